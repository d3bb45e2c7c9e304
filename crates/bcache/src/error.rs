//! Typed errors of devices and caches.

use core::fmt;

/// Why a block transfer failed.
///
/// Devices return these; caches pass them on unchanged, after making sure
/// that nothing of the failed transfer stays in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoError {
    /// The request reaches past the last block of the device.
    OutOfRange {
        /// First block asked for.
        block: u64,
        /// Number of blocks asked for.
        blocks: u64,
        /// Blocks the device has.
        device_blocks: u64,
    },
    /// A buffer whose length is not a whole number of blocks.
    Misaligned {
        /// The buffer's length in bytes.
        len: usize,
        /// The device's block size.
        block_size: usize,
    },
    /// More blocks than the device moves in one operation.
    TooLarge {
        /// Blocks asked for.
        blocks: u64,
        /// The device's largest transfer, in blocks.
        max_blocks: u32,
    },
    /// The medium failed to read or write (a bad sector, a lost link).
    Medium {
        /// First block of the failed operation.
        block: u64,
    },
    /// The device does not accept writes.
    ReadOnly,
    /// The host file behind a file-backed device failed (an OS error code,
    /// or -1 when the host gave none).
    Host {
        /// The OS error number.
        code: i32,
    },
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IoError::OutOfRange {
                block,
                blocks,
                device_blocks,
            } => write!(
                f,
                "blocks {block}..+{blocks} lie beyond the device's {device_blocks} blocks"
            ),
            IoError::Misaligned { len, block_size } => write!(
                f,
                "a transfer of {len} bytes is not a whole number of {block_size}-byte blocks"
            ),
            IoError::TooLarge { blocks, max_blocks } => write!(
                f,
                "a transfer of {blocks} blocks exceeds the device's largest transfer of {max_blocks}"
            ),
            IoError::Medium { block } => write!(f, "medium error in the transfer at block {block}"),
            IoError::ReadOnly => f.write_str("the device is read-only"),
            IoError::Host { code } => write!(f, "host I/O error (code {code})"),
        }
    }
}

impl core::error::Error for IoError {}

/// Why a device, cache or striped set could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Block sizes are powers of two from 512 to 4096 bytes.
    BlockSize(usize),
    /// The backing store is not a whole number of blocks.
    Length {
        /// Its length in bytes.
        len: u64,
        /// The block size asked for.
        block_size: usize,
    },
    /// A device needs at least one block, and a transfer at least one block.
    Empty,
    /// A striped set needs members of one block size and one block count.
    MismatchedMembers,
    /// A striped set needs at least one member and a stripe of at least one block.
    NoMembers,
    /// The memory a cache needs could not be allocated.
    OutOfMemory {
        /// The bytes of block storage asked for.
        bytes: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::BlockSize(size) => write!(
                f,
                "block size {size} is not a power of two between 512 and 4096"
            ),
            ConfigError::Length { len, block_size } => write!(
                f,
                "{len} bytes are not a whole number of {block_size}-byte blocks"
            ),
            ConfigError::Empty => f.write_str("a device needs at least one block"),
            ConfigError::MismatchedMembers => {
                f.write_str("striped members differ in block size or block count")
            }
            ConfigError::NoMembers => {
                f.write_str("a striped set needs members and a stripe of at least one block")
            }
            ConfigError::OutOfMemory { bytes } => {
                write!(f, "out of memory for a cache of {bytes} bytes")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    #[test]
    fn io_messages_give_the_numbers_involved() {
        let error: &dyn core::error::Error = &IoError::OutOfRange {
            block: 10,
            blocks: 4,
            device_blocks: 12,
        };
        assert_eq!(
            error.to_string(),
            "blocks 10..+4 lie beyond the device's 12 blocks"
        );
        assert_eq!(
            IoError::Host { code: 5 }.to_string(),
            "host I/O error (code 5)"
        );
    }

    #[test]
    fn config_messages_say_what_is_wrong() {
        let error: &dyn core::error::Error = &ConfigError::BlockSize(1000);
        assert_eq!(
            error.to_string(),
            "block size 1000 is not a power of two between 512 and 4096"
        );
        assert_eq!(
            ConfigError::Length {
                len: 1000,
                block_size: 512
            }
            .to_string(),
            "1000 bytes are not a whole number of 512-byte blocks"
        );
    }
}
