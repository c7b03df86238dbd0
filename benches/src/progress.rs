//! The progress bar, and log lines that print above it (or plainly when stderr is not a terminal,
//! where indicatif draws nothing).

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar over a known number of rows.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `total` rows.
    pub fn new(total: u64) -> Progress {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} rows, eta {eta} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar }
    }

    /// What runs now.
    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    /// One row done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Prints a line above the bar.
    pub fn log(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
