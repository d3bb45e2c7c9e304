//! Version 7's compressed blocks: `[u32 compressed size][u32 size][data]`,
//! zlib or zstd as the file header names.

use std::io::Read;

use crate::error::{Error, Result};
use crate::input::Bytes;

/// The largest block accepted. trace-cmd compresses CPU data a few pages
/// at a time and its largest metadata (kallsyms) is a few megabytes; a
/// bigger stated size is a corrupt or hostile file, refused before the
/// decoder spends time and memory on it.
const MAX_BLOCK: u32 = 256 << 20;

/// A compression algorithm trace-cmd 3.x may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Codec {
    Zlib,
    Zstd,
}

impl Codec {
    /// The codec the file header names; `None` for "none".
    pub(crate) fn from_name(name: &str) -> Result<Option<Codec>> {
        match name {
            "none" | "" => Ok(None),
            "zlib" => Ok(Some(Codec::Zlib)),
            "zstd" => Ok(Some(Codec::Zstd)),
            other => Err(Error::UnsupportedCompression(other.to_string())),
        }
    }

    /// Decompresses `data`, which must yield exactly `size` bytes. Output
    /// grows with what the decoder produces, never by the stated `size`,
    /// so a lying header costs no memory.
    pub(crate) fn decompress(self, data: &[u8], size: u32) -> Result<Vec<u8>> {
        if size > MAX_BLOCK {
            return Err(Error::Decompress(format!("a block of {size} bytes")));
        }
        let mut out = Vec::new();
        let limit = u64::from(size) + 1;
        let got = match self {
            Codec::Zlib => flate2::read::ZlibDecoder::new(data)
                .take(limit)
                .read_to_end(&mut out),
            Codec::Zstd => {
                let mut src = data;
                let decoder = ruzstd::decoding::StreamingDecoder::new(&mut src)
                    .map_err(|e| Error::Decompress(e.to_string()))?;
                decoder.take(limit).read_to_end(&mut out)
            }
        };
        got.map_err(|e| Error::Decompress(e.to_string()))?;
        if out.len() != size as usize {
            return Err(Error::Decompress(format!(
                "{} bytes where the block header says {size}",
                out.len()
            )));
        }
        Ok(out)
    }

    /// Reads one `[u32 compressed][u32 size][data]` block from `bytes`.
    pub(crate) fn block(self, bytes: &mut Bytes<'_>) -> Result<Vec<u8>> {
        let compressed = bytes.u32()?;
        let size = bytes.u32()?;
        let data = bytes.take(u64::from(compressed))?;
        self.decompress(data, size)
    }
}
