//! A line of text formatted into a fixed buffer, for markers written where
//! nothing may allocate (interrupt handlers).

use core::fmt;

/// Bytes a marker line keeps; the rest is cut, as `trace_marker` cuts it.
const LINE_BYTES: usize = 160;

/// A line of at most [`LINE_BYTES`] bytes, cut at a character boundary.
pub(super) struct StackText {
    bytes: [u8; LINE_BYTES],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        StackText {
            bytes: [0; LINE_BYTES],
            len: 0,
        }
    }
}

impl StackText {
    pub(super) fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for StackText {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let room = self.bytes.len() - self.len;
        let mut take = text.len().min(room);
        while !text.is_char_boundary(take) {
            take -= 1;
        }
        self.bytes[self.len..self.len + take].copy_from_slice(&text.as_bytes()[..take]);
        self.len += take;
        if take < text.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}
