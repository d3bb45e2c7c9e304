//! A disk backed by a host file (`std` only).

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::device::{check_block_size, check_transfer, BlockDevice};
use crate::error::{ConfigError, IoError};

/// A disk image file seen as a block device.
///
/// A file whose length is not a whole number of blocks gets a last block
/// padded with zeros, so any image can be loaded whatever the block size.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    block_size: usize,
    blocks: u64,
    writable: bool,
}

/// Largest transfer of a file-backed device: 1 MiB.
const MAX_TRANSFER_BYTES: usize = 1 << 20;

impl FileDevice {
    /// Opens `path` read-only.
    pub fn open(path: &Path, block_size: usize) -> std::io::Result<Self> {
        Self::with_file(File::open(path)?, block_size, false)
    }

    /// Opens `path` for reading and writing.
    pub fn open_writable(path: &Path, block_size: usize) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Self::with_file(file, block_size, true)
    }

    fn with_file(file: File, block_size: usize, writable: bool) -> std::io::Result<Self> {
        let invalid = |e: ConfigError| std::io::Error::new(ErrorKind::InvalidInput, e);
        check_block_size(block_size).map_err(invalid)?;
        let len = file.metadata()?.len();
        if len == 0 {
            return Err(invalid(ConfigError::Empty));
        }
        Ok(FileDevice {
            file,
            block_size,
            blocks: len.div_ceil(block_size as u64),
            writable,
        })
    }
}

fn host(error: &std::io::Error) -> IoError {
    IoError::Host {
        code: error.raw_os_error().unwrap_or(-1),
    }
}

impl BlockDevice for FileDevice {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn max_transfer_blocks(&self) -> u32 {
        (MAX_TRANSFER_BYTES / self.block_size) as u32
    }

    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        check_transfer(self, first, buf.len())?;
        self.file
            .seek(SeekFrom::Start(first * self.block_size as u64))
            .map_err(|e| host(&e))?;
        let mut filled = 0;
        while filled < buf.len() {
            match self.file.read(&mut buf[filled..]) {
                // The padded tail of the last block reads as zeros.
                Ok(0) => {
                    buf[filled..].fill(0);
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(host(&e)),
            }
        }
        Ok(())
    }

    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        check_transfer(self, first, data.len())?;
        if !self.writable {
            return Err(IoError::ReadOnly);
        }
        self.file
            .seek(SeekFrom::Start(first * self.block_size as u64))
            .map_err(|e| host(&e))?;
        self.file.write_all(data).map_err(|e| host(&e))
    }
}
