//! Where the driver's words go: a 16550 UART at the PC's COM1 port, the core's `log` records
//! and the boot's phases. **Skeleton**: replace [`write_str`] with the OS's console.

use core::fmt::{self, Write};
use core::time::Duration;

use nvbare_core::gsp::boot::{BootError, BootObserver, BootPhase, BootReport};

/// COM1's I/O port.
const COM1: u16 = 0x3f8;

fn outb(port: u16, value: u8) {
    // SAFETY: a port write to the legacy serial port; it touches no memory.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack))
    }
}

fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: a port read from the legacy serial port; it touches no memory.
    unsafe { core::arch::asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack)) };
    v
}

/// Writes `s` to the console (bounded wait for the transmitter, so a missing UART cannot hang).
pub fn write_str(s: &str) {
    for b in s.bytes() {
        for _ in 0..100_000 {
            if inb(COM1 + 5) & 0x20 != 0 {
                break;
            }
            core::hint::spin_loop();
        }
        outb(COM1, b);
    }
}

struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_str(s);
        Ok(())
    }
}

/// Prints a line.
pub fn println(args: fmt::Arguments<'_>) {
    let _ = Console.write_fmt(args);
    write_str("\r\n");
}

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            println(format_args!("{} {}: {}", r.level(), r.target(), r.args()));
        }
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// Sends the core's `log` records (warnings about GSP events, unload problems, ...) to the
/// console.
pub fn init_logger() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// Prints the boot's phases, details and, on failure, the report (registers, GSP log lines).
#[derive(Debug, Default)]
pub struct ConsoleObserver;

impl BootObserver for ConsoleObserver {
    fn phase_started(&mut self, phase: BootPhase) {
        println(format_args!("gsp: {phase}"));
    }

    fn phase_finished(&mut self, phase: BootPhase, elapsed: Duration) {
        println(format_args!("gsp: {phase} done in {elapsed:?}"));
    }

    fn detail(&mut self, _phase: BootPhase, what: fmt::Arguments<'_>) {
        println(format_args!("gsp:   {what}"));
    }

    fn failed(&mut self, error: &BootError, report: &BootReport) {
        println(format_args!("gsp: FAILED: {error}"));
        println(format_args!("{report}"));
    }
}
