//! Version 6 written as a stream: the metadata from a [`TraceDat`], each
//! CPU's pages from a reader, so a file far larger than memory (a
//! benchmark's input, a long recording copied from disk) is written with
//! one buffer. Version 6 suits this because its `flyrecord` table holds
//! only offsets and sizes, known before any page is read; version 7's
//! compressed chunks are sized only once compressed, so it is written in
//! memory by [`super::write_trace_dat`].

use std::fmt;
use std::io::{self, Read, Write};

use super::{v6_head, TraceDat, WriteError};

/// One CPU's data for [`write_trace_dat_v6_streaming`]: its size in bytes,
/// which goes into the file's table before any of it is read, and where
/// to read it from.
#[derive(Debug)]
pub struct CpuReader<R> {
    /// Bytes `data` yields, exactly.
    pub size: u64,
    /// The CPU's raw ring-buffer pages, back to back.
    pub data: R,
}

/// Why a streamed trace.dat could not be written.
#[derive(Debug)]
#[non_exhaustive]
pub enum StreamError {
    /// The layout was refused (see [`WriteError`]).
    Layout(WriteError),
    /// `TraceDat::cpu_data` was not empty: the CPUs' data comes from the
    /// readers alone.
    CpuDataInMemory,
    /// A CPU's reader gave fewer or more bytes than its declared size.
    Size {
        /// The CPU's index in the readers given.
        cpu: usize,
        /// The size declared in [`CpuReader::size`].
        declared: u64,
        /// What the reader gave (counted up to one byte past `declared`).
        read: u64,
    },
    /// Reading a CPU's data or writing the file failed.
    Io(io::Error),
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Layout(e) => e.fmt(f),
            StreamError::CpuDataInMemory => {
                f.write_str("CPU data given both in memory and as readers")
            }
            StreamError::Size {
                cpu,
                declared,
                read,
            } => write!(
                f,
                "CPU {cpu}: {declared} bytes declared, the reader gave {read}{}",
                if read > declared { " or more" } else { "" }
            ),
            StreamError::Io(e) => write!(f, "trace.dat stream: {e}"),
        }
    }
}

impl std::error::Error for StreamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StreamError::Layout(e) => Some(e),
            StreamError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for StreamError {
    fn from(e: io::Error) -> Self {
        StreamError::Io(e)
    }
}

/// Writes `file`'s metadata and then each CPU's data from `cpus` (in CPU
/// order) to `out` as a version 6 trace.dat, byte for byte what
/// [`super::write_trace_dat`] writes for the same data held in
/// `file.cpu_data`, which must be empty here. Returns the bytes written.
/// Memory use is the metadata and a copy buffer, whatever the data's size.
///
/// ```
/// use hotkern_tracedat::write::{write_trace_dat, write_trace_dat_v6_streaming, CpuReader, TraceDat, WriteOptions};
///
/// let meta = TraceDat { page_size: 4096, ..TraceDat::default() };
/// // Two CPUs of three empty pages each, from any `Read`.
/// let pages = || CpuReader { size: 3 * 4096, data: std::io::repeat(0).take(3 * 4096) };
/// # use std::io::Read;
/// let mut streamed = Vec::new();
/// let written = write_trace_dat_v6_streaming(&meta, vec![pages(), pages()], &mut streamed)?;
/// assert_eq!(written, streamed.len() as u64);
///
/// let in_memory = TraceDat { cpu_data: vec![vec![0; 3 * 4096]; 2], ..meta };
/// assert_eq!(streamed, write_trace_dat(&in_memory, &WriteOptions::default())?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_trace_dat_v6_streaming<R: Read, W: Write>(
    file: &TraceDat,
    cpus: Vec<CpuReader<R>>,
    mut out: W,
) -> Result<u64, StreamError> {
    if file.page_size == 0 {
        return Err(StreamError::Layout(WriteError::NoPageSize));
    }
    if !file.cpu_data.is_empty() {
        return Err(StreamError::CpuDataInMemory);
    }
    let sizes: Vec<u64> = cpus.iter().map(|c| c.size).collect();
    let (head, offsets) = v6_head(file, &sizes).map_err(StreamError::Layout)?;
    out.write_all(&head)?;
    let mut at = head.len() as u64;
    for (cpu, (reader, offset)) in cpus.into_iter().zip(offsets).enumerate() {
        io::copy(&mut io::repeat(0).take(offset - at), &mut out)?;
        // One byte past the declared size tells a longer reader apart.
        let mut data = reader.data.take(reader.size.saturating_add(1));
        let read = io::copy(&mut data, &mut out)?;
        if read != reader.size {
            return Err(StreamError::Size {
                cpu,
                declared: reader.size,
                read,
            });
        }
        at = offset + read;
    }
    out.flush()?;
    Ok(at)
}
