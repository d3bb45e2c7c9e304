//! How a filter sees an event's fields: where they are in the payload and
//! what type they have.

use alloc::string::String;

/// The type of a field, as far as filtering is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A signed integer of 1, 2, 4 or 8 bytes, compared as `i64`.
    Signed,
    /// An unsigned integer of 1, 2, 4 or 8 bytes, compared as `u64`.
    Unsigned,
    /// `char name[N]`: the string ends at the first NUL or after N bytes.
    FixedString,
    /// `__data_loc char[] name`: a `u32` holding the string's offset in the
    /// payload (low 16 bits) and its length including the NUL (high 16 bits).
    DataLocString,
    /// ftrace's pseudo-field `CPU`: the CPU the event was recorded on.
    Cpu,
    /// ftrace's pseudo-field `COMM` (or `comm`): the name of the task that
    /// hit the event, compared as a string.
    Comm,
}

impl FieldKind {
    /// True for the kinds compared with `==`, `!=` and `~` against strings.
    pub fn is_string(self) -> bool {
        matches!(
            self,
            FieldKind::FixedString | FieldKind::DataLocString | FieldKind::Comm
        )
    }
}

/// One field an expression may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    /// The field's name as it appears in the event's `format` file.
    pub name: String,
    /// Byte offset in the payload (which starts with the common header).
    pub offset: usize,
    /// Bytes it takes in the payload (1, 2, 4 or 8 for integers).
    pub size: usize,
    /// How its bytes are read and which operators apply to it.
    pub kind: FieldKind,
}

impl FieldSpec {
    /// A signed integer field.
    #[cfg(any(test, feature = "internals"))]
    pub fn signed(name: &str, offset: usize, size: usize) -> FieldSpec {
        FieldSpec::new(name, offset, size, FieldKind::Signed)
    }

    /// An unsigned integer field.
    #[cfg(any(test, feature = "internals"))]
    pub fn unsigned(name: &str, offset: usize, size: usize) -> FieldSpec {
        FieldSpec::new(name, offset, size, FieldKind::Unsigned)
    }

    /// A `char name[size]` field.
    #[cfg(any(test, feature = "internals"))]
    pub fn fixed_string(name: &str, offset: usize, size: usize) -> FieldSpec {
        FieldSpec::new(name, offset, size, FieldKind::FixedString)
    }

    /// A `__data_loc char[] name` field (a 4-byte locator at `offset`).
    #[cfg(any(test, feature = "internals"))]
    pub fn data_loc_string(name: &str, offset: usize) -> FieldSpec {
        FieldSpec::new(name, offset, 4, FieldKind::DataLocString)
    }

    /// A field with the given kind.
    pub fn new(name: &str, offset: usize, size: usize, kind: FieldKind) -> FieldSpec {
        FieldSpec {
            name: String::from(name),
            offset,
            size,
            kind,
        }
    }

    /// Builds the spec from a line of an event's `format` file, i.e. from
    /// its C type, offset, size and signedness.
    ///
    /// ```
    /// use hotkern_trace::internals::filter::{FieldKind, FieldSpec};
    ///
    /// assert_eq!(FieldSpec::from_format("comm", "char[16]", 8, 16, true).kind, FieldKind::FixedString);
    /// assert_eq!(FieldSpec::from_format("msg", "__data_loc char[]", 8, 4, true).kind, FieldKind::DataLocString);
    /// assert_eq!(FieldSpec::from_format("pid", "pid_t", 24, 4, true).kind, FieldKind::Signed);
    /// ```
    pub fn from_format(
        name: &str,
        c_type: &str,
        offset: usize,
        size: usize,
        signed: bool,
    ) -> FieldSpec {
        FieldSpec::new(
            name,
            offset,
            size,
            FieldSpec::kind_of_format(c_type, signed),
        )
    }

    /// The kind of a field declared with C type `c_type` (array suffix
    /// included) in an event's `format` file.
    pub(crate) fn kind_of_format(c_type: &str, signed: bool) -> FieldKind {
        let c_type = c_type.trim();
        if c_type.starts_with("__data_loc") && c_type.contains("char") {
            FieldKind::DataLocString
        } else if c_type.contains("char") && c_type.contains('[') {
            FieldKind::FixedString
        } else if signed {
            FieldKind::Signed
        } else {
            FieldKind::Unsigned
        }
    }

    /// The integer value of the field in `payload`, zero- or sign-extended
    /// to 64 bits; `None` when the payload is too short or the size is not
    /// an integer size.
    pub(crate) fn read_bits(&self, payload: &[u8]) -> Option<u64> {
        self.location().bits(payload)
    }

    /// The string value of the field in `payload` (without its NUL).
    pub(crate) fn read_str<'p>(&self, payload: &'p [u8]) -> Option<&'p [u8]> {
        self.location().string(payload)
    }

    /// Where the field is, without its name: what compiled programs keep.
    pub(crate) fn location(&self) -> Location {
        Location::new(self.offset, self.size, self.kind)
    }
}

/// A field's place and type in the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    offset: usize,
    size: usize,
    kind: FieldKind,
}

impl Location {
    /// `size` bytes at `offset`, read as `kind`.
    pub(crate) fn new(offset: usize, size: usize, kind: FieldKind) -> Location {
        Location { offset, size, kind }
    }

    #[inline]
    pub(crate) fn bits(self, payload: &[u8]) -> Option<u64> {
        let bytes = payload.get(self.offset..self.offset.checked_add(self.size)?)?;
        let raw = match *bytes {
            [a] => u64::from(a),
            [a, b] => u64::from(u16::from_ne_bytes([a, b])),
            [a, b, c, d] => u64::from(u32::from_ne_bytes([a, b, c, d])),
            [a, b, c, d, e, f, g, h] => u64::from_ne_bytes([a, b, c, d, e, f, g, h]),
            _ => return None,
        };
        if self.kind == FieldKind::Signed && self.size < 8 {
            let shift = 64 - 8 * self.size as u32;
            Some((((raw << shift) as i64) >> shift) as u64)
        } else {
            Some(raw)
        }
    }

    #[inline]
    pub(crate) fn string(self, payload: &[u8]) -> Option<&[u8]> {
        let raw = match self.kind {
            FieldKind::FixedString => {
                payload.get(self.offset..self.offset.checked_add(self.size)?)?
            }
            FieldKind::DataLocString => {
                let locator = payload.get(self.offset..self.offset.checked_add(4)?)?;
                let locator = u32::from_ne_bytes([locator[0], locator[1], locator[2], locator[3]]);
                let start = (locator & 0xffff) as usize;
                let len = (locator >> 16) as usize;
                payload.get(start..start + len)?
            }
            _ => return None,
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        Some(&raw[..end])
    }
}

/// The fields of ftrace's common header, which every event carries at the
/// start of its payload and every filter may name.
#[cfg(test)]
pub(crate) fn common_fields() -> [FieldSpec; 4] {
    [
        FieldSpec::unsigned("common_type", 0, 2),
        FieldSpec::unsigned("common_flags", 2, 1),
        FieldSpec::unsigned("common_preempt_count", 3, 1),
        FieldSpec::signed("common_pid", 4, 4),
    ]
}
