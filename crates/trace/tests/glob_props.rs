//! The glob matcher (fast shapes and general matcher) against a recursive
//! reference that follows the definition literally.

use hotkern_trace::glob::{glob_match, Glob};
use proptest::prelude::*;

/// Straight from the definition; exponential, fine for short inputs.
fn reference(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|skip| reference(&pattern[1..], &text[skip..])),
        Some(b'?') => !text.is_empty() && reference(&pattern[1..], &text[1..]),
        Some(b'\\') if pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && reference(&pattern[2..], &text[1..])
        }
        Some(b'[') => match reference_class(pattern) {
            Some((members, negated, used)) => match text.first() {
                Some(byte) => {
                    (members.contains(byte) != negated) && reference(&pattern[used..], &text[1..])
                }
                None => false,
            },
            None => text.first() == Some(&b'[') && reference(&pattern[1..], &text[1..]),
        },
        Some(&byte) => text.first() == Some(&byte) && reference(&pattern[1..], &text[1..]),
    }
}

/// Expands a bracket expression into its member list.
fn reference_class(pattern: &[u8]) -> Option<(Vec<u8>, bool, usize)> {
    let mut i = 1;
    let negated = matches!(pattern.get(1), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let end = (i + usize::from(pattern.get(i) == Some(&b']'))..pattern.len())
        .find(|&j| pattern[j] == b']')?;
    let body = &pattern[i..end];
    let mut members = Vec::new();
    let mut k = 0;
    while k < body.len() {
        if k + 2 < body.len() && body[k + 1] == b'-' {
            members.extend(body[k]..=body[k + 2]);
            k += 3;
        } else {
            members.push(body[k]);
            k += 1;
        }
    }
    Some((members, negated, end + 1))
}

fn pattern_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => proptest::sample::select(vec!['a', 'b', 'c', '_']).prop_map(|c| c.to_string()),
            2 => Just("*".to_string()),
            1 => Just("?".to_string()),
            1 => Just("[a-b]".to_string()),
            1 => Just("[!c]".to_string()),
            1 => Just("[".to_string()),
            1 => Just("\\*".to_string()),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn matches_reference(pattern in pattern_strategy(), text in "[abc_*\\[]{0,10}") {
        let expected = reference(pattern.as_bytes(), text.as_bytes());
        prop_assert_eq!(Glob::new(&pattern).matches(&text), expected);
        prop_assert_eq!(glob_match(&pattern, &text), expected);
    }
}
