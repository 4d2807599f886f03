//! Decoding GSP-RM's LIBOS log buffers (LOGINIT, LOGINTR, LOGRM, LOGMNOC, LOGKRNL).
//!
//! Layout (`liblogdecode.c`, `libosExtractLog_ReadRecord`; `_setupLogBufferBaremetal` in
//! `kernel_gsp.c`): word 0 of a buffer is the *put* counter, the total number of u64 words
//! the firmware has written; words 1.. are a ring of `size / 8 - 1` words (the CPU fills them
//! with the buffer's page table at setup, which the first records overwrite). Word `k` of the
//! stream lives at ring slot `k % entries`. A record is written forwards as
//!
//! ```text
//! arg[0] .. arg[n-1] | metadata pointer | timestamp
//! ```
//!
//! and can only be split backwards from `put`: the argument count `n` is in the
//! `libosLogMetadata` the pointer refers to, which lives in the firmware's logging ELF (the
//! `.fwlogging_*` sections of the GSP-RM image), not in the buffer. So:
//!
//! * with a [`LogImage`] (the logging ELF's loaded bytes by virtual address, provided by the
//!   firmware parser) records are split, and [`format_record`] prints them with their
//!   printf-style format string, file and line;
//! * without one, [`LogReader`] still reports the put counter, the words lost to wraparound
//!   and the raw words, oldest first.
//!
//! Everything here treats the buffer and the image as hostile: a bad metadata pointer, an
//! argument count above `LIBOS_LOG_MAX_ARGS`, a put counter that ran backwards, or an
//! unterminated string end decoding of the affected records with a count, never a panic.

use core::fmt;

use super::GspError;
use crate::hal::DmaBuffer;

/// `LIBOS_LOG_MAX_ARGS`.
pub const LIBOS_LOG_MAX_ARGS: usize = 20;
/// Records decoded per [`LogReader::read_new`] call; older new ones are counted as skipped.
pub const MAX_RECORDS_PER_READ: usize = 256;
/// Longest string read from the image.
pub const MAX_STRING: usize = 256;
/// `filename` value that marks `libosLogMetadata_extended`.
pub const LIBOS_LOG_METADATA_EXTENDED: u64 = 0x8000_0000_0000_0000;

/// `libosLogMetadata` (`libos_log.h`): 24 bytes in the logging image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMetadata {
    /// VA of the source file name.
    pub filename: u64,
    /// VA of the printf format.
    pub format: u64,
    /// Source line.
    pub line: u32,
    /// Arguments (without the format).
    pub argument_count: u8,
    /// `LOG_LEVEL_*` (1 info .. 4 error).
    pub print_level: u8,
    /// Special record type (0 = plain).
    pub special_type: u8,
}

/// The firmware's logging image, addressed by virtual address.
pub trait LogImage {
    /// Copies `dst.len()` bytes at `va`; false when not mapped.
    fn read(&self, va: u64, dst: &mut [u8]) -> bool;
}

/// A logging image made of (VA, bytes) segments.
#[derive(Debug, Clone, Copy)]
pub struct Segments<'a>(pub &'a [(u64, &'a [u8])]);

impl LogImage for Segments<'_> {
    fn read(&self, va: u64, dst: &mut [u8]) -> bool {
        self.0.iter().any(|(base, bytes)| {
            let Some(off) = va.checked_sub(*base) else {
                return false;
            };
            let Ok(off) = usize::try_from(off) else {
                return false;
            };
            match off
                .checked_add(dst.len())
                .and_then(|end| bytes.get(off..end))
            {
                Some(src) => {
                    dst.copy_from_slice(src);
                    true
                }
                None => false,
            }
        })
    }
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(o..o + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// Reads the metadata at `va`, following the extended form.
pub fn read_metadata(image: &dyn LogImage, va: u64) -> Option<LogMetadata> {
    let mut m = [0u8; 24];
    if !image.read(va, &mut m) {
        return None;
    }
    if u64_at(&m, 0) == LIBOS_LOG_METADATA_EXTENDED {
        // libosLogMetadata_extended: versionExtended, elfSectionName, meta.
        if !image.read(va.checked_add(16)?, &mut m) {
            return None;
        }
    }
    let meta = LogMetadata {
        filename: u64_at(&m, 0),
        format: u64_at(&m, 8),
        line: u32::from_le_bytes([m[16], m[17], m[18], m[19]]),
        argument_count: m[20],
        print_level: m[21],
        special_type: m[22],
    };
    (meta.argument_count as usize <= LIBOS_LOG_MAX_ARGS).then_some(meta)
}

/// Reads a NUL-terminated string of at most [`MAX_STRING`] bytes into `buf`.
pub fn read_string<'b>(
    image: &dyn LogImage,
    va: u64,
    buf: &'b mut [u8; MAX_STRING],
) -> Option<&'b [u8]> {
    let mut n = 0;
    while n < MAX_STRING {
        let mut b = [0u8; 1];
        if !image.read(va.checked_add(n as u64)?, &mut b) {
            break;
        }
        if b[0] == 0 {
            return buf.get(..n);
        }
        buf[n] = b[0];
        n += 1;
    }
    // Unterminated or unmapped: return what was read, if anything.
    (n > 0).then(|| &buf[..n])
}

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecord {
    /// Stream index of its first word.
    pub index: u64,
    /// Its timestamp (GSP timer, ns).
    pub timestamp: u64,
    /// The metadata pointer.
    pub meta_va: u64,
    /// The metadata.
    pub meta: LogMetadata,
    /// Arguments (first `meta.argument_count` valid).
    pub args: [u64; LIBOS_LOG_MAX_ARGS],
}

/// Where log words come from: index 0 is the put counter, 1.. the ring.
pub trait WordSource {
    /// Bytes of the buffer.
    fn size(&self) -> usize;
    /// Word `i` of the buffer.
    fn word(&self, i: usize) -> Result<u64, GspError>;
}

/// A log buffer in DMA memory at `offset`, `size` bytes.
#[derive(Debug)]
pub struct DmaLog<'a, B: DmaBuffer> {
    /// The buffer.
    pub buf: &'a B,
    /// Offset of the log in it.
    pub offset: usize,
    /// Bytes of the log.
    pub size: usize,
}

impl<B: DmaBuffer> WordSource for DmaLog<'_, B> {
    fn size(&self) -> usize {
        self.size
    }
    fn word(&self, i: usize) -> Result<u64, GspError> {
        let at = i
            .checked_mul(8)
            .filter(|b| b + 8 <= self.size)
            .and_then(|b| b.checked_add(self.offset))
            .ok_or(GspError::BadLayout("log word outside the buffer"))?;
        Ok(self.buf.read_u64(at)?)
    }
}

impl WordSource for &[u8] {
    fn size(&self) -> usize {
        self.len()
    }
    fn word(&self, i: usize) -> Result<u64, GspError> {
        let at = i
            .checked_mul(8)
            .ok_or(GspError::BadLayout("log word index"))?;
        let b = self
            .get(at..at.saturating_add(8))
            .filter(|b| b.len() == 8)
            .ok_or(GspError::BadLayout("log word outside the buffer"))?;
        Ok(u64_at(b, 0))
    }
}

/// What one [`LogReader::read_new`] call found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogSummary {
    /// The put counter.
    pub put: u64,
    /// Words written since the previous call.
    pub new_words: u64,
    /// Of those, words overwritten before they could be read (the ring wrapped).
    pub lost_words: u64,
    /// Records decoded.
    pub records: u64,
    /// New records skipped because more than [`MAX_RECORDS_PER_READ`] arrived.
    pub skipped_records: u64,
    /// Words before the oldest decodable record that could not be attributed (bad metadata,
    /// a record cut by the wrap, or no image).
    pub undecoded_words: u64,
    /// The put counter went backwards (the firmware restarted); reading restarted at 0.
    pub reset: bool,
}

/// What [`LogReader::read_new`] hands the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogItem<'a> {
    /// A decoded record (oldest first).
    Record(&'a LogRecord),
    /// A raw word (no image given): (stream index, value), oldest first.
    Word(u64, u64),
}

/// Reads one LIBOS log buffer incrementally.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogReader {
    previous_put: u64,
}

impl LogReader {
    /// A reader that starts at the beginning of the stream.
    pub fn new() -> Self {
        LogReader { previous_put: 0 }
    }

    /// The put counter seen by the last call.
    pub fn previous_put(&self) -> u64 {
        self.previous_put
    }

    /// Decodes what was written since the last call and passes it to `sink`, oldest first.
    pub fn read_new(
        &mut self,
        src: &dyn WordSource,
        image: Option<&dyn LogImage>,
        sink: &mut dyn FnMut(LogItem<'_>),
    ) -> Result<LogSummary, GspError> {
        let entries = (src.size() / 8).saturating_sub(1) as u64;
        if entries == 0 {
            return Err(GspError::BadLayout("log buffer smaller than 16 bytes"));
        }
        let put = src.word(0)?;
        let mut s = LogSummary {
            put,
            ..Default::default()
        };
        if put < self.previous_put {
            s.reset = true;
            self.previous_put = 0;
        }
        s.new_words = put - self.previous_put;
        let start = self.previous_put.max(put.saturating_sub(entries));
        s.lost_words = start - self.previous_put;
        let slot = |k: u64| 1 + (k % entries) as usize;
        match image {
            None => {
                for k in start..put {
                    sink(LogItem::Word(k, src.word(slot(k))?));
                }
                s.undecoded_words = put - start;
            }
            Some(img) => {
                // Walk backwards from put, collecting record spans.
                let mut spans: heapless::Vec<(u64, LogMetadata, u64, u64), MAX_RECORDS_PER_READ> =
                    heapless::Vec::new();
                let mut i = put;
                while i - start >= 2 {
                    let ts = src.word(slot(i - 1))?;
                    let meta_va = src.word(slot(i - 2))?;
                    let Some(meta) = read_metadata(img, meta_va) else {
                        break;
                    };
                    let n = meta.argument_count as u64;
                    if i - 2 - start < n {
                        break;
                    }
                    let first = i - 2 - n;
                    if spans.push((first, meta, meta_va, ts)).is_err() {
                        s.skipped_records += 1;
                    }
                    i = first;
                }
                s.undecoded_words = i - start;
                for &(first, meta, meta_va, timestamp) in spans.iter().rev() {
                    let mut rec = LogRecord {
                        index: first,
                        timestamp,
                        meta_va,
                        meta,
                        args: [0; LIBOS_LOG_MAX_ARGS],
                    };
                    for (j, a) in rec
                        .args
                        .iter_mut()
                        .take(meta.argument_count as usize)
                        .enumerate()
                    {
                        *a = src.word(slot(first + j as u64))?;
                    }
                    s.records += 1;
                    sink(LogItem::Record(&rec));
                }
            }
        }
        self.previous_put = put;
        Ok(s)
    }
}

/// Writes the buffer header RM writes before boot: put = 0, then the bus address of every
/// page of the buffer (`_setupLogBufferBaremetal`). `offset` must be page aligned.
pub fn init_log_buffer<B: DmaBuffer>(buf: &B, offset: usize, size: usize) -> Result<(), GspError> {
    if !offset.is_multiple_of(4096) || !size.is_multiple_of(4096) || size < 4096 {
        return Err(GspError::BadLayout("log buffer must be whole pages"));
    }
    buf.fill(offset, size, 0)?;
    let base = buf.dev_addr() + offset as u64;
    for p in 0..size / 4096 {
        buf.write_u64(offset + 8 + p * 8, base + (p * 4096) as u64)?;
    }
    Ok(())
}

/// Prints a record as `file:line: message` using its format string.
pub fn format_record(
    rec: &LogRecord,
    image: &dyn LogImage,
    out: &mut dyn fmt::Write,
) -> fmt::Result {
    let mut sbuf = [0u8; MAX_STRING];
    match read_string(image, rec.meta.filename, &mut sbuf) {
        Some(f) => write_lossy(out, f)?,
        None => out.write_str("?")?,
    }
    write!(out, ":{}: ", rec.meta.line)?;
    let mut fbuf = [0u8; MAX_STRING];
    let Some(fmt_bytes) = read_string(image, rec.meta.format, &mut fbuf) else {
        write!(out, "<format at {:#x} not in image>", rec.meta.format)?;
        for a in rec.args.iter().take(rec.meta.argument_count as usize) {
            write!(out, " {a:#x}")?;
        }
        return Ok(());
    };
    let args = rec
        .args
        .get(..rec.meta.argument_count as usize)
        .unwrap_or(&[]);
    printf(out, fmt_bytes, args, image)
}

fn write_lossy(out: &mut dyn fmt::Write, b: &[u8]) -> fmt::Result {
    for &c in b {
        out.write_char(if c.is_ascii() && (c >= 0x20 || c == b'\n' || c == b'\t') {
            c as char
        } else {
            '?'
        })?;
    }
    Ok(())
}

/// A printf subset over u64 arguments: `%[-0+ #][width][.prec][hh|h|l|ll|z|j|t]` with
/// `d i u x X o p c s %`. Missing arguments print as `<?>`.
pub fn printf(
    out: &mut dyn fmt::Write,
    format: &[u8],
    args: &[u64],
    image: &dyn LogImage,
) -> fmt::Result {
    let mut args = args.iter();
    let mut i = 0;
    while let Some(&c) = format.get(i) {
        i += 1;
        if c != b'%' {
            write_lossy(out, &[c])?;
            continue;
        }
        let (mut left, mut zero, mut alt, mut plus) = (false, false, false, false);
        while let Some(&f) = format.get(i) {
            match f {
                b'-' => left = true,
                b'0' => zero = true,
                b'#' => alt = true,
                b'+' => plus = true,
                b' ' => {}
                _ => break,
            }
            i += 1;
        }
        let mut width = 0usize;
        while let Some(d) = format.get(i).filter(|d| d.is_ascii_digit()) {
            width = (width * 10 + (d - b'0') as usize).min(64);
            i += 1;
        }
        let mut prec = None;
        if format.get(i) == Some(&b'.') {
            i += 1;
            let mut p = 0usize;
            while let Some(d) = format.get(i).filter(|d| d.is_ascii_digit()) {
                p = (p * 10 + (d - b'0') as usize).min(MAX_STRING);
                i += 1;
            }
            prec = Some(p);
        }
        let mut long = false;
        let mut short = 0;
        while let Some(&l) = format.get(i) {
            match l {
                b'l' | b'z' | b'j' | b't' | b'q' => long = true,
                b'h' => short += 1,
                _ => break,
            }
            i += 1;
        }
        let Some(&conv) = format.get(i) else {
            return out.write_char('%');
        };
        i += 1;
        if conv == b'%' {
            out.write_char('%')?;
            continue;
        }
        let Some(&a) = args.next() else {
            out.write_str("<?>")?;
            continue;
        };
        let narrow = |v: u64| -> u64 {
            if long {
                v
            } else if short == 1 {
                v as u16 as u64
            } else if short >= 2 {
                v as u8 as u64
            } else {
                v as u32 as u64
            }
        };
        let signed = |v: u64| -> i64 {
            if long {
                v as i64
            } else if short == 1 {
                v as i16 as i64
            } else if short >= 2 {
                v as i8 as i64
            } else {
                v as i32 as i64
            }
        };
        match (conv, left, zero) {
            (b'd' | b'i', _, _) => {
                let v = signed(a);
                match (left, zero, plus) {
                    (true, _, _) => write!(out, "{v:<width$}")?,
                    (false, true, true) => write!(out, "{v:+0width$}")?,
                    (false, true, false) => write!(out, "{v:0width$}")?,
                    (false, false, true) => write!(out, "{v:+width$}")?,
                    (false, false, false) => write!(out, "{v:width$}")?,
                }
            }
            (b'u', true, _) => write!(out, "{:<width$}", narrow(a))?,
            (b'u', false, true) => write!(out, "{:0width$}", narrow(a))?,
            (b'u', false, false) => write!(out, "{:width$}", narrow(a))?,
            (b'x', _, _) | (b'X', _, _) | (b'o', _, _) => {
                let v = narrow(a);
                if alt && v != 0 {
                    out.write_str(match conv {
                        b'x' => "0x",
                        b'X' => "0X",
                        _ => "0",
                    })?;
                }
                match (conv, left, zero) {
                    (b'x', true, _) => write!(out, "{v:<width$x}")?,
                    (b'x', false, true) => write!(out, "{v:0width$x}")?,
                    (b'x', false, false) => write!(out, "{v:width$x}")?,
                    (b'X', true, _) => write!(out, "{v:<width$X}")?,
                    (b'X', false, true) => write!(out, "{v:0width$X}")?,
                    (b'X', false, false) => write!(out, "{v:width$X}")?,
                    (_, true, _) => write!(out, "{v:<width$o}")?,
                    (_, false, true) => write!(out, "{v:0width$o}")?,
                    _ => write!(out, "{v:width$o}")?,
                }
            }
            (b'p', _, _) => write!(out, "{a:#x}")?,
            (b'c', _, _) => write_lossy(out, &[a as u8])?,
            (b's', _, _) => {
                let mut sb = [0u8; MAX_STRING];
                match read_string(image, a, &mut sb) {
                    Some(s) => {
                        let s = &s[..prec.unwrap_or(s.len()).min(s.len())];
                        for _ in s.len()..width {
                            if !left {
                                out.write_char(' ')?;
                            }
                        }
                        write_lossy(out, s)?;
                        for _ in s.len()..width {
                            if left {
                                out.write_char(' ')?;
                            }
                        }
                    }
                    None => write!(out, "<str {a:#x}>")?,
                }
            }
            _ => {
                // Unknown conversion: show it and its argument.
                write!(out, "%{}<{a:#x}>", conv as char)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::String;
    use std::vec;
    use std::vec::Vec;

    fn image() -> Vec<u8> {
        let mut img = vec![0u8; 0x400];
        // meta at 0x0: 2 args; meta at 0x40: extended, 1 arg.
        img[0..8].copy_from_slice(&0x1000_0200u64.to_le_bytes());
        img[8..16].copy_from_slice(&0x1000_0100u64.to_le_bytes());
        img[16..20].copy_from_slice(&42u32.to_le_bytes());
        img[20] = 2;
        img[0x40..0x48].copy_from_slice(&LIBOS_LOG_METADATA_EXTENDED.to_le_bytes());
        img[0x50..0x58].copy_from_slice(&0x1000_0200u64.to_le_bytes());
        img[0x58..0x60].copy_from_slice(&0x1000_0180u64.to_le_bytes());
        img[0x60..0x64].copy_from_slice(&7u32.to_le_bytes());
        img[0x64] = 1;
        let f1 = b"x=%u name=%s\n\0";
        img[0x100..0x100 + f1.len()].copy_from_slice(f1);
        let f2 = b"[%08x] %-4d|%5s|%c%%\0";
        img[0x180..0x180 + f2.len()].copy_from_slice(f2);
        img[0x200..0x208].copy_from_slice(b"rm.c\0\0\0\0");
        img[0x300..0x303].copy_from_slice(b"gsp");
        img
    }

    fn log_with(words: &[u64], size_words: usize) -> Vec<u8> {
        // words is the stream; writes it into a ring of size_words - 1 entries.
        let entries = size_words - 1;
        let mut buf = vec![0u8; size_words * 8];
        buf[..8].copy_from_slice(&(words.len() as u64).to_le_bytes());
        for (k, w) in words.iter().enumerate() {
            let at = (1 + k % entries) * 8;
            buf[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
        buf
    }

    #[test]
    fn decodes_records_across_the_wrap_and_counts_losses() {
        let img = image();
        let segs = [(0x1000_0000u64, &img[..])];
        let image = Segments(&segs);
        let mut stream = Vec::new();
        for i in 0..10u64 {
            stream.extend_from_slice(&[i, 0x1000_0300, 0x1000_0000, 1000 + i]);
        }
        let buf = log_with(&stream, 13); // ring of 12 words: 3 records survive
        let src: &[u8] = &buf;
        let mut r = LogReader::new();
        let mut got = Vec::new();
        let s = r
            .read_new(&src, Some(&image), &mut |it| {
                if let LogItem::Record(rec) = it {
                    let mut line = String::new();
                    format_record(rec, &image, &mut line).unwrap();
                    got.push((rec.timestamp, line));
                }
            })
            .unwrap();
        assert_eq!(s.put, 40);
        assert_eq!(s.lost_words, 28);
        assert_eq!(s.records, 3);
        assert_eq!(got[0], (1007, String::from("rm.c:42: x=7 name=gsp\n")));
        assert_eq!(got[2].0, 1009);
        // Nothing new: nothing reported.
        let s = r.read_new(&src, Some(&image), &mut |_| panic!()).unwrap();
        assert_eq!(s.new_words, 0);
    }

    #[test]
    fn printf_subset_and_extended_metadata() {
        let img = image();
        let segs = [(0x1000_0000u64, &img[..])];
        let image = Segments(&segs);
        let meta = read_metadata(&image, 0x1000_0040).unwrap();
        assert_eq!(meta.line, 7);
        let mut s = String::new();
        printf(
            &mut s,
            b"[%08x] %-4d|%5s|%c%% %lld %hhu %p %y %y",
            &[
                0xbeef,
                (-3i64) as u64,
                0x1000_0300,
                b'Z' as u64,
                u64::MAX,
                0x1ff,
                0x10,
                7,
            ],
            &image,
        )
        .unwrap();
        assert_eq!(s, "[0000beef] -3  |  gsp|Z% -1 255 0x10 %y<0x7> <?>");
    }

    #[test]
    fn garbage_never_panics() {
        let img = image();
        let segs = [(0x1000_0000u64, &img[..])];
        let image = Segments(&segs);
        let mut x = 0x1234_5678_9abc_def1u64;
        for round in 0..200 {
            let mut buf = vec![0u8; 8 * (2 + round % 40)];
            for w in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mix in valid metadata pointers now and then.
                let v = if x.is_multiple_of(5) { 0x1000_0000 } else { x };
                w.copy_from_slice(&v.to_le_bytes());
            }
            let src: &[u8] = &buf;
            let mut r = LogReader::new();
            let _ = r.read_new(&src, Some(&image), &mut |it| {
                if let LogItem::Record(rec) = it {
                    let mut s = String::new();
                    let _ = format_record(rec, &image, &mut s);
                }
            });
            let _ = r.read_new(&src, None, &mut |_| {});
        }
        let tiny: &[u8] = &[0u8; 8];
        assert!(LogReader::new().read_new(&tiny, None, &mut |_| {}).is_err());
    }
}
