//! Progress on standard error, so that tables and JSON on standard output
//! stay clean: a bar of steps (the benchmarks), a spinner (a boot), or a
//! bar of bytes (a large trace.dat read). The bar hides itself when
//! standard error is not a terminal; the lines of [`Progress::step`] are
//! printed either way, for CI logs.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Console lines shown beside a spinner are cut to this many characters,
/// so that the spinner's line does not wrap.
const MESSAGE_CHARS: usize = 70;

/// A progress bar or spinner on standard error, cleared when dropped.
pub struct Progress {
    bar: ProgressBar,
    label: String,
}

impl Progress {
    /// A bar of `steps` steps labelled `label` (a benchmark's name).
    pub fn steps(label: &str, steps: u64) -> Self {
        let bar = ProgressBar::new(steps);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>8} [{bar:32.cyan/blue}] {pos:>3}/{len:3} {elapsed:>4} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(label.to_owned());
        Progress {
            bar,
            label: label.to_owned(),
        }
    }

    /// A spinner for work of unknown length; its [`step`](Self::step)
    /// lines start with `label` (`hotkern boot`).
    pub fn spinner(label: &str) -> Self {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>3} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress {
            bar,
            label: label.to_owned(),
        }
    }

    /// A bar of `total` bytes, advanced by a [`ProgressReader`].
    pub fn bytes(total: u64) -> Self {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template("{bar:32} {bytes}/{total_bytes} {elapsed}")
        {
            bar.set_style(style);
        }
        Progress {
            bar,
            label: String::new(),
        }
    }

    /// Says what runs now, beside the bar.
    pub fn start(&self, what: &str) {
        let short: String = what.chars().take(MESSAGE_CHARS).collect();
        self.bar.set_message(short);
    }

    /// Marks one step done.
    pub fn advance(&self) {
        self.bar.inc(1);
    }

    /// A step worth a line of its own (`label: text`), then shown beside
    /// the bar as what runs now.
    pub fn step(&self, text: &str) {
        self.line(&format!("{}: {text}", self.label));
        self.start(text);
    }

    /// Prints `text` on a line of its own above the bar.
    pub fn line(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }

    /// Clears the bar; dropping it does the same.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// A reader that advances a [`Progress::bytes`] bar by the bytes it reads.
pub struct ProgressReader<R> {
    inner: R,
    progress: Progress,
}

impl<R> ProgressReader<R> {
    /// Wraps `inner`, whose length is `size` bytes.
    pub fn new(inner: R, size: u64) -> Self {
        ProgressReader {
            inner,
            progress: Progress::bytes(size),
        }
    }
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bar.inc(n as u64);
        Ok(n)
    }
}

impl<R: Seek> Seek for ProgressReader<R> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_passes_every_byte_through_and_counts_them() {
        let data: Vec<u8> = (0..=255).collect();
        let mut reader = ProgressReader::new(std::io::Cursor::new(data.clone()), 256);
        let mut read = Vec::new();
        reader.read_to_end(&mut read).unwrap();
        assert_eq!(read, data);
        assert_eq!(reader.progress.bar.position(), 256);
        reader.seek(SeekFrom::Start(250)).unwrap();
        let mut tail = Vec::new();
        reader.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, [250, 251, 252, 253, 254, 255]);
    }

    #[test]
    fn steps_advance_one_at_a_time_and_messages_are_cut() {
        let progress = Progress::steps("physmem", 3);
        progress.advance();
        progress.advance();
        assert_eq!(progress.bar.position(), 2);
        progress.start(&"x".repeat(200));
        assert_eq!(progress.bar.message().chars().count(), MESSAGE_CHARS);
    }
}
