//! What the output side and the filters read of a parsed event format.
//!
//! The `format` text is parsed once, by [`hotkern_tracedat`]'s
//! [`EventFormat::parse`] (libtraceevent's rules), whether it comes from
//! this tracer or from a saved trace: the recorder only generates the
//! text ([`event::EventFormat`](crate::event::EventFormat)). A field is
//! read here as the filters read it ([`Location`]), in this machine's byte
//! order, the order the rings were written in.

use alloc::vec::Vec;

use hotkern_tracedat::{EventFormat, Field};

use crate::filter::{FieldSpec, Location};

/// `field` as the filter language sees it.
fn field_spec(field: &Field) -> FieldSpec {
    FieldSpec::from_format(
        &field.name,
        &field.type_name,
        field.offset,
        field.size,
        field.signed,
    )
}

fn field_kind(field: &Field) -> crate::filter::FieldKind {
    FieldSpec::kind_of_format(&field.type_name, field.signed)
}

/// Every field of `event`, common ones first, as the filter language sees
/// them.
pub(crate) fn field_specs(event: &EventFormat) -> Vec<FieldSpec> {
    event.all_fields().map(field_spec).collect()
}

/// The first field whose name is `name` or ends in `.name` (ftrace's
/// graph events call them `graph_ent.func`, `ret.func`).
pub(crate) fn field_like<'e>(event: &'e EventFormat, name: &str) -> Option<&'e Field> {
    event.all_fields().find(|f| {
        f.name == name
            || f.name
                .strip_suffix(name)
                .is_some_and(|head| head.ends_with('.'))
    })
}

/// Reads `field` from `payload` as an integer, sign-extending signed ones.
pub(crate) fn read_int(field: &Field, payload: &[u8]) -> Option<u64> {
    Location::new(field.offset, field.size, field_kind(field)).bits(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FieldKind;

    const TEXT: &str = "name: demo\nID: 500\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
        \tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;\n\
        \tfield:int graph_ent.depth;\toffset:28;\tsize:4;\tsigned:1;\n\
        \nprint fmt: \"comm=%s\", REC->comm\n";

    #[test]
    fn filters_see_every_field_with_its_kind() {
        let event = EventFormat::parse("demo", TEXT).unwrap();
        let specs = field_specs(&event);
        let kinds: Vec<(&str, FieldKind)> =
            specs.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("common_type", FieldKind::Unsigned),
                ("common_pid", FieldKind::Signed),
                ("comm", FieldKind::FixedString),
                ("name", FieldKind::DataLocString),
                ("graph_ent.depth", FieldKind::Signed),
            ]
        );
    }

    #[test]
    fn graph_fields_are_found_by_their_last_part_and_sign_extended() {
        let event = EventFormat::parse("demo", TEXT).unwrap();
        let depth = field_like(&event, "depth").unwrap();
        let mut payload = alloc::vec![0u8; 32];
        payload[28..32].copy_from_slice(&(-2i32).to_ne_bytes());
        assert_eq!(read_int(depth, &payload), Some(-2i64 as u64));
        assert!(field_like(&event, "pth").is_none());
    }
}
