//! A line-per-event record of what a driver made the simulated GPU do: every RPC GSP-RM
//! receives (function, class or control command, parameter size and hash, result) and every
//! boot step the boot hardware recognises. Two drivers' bring-ups of the same chip can be
//! compared line by line (`nvbare serve --trace FILE`).

use std::fmt;
use std::sync::Arc;

/// Where trace lines go.
#[derive(Clone)]
pub struct Trace(Arc<dyn Fn(&str) + Send + Sync>);

impl Trace {
    /// Lines go to `sink`.
    pub fn new(sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Trace(Arc::new(sink))
    }

    /// Records one line.
    pub fn line(&self, s: &str) {
        (self.0)(s)
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Trace")
    }
}

/// FNV-1a over `bytes`: a short fingerprint of RPC parameters.
pub fn hash(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn lines_reach_the_sink_and_the_hash_is_fnv1a() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let t = Trace::new(move |s| g.lock().unwrap().push(s.to_string()));
        t.clone().line("a");
        t.line("b");
        assert_eq!(*got.lock().unwrap(), ["a", "b"]);
        assert_eq!(hash(b""), 0x811c_9dc5);
        assert_eq!(hash(b"a"), 0xe40c_292c);
    }
}
