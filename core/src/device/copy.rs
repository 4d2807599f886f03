//! Device-to-device copies: on the copy engine, or with a copy kernel on the SMs.
//!
//! The device's copy channel runs on the copy engine of the graphics engine's channel group.
//! Between two buffers in video memory it moves about 95 GB/s on an H200 (189 GB/s counting
//! bytes read plus bytes written, docs/performance.md), a twentieth of what HBM gives. A copy
//! kernel on the SMs reaches HBM bandwidth: [`COPY_KERNEL_NAME`] from
//! `tests/fixtures/cubins/src/runtime.ptx` (16-byte loads and stores, four in flight per thread,
//! a grid-stride loop over at most `Tuning::copy_kernel_ctas_per_sm` CTAs per SM).
//!
//! The core cannot parse cubins, so whoever opens the device installs the kernel
//! ([`Device::install_copy_kernel`]; `nvbare_gsp_firmware::program::LoadCubin::install_runtime`
//! picks the built-in cubin for the device's SM). Without it every copy uses the copy engine.
//! [`CopyPath`] says which engine a copy uses; [`Device::dtod_copy`] picks by itself.
//!
//! The kernel runs on the compute channel; stream order with the copy channel is kept as for any
//! other submission (each channel first waits for the other's earlier work).

use super::backend::{Backend, Location};
use super::launch::CallInputs;
use super::memory::{DeviceBuffer, DeviceRepr};
use super::module::{Arg, KernelInfo};
use super::ops::Inner;
use super::program::Program;
use super::qmd::LaunchKey;
use super::{Device, DeviceError, DeviceInfo, DeviceOptions};

/// The name of the copy kernel in a runtime program. Its parameters are
/// `(u64 dst, u64 src, u64 bytes)`, all GPU virtual addresses or byte counts.
pub const COPY_KERNEL_NAME: &str = "nvbare_copy";

/// Which engine copies between two GPU buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyPath {
    /// The copy kernel when it is installed, both buffers are in device memory, the copy is at
    /// least 256 KiB long (`Tuning::kernel_copy_min_bytes`) and source and destination have the
    /// same address modulo 16 (so 16-byte vectors line up); the copy engine otherwise.
    #[default]
    Auto,
    /// The copy engine, always.
    CopyEngine,
    /// The copy kernel, always (an error when none is installed). It copies any length at any
    /// alignment, from and to host memory too; when source and destination differ modulo 16
    /// it copies a byte per thread and iteration, which is slow.
    Kernel,
}

/// The installed copy kernel: where its program lives and what it is.
#[derive(Debug)]
pub(crate) struct CopyKernel {
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) sass_version: u32,
    pub(super) index: usize,
    pub(super) info: KernelInfo,
}

impl<B: Backend> Inner<B> {
    /// Loads `program` and keeps its [`COPY_KERNEL_NAME`] kernel (replacing an earlier one).
    pub(super) fn install_copy_kernel<P: Program + ?Sized>(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        program: &P,
    ) -> Result<(), DeviceError> {
        let (slot, generation, base, descs) = self.load_module(info, opts, program)?;
        let found = descs
            .into_iter()
            .enumerate()
            .find(|(_, k)| k.name == COPY_KERNEL_NAME);
        let checked = match found {
            None => Err(DeviceError::NoSuchKernel(COPY_KERNEL_NAME.into())),
            Some((index, k)) => {
                let mut params: alloc::vec::Vec<_> =
                    k.params.iter().map(|p| (p.ordinal, p.size)).collect();
                params.sort_unstable();
                if params.iter().map(|p| p.1).eq([8, 8, 8]) {
                    Ok((index, k))
                } else {
                    Err(DeviceError::Arguments(alloc::format!(
                        "`{COPY_KERNEL_NAME}` must take (u64 dst, u64 src, u64 bytes); this one \
                         takes parameters of {:?} bytes",
                        params.iter().map(|p| p.1).collect::<alloc::vec::Vec<_>>()
                    )))
                }
            }
        };
        match checked {
            Err(e) => {
                self.release_slot(info, opts, slot, generation);
                Err(e)
            }
            Ok((index, k)) => {
                if let Some(old) = self.copy_kernel.take() {
                    self.release_slot(info, opts, old.slot, old.generation);
                }
                self.copy_kernel = Some(CopyKernel {
                    slot,
                    generation,
                    sass_version: program.sass_version(),
                    index,
                    info: KernelInfo::loaded(base, k),
                });
                Ok(())
            }
        }
    }

    /// Copies `len` bytes from GPU VA `src` to `dst` on the engine `path` chooses.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_between(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: (u64, Location),
        dst: (u64, Location),
        len: u64,
        path: CopyPath,
    ) -> Result<(), DeviceError> {
        if len == 0 {
            return Ok(());
        }
        if use_kernel(
            path,
            self.copy_kernel.is_some(),
            opts.tuning.kernel_copy_min_bytes,
            src,
            dst,
            len,
        )? {
            self.copy_with_kernel(info, opts, src.0, dst.0, len)
        } else {
            self.dtod(info, opts, src.0, dst.0, len)
        }
    }

    /// Whether [`CopyPath::Auto`] runs a copy of `len` bytes from `src` to `dst` (VAs, local or
    /// peer mappings, and where their memory is) on the copy kernel.
    pub(super) fn kernel_copy_applies(
        &self,
        opts: &DeviceOptions,
        src: (u64, Location),
        dst: (u64, Location),
        len: u64,
    ) -> bool {
        use_kernel(
            CopyPath::Auto,
            self.copy_kernel.is_some(),
            opts.tuning.kernel_copy_min_bytes,
            src,
            dst,
            len,
        )
        .unwrap_or(false)
    }

    pub(super) fn copy_with_kernel(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        src: u64,
        dst: u64,
        len: u64,
    ) -> Result<(), DeviceError> {
        // Taken out for the launch, which borrows the device.
        let Some(ck) = self.copy_kernel.take() else {
            return Err(no_kernel());
        };
        let (grid, block) = copy_geometry(info, opts, &ck.info, src, dst, len);
        let args = [Arg::U64(dst), Arg::U64(src), Arg::U64(len)];
        let r = self.launch(
            info,
            opts,
            &ck.info,
            ck.sass_version,
            &ck.call(grid, block, &args),
        );
        self.copy_kernel = Some(ck);
        r
    }
}

impl CopyKernel {
    /// A launch of the copy kernel over `grid` CTAs of `block` threads.
    pub(super) fn call<'a>(&self, grid: u32, block: u32, args: &'a [Arg<'a>]) -> CallInputs<'a> {
        CallInputs {
            key: LaunchKey {
                slot: self.slot,
                generation: self.generation,
                kernel: self.index,
                dynamic_shared: 0,
            },
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            args,
            // Only plain addresses, no buffer whose device would be checked.
            device_id: 0,
        }
    }
}

fn no_kernel() -> DeviceError {
    DeviceError::BadRange(
        "CopyPath::Kernel, but no copy kernel is installed: call Device::install_copy_kernel \
         (LoadCubin::install_runtime) first, or use CopyPath::Auto or CopyPath::CopyEngine"
            .into(),
    )
}

/// Whether a copy of `len` bytes from `src` to `dst` runs on the copy kernel.
fn use_kernel(
    path: CopyPath,
    installed: bool,
    min_bytes: u64,
    src: (u64, Location),
    dst: (u64, Location),
    len: u64,
) -> Result<bool, DeviceError> {
    Ok(match path {
        CopyPath::CopyEngine => false,
        CopyPath::Kernel if !installed => return Err(no_kernel()),
        CopyPath::Kernel => true,
        CopyPath::Auto => {
            installed
                && src.1 == Location::Device
                && dst.1 == Location::Device
                && len >= min_bytes
                && (src.0 ^ dst.0).is_multiple_of(16)
        }
    })
}

/// Grid and block of the copy kernel for a copy: one 16-byte vector per thread (one byte when
/// the addresses differ modulo 16), at most `copy_kernel_ctas_per_sm` CTAs per SM; the
/// grid-stride loop does the rest. At least 32 threads, so the head and tail bytes (fewer than
/// 16 each) always have a thread.
fn copy_geometry(
    info: &DeviceInfo,
    opts: &DeviceOptions,
    k: &KernelInfo,
    src: u64,
    dst: u64,
    len: u64,
) -> (u32, u32) {
    let limit = k.max_threads.unwrap_or(1024).clamp(32, 1024);
    let block = (opts.tuning.copy_kernel_block.clamp(32, limit) / 32) * 32;
    let units = if (src ^ dst).is_multiple_of(16) {
        len / 16
    } else {
        len
    };
    let max_ctas = u64::from(info.gr.sm_count().max(1))
        * u64::from(opts.tuning.copy_kernel_ctas_per_sm.max(1));
    let grid = units
        .div_ceil(u64::from(block))
        .clamp(1, max_ctas.min(i32::MAX as u64));
    (grid as u32, block)
}

impl<B: Backend> Device<B> {
    /// Loads `program` (the runtime cubin for this GPU) and uses its [`COPY_KERNEL_NAME`]
    /// kernel for large device-to-device copies from now on ([`CopyPath::Auto`]). Installing
    /// again replaces the kernel. The program stays loaded until the device closes.
    pub fn install_copy_kernel<P: Program + ?Sized>(&self, program: &P) -> Result<(), DeviceError> {
        self.inner()?
            .install_copy_kernel(&self.info, &self.options, program)
    }

    /// Whether a copy kernel is installed.
    pub fn has_copy_kernel(&self) -> bool {
        self.inner().is_ok_and(|i| i.copy_kernel.is_some())
    }

    /// Copies all of `src` into the start of `dst` on the engine `path` says, in stream order.
    pub fn dtod_copy_with<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        dst: &mut DeviceBuffer<'_, B, T>,
        path: CopyPath,
    ) -> Result<(), DeviceError> {
        if src.len > dst.len {
            return Err(DeviceError::BadRange(alloc::format!(
                "copying {} elements into a buffer of {}",
                src.len,
                dst.len
            )));
        }
        self.dtod_copy_range(src, 0, dst, 0, src.len, path)
    }

    /// Copies `count` elements from `src[src_start..]` to `dst[dst_start..]` on the engine
    /// `path` says, in stream order. The ranges must lie inside the buffers.
    pub fn dtod_copy_range<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        src_start: usize,
        dst: &mut DeviceBuffer<'_, B, T>,
        dst_start: usize,
        count: usize,
        path: CopyPath,
    ) -> Result<(), DeviceError> {
        src.check(self)?;
        dst.check(self)?;
        let fits = |start: usize, len: usize| start.checked_add(count).is_some_and(|e| e <= len);
        if !fits(src_start, src.len) || !fits(dst_start, dst.len) {
            return Err(DeviceError::BadRange(alloc::format!(
                "copying {count} elements from element {src_start} of a buffer of {} to element \
                 {dst_start} of a buffer of {}",
                src.len,
                dst.len
            )));
        }
        let size = size_of::<T>() as u64;
        let mut i = self.inner()?;
        i.buffer_va(src.slot, src.generation)?;
        i.buffer_va(dst.slot, dst.generation)?;
        i.copy_between(
            &self.info,
            &self.options,
            (src.va + src_start as u64 * size, src.location),
            (dst.va + dst_start as u64 * size, dst.location),
            count as u64 * size,
            path,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Location = Location::Device;
    const H: Location = Location::Host;

    #[test]
    fn auto_takes_the_kernel_only_for_large_aligned_device_copies() {
        let k =
            |path, installed, src, dst, len| use_kernel(path, installed, 1 << 20, src, dst, len);
        let big = 1 << 30;
        assert!(k(CopyPath::Auto, true, (0x1000, D), (0x2000, D), big).unwrap());
        assert!(k(CopyPath::Auto, true, (0x1003, D), (0x2003, D), big).unwrap());
        assert!(!k(CopyPath::Auto, false, (0x1000, D), (0x2000, D), big).unwrap());
        assert!(!k(CopyPath::Auto, true, (0x1000, H), (0x2000, D), big).unwrap());
        assert!(!k(CopyPath::Auto, true, (0x1000, D), (0x2000, H), big).unwrap());
        assert!(!k(CopyPath::Auto, true, (0x1000, D), (0x2008, D), big).unwrap());
        assert!(
            !k(
                CopyPath::Auto,
                true,
                (0x1000, D),
                (0x2000, D),
                (1 << 20) - 1
            )
            .unwrap()
        );
        assert!(k(CopyPath::Auto, true, (0x1000, D), (0x2000, D), 1 << 20).unwrap());
        assert!(!k(CopyPath::CopyEngine, true, (0x1000, D), (0x2000, D), big).unwrap());
        assert!(k(CopyPath::Kernel, true, (0x1001, H), (0x2000, D), 3).unwrap());
        assert!(matches!(
            k(CopyPath::Kernel, false, (0x1000, D), (0x2000, D), big),
            Err(DeviceError::BadRange(_))
        ));
    }
}
