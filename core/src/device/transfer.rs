//! Copies through the copy channel: host to device through the two staging halves, device to
//! host the same way (the copy engine fills one half while the CPU reads the other), device
//! to device, and the copies and semaphore waits that order work against other devices
//! (`peer.rs`).

use super::backend::{Backend, GpuMemory};
use super::error::DeviceError;
use super::ops::Inner;
use super::{DeviceInfo, DeviceOptions};

/// Largest copy-engine line (`LINE_LENGTH_IN` is 32 bits; stay well below).
const MAX_COPY_CHUNK: u64 = 1 << 30;

impl<B: Backend> Inner<B> {
    /// Copy-engine copy of `len` bytes between GPU VAs, chunked; returns the last value.
    fn copy_gpu(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: u64,
        dst: u64,
        len: u64,
    ) -> Result<u64, DeviceError> {
        let mut done = 0;
        let ci = self.copy_ci();
        let mut v = self.chans[ci].submitted;
        while done < len {
            let n = (len - done).min(MAX_COPY_CHUNK);
            v = self.submit(info, opts, ci, 0, |pb, _, _| {
                pb.ce_copy(src + done, dst + done, n as u32)?;
                Ok(false)
            })?;
            done += n;
        }
        Ok(v)
    }

    pub(super) fn htod(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        dst: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        let half = self.staging.size() / 2;
        let base = self.staging.gpu_va();
        for (i, chunk) in src.chunks(half as usize).enumerate() {
            let h = i % 2;
            self.wait_staging(info, opts, h, "a staging buffer to free up")?;
            let off = h as u64 * half;
            self.staging.write(off, chunk)?;
            let n = chunk.len() as u64;
            let d = dst + i as u64 * half;
            let ci = self.copy_ci();
            let v = self.submit(info, opts, ci, 0, |pb, _, _| {
                pb.ce_copy(base + off, d, n as u32)?;
                Ok(false)
            })?;
            self.staging_last[h] = (ci, v);
        }
        Ok(())
    }

    pub(super) fn fill_zero(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        dst: u64,
        len: u64,
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        let half = self.staging.size() / 2;
        self.wait_staging(info, opts, 0, "a staging buffer to free up")?;
        let n0 = len.min(half);
        self.staging.zero(0, n0)?;
        let base = self.staging.gpu_va();
        let mut done = 0;
        while done < len {
            let n = (len - done).min(half);
            let d = dst + done;
            let ci = self.copy_ci();
            let v = self.submit(info, opts, ci, 0, |pb, _, _| {
                pb.ce_copy(base, d, n as u32)?;
                Ok(false)
            })?;
            self.staging_last[0] = (ci, v);
            done += n;
        }
        Ok(())
    }

    pub(super) fn dtoh(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        let half = self.staging.size() / 2;
        let len = dst.len() as u64;
        // Chunk `i` goes through staging half `i % 2`; the copy engine fills the next half
        // while the CPU reads the last one out.
        let chunks = len.div_ceil(half);
        if chunks > 0 {
            self.dtoh_chunk(info, opts, src, len, 0)?;
        }
        for (i, chunk) in dst.chunks_mut(half as usize).enumerate() {
            let i = i as u64;
            if i + 1 < chunks {
                self.dtoh_chunk(info, opts, src, len, i + 1)?;
            }
            let h = (i % 2) as usize;
            self.wait_staging(info, opts, h, "a device-to-host copy")?;
            self.staging.read(h as u64 * half, chunk)?;
        }
        Ok(())
    }

    /// Waits for the last copy that used staging half `h` (`what` names it in a timeout).
    fn wait_staging(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        h: usize,
        what: &'static str,
    ) -> Result<(), DeviceError> {
        let (ci, v) = self.staging_last[h];
        self.wait(info, opts, ci, v, what)
    }

    /// Submits the copy of chunk `i` of a `len`-byte device-to-host copy from `src` into
    /// staging half `i % 2`, once that half is free.
    fn dtoh_chunk(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: u64,
        len: u64,
        i: u64,
    ) -> Result<(), DeviceError> {
        let half = self.staging.size() / 2;
        let h = (i % 2) as usize;
        self.wait_staging(info, opts, h, "a staging buffer to free up")?;
        let off = h as u64 * half;
        let n = (len - i * half).min(half);
        let s = src + i * half;
        let base = self.staging.gpu_va();
        let ci = self.copy_ci();
        let v = self.submit(info, opts, ci, 0, |pb, _, _| {
            pb.ce_copy(s, base + off, n as u32)?;
            Ok(false)
        })?;
        self.staging_last[h] = (ci, v);
        Ok(())
    }

    pub(super) fn dtod(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: u64,
        dst: u64,
        len: u64,
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        self.copy_gpu(info, opts, src, dst, len).map(|_| ())
    }

    /// Copy-engine copy of `len` bytes between GPU VAs (either may be a peer mapping) after
    /// 64-bit semaphore acquires `(address, value)` (another device's timelines); returns the
    /// copy timeline value that marks its end. A value of 0 is already reached and skipped.
    pub(super) fn copy_after(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: u64,
        dst: u64,
        len: u64,
        acquires: &[(u64, u64)],
    ) -> Result<u64, DeviceError> {
        self.check_alive()?;
        let mut done = 0;
        let ci = self.copy_ci();
        let mut v = self.chans[ci].submitted;
        let mut first = true;
        while done < len || first {
            let n = (len - done).min(MAX_COPY_CHUNK);
            let waits = if first { acquires } else { &[] };
            v = self.submit(info, opts, ci, 0, |pb, _, _| {
                for &(addr, value) in waits.iter().filter(|w| w.1 > 0) {
                    pb.host_acquire64_geq(addr, value)?;
                }
                if n > 0 {
                    pb.ce_copy(src + done, dst + done, n as u32)?;
                }
                Ok(false)
            })?;
            done += n;
            first = false;
        }
        Ok(v)
    }

    /// Makes all later work wait for the 64-bit semaphores `(address, value)`: one acquire
    /// submission on the copy channel, which the compute channel's next submission waits for
    /// (the cross-channel rule of `submit`).
    pub(super) fn acquire(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        acquires: &[(u64, u64)],
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        if acquires.iter().all(|w| w.1 == 0) {
            return Ok(());
        }
        self.submit(info, opts, self.copy_ci(), 0, |pb, _, _| {
            for &(addr, value) in acquires.iter().filter(|w| w.1 > 0) {
                pb.host_acquire64_geq(addr, value)?;
            }
            Ok(false)
        })
        .map(|_| ())
    }

    /// Releases `value` at `addr` (copy engine, flushed) after all work submitted so far.
    pub(super) fn release_after_all(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        addr: u64,
        value: u64,
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        // `submit` puts a wait for the compute channel's newer work first.
        self.submit(info, opts, self.copy_ci(), 0, |pb, _, _| {
            pb.ce_release_on(addr, value, false, info.chip.ce_semaphore64())?;
            Ok(false)
        })
        .map(|_| ())
    }
}
