//! Directory entries: 32-byte records, with long names spread over
//! preceding records in UCS-2.

use alloc::string::String;
use alloc::vec::Vec;

use super::FatType;

const ATTR_VOLUME_LABEL: u8 = 0x08;
const ATTR_DIRECTORY: u8 = 0x10;
const ATTR_LONG_NAME: u8 = 0x0F;

/// A file or directory found in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The long name when there is a valid one, else the 8.3 name.
    pub name: String,
    /// The 8.3 name, e.g. `KERNEL.BIN`.
    pub short_name: String,
    /// Whether this is a directory.
    pub is_dir: bool,
    /// Size in bytes (0 for directories).
    pub size: u32,
    /// First cluster (0 for an empty file, or the FAT12/16 root).
    pub first_cluster: u32,
}

impl DirEntry {
    /// Whether `name` names this entry (case-insensitively, as FAT does).
    pub fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name) || self.short_name.eq_ignore_ascii_case(name)
    }

    /// Whether this is `.` or `..`.
    pub fn is_dot(&self) -> bool {
        self.short_name == "." || self.short_name == ".."
    }
}

/// What one 32-byte record means.
pub(crate) enum Record {
    /// No more entries in this directory.
    End,
    /// Deleted entry, volume label or long-name piece consumed.
    Skip,
    /// A file or directory.
    Entry(DirEntry),
}

/// Assembles long names across records.
#[derive(Default)]
pub(crate) struct Decoder {
    long: Vec<u16>,
    checksum: Option<u8>,
}

fn short_checksum(raw: &[u8; 32]) -> u8 {
    raw[..11]
        .iter()
        .fold(0u8, |sum, &b| sum.rotate_right(1).wrapping_add(b))
}

fn short_name(raw: &[u8; 32]) -> String {
    let mut base: Vec<u8> = raw[..8].to_vec();
    if base[0] == 0x05 {
        base[0] = 0xE5;
    }
    let trim = |part: &[u8]| -> String {
        let end = part.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1);
        part[..end].iter().map(|&b| char::from(b)).collect()
    };
    let mut name = trim(&base);
    let extension = trim(&raw[8..11]);
    if !extension.is_empty() {
        name.push('.');
        name.push_str(&extension);
    }
    name
}

impl Decoder {
    pub fn decode(&mut self, raw: &[u8; 32], fat_type: FatType) -> Record {
        if raw[0] == 0 {
            return Record::End;
        }
        if raw[0] == 0xE5 {
            self.reset();
            return Record::Skip;
        }
        let attributes = raw[11];
        if attributes & 0x3F == ATTR_LONG_NAME {
            self.long_piece(raw);
            return Record::Skip;
        }
        if attributes & ATTR_VOLUME_LABEL != 0 {
            self.reset();
            return Record::Skip;
        }
        let short_name = short_name(raw);
        let name = match self.checksum {
            Some(sum) if sum == short_checksum(raw) && !self.long.is_empty() => {
                let end = self
                    .long
                    .iter()
                    .position(|&c| c == 0 || c == 0xFFFF)
                    .unwrap_or(self.long.len());
                char::decode_utf16(self.long[..end].iter().copied())
                    .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
                    .collect()
            }
            _ => short_name.clone(),
        };
        self.reset();
        let high = if fat_type == FatType::Fat32 {
            u32::from(u16::from_le_bytes([raw[20], raw[21]])) << 16
        } else {
            0
        };
        let is_dir = attributes & ATTR_DIRECTORY != 0;
        Record::Entry(DirEntry {
            name,
            short_name,
            is_dir,
            size: if is_dir {
                0
            } else {
                u32::from_le_bytes([raw[28], raw[29], raw[30], raw[31]])
            },
            first_cluster: high | u32::from(u16::from_le_bytes([raw[26], raw[27]])),
        })
    }

    fn reset(&mut self) {
        self.long.clear();
        self.checksum = None;
    }

    fn long_piece(&mut self, raw: &[u8; 32]) {
        let sequence = usize::from(raw[0] & 0x1F);
        if sequence == 0 {
            self.reset();
            return;
        }
        if raw[0] & 0x40 != 0 {
            self.reset();
            self.long.resize(sequence * 13, 0xFFFF);
            self.checksum = Some(raw[13]);
        }
        if self.checksum != Some(raw[13]) || sequence * 13 > self.long.len() {
            self.reset();
            return;
        }
        let at = (sequence - 1) * 13;
        let offsets = [1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30];
        for (k, &o) in offsets.iter().enumerate() {
            self.long[at + k] = u16::from_le_bytes([raw[o], raw[o + 1]]);
        }
    }
}
