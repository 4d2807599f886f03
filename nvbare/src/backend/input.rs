//! Every file (or standard input, `-`) a user names is read through here, with a size limit:
//! `/dev/zero`, a FIFO or a file that keeps growing ends in an error that names the file and
//! the limit instead of eating all memory. A regular file's length is checked before any byte
//! is read; anything else is read through `take(limit + 1)`, so one byte past the limit is
//! enough to tell.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Most bytes read as a cubin (`nvbare run`, `nvbare bench --runtime-cubin`): the fixture
/// cubins are tens of KiB and large real ones tens of MiB, so 512 MiB only stops a wrong path.
pub const MAX_CUBIN_BYTES: u64 = 512 << 20;

/// Most bytes read from one firmware file (`nvbare fw inspect`, the firmware directory of a
/// boot): the largest real file, the GSP-RM image, is 62 MiB.
pub const MAX_FIRMWARE_BYTES: u64 = 256 << 20;

/// Most bytes `nvbare decode pushbuf` reads: 16 Mi method words, far more than one submission
/// holds (the device layer's pushbuffers are a few MiB).
pub const MAX_PUSHBUF_BYTES: u64 = 64 << 20;

/// How many bytes an input may or must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// At most this many.
    AtMost(u64),
    /// Exactly this many (a QMD, the contents of a buffer).
    Exactly(u64),
}

impl Size {
    fn limit(self) -> u64 {
        match self {
            Size::AtMost(n) | Size::Exactly(n) => n,
        }
    }
}

/// What an input is, for messages: e.g. "a cubin", with what to do when it is too large.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// What the file should be, e.g. `"a cubin"`.
    pub what: &'static str,
    /// What to do when it does not fit, e.g. `"check that it is the cubin"`.
    pub hint: &'static str,
}

/// Why an input could not be read.
#[derive(Debug)]
pub enum InputError {
    /// Opening or reading failed.
    Io {
        /// The file (or "standard input").
        name: String,
        /// Why.
        source: io::Error,
    },
    /// It holds more (or, for [`Size::Exactly`], fewer) bytes than it may.
    Size {
        /// The file (or "standard input").
        name: String,
        /// What it holds: a length, or "more than N".
        holds: String,
        /// The size it must have.
        size: Size,
        /// What it is and what to do.
        kind: Kind,
    },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Io { name, source } => write!(f, "cannot read {name}: {source}"),
            InputError::Size {
                name,
                holds,
                size,
                kind,
            } => {
                let want = match size {
                    Size::AtMost(n) => format!("at most {}", bytes(*n)),
                    Size::Exactly(n) => format!("exactly {}", bytes(*n)),
                };
                write!(
                    f,
                    "{name} holds {holds} bytes; {} must be {want}: {}",
                    kind.what, kind.hint
                )
            }
        }
    }
}

impl std::error::Error for InputError {}

/// `n` bytes, with the MiB or GiB too when that is easier to read.
pub fn bytes(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    match n {
        n if n >= GIB && n % GIB == 0 => format!("{n} bytes ({} GiB)", n / GIB),
        n if n >= MIB && n % MIB == 0 => format!("{n} bytes ({} MiB)", n / MIB),
        n => format!("{n} bytes"),
    }
}

/// An input being read, at most [`Size`]'s bytes of it.
pub struct Input {
    name: String,
    size: Size,
    kind: Kind,
    reader: io::Take<Box<dyn Read>>,
    read: u64,
    /// A regular file's length (what [`Input::read_all`] reserves), else 0.
    len_hint: u64,
}

impl fmt::Debug for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("size", &self.size)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl Input {
    /// Opens `path` (`-`: standard input); a regular file of the wrong length is refused here,
    /// before any byte is read.
    pub fn open(path: &Path, size: Size, kind: Kind) -> Result<Input, InputError> {
        let (name, reader, len_hint): (String, Box<dyn Read>, u64) = if path.as_os_str() == "-" {
            ("standard input".into(), Box::new(io::stdin()), 0)
        } else {
            let name = path.display().to_string();
            let io_err = |source| InputError::Io {
                name: name.clone(),
                source,
            };
            let file = File::open(path).map_err(io_err)?;
            let meta = file.metadata().map_err(io_err)?;
            let wrong = match size {
                Size::AtMost(n) => meta.len() > n,
                Size::Exactly(n) => meta.len() != n,
            };
            if meta.is_file() && wrong {
                return Err(InputError::Size {
                    name,
                    holds: meta.len().to_string(),
                    size,
                    kind,
                });
            }
            let hint = if meta.is_file() { meta.len() } else { 0 };
            (name, Box::new(file), hint)
        };
        Ok(Input {
            name,
            size,
            kind,
            reader: reader.take(size.limit().saturating_add(1)),
            read: 0,
            len_hint,
        })
    }

    /// The file's name, as messages give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn size_error(&self, holds: String) -> InputError {
        InputError::Size {
            name: self.name.clone(),
            holds,
            size: self.size,
            kind: self.kind,
        }
    }

    /// Fills `buf` (less only at the end of the input); the number of bytes read. Reading past
    /// the limit is an error.
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> Result<usize, InputError> {
        let mut got = 0;
        while got < buf.len() {
            match self.reader.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(InputError::Io {
                        name: self.name.clone(),
                        source,
                    });
                }
            }
        }
        self.read += got as u64;
        if self.read > self.size.limit() {
            let limit = self.size.limit();
            return Err(self.size_error(format!("more than {limit}")));
        }
        Ok(got)
    }

    /// Checks that the input ended where it had to: nothing past the limit, and for
    /// [`Size::Exactly`] nothing missing.
    pub fn finish(mut self) -> Result<(), InputError> {
        let mut probe = [0u8; 1];
        self.read_chunk(&mut probe)?;
        match self.size {
            Size::Exactly(n) if self.read != n => Err(self.size_error(self.read.to_string())),
            _ => Ok(()),
        }
    }

    /// Reads all of it. The buffer grows with what arrives and never past the limit (plus the
    /// one byte that tells the input is too large).
    pub fn read_all(mut self) -> Result<Vec<u8>, InputError> {
        let cap = self.size.limit().saturating_add(1);
        let mut v: Vec<u8> = Vec::with_capacity(self.len_hint.min(cap) as usize);
        let mut chunk = vec![0u8; cap.min(1 << 20) as usize];
        loop {
            let n = self.read_chunk(&mut chunk)?;
            if n == 0 {
                break;
            }
            if v.len() + n > v.capacity() {
                let want = (v.capacity() as u64 * 2).clamp((v.len() + n) as u64, cap);
                v.reserve_exact(want as usize - v.len());
            }
            v.extend_from_slice(&chunk[..n]);
        }
        self.finish()?;
        Ok(v)
    }
}

/// Reads all of `path` (`-`: standard input), refusing more than `max` bytes.
pub fn read_at_most(path: &Path, max: u64, kind: Kind) -> Result<Vec<u8>, InputError> {
    Input::open(path, Size::AtMost(max), kind)?.read_all()
}

/// Reads `path` (`-`: standard input), which must hold exactly `len` bytes.
pub fn read_exactly(path: &Path, len: u64, kind: Kind) -> Result<Vec<u8>, InputError> {
    Input::open(path, Size::Exactly(len), kind)?.read_all()
}

/// A cubin, for messages.
pub const CUBIN: Kind = Kind {
    what: "a cubin",
    hint: "check that the path names a cubin (nvcc -cubin or cuobjdump -xelf output)",
};

/// A firmware file, for messages.
pub const FIRMWARE: Kind = Kind {
    what: "a firmware file",
    hint: "check that the path names a firmware file (the largest real one, the GSP-RM image, \
           is 62 MiB)",
};

/// A pushbuffer dump, for messages.
pub const PUSHBUF: Kind = Kind {
    what: "a pushbuffer dump",
    hint: "decode a smaller piece of it (e.g. `head -c 1M FILE | nvbare decode pushbuf -`)",
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const K: Kind = Kind {
        what: "a test file",
        hint: "pass a smaller one",
    };

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nvbare-input-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn size_err(r: Result<Vec<u8>, InputError>) -> String {
        match r {
            Err(e @ InputError::Size { .. }) => e.to_string(),
            other => panic!("not a size error: {other:?}"),
        }
    }

    #[test]
    fn regular_files_are_checked_by_length() {
        let f = temp("ten", &[7u8; 10]);
        assert_eq!(read_at_most(&f, 10, K).unwrap(), [7u8; 10]);
        assert_eq!(read_exactly(&f, 10, K).unwrap(), [7u8; 10]);
        let e = size_err(read_at_most(&f, 9, K));
        assert!(e.contains("holds 10 bytes"), "{e}");
        assert!(
            e.contains("a test file must be at most 9 bytes: pass a smaller one"),
            "{e}"
        );
        assert!(e.contains(&f.display().to_string()), "{e}");
        let e = size_err(read_exactly(&f, 11, K));
        assert!(
            e.contains("holds 10 bytes") && e.contains("exactly 11 bytes"),
            "{e}"
        );
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn endless_and_empty_devices_end_at_the_limit() {
        let zero = Path::new("/dev/zero");
        let e = size_err(read_at_most(zero, 1 << 20, K));
        assert!(e.contains("/dev/zero holds more than 1048576 bytes"), "{e}");
        assert!(e.contains("at most 1048576 bytes (1 MiB)"), "{e}");
        let e = size_err(read_exactly(zero, 384, K));
        assert!(
            e.contains("more than 384") && e.contains("exactly 384 bytes"),
            "{e}"
        );
        let e = size_err(read_exactly(Path::new("/dev/null"), 384, K));
        assert!(e.contains("/dev/null holds 0 bytes"), "{e}");
        assert!(
            read_at_most(Path::new("/dev/null"), 16, K)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn pieces_read_in_a_loop_stop_at_the_limit() {
        let mut i = Input::open(Path::new("/dev/zero"), Size::Exactly(10), K).unwrap();
        let mut b = [1u8; 4];
        assert_eq!(i.read_chunk(&mut b).unwrap(), 4);
        assert_eq!(i.read_chunk(&mut b).unwrap(), 4);
        assert_eq!(b, [0; 4]);
        // The third piece would go past 10 bytes.
        assert!(matches!(i.read_chunk(&mut b), Err(InputError::Size { .. })));

        let f = temp("six", &[1, 2, 3, 4, 5, 6]);
        let mut i = Input::open(&f, Size::Exactly(6), K).unwrap();
        assert_eq!(i.name(), f.display().to_string());
        assert_eq!(i.read_chunk(&mut b).unwrap(), 4);
        assert_eq!(i.read_chunk(&mut b).unwrap(), 2);
        assert_eq!(b[..2], [5, 6]);
        i.finish().unwrap();
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_sizes_read_well() {
        let missing = Path::new("/nonexistent/nvbare/input.bin");
        let e = read_at_most(missing, 16, K).unwrap_err();
        assert!(matches!(e, InputError::Io { .. }));
        assert!(
            e.to_string()
                .starts_with("cannot read /nonexistent/nvbare/input.bin")
        );
        assert_eq!(bytes(3), "3 bytes");
        assert_eq!(bytes(64 << 20), "67108864 bytes (64 MiB)");
        assert_eq!(bytes(4 << 40), "4398046511104 bytes (4096 GiB)");
    }
}
