//! Values on the kernel command line that may hold any text: a FAT path
//! such as `Boot Files/Kernel Image.elf` or `Données/été.txt`.
//!
//! The command line is words split at spaces (`key=value key=value`, as
//! QEMU's `-append` passes it), so a value with a space would be cut in
//! two. The host percent-encodes such a value ([`encode_value`]) and the
//! kernel decodes it ([`decode_value`]), as URLs carry any byte
//! (RFC 3986's percent-encoding): every byte outside printable ASCII, and
//! `%` itself, becomes `%` and two hex digits, so the encoded word is
//! printable ASCII without spaces. A value that needs no escaping is its
//! own encoding, so `load=boot/kernel/kernel` reads as it always did.
//! Linux instead honours double quotes around a value; percent-encoding
//! needs no quote-aware splitting and carries any UTF-8, quotes included.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Why a command-line value does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLineError {
    /// A `%` at this byte offset is not followed by two characters.
    TruncatedEscape {
        /// The byte offset of the `%`.
        offset: usize,
    },
    /// A `%` at this byte offset is not followed by two hex digits.
    NotHex {
        /// The byte offset of the `%`.
        offset: usize,
    },
    /// The decoded bytes are not UTF-8.
    NotUtf8,
}

impl fmt::Display for CommandLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandLineError::TruncatedEscape { offset } => {
                write!(f, "'%' at byte {offset} needs two hex digits after it")
            }
            CommandLineError::NotHex { offset } => {
                write!(f, "'%' at byte {offset} is not followed by two hex digits")
            }
            CommandLineError::NotUtf8 => f.write_str("the decoded value is not UTF-8"),
        }
    }
}

/// Whether `byte` goes on the command line as it is.
fn plain(byte: u8) -> bool {
    byte.is_ascii_graphic() && byte != b'%'
}

/// Encodes `value` as one command-line word: printable ASCII, no spaces.
///
/// ```
/// use hotkern_kernel::command_line::encode_value;
///
/// assert_eq!(encode_value("boot/kernel/kernel"), "boot/kernel/kernel");
/// assert_eq!(encode_value("Boot Files/Kernel Image.elf"), "Boot%20Files/Kernel%20Image.elf");
/// assert_eq!(encode_value("Données/été.txt"), "Donn%C3%A9es/%C3%A9t%C3%A9.txt");
/// ```
pub fn encode_value(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut word = String::with_capacity(value.len());
    for &byte in value.as_bytes() {
        if plain(byte) {
            word.push(char::from(byte));
        } else {
            word.push('%');
            word.push(char::from(HEX[usize::from(byte >> 4)]));
            word.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
    word
}

/// Decodes a word [`encode_value`] made (hex digits in either case).
///
/// ```
/// use hotkern_kernel::command_line::{decode_value, CommandLineError};
///
/// assert_eq!(decode_value("Boot%20Files/Kernel%20Image.elf").unwrap(), "Boot Files/Kernel Image.elf");
/// assert_eq!(decode_value("Donn%c3%a9es").unwrap(), "Données");
/// assert_eq!(decode_value("50%"), Err(CommandLineError::TruncatedEscape { offset: 2 }));
/// assert_eq!(decode_value("%zz"), Err(CommandLineError::NotHex { offset: 0 }));
/// assert_eq!(decode_value("%FF"), Err(CommandLineError::NotUtf8));
/// ```
pub fn decode_value(word: &str) -> Result<String, CommandLineError> {
    let bytes = word.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut offset = 0;
    while offset < bytes.len() {
        let byte = bytes[offset];
        if byte != b'%' {
            decoded.push(byte);
            offset += 1;
            continue;
        }
        let digits = bytes
            .get(offset + 1..offset + 3)
            .ok_or(CommandLineError::TruncatedEscape { offset })?;
        let high = hex_digit(digits[0]).ok_or(CommandLineError::NotHex { offset })?;
        let low = hex_digit(digits[1]).ok_or(CommandLineError::NotHex { offset })?;
        decoded.push(high << 4 | low);
        offset += 3;
    }
    String::from_utf8(decoded).map_err(|_| CommandLineError::NotUtf8)
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paths_with_spaces_and_accents_become_one_plain_word() {
        for (path, word) in [
            (
                "Boot Files/Kernel Image.elf",
                "Boot%20Files/Kernel%20Image.elf",
            ),
            ("Données/été.txt", "Donn%C3%A9es/%C3%A9t%C3%A9.txt"),
            ("100%", "100%25"),
            ("tab\there", "tab%09here"),
            ("", ""),
        ] {
            assert_eq!(encode_value(path), word);
            assert_eq!(decode_value(word).unwrap(), path);
        }
    }

    #[test]
    fn malformed_escapes_are_typed_errors() {
        assert_eq!(
            decode_value("a%4"),
            Err(CommandLineError::TruncatedEscape { offset: 1 })
        );
        assert_eq!(
            decode_value("ab%"),
            Err(CommandLineError::TruncatedEscape { offset: 2 })
        );
        assert_eq!(
            decode_value("%4g"),
            Err(CommandLineError::NotHex { offset: 0 })
        );
        assert_eq!(
            decode_value("x%+1"),
            Err(CommandLineError::NotHex { offset: 1 })
        );
        // A lone continuation byte, and half of a two-byte character.
        assert_eq!(decode_value("%80"), Err(CommandLineError::NotUtf8));
        assert_eq!(decode_value("%C3"), Err(CommandLineError::NotUtf8));
        assert_eq!(
            CommandLineError::NotHex { offset: 3 }.to_string(),
            "'%' at byte 3 is not followed by two hex digits"
        );
    }

    proptest! {
        #[test]
        fn any_text_round_trips_through_one_plain_word(value in any::<String>()) {
            let word = encode_value(&value);
            prop_assert!(word.bytes().all(|byte| byte.is_ascii_graphic()), "{}", word);
            prop_assert_eq!(decode_value(&word).unwrap(), value);
        }

        #[test]
        fn words_without_escapes_decode_to_themselves(word in "[!-$&-~]*") {
            prop_assert_eq!(encode_value(&word), word.clone());
            prop_assert_eq!(decode_value(&word).unwrap(), word);
        }
    }
}
