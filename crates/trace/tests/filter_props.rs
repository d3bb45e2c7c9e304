//! The compiled filter program against the tree-walking reference, over
//! random expressions and random payloads. The expression is printed to
//! text and compiled from that text, so the parser is covered too. The
//! `COMM` pseudo-field is compared against random task names, including
//! none.

use hotkern_trace::filter::{reference, CompareOp, Expr, FieldSpec, Filter, Operand, Predicate};
use proptest::prelude::*;

fn fields() -> Vec<FieldSpec> {
    vec![
        FieldSpec::signed("s8", 0, 1),
        FieldSpec::unsigned("u16", 2, 2),
        FieldSpec::signed("s32", 4, 4),
        FieldSpec::unsigned("u64", 8, 8),
        FieldSpec::signed("s64", 16, 8),
        FieldSpec::fixed_string("name", 24, 8),
        FieldSpec::data_loc_string("msg", 32),
    ]
}

const PAYLOAD_LEN: usize = 48;

fn small_text() -> impl Strategy<Value = String> {
    "[ab_]{0,4}"
}

fn predicate() -> impl Strategy<Value = Expr> {
    let numeric_op = proptest::sample::select(vec![
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
        CompareOp::BitAnd,
    ]);
    let string_op = proptest::sample::select(vec![CompareOp::Eq, CompareOp::Ne, CompareOp::Glob]);
    let signed = (
        proptest::sample::select(vec!["s8", "s32", "s64"]),
        numeric_op.clone(),
        prop_oneof![-3i64..4, any::<i64>()],
    )
        .prop_map(|(field, op, v)| (field.to_string(), op, Operand::Signed(v)));
    let unsigned = (
        proptest::sample::select(vec!["u16", "u64", "CPU"]),
        numeric_op,
        prop_oneof![0u64..4, any::<u64>()],
    )
        .prop_map(|(field, op, v)| (field.to_string(), op, Operand::Unsigned(v)));
    let string = (
        proptest::sample::select(vec!["name", "msg", "COMM", "comm"]),
        string_op,
        prop_oneof![small_text(), "[ab*?]{0,4}"],
    )
        .prop_map(|(field, op, v)| (field.to_string(), op, Operand::Str(v)));
    prop_oneof![signed, unsigned, string]
        .prop_map(|(field, op, operand)| Expr::Compare(Predicate { field, op, operand }))
}

fn expression() -> impl Strategy<Value = Expr> {
    predicate().prop_recursive(5, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| Expr::Or(Box::new(a), Box::new(b))),
        ]
    })
}

/// The task that hit the event: unknown, or a `task->comm` buffer holding a
/// short name (NUL-padded) or all 16 bytes without a NUL.
fn task() -> impl Strategy<Value = Option<[u8; 16]>> {
    prop_oneof![
        Just(None),
        small_text().prop_map(|name| {
            let mut comm = [0u8; 16];
            comm[..name.len()].copy_from_slice(name.as_bytes());
            Some(comm)
        }),
        Just(Some(*b"abababababababab")),
    ]
}

/// Random bytes, with small values and short strings common enough that
/// equalities and globs hit.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), PAYLOAD_LEN),
        proptest::collection::vec(
            prop_oneof![Just(0u8), Just(1), Just(2), Just(255)],
            PAYLOAD_LEN,
        ),
        any::<bool>(),
        small_text(),
        small_text(),
        0..PAYLOAD_LEN + 2,
    )
        .prop_map(|(random, small, use_small, name, msg, cut)| {
            let mut p = if use_small { small } else { random };
            p[24..32].fill(0);
            p[24..24 + name.len()].copy_from_slice(name.as_bytes());
            let locator = 40u32 | ((msg.len() as u32 + 1) << 16);
            p[32..36].copy_from_slice(&locator.to_ne_bytes());
            p[40..48].fill(0);
            p[40..40 + msg.len()].copy_from_slice(msg.as_bytes());
            // Sometimes the payload is cut short: fields past the end must
            // read as "no match" in both evaluators.
            if cut < PAYLOAD_LEN {
                p.truncate(cut);
            }
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn program_agrees_with_reference(expr in expression(), payloads in proptest::collection::vec(payload(), 4), cpu in 0u32..4, comm in task()) {
        let fields = fields();
        let text = expr.to_string();
        let filter = Filter::compile(&text, &fields).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let comm = comm.as_ref().map(|c| &c[..]);
        for p in &payloads {
            prop_assert_eq!(
                filter.matches_on(p, cpu),
                reference::evaluate(&expr, &fields, p, cpu),
                "{}", text
            );
            prop_assert_eq!(
                filter.matches_task(p, cpu, comm),
                reference::evaluate_task(&expr, &fields, p, cpu, comm),
                "{} with {:?}", text, comm
            );
        }
    }

    #[test]
    fn printed_expressions_parse_back(expr in expression()) {
        let fields = fields();
        let parsed = hotkern_trace::filter::parse(&expr.to_string(), &fields).unwrap();
        prop_assert_eq!(parsed, expr);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[a-z0-9_ !=<>&|~()\"'*-]{0,40}") {
        let fields = fields();
        if let Err(error) = Filter::compile(&text, &fields) {
            prop_assert!(error.position <= text.len());
        }
    }
}
