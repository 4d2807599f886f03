//! Video memory: a sparse backing store (only pages that were written take host memory), so a
//! simulated 141 GiB H200 fits on a laptop. Reads of untouched memory return zeros.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Granule of the sparse store.
const CHUNK: u64 = 64 << 10;

/// Why a VRAM access failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("VRAM access of {len} bytes at {addr:#x} is beyond the {size:#x}-byte framebuffer")]
pub struct VramRangeError {
    /// Physical address.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// VRAM size.
    pub size: u64,
}

/// The framebuffer.
#[derive(Debug)]
pub struct Vram {
    size: u64,
    chunks: Mutex<HashMap<u64, Box<[u8]>>>,
    /// BAR1 translates through GSP-RM's tables (virtual mode) instead of being a linear window.
    bar1_virtual: AtomicBool,
    /// CPU accesses through BAR1 while it was in virtual mode.
    bar1_virtual_accesses: AtomicU64,
}

impl Vram {
    /// A framebuffer of `size` bytes.
    pub fn new(size: u64) -> Self {
        Vram {
            size,
            chunks: Mutex::new(HashMap::new()),
            bar1_virtual: AtomicBool::new(false),
            bar1_virtual_accesses: AtomicU64::new(0),
        }
    }

    /// Switches BAR1 between physical mode (a linear window onto VRAM, the power-on state)
    /// and virtual mode (translated by tables the simulator does not model: the CPU then
    /// reaches nothing).
    pub fn set_bar1_virtual(&self, virtual_mode: bool) {
        self.bar1_virtual.store(virtual_mode, Ordering::SeqCst);
    }

    /// Whether BAR1 is in virtual mode.
    pub fn bar1_virtual(&self) -> bool {
        self.bar1_virtual.load(Ordering::SeqCst)
    }

    /// Counts a CPU access through BAR1 in virtual mode (a driver that forgot to switch it).
    pub fn note_bar1_virtual_access(&self) {
        self.bar1_virtual_accesses.fetch_add(1, Ordering::Relaxed);
    }

    /// CPU accesses through BAR1 made while it was in virtual mode.
    pub fn bar1_virtual_accesses(&self) -> u64 {
        self.bar1_virtual_accesses.load(Ordering::Relaxed)
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Host memory currently backing written pages.
    pub fn resident_bytes(&self) -> u64 {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner()).len() as u64 * CHUNK
    }

    fn check(&self, addr: u64, len: usize) -> Result<(), VramRangeError> {
        let len = len as u64;
        match addr.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(VramRangeError {
                addr,
                len,
                size: self.size,
            }),
        }
    }

    /// Copies out of VRAM.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), VramRangeError> {
        self.check(addr, dst.len())?;
        let chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0usize;
        while done < dst.len() {
            let a = addr + done as u64;
            let (idx, off) = (a / CHUNK, (a % CHUNK) as usize);
            let n = (CHUNK as usize - off).min(dst.len() - done);
            match chunks.get(&idx) {
                Some(c) => dst[done..done + n].copy_from_slice(&c[off..off + n]),
                None => dst[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// Copies into VRAM.
    pub fn write(&self, addr: u64, src: &[u8]) -> Result<(), VramRangeError> {
        self.check(addr, src.len())?;
        let mut chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0usize;
        while done < src.len() {
            let a = addr + done as u64;
            let (idx, off) = (a / CHUNK, (a % CHUNK) as usize);
            let n = (CHUNK as usize - off).min(src.len() - done);
            let part = &src[done..done + n];
            match chunks.get_mut(&idx) {
                Some(c) => c[off..off + n].copy_from_slice(part),
                // Zeros into an untouched chunk change nothing: keep it sparse, so clearing a
                // large buffer takes no host memory.
                None if part.iter().all(|&b| b == 0) => {}
                None => {
                    let mut c: Box<[u8]> = vec![0u8; CHUNK as usize].into();
                    c[off..off + n].copy_from_slice(part);
                    chunks.insert(idx, c);
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&self, addr: u64) -> Result<u32, VramRangeError> {
        let mut b = [0; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian u32.
    pub fn write_u32(&self, addr: u64, v: u32) -> Result<(), VramRangeError> {
        self.write(addr, &v.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_roundtrip_across_chunks() {
        let v = Vram::new(1 << 40);
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        v.write((1 << 39) - 7, &data).unwrap();
        let mut back = vec![0; data.len()];
        v.read((1 << 39) - 7, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(v.resident_bytes() <= 5 * CHUNK);
        assert_eq!(v.read_u32(0).unwrap(), 0);
        assert!(v.write(1 << 40, &[1]).is_err());
        assert!(v.read(u64::MAX, &mut [0]).is_err());
    }

    #[test]
    fn zeros_into_untouched_memory_take_no_host_memory() {
        let v = Vram::new(1 << 40);
        v.write(1 << 30, &vec![0u8; 1 << 20]).unwrap();
        assert_eq!(v.resident_bytes(), 0);
        // Zeros over written memory still land.
        v.write_u32(8, 0xdead_beef).unwrap();
        v.write(0, &[0u8; 16]).unwrap();
        assert_eq!(v.read_u32(8).unwrap(), 0);
        assert_eq!(v.resident_bytes(), CHUNK);
    }
}
