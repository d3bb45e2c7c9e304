//! A progress bar on standard error, so that tables and JSON on standard
//! output stay clean. It hides itself when standard error is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// Progress through a benchmark's cases.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` steps labelled with the benchmark's name.
    pub fn new(label: &str, steps: u64) -> Self {
        let bar = ProgressBar::new(steps);
        let style = ProgressStyle::with_template(
            "{prefix:>8} [{bar:32.cyan/blue}] {pos:>3}/{len:3} {elapsed:>4} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_owned());
        Progress { bar }
    }

    /// Says which case runs now.
    pub fn start(&self, case: &str) {
        self.bar.set_message(case.to_owned());
    }

    /// Marks one step done.
    pub fn advance(&self) {
        self.bar.inc(1);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
