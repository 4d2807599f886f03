//! A minimal stderr logger for the `log` facade (the core logs through `log`).

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let tag = match record.level() {
                Level::Error => "error",
                Level::Warn => "warning",
                Level::Info => "info",
                Level::Debug => "debug",
                Level::Trace => "trace",
            };
            eprintln!("{tag}: {}", record.args());
        }
    }

    fn flush(&self) {}
}

/// Installs the logger: warnings by default, more with `verbose`, or `NVBARE_LOG=debug|trace|...`.
pub fn init(verbose: u8) {
    let from_env = std::env::var("NVBARE_LOG")
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok());
    let level = from_env.unwrap_or(match verbose {
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    });
    if log::set_logger(&Stderr).is_ok() {
        log::set_max_level(level);
    }
}
