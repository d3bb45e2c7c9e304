//! Bounded access to the file: every read is checked against the file's
//! length first, so a corrupt size field becomes an error instead of a huge
//! allocation or a read past the end.

use std::io::{Read, Seek, SeekFrom};

use crate::error::{Error, Result};
pub(crate) use crate::format::read_uint;

/// What a trace can be read from: a file, or bytes in memory.
pub(crate) trait Source: Read + Seek + Send {}
impl<T: Read + Seek + Send> Source for T {}

/// The file with its length.
pub(crate) struct Input {
    inner: Box<dyn Source>,
    len: u64,
}

impl Input {
    pub(crate) fn new(mut inner: Box<dyn Source>) -> Result<Self> {
        let len = inner.seek(SeekFrom::End(0))?;
        Ok(Input { inner, len })
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// `len` bytes at `offset`, or `Truncated(what)` if the file is shorter.
    pub(crate) fn read_at(&mut self, offset: u64, len: u64, what: &'static str) -> Result<Vec<u8>> {
        let end = offset.checked_add(len).ok_or(Error::Truncated(what))?;
        if end > self.len {
            return Err(Error::Truncated(what));
        }
        self.inner.seek(SeekFrom::Start(offset))?;
        let mut buf = vec![0; len as usize];
        self.inner.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// Up to `max` bytes at `offset` (fewer at the end of the file).
    pub(crate) fn read_upto(&mut self, offset: u64, max: u64) -> Result<Vec<u8>> {
        let len = max.min(self.len.saturating_sub(offset));
        self.read_at(offset, len, "file")
    }

    /// The NUL-terminated string at `offset` and the offset after its NUL.
    pub(crate) fn cstr_at(&mut self, offset: u64, what: &'static str) -> Result<(String, u64)> {
        let mut out = Vec::new();
        let mut at = offset;
        loop {
            let chunk = self.read_upto(at, 256)?;
            if chunk.is_empty() {
                return Err(Error::Truncated(what));
            }
            if let Some(nul) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                let next = at + nul as u64 + 1;
                return Ok((String::from_utf8_lossy(&out).into_owned(), next));
            }
            at += chunk.len() as u64;
            out.extend_from_slice(&chunk);
        }
    }
}

/// A little parser over bytes already in memory, in the file's byte order.
#[derive(Clone)]
pub(crate) struct Bytes<'a> {
    buf: &'a [u8],
    pos: usize,
    big_endian: bool,
    what: &'static str,
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(buf: &'a [u8], big_endian: bool, what: &'static str) -> Self {
        Bytes {
            buf,
            pos: 0,
            big_endian,
            what,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(Error::Truncated(self.what));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N as u64)?);
        if self.big_endian {
            a.reverse();
        }
        Ok(a)
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A NUL-terminated string (the NUL is consumed, not returned).
    pub(crate) fn cstr(&mut self) -> Result<String> {
        let rest = &self.buf[self.pos..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(Error::Truncated(self.what))?;
        self.pos += nul + 1;
        Ok(String::from_utf8_lossy(&rest[..nul]).into_owned())
    }
}

/// Sequential reads of numbers, strings and blocks, from memory ([`Bytes`])
/// or straight from the file ([`Seq`]).
pub(crate) trait Cursor {
    fn u16(&mut self) -> Result<u16>;
    fn u32(&mut self) -> Result<u32>;
    fn u64(&mut self) -> Result<u64>;
    /// `n` bytes; fails without allocating if fewer remain.
    fn block(&mut self, n: u64) -> Result<Vec<u8>>;
    fn cstr(&mut self) -> Result<String>;
}

impl Cursor for Bytes<'_> {
    fn u16(&mut self) -> Result<u16> {
        Bytes::u16(self)
    }
    fn u32(&mut self) -> Result<u32> {
        Bytes::u32(self)
    }
    fn u64(&mut self) -> Result<u64> {
        Bytes::u64(self)
    }
    fn block(&mut self, n: u64) -> Result<Vec<u8>> {
        Ok(self.take(n)?.to_vec())
    }
    fn cstr(&mut self) -> Result<String> {
        Bytes::cstr(self)
    }
}

/// Reads through the file from an offset, so version 6's metadata is read
/// without loading the CPU data behind it.
pub(crate) struct Seq<'a> {
    pub(crate) input: &'a mut Input,
    pub(crate) at: u64,
    pub(crate) big_endian: bool,
}

impl Seq<'_> {
    fn number<const N: usize>(&mut self) -> Result<u64> {
        let raw = self.block(N as u64)?;
        Ok(read_uint(&raw, self.big_endian, N).unwrap_or(0))
    }
}

impl Cursor for Seq<'_> {
    fn u16(&mut self) -> Result<u16> {
        Ok(self.number::<2>()? as u16)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(self.number::<4>()? as u32)
    }
    fn u64(&mut self) -> Result<u64> {
        self.number::<8>()
    }
    fn block(&mut self, n: u64) -> Result<Vec<u8>> {
        let data = self.input.read_at(self.at, n, "metadata")?;
        self.at += n;
        Ok(data)
    }
    fn cstr(&mut self) -> Result<String> {
        let (s, next) = self.input.cstr_at(self.at, "metadata")?;
        self.at = next;
        Ok(s)
    }
}
