//! A device whose BARs, config space and host memory are plain memory, for tests and fuzzing
//! of the server (feature `testutil`): it records what it was asked, so a test can check what
//! reached it and what did not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Refusal, ServedDevice, Sysmem, refuse};

/// Where [`MemDevice`] puts BAR0 on the bus.
pub const MEM_BAR0_BUS: u64 = 0xf000_0000;
/// Where [`MemDevice`] puts BAR1 on the bus.
pub const MEM_BAR1_BUS: u64 = 0x38_0000_0000;
/// The bus address of [`MemDevice`]'s first host memory.
pub const MEM_SYSMEM_BUS: u64 = 0x1_0000_0000;

/// What a [`MemDevice`] was asked, shared with the test that made it.
#[derive(Debug, Default)]
pub struct MemStats {
    /// `tick` calls.
    pub ticks: AtomicU64,
    /// Requests that reached `mmio_read`, `mmio_write`, `cfg_read`, `cfg_write`.
    pub accesses: AtomicU64,
    /// `reset` calls.
    pub resets: AtomicU64,
    /// `alloc_sysmem` calls.
    pub allocs: AtomicU64,
    /// Host memory allocated and not yet dropped, bytes.
    pub live_sysmem: AtomicU64,
    /// Accesses that reached the device outside its BARs, config space or host memory: ranges
    /// the server should have refused (refused here too). Always 0 for a correct server.
    pub unchecked: AtomicU64,
}

impl MemStats {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// A device made of memory: BAR0 and BAR1 (byte-addressable), 4 KiB of config space (vendor
/// and device id at 0, class at 8), and host memory at consecutive bus addresses.
#[derive(Debug)]
pub struct MemDevice {
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device_id: u16,
    /// Class code.
    pub class: u32,
    /// BAR0's bytes.
    pub bar0: Vec<u8>,
    /// BAR1's bytes.
    pub bar1: Vec<u8>,
    /// Config space.
    pub config: Vec<u8>,
    next_bus: u64,
    stats: Arc<MemStats>,
}

impl MemDevice {
    /// An NVIDIA 3D controller (device id 0x2335) with `bar0` and `bar1` bytes of BARs.
    pub fn new(bar0: usize, bar1: usize) -> Self {
        let mut config = vec![0u8; 4096];
        config[..4].copy_from_slice(&0x2335_10de_u32.to_le_bytes());
        config[8..12].copy_from_slice(&0x0302_00a1_u32.to_le_bytes());
        MemDevice {
            vendor: 0x10de,
            device_id: 0x2335,
            class: 0x03_02_00,
            bar0: vec![0; bar0],
            bar1: vec![0; bar1],
            config,
            next_bus: MEM_SYSMEM_BUS,
            stats: Arc::new(MemStats::default()),
        }
    }

    /// Its counters (shared: they stay readable after the device is handed to the server).
    pub fn stats(&self) -> Arc<MemStats> {
        self.stats.clone()
    }

    fn bar_bytes(&mut self, bar: u32) -> Result<&mut Vec<u8>, Refusal> {
        match bar {
            0 => Ok(&mut self.bar0),
            1 => Ok(&mut self.bar1),
            _ => {
                MemStats::bump(&self.stats.unchecked);
                refuse(format!("no BAR{bar}"))
            }
        }
    }
}

fn range(
    stats: &MemStats,
    offset: u64,
    len: usize,
    size: usize,
) -> Result<std::ops::Range<usize>, Refusal> {
    // The server checked this already; a MemDevice checks again, and counts what it had to
    // refuse, so that a server that did not check is caught, not an out-of-bounds slice.
    let start = usize::try_from(offset).ok();
    match start.and_then(|s| s.checked_add(len).map(|e| (s, e))) {
        Some((s, e)) if e <= size => Ok(s..e),
        _ => {
            MemStats::bump(&stats.unchecked);
            refuse(format!(
                "MemDevice: {len} bytes at {offset:#x} outside {size}"
            ))
        }
    }
}

impl ServedDevice for MemDevice {
    fn name(&self) -> String {
        "mem".into()
    }
    fn vendor(&self) -> u16 {
        self.vendor
    }
    fn device_id(&self) -> u16 {
        self.device_id
    }
    fn class(&self) -> u32 {
        self.class
    }
    fn bar(&self, index: u32) -> Option<(u64, u64)> {
        match index {
            0 => Some((MEM_BAR0_BUS, self.bar0.len() as u64)),
            1 => Some((MEM_BAR1_BUS, self.bar1.len() as u64)),
            _ => None,
        }
    }
    fn mmio_read(&mut self, bar: u32, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
        MemStats::bump(&self.stats.accesses);
        let stats = self.stats.clone();
        let b = self.bar_bytes(bar)?;
        let r = range(&stats, offset, dst.len(), b.len())?;
        dst.copy_from_slice(&b[r]);
        Ok(())
    }
    fn mmio_write(&mut self, bar: u32, offset: u64, src: &[u8]) -> Result<(), Refusal> {
        MemStats::bump(&self.stats.accesses);
        let stats = self.stats.clone();
        let b = self.bar_bytes(bar)?;
        let r = range(&stats, offset, src.len(), b.len())?;
        b[r].copy_from_slice(src);
        Ok(())
    }
    fn cfg_read(&mut self, offset: u16, size: u8) -> Result<u32, Refusal> {
        MemStats::bump(&self.stats.accesses);
        let r = range(&self.stats, offset.into(), size.into(), self.config.len())?;
        let mut w = [0u8; 4];
        w[..r.len()].copy_from_slice(&self.config[r]);
        Ok(u32::from_le_bytes(w))
    }
    fn cfg_write(&mut self, offset: u16, size: u8, value: u32) -> Result<(), Refusal> {
        MemStats::bump(&self.stats.accesses);
        let r = range(&self.stats, offset.into(), size.into(), self.config.len())?;
        let n = r.len();
        self.config[r].copy_from_slice(&value.to_le_bytes()[..n]);
        Ok(())
    }
    fn reset(&mut self) -> Result<(), Refusal> {
        MemStats::bump(&self.stats.resets);
        Ok(())
    }
    fn alloc_sysmem(
        &mut self,
        size: u64,
        _contiguous: bool,
    ) -> Result<(Box<dyn Sysmem>, Vec<u64>), Refusal> {
        MemStats::bump(&self.stats.allocs);
        let n = usize::try_from(size).map_err(|_| Refusal("size".into()))?;
        let bus = self.next_bus;
        self.next_bus = self.next_bus.wrapping_add(size);
        self.stats.live_sysmem.fetch_add(size, Ordering::Relaxed);
        let pages = (0..size / 4096).map(|i| bus + i * 4096).collect();
        let mem = MemSysmem {
            bytes: Mutex::new(vec![0; n]),
            stats: self.stats.clone(),
        };
        Ok((Box::new(mem), pages))
    }
    fn tick(&mut self) {
        MemStats::bump(&self.stats.ticks);
    }
}

/// [`MemDevice`]'s host memory; dropping it counts it freed.
#[derive(Debug)]
struct MemSysmem {
    bytes: Mutex<Vec<u8>>,
    stats: Arc<MemStats>,
}

impl Sysmem for MemSysmem {
    fn size(&self) -> u64 {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
        let b = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let r = range(&self.stats, offset, dst.len(), b.len())?;
        dst.copy_from_slice(&b[r]);
        Ok(())
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), Refusal> {
        let mut b = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let r = range(&self.stats, offset, src.len(), b.len())?;
        b[r].copy_from_slice(src);
        Ok(())
    }
}

impl Drop for MemSysmem {
    fn drop(&mut self) {
        let n = self
            .bytes
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .len() as u64;
        self.stats.live_sysmem.fetch_sub(n, Ordering::Relaxed);
    }
}
