//! The glob matcher (fast shapes and general matcher) against the filter
//! reference's recursive matcher, which follows the definition literally.

use std::cell::Cell;

use hotkern_trace::internals::filter_reference::glob_matches as reference;
use hotkern_trace::internals::glob::{glob_match, Glob, GlobKind};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn text_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(vec!['a', 'b', 'c', '_', '*', '[', ']', '!', '-', '\\']),
        0..10,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn one_of(texts: &'static [&'static str]) -> BoxedStrategy<String> {
    proptest::sample::select(texts)
        .prop_map(String::from)
        .boxed()
}

/// A piece of pattern and a text it would match on its own. The pieces
/// are the ones the definition treats specially, lone `[`, `]`, `!`, `-`
/// and `\` too, so that classes open and close, negate and range in every
/// arrangement; pieces together need not match their texts together (a
/// lone `[` and a later `]` make a class).
fn piece() -> impl Strategy<Value = (String, String)> {
    let fixed = |pattern: &'static str, texts: &'static [&'static str]| {
        one_of(texts).prop_map(move |text| (pattern.to_string(), text))
    };
    prop_oneof![
        6 => one_of(&["a", "b", "c", "_"]).prop_map(|c| (c.clone(), c)),
        3 => text_strategy().prop_map(|t| ("*".to_string(), t.chars().take(3).collect())),
        1 => fixed("?", &["a", "]", "\\"]),
        1 => fixed("[a-b]", &["a", "b"]),
        1 => fixed("[!c]", &["a", "_", "["]),
        1 => fixed("[^a_]", &["b", "c"]),
        1 => fixed("[]a]", &["]", "a"]),
        1 => fixed("[a-]", &["a", "-"]),
        1 => fixed("\\*", &["*"]),
        1 => one_of(&["[", "]", "!", "-", "\\"]).prop_map(|c| (c.clone(), c)),
    ]
}

/// A pattern, and either the text its pieces match or a random one.
fn case() -> impl Strategy<Value = (String, String)> {
    (
        proptest::collection::vec(piece(), 0..8),
        any::<bool>(),
        text_strategy(),
    )
        .prop_map(|(pieces, derived, random)| {
            let pattern = pieces.iter().map(|(p, _)| p.as_str()).collect();
            let text = if derived {
                pieces.iter().map(|(_, t)| t.as_str()).collect()
            } else {
                random
            };
            (pattern, text)
        })
}

#[test]
fn matches_reference() {
    const CASES: u32 = 4000;
    let (matched, general, class_matched) = (Cell::new(0u32), Cell::new(0u32), Cell::new(0u32));
    let mut runner = TestRunner::new(Config::with_cases(CASES));
    runner
        .run(&case(), |(pattern, text)| {
            let expected = reference(pattern.as_bytes(), text.as_bytes());
            let glob = Glob::new(&pattern);
            prop_assert_eq!(glob.matches(&text), expected, "{} vs {}", pattern, text);
            prop_assert_eq!(glob_match(&pattern, &text), expected);
            matched.set(matched.get() + u32::from(expected));
            general.set(general.get() + u32::from(glob.kind() == GlobKind::General));
            let class = pattern.contains('[') && pattern.contains(']');
            class_matched.set(class_matched.get() + u32::from(class && expected));
            Ok(())
        })
        .unwrap();
    // Random texts rarely fit random patterns, hence the derived ones; a
    // third of the cases must match, or the comparison is mostly of "no"
    // with "no".
    let share = |n: u32| f64::from(n) / f64::from(CASES);
    eprintln!(
        "{:.0} % of cases match, {:.0} % use the general matcher, {:.0} % match with a class",
        100.0 * share(matched.get()),
        100.0 * share(general.get()),
        100.0 * share(class_matched.get())
    );
    assert!(share(matched.get()) >= 0.35);
    assert!(share(general.get()) >= 0.5);
    assert!(share(class_matched.get()) >= 0.1);
}

/// The fuzzer's hang: a pattern of many stars that cannot match. Tried
/// split by split without remembering answers, this took exponential time.
#[test]
fn the_reference_answers_many_stars_at_once() {
    let pattern = [b"*a".repeat(24), b"*b".to_vec()].concat();
    let text = b"a".repeat(60);
    let started = std::time::Instant::now();
    assert!(!reference(&pattern, &text));
    assert!(reference(&pattern, &[text.as_slice(), b"b"].concat()));
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
}
