//! The one error type of the crate.

use std::fmt;

/// Why a trace.dat could not be read.
///
/// ```
/// let err = hotkern_tracedat::TraceFile::from_bytes(b"not a trace".to_vec()).err().unwrap();
/// assert!(matches!(err, hotkern_tracedat::Error::BadMagic));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused a read.
    Io(std::io::Error),
    /// The file does not start with trace-cmd's magic bytes.
    BadMagic,
    /// A version other than 6 or 7.
    UnsupportedVersion(String),
    /// A compression algorithm other than zlib and zstd.
    UnsupportedCompression(String),
    /// The file ends inside the named part.
    Truncated(&'static str),
    /// A part of the file is malformed; the text says which and how.
    Corrupt(String),
    /// A compressed block does not decompress to its stated size.
    Decompress(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::BadMagic => write!(f, "not a trace.dat file (bad magic)"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported trace.dat version {v}"),
            Error::UnsupportedCompression(c) => write!(f, "unsupported compression {c}"),
            Error::Truncated(what) => write!(f, "file ends inside the {what}"),
            Error::Corrupt(what) => write!(f, "corrupt trace.dat: {what}"),
            Error::Decompress(what) => write!(f, "decompression failed: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
