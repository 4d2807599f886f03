//! Spinners and bars (indicatif) where a person waits: boot phases, benchmarks, the firmware
//! fetch. Drawn on stderr, and only when both stdout and stderr are terminals, so pipes,
//! `--json` consumers and tests see exactly the text they saw before.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Set (to anything but `0`) to turn progress display off on a terminal too.
pub const NO_PROGRESS_ENV: &str = "NVBARE_NO_PROGRESS";

/// Whether progress is drawn at all.
pub fn enabled() -> bool {
    let off = std::env::var_os(NO_PROGRESS_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    !off && std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// A spinner (or nothing, when progress is off).
#[derive(Debug)]
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    /// A spinner showing `msg`, ticking on its own.
    pub fn new(msg: impl Into<String>) -> Spinner {
        if !enabled() {
            return Spinner(None);
        }
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>3.dim} {wide_msg}") {
            pb.set_style(style);
        }
        pb.set_message(msg.into());
        pb.enable_steady_tick(Duration::from_millis(100));
        Spinner(Some(pb))
    }

    /// A bar of `len` steps showing `msg` (a spinner-like nothing when progress is off).
    pub fn bar(len: u64, msg: impl Into<String>) -> Spinner {
        if !enabled() {
            return Spinner(None);
        }
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed:.dim}")
        {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(msg.into());
        pb.enable_steady_tick(Duration::from_millis(200));
        Spinner(Some(pb))
    }

    /// A spinner that does nothing.
    pub fn off() -> Spinner {
        Spinner(None)
    }

    /// Replaces the message.
    pub fn set_message(&self, msg: impl Into<String>) {
        if let Some(pb) = &self.0 {
            pb.set_message(msg.into());
        }
    }

    /// Advances a bar by one step.
    pub fn inc(&self) {
        if let Some(pb) = &self.0 {
            pb.inc(1);
        }
    }

    /// Runs `f` (which prints) with the spinner hidden, so lines do not mix with it.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.0 {
            Some(pb) => pb.suspend(f),
            None => f(),
        }
    }

    /// Removes the spinner from the terminal.
    pub fn finish(&self) {
        if let Some(pb) = &self.0 {
            pb.finish_and_clear();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The spinner of the step [`step`] started last.
static CURRENT: std::sync::Mutex<Option<Spinner>> = std::sync::Mutex::new(None);

/// Prints `line` on stderr as a finished step and, on a terminal, spins under it until the next
/// step or [`clear`]: a spinner per measurement, for commands that print progress lines.
/// The spinner redraws twice a second, little enough to leave timings alone
/// ([`NO_PROGRESS_ENV`] turns it off).
pub fn step(line: &str) {
    let mut cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = cur.take() {
        s.finish();
    }
    eprintln!("{line}");
    if enabled() {
        let s = Spinner::new("");
        if let Some(pb) = &s.0 {
            pb.enable_steady_tick(Duration::from_millis(500));
        }
        *cur = Some(s);
    }
}

/// Removes the spinner [`step`] left.
pub fn clear() {
    let mut cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = cur.take() {
        s.finish();
    }
}

/// The spinner of a running firmware fetch.
static FETCH: std::sync::Mutex<Option<Spinner>> = std::sync::Mutex::new(None);

/// Shows the firmware fetch script's lines where they belong, with a spinner naming the step
/// it is on (installed by `main` with `nvbare::backend::firmware::set_fetch_progress`).
pub fn fetch_event(e: nvbare::backend::firmware::FetchEvent<'_>) {
    use nvbare::backend::firmware::FetchEvent;
    let mut cur = FETCH.lock().unwrap_or_else(|p| p.into_inner());
    match e {
        FetchEvent::Line { text, to_stderr } => {
            let s = cur.get_or_insert_with(|| Spinner::new("fetching GSP firmware"));
            s.suspend(|| {
                if to_stderr {
                    eprintln!("{text}");
                } else {
                    println!("{text}");
                }
            });
            let step = text.strip_prefix("fetch-firmware: ").unwrap_or(text);
            s.set_message(format!("fetching GSP firmware: {step}"));
        }
        FetchEvent::Done => {
            if let Some(s) = cur.take() {
                s.finish();
            }
        }
    }
}
