//! Pure helpers for a compute launch: limits, constant bank 0 (driver area + kernel
//! parameters), shared-memory carveout and local-memory (SLM) sizing.
//!
//! A launch of a kernel `k` (`nvbare_core::kernel::Kernel`, as the cubin parser gives it) on a
//! chip with shader model `sm`, with the pieces from this module:
//!
//! 1. [`validate_launch`]`(block, grid, k.regcount, k.max_threads)`.
//! 2. Constant bank 0: a buffer of [`cbuf0_size`]`(area, k.param_base, k.param_size)` bytes
//!    with `area = `[`DriverArea::for_sm`]`(sm)`; fill it with [`write_driver_area`] (block and
//!    grid dimensions, shared/local windows, stack pointer; CUDA code reads `blockDim` and
//!    `gridDim` from there) and [`write_param`] for each argument at its `KernelParam::offset`.
//! 3. Shared memory: `bytes = `[`block_shared_memory`]`(sm, k.shared_size, dynamic)`,
//!    `sm_config = `[`sm_shared_config`]`(sm, bytes, block, threads per SM)`.
//! 4. Local memory: per thread [`local_memory_per_thread`]`(k.local_size)` as the QMD's
//!    `SHADER_LOCAL_MEMORY_HIGH_SIZE` (the CUDA stack grows down from the top of the window),
//!    and the channel's SLM buffer from [`slm_size`] (programmed with
//!    `SET_SHADER_LOCAL_MEMORY_A`/`_NON_THROTTLED_A`), re-sized when a kernel needs more.
//!
//! The constant-bank-0 layout was read from ptxas 12.9/13.5 SASS (`nvdisasm` of the fixture
//! cubins: which `c[0x0][..]` offsets `%ntid`, `%nctaid` and the stack pointer load from)
//! and from tinygrad (`ops_nv.py`: the shared/local window pointers and `0xfffdc0`).

use core::fmt;

use crate::channel::qmd::SmSharedConfig;

/// Most threads in a block.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// Largest block dimensions.
pub const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];
/// Largest grid dimensions.
pub const MAX_GRID: [u32; 3] = [0x7fff_ffff, 65535, 65535];
/// 32-bit registers per SM (the register file every supported chip has).
pub const REGISTER_FILE: u32 = 65536;
/// Shared memory the system reserves in every block (sm_80 and later).
pub const RESERVED_SHARED_PER_BLOCK: u32 = 1024;
/// Initial stack pointer CUDA code loads from constant bank 0: 16 MiB local window minus
/// [`STACK_TOP_RESERVE`].
pub const STACK_POINTER_INIT: u32 = 0x00ff_fdc0;
/// Bytes of local memory above the initial stack pointer.
pub const STACK_TOP_RESERVE: u32 = 0x240;
/// Local-memory window tinygrad programs (`SET_SHADER_LOCAL_MEMORY_WINDOW_A`).
pub const DEFAULT_LOCAL_WINDOW: u64 = 0x7293_0000_0000;
/// Shared-memory window tinygrad programs (`SET_SHADER_SHARED_MEMORY_WINDOW_A`).
pub const DEFAULT_SHARED_WINDOW: u64 = 0x7294_0000_0000;

/// Why a launch cannot go ahead as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchError {
    /// A block or grid dimension is 0.
    ZeroDimension {
        /// "block" or "grid".
        what: &'static str,
        /// 0 = x, 1 = y, 2 = z.
        axis: usize,
    },
    /// A block dimension is above [`MAX_BLOCK`].
    BlockDimension {
        /// 0 = x, 1 = y, 2 = z.
        axis: usize,
        /// The dimension asked for.
        value: u32,
        /// The limit.
        max: u32,
    },
    /// A grid dimension is above [`MAX_GRID`].
    GridDimension {
        /// 0 = x, 1 = y, 2 = z.
        axis: usize,
        /// The dimension asked for.
        value: u32,
        /// The limit.
        max: u32,
    },
    /// More threads per block than the hardware, the kernel (`.maxntid`/`.reqntid`) or its
    /// register use allow.
    TooManyThreads {
        /// Threads per block asked for.
        threads: u64,
        /// The limit.
        max: u32,
        /// Which limit: "hardware", "kernel" or "registers".
        limit: &'static str,
    },
    /// More shared memory than the chip's largest carveout.
    SharedMemoryTooLarge {
        /// Bytes per block (including the reserved 1 KiB).
        bytes: u64,
        /// The chip's largest carveout in bytes.
        max: u32,
    },
    /// A buffer is too small for what is written into it.
    BufferTooSmall {
        /// What was being written.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        len: usize,
    },
    /// A parameter does not lie inside the kernel's parameter area.
    ParamOutOfRange {
        /// Byte offset from the parameter base.
        offset: u32,
        /// Its size.
        size: usize,
        /// The kernel's parameter area size.
        param_size: u32,
    },
    /// A size computation overflowed (the inputs are absurd).
    Overflow {
        /// The quantity.
        what: &'static str,
    },
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const AXES: [&str; 3] = ["x", "y", "z"];
        let axis = |a: usize| AXES.get(a).copied().unwrap_or("?");
        match *self {
            Self::ZeroDimension { what, axis: a } => {
                write!(
                    f,
                    "{what} dimension {} is 0; every dimension must be at least 1",
                    axis(a)
                )
            }
            Self::BlockDimension {
                axis: a,
                value,
                max,
            } => write!(
                f,
                "block dimension {} = {value} exceeds the hardware limit {max}",
                axis(a)
            ),
            Self::GridDimension {
                axis: a,
                value,
                max,
            } => write!(
                f,
                "grid dimension {} = {value} exceeds the hardware limit {max}",
                axis(a)
            ),
            Self::TooManyThreads {
                threads,
                max,
                limit,
            } => write!(
                f,
                "{threads} threads per block exceed the {limit} limit of {max}; use smaller \
                 blocks"
            ),
            Self::SharedMemoryTooLarge { bytes, max } => write!(
                f,
                "{bytes} bytes of shared memory per block exceed this chip's {max}"
            ),
            Self::BufferTooSmall { what, needed, len } => {
                write!(f, "{what} needs {needed} bytes but the buffer has {len}")
            }
            Self::ParamOutOfRange {
                offset,
                size,
                param_size,
            } => write!(
                f,
                "kernel argument of {size} bytes at offset {offset:#x} lies outside the \
                 kernel's {param_size}-byte parameter area; check the argument list"
            ),
            Self::Overflow { what } => write!(f, "{what} overflows"),
        }
    }
}

impl core::error::Error for LaunchError {}

fn round_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x / align * align)
}

/// Most threads per block a kernel using `registers` registers per thread can run with: the
/// register file holds [`REGISTER_FILE`] registers, allocated per warp in units of 256 and to
/// blocks in units of 4 warps (as tinygrad computes it).
pub fn max_threads_for_registers(registers: u32) -> u32 {
    let per_warp = (u64::from(registers.max(1)) * 32).div_ceil(256) * 256;
    let warps = u64::from(REGISTER_FILE) / per_warp / 4 * 4;
    (warps * 32).min(u64::from(MAX_THREADS_PER_BLOCK)) as u32
}

/// Threads in a block of dimensions `block` (u64: the product of three u32 cannot overflow).
pub fn block_threads(block: [u32; 3]) -> u64 {
    u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2])
}

/// Checks a launch shape against the hardware limits, the register file and the kernel's own
/// thread limit (`Kernel::max_threads`, `None` if it has none).
pub fn validate_launch(
    block: [u32; 3],
    grid: [u32; 3],
    registers: u32,
    kernel_max_threads: Option<u32>,
) -> Result<(), LaunchError> {
    for axis in 0..3 {
        if block[axis] == 0 {
            return Err(LaunchError::ZeroDimension {
                what: "block",
                axis,
            });
        }
        if grid[axis] == 0 {
            return Err(LaunchError::ZeroDimension { what: "grid", axis });
        }
        if block[axis] > MAX_BLOCK[axis] {
            return Err(LaunchError::BlockDimension {
                axis,
                value: block[axis],
                max: MAX_BLOCK[axis],
            });
        }
        if grid[axis] > MAX_GRID[axis] {
            return Err(LaunchError::GridDimension {
                axis,
                value: grid[axis],
                max: MAX_GRID[axis],
            });
        }
    }
    let threads = block_threads(block);
    for (max, limit) in [
        (MAX_THREADS_PER_BLOCK, "hardware"),
        (kernel_max_threads.unwrap_or(u32::MAX), "kernel"),
        (max_threads_for_registers(registers), "registers"),
    ] {
        if threads > u64::from(max) {
            return Err(LaunchError::TooManyThreads {
                threads,
                max,
                limit,
            });
        }
    }
    Ok(())
}

/// Shared-memory carveouts an SM of shader model `sm` supports, in KiB (CUDA C Programming
/// Guide, compute capabilities: 8.0 up to 164 KiB; 8.6/8.9 and 12.x up to 100 KiB; 9.0 and
/// 10.x up to 228 KiB). Unknown models get the 100 KiB list.
pub fn shared_carveouts_kib(sm: u32) -> &'static [u32] {
    // Turing (sm_75): Mesa NVK's steps (8, 16, 32, 64 KiB; `gv100_sm_config_smem_size`) up to
    // the 64 KiB of shared memory a 7.5 SM has (CUDA C Programming Guide, compute capability
    // table).
    const UP_TO_64: &[u32] = &[0, 8, 16, 32, 64];
    const UP_TO_100: &[u32] = &[0, 8, 16, 32, 64, 100];
    const UP_TO_164: &[u32] = &[0, 8, 16, 32, 64, 100, 132, 164];
    const UP_TO_228: &[u32] = &[0, 8, 16, 32, 64, 100, 132, 164, 196, 228];
    match sm {
        75 => UP_TO_64,
        80 | 87 => UP_TO_164,
        90..=119 => UP_TO_228,
        _ => UP_TO_100,
    }
}

/// Shared memory a block needs, as the QMD's `SHARED_MEMORY_SIZE`: the kernel's static
/// shared memory (`Kernel::shared_size`), the dynamic shared memory asked for at launch,
/// and the 1 KiB the system reserves per block (which ptxas already counts in the static
/// size from sm_90 on), rounded up to 256 bytes.
pub fn block_shared_memory(
    sm: u32,
    static_bytes: u32,
    dynamic_bytes: u32,
) -> Result<u32, LaunchError> {
    let reserve_counted = sm >= 90 && static_bytes >= RESERVED_SHARED_PER_BLOCK;
    let reserve = if reserve_counted {
        0
    } else {
        RESERVED_SHARED_PER_BLOCK
    };
    let total = u64::from(static_bytes) + u64::from(dynamic_bytes) + u64::from(reserve);
    let total = round_up(total, 256).ok_or(LaunchError::Overflow {
        what: "shared memory size",
    })?;
    let max = shared_carveouts_kib(sm).last().copied().unwrap_or(0) * 1024;
    if total > u64::from(max) {
        return Err(LaunchError::SharedMemoryTooLarge { bytes: total, max });
    }
    Ok(total as u32)
}

/// Most blocks an SM keeps resident, by shader model (CUDA C Programming Guide, compute
/// capabilities: 16 on 7.5, 8.6 and 8.7, 24 on 8.9, 32 on 8.0, 9.0, 10.x and 12.x).
pub fn max_blocks_per_sm(sm: u32) -> u32 {
    match sm {
        75 | 86 | 87 => 16,
        89 => 24,
        _ => 32,
    }
}

/// The QMD carveout fields for blocks of dimensions `block` using `block_bytes` of shared
/// memory each, on an SM of shader model `sm` that keeps at most `max_threads_per_sm`
/// threads, each encoded as `KiB / 4 + 1` (Mesa NVK's and tinygrad's encoding):
///
/// * minimum: the smallest carveout of at least 8 KiB that holds one block;
/// * target: the smallest that holds one block more than the SM's thread and block limits
///   let it keep resident (registers are not counted, so a register-bound kernel may get
///   more shared memory and less L1 than it could use), else the largest;
/// * maximum: the chip's largest.
///
/// The target is what decides occupancy: a carveout for one block (what this picked before)
/// kept 128-thread blocks of the copy kernel at half occupancy on the H200 (3.63 against
/// 4.26 TB/s), 64-thread ones at a quarter (2.44 against 3.38). The block more: eight
/// 256-thread blocks of 1 KiB in the 8 KiB carveout copied 1.4 % slower than with 16 KiB
/// or more (docs/performance.md, "Device-to-device copies: the copy kernel, its carveout,
/// the wait's poll").
pub fn sm_shared_config(
    sm: u32,
    block_bytes: u32,
    block: [u32; 3],
    max_threads_per_sm: u32,
) -> Result<SmSharedConfig, LaunchError> {
    let sizes = shared_carveouts_kib(sm);
    let max = sizes.last().copied().unwrap_or(0);
    let holding = |bytes: u64| {
        sizes
            .iter()
            .copied()
            .filter(|&k| k >= 8)
            .find(|&k| u64::from(k) * 1024 >= bytes)
    };
    let min = holding(block_bytes.into()).ok_or(LaunchError::SharedMemoryTooLarge {
        bytes: block_bytes.into(),
        max: max * 1024,
    })?;
    let warp_threads = block_threads(block).max(1).div_ceil(32) * 32;
    let resident =
        (u64::from(max_threads_per_sm) / warp_threads).clamp(1, max_blocks_per_sm(sm).into());
    let target = holding((resident + 1) * u64::from(block_bytes))
        .unwrap_or(max)
        .max(min);
    let enc = |kib: u32| kib / 4 + 1;
    Ok(SmSharedConfig {
        min: enc(min),
        max: enc(max),
        target: enc(target),
    })
}

/// Local memory per thread for a kernel whose compiler-known need is `kernel_local_size`
/// (`Kernel::local_size`): plus [`STACK_TOP_RESERVE`] above the initial stack pointer,
/// rounded up to 32 bytes. Use it as `SHADER_LOCAL_MEMORY_HIGH_SIZE` and for [`slm_size`].
pub fn local_memory_per_thread(kernel_local_size: u32) -> Result<u32, LaunchError> {
    let v = round_up(
        u64::from(kernel_local_size) + u64::from(STACK_TOP_RESERVE),
        32,
    )
    .filter(|&v| v <= u64::from(STACK_POINTER_INIT))
    .ok_or(LaunchError::Overflow {
        what: "local memory per thread",
    })?;
    Ok(v as u32)
}

/// The GPU shape local memory is sized for (from the RM's GR info).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlmGeometry {
    /// Most resident warps per SM (e.g. 64 on GH100, 48 on AD10x).
    pub max_warps_per_sm: u32,
    /// SMs per TPC (2 on these chips).
    pub sms_per_tpc: u32,
    /// TPCs per GPC (the maximum, as GR info reports it).
    pub tpcs_per_gpc: u32,
    /// GPCs.
    pub gpcs: u32,
}

/// Local-memory (SLM) buffer sizes for a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlmSize {
    /// Bytes per thread (rounded up to 32).
    pub per_thread: u32,
    /// Bytes per TPC: `SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A` (and `_B`/`_C`).
    pub bytes_per_tpc: u64,
    /// Bytes of the whole buffer `SET_SHADER_LOCAL_MEMORY_A` points at.
    pub total: u64,
}

/// Sizes the SLM buffer for `per_thread` bytes of local memory per thread (tinygrad's formula:
/// per warp rounded to 512 bytes, per TPC to 32 KiB, in all to 128 KiB).
pub fn slm_size(per_thread: u32, g: &SlmGeometry) -> Result<SlmSize, LaunchError> {
    let ov = LaunchError::Overflow {
        what: "local memory size",
    };
    let per_thread = round_up(per_thread.into(), 32).ok_or(ov)?;
    let per_warp = round_up(per_thread * 32, 0x200).ok_or(ov)?;
    let per_tpc = per_warp
        .checked_mul(g.max_warps_per_sm.into())
        .and_then(|v| v.checked_mul(g.sms_per_tpc.into()))
        .and_then(|v| round_up(v, 0x8000))
        .ok_or(ov)?;
    let total = per_tpc
        .checked_mul(g.tpcs_per_gpc.into())
        .and_then(|v| v.checked_mul(g.gpcs.into()))
        .and_then(|v| round_up(v, 0x2_0000))
        .ok_or(ov)?;
    Ok(SlmSize {
        per_thread: u32::try_from(per_thread).map_err(|_| ov)?,
        bytes_per_tpc: per_tpc,
        total,
    })
}

/// Where the driver's values live in constant bank 0: one layout before Blackwell (sm_8x and
/// sm_90 differ only in where constant bank 3's address goes) and one for Blackwell (sm_100,
/// sm_120).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverArea {
    /// sm_80..sm_89: `%ntid` at 0x00, `%nctaid` at 0x0c, shared window 0x18, local window
    /// 0x20, stack pointer 0x28, constant bank 3's address 0x50. Parameters start at 0x160.
    Ampere,
    /// sm_90: as [`DriverArea::Ampere`], constant bank 3's address at 0xd0. Parameters start
    /// at 0x210.
    Hopper,
    /// sm_100 and later: constant bank 3's address 0x120, shared window 0x2f0, local window
    /// 0x2f8, `%ntid` at 0x360, `%nctaid` at 0x370, stack pointer 0x37c. Parameters start at
    /// 0x380.
    Blackwell,
}

/// The values [`write_driver_area`] stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverAreaValues {
    /// Block dimensions (`%ntid`, CUDA `blockDim`).
    pub block: [u32; 3],
    /// Grid dimensions (`%nctaid`, CUDA `gridDim`).
    pub grid: [u32; 3],
    /// The shared-memory window (`SET_SHADER_SHARED_MEMORY_WINDOW_A`).
    pub shared_window: u64,
    /// The local-memory window (`SET_SHADER_LOCAL_MEMORY_WINDOW_A`).
    pub local_window: u64,
    /// GPU address of the kernel's constant bank 3 (its module's `__constant__` data), 0 if it
    /// has none.
    pub const_bank3: u64,
}

impl DriverArea {
    /// The layout for shader model `sm`.
    pub fn for_sm(sm: u32) -> DriverArea {
        if sm >= 100 {
            DriverArea::Blackwell
        } else if sm >= 90 {
            DriverArea::Hopper
        } else {
            DriverArea::Ampere
        }
    }

    /// Byte offset of `%ntid.x` (then y, z).
    pub const fn block_dim_offset(self) -> usize {
        match self {
            Self::Ampere | Self::Hopper => 0x00,
            Self::Blackwell => 0x360,
        }
    }

    /// Byte offset of `%nctaid.x` (then y, z).
    pub const fn grid_dim_offset(self) -> usize {
        match self {
            Self::Ampere | Self::Hopper => 0x0c,
            Self::Blackwell => 0x370,
        }
    }

    /// Byte offset of the shared-memory window (u64).
    pub const fn shared_window_offset(self) -> usize {
        match self {
            Self::Ampere | Self::Hopper => 0x18,
            Self::Blackwell => 0x2f0,
        }
    }

    /// Byte offset of the local-memory window (u64).
    pub const fn local_window_offset(self) -> usize {
        match self {
            Self::Ampere | Self::Hopper => 0x20,
            Self::Blackwell => 0x2f8,
        }
    }

    /// Byte offset of the initial stack pointer (u32, [`STACK_POINTER_INIT`]).
    pub const fn stack_pointer_offset(self) -> usize {
        match self {
            Self::Ampere | Self::Hopper => 0x28,
            Self::Blackwell => 0x37c,
        }
    }

    /// Byte offset of constant bank 3's GPU address (u64): code that takes the address of a
    /// `__constant__` variable (any access in a `nvcc -G` build) adds the variable's offset in
    /// bank 3 to it and loads through the generic address space. Read off ptxas 13.5 output
    /// (`LDC.64 c[0x0][0x50]` / `[0xd0]` / `[0x120]` before such loads); CUDA fills it.
    pub const fn const_bank3_offset(self) -> usize {
        match self {
            Self::Ampere => 0x50,
            Self::Hopper => 0xd0,
            Self::Blackwell => 0x120,
        }
    }

    /// Bytes the driver area needs at least (end of its last field).
    pub const fn size(self) -> u32 {
        match self {
            Self::Ampere => 0x58,
            Self::Hopper => 0xd8,
            Self::Blackwell => 0x380,
        }
    }
}

/// Size to allocate for a kernel's constant bank 0: the driver area and the parameters,
/// rounded up to 256 bytes.
pub fn cbuf0_size(area: DriverArea, param_base: u32, param_size: u32) -> Result<u32, LaunchError> {
    let end = (u64::from(param_base) + u64::from(param_size)).max(area.size().into());
    round_up(end, 256)
        .filter(|&v| v <= 0x1_0000)
        .map(|v| v as u32)
        .ok_or(LaunchError::Overflow {
            what: "constant bank 0 size (64 KiB at most)",
        })
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8], what: &'static str) -> Result<(), LaunchError> {
    let len = buf.len();
    at.checked_add(bytes.len())
        .and_then(|end| buf.get_mut(at..end))
        .ok_or(LaunchError::BufferTooSmall {
            what,
            needed: at as u64 + bytes.len() as u64,
            len,
        })?
        .copy_from_slice(bytes);
    Ok(())
}

/// Writes the driver's part of constant bank 0: block and grid dimensions, the shared and
/// local windows, constant bank 3's address and the initial stack pointer. Other bytes are
/// left as they are (zero them first).
pub fn write_driver_area(
    area: DriverArea,
    cb0: &mut [u8],
    v: &DriverAreaValues,
) -> Result<(), LaunchError> {
    const W: &str = "constant bank 0 driver area";
    for i in 0..3 {
        put(
            cb0,
            area.block_dim_offset() + 4 * i,
            &v.block[i].to_le_bytes(),
            W,
        )?;
        put(
            cb0,
            area.grid_dim_offset() + 4 * i,
            &v.grid[i].to_le_bytes(),
            W,
        )?;
    }
    put(
        cb0,
        area.shared_window_offset(),
        &v.shared_window.to_le_bytes(),
        W,
    )?;
    put(
        cb0,
        area.local_window_offset(),
        &v.local_window.to_le_bytes(),
        W,
    )?;
    put(
        cb0,
        area.const_bank3_offset(),
        &v.const_bank3.to_le_bytes(),
        W,
    )?;
    put(
        cb0,
        area.stack_pointer_offset(),
        &STACK_POINTER_INIT.to_le_bytes(),
        W,
    )
}

/// Writes one kernel argument's bytes at `offset` inside the parameter area that starts at
/// `param_base` and is `param_size` bytes long (`Kernel::param_base`/`param_size`, offsets from
/// `KernelParam::offset`).
pub fn write_param(
    cb0: &mut [u8],
    param_base: u32,
    param_size: u32,
    offset: u32,
    bytes: &[u8],
) -> Result<(), LaunchError> {
    let inside = u64::from(offset) + bytes.len() as u64 <= u64::from(param_size);
    if !inside {
        return Err(LaunchError::ParamOutOfRange {
            offset,
            size: bytes.len(),
            param_size,
        });
    }
    put(
        cb0,
        param_base as usize + offset as usize,
        bytes,
        "constant bank 0 parameters",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_limits() {
        assert_eq!(validate_launch([256, 1, 1], [4096, 1, 1], 16, None), Ok(()));
        assert_eq!(
            validate_launch([32, 32, 1], [0x7fff_ffff, 65535, 65535], 32, None),
            Ok(())
        );
        assert_eq!(
            validate_launch([0, 1, 1], [1, 1, 1], 8, None),
            Err(LaunchError::ZeroDimension {
                what: "block",
                axis: 0
            })
        );
        assert_eq!(
            validate_launch([1, 1, 1], [1, 1, 0], 8, None),
            Err(LaunchError::ZeroDimension {
                what: "grid",
                axis: 2
            })
        );
        assert_eq!(
            validate_launch([1, 1, 65], [1, 1, 1], 8, None),
            Err(LaunchError::BlockDimension {
                axis: 2,
                value: 65,
                max: 64
            })
        );
        assert_eq!(
            validate_launch([1, 1, 1], [0x8000_0000, 1, 1], 8, None),
            Err(LaunchError::GridDimension {
                axis: 0,
                value: 0x8000_0000,
                max: 0x7fff_ffff
            })
        );
        assert_eq!(
            validate_launch([1, 1, 1], [1, 65536, 1], 8, None),
            Err(LaunchError::GridDimension {
                axis: 1,
                value: 65536,
                max: 65535
            })
        );
        assert_eq!(
            validate_launch([1024, 2, 1], [1, 1, 1], 8, None),
            Err(LaunchError::TooManyThreads {
                threads: 2048,
                max: 1024,
                limit: "hardware"
            })
        );
        assert_eq!(
            validate_launch([256, 1, 1], [1, 1, 1], 8, Some(128)),
            Err(LaunchError::TooManyThreads {
                threads: 256,
                max: 128,
                limit: "kernel"
            })
        );
        assert_eq!(
            validate_launch([512, 1, 1], [1, 1, 1], 255, None),
            Err(LaunchError::TooManyThreads {
                threads: 512,
                max: 256,
                limit: "registers"
            })
        );
    }

    #[test]
    fn registers_limit_threads() {
        // 65536 registers, per-warp allocation in 256-register units, 4-warp granularity.
        assert_eq!(max_threads_for_registers(0), 1024);
        assert_eq!(max_threads_for_registers(32), 1024); // 64 warps, capped
        assert_eq!(max_threads_for_registers(64), 1024); // 2048 regs/warp -> 32 warps
        assert_eq!(max_threads_for_registers(72), 896); // 2304 -> 28 warps
        assert_eq!(max_threads_for_registers(128), 512);
        assert_eq!(max_threads_for_registers(255), 256); // 8160 -> 8192 -> 8 warps
        // registers x threads never exceeds the register file.
        for r in 1..=255u32 {
            assert!(r * max_threads_for_registers(r) <= REGISTER_FILE, "{r}");
        }
    }

    #[test]
    fn shared_memory() {
        // sm_89: 4000 static bytes + the 1 KiB reserve, rounded to 256.
        assert_eq!(block_shared_memory(89, 4000, 0), Ok(5120));
        // sm_90: ptxas already counted the reserve in the static size (4000 + 1024).
        assert_eq!(block_shared_memory(90, 5024, 0), Ok(5120));
        assert_eq!(block_shared_memory(90, 0, 0), Ok(1024));
        assert_eq!(block_shared_memory(120, 0, 4096), Ok(5120));
        assert_eq!(block_shared_memory(90, 1024, 227 * 1024), Ok(228 * 1024));
        assert_eq!(
            block_shared_memory(89, 0, 100 * 1024),
            Err(LaunchError::SharedMemoryTooLarge {
                bytes: 101 * 1024,
                max: 100 * 1024
            })
        );
        assert!(block_shared_memory(80, u32::MAX, u32::MAX).is_err());

        // Carveouts: KiB / 4 + 1; tinygrad's max for 100 KiB parts is 0x1a. 1536 threads
        // per SM on sm_89 (48 warps), 2048 on sm_80 / sm_90.
        let enc = |kib: u32| kib / 4 + 1;
        // One 1024-thread block fits in 1536 threads; room for two of 5 KiB is 10 KiB, so 16
        // KiB; 8 KiB holds one.
        assert_eq!(
            sm_shared_config(89, 5120, [1024, 1, 1], 1536),
            Ok(SmSharedConfig {
                min: 3,
                max: 0x1a,
                target: enc(16)
            })
        );
        assert_eq!(
            sm_shared_config(89, 40 * 1024, [1024, 1, 1], 1536)
                .unwrap()
                .min,
            enc(64)
        );
        // More than the largest carveout holds: the largest.
        assert_eq!(
            sm_shared_config(89, 40 * 1024, [1024, 1, 1], 1536)
                .unwrap()
                .target,
            enc(100)
        );
        assert_eq!(
            sm_shared_config(90, 200 * 1024, [256, 1, 1], 2048).unwrap(),
            SmSharedConfig {
                min: 58,
                max: 58,
                target: 58
            }
        );
        assert_eq!(
            sm_shared_config(80, 0, [256, 1, 1], 2048).unwrap().max,
            164 / 4 + 1
        );
        assert!(sm_shared_config(120, 101 * 1024, [32, 1, 1], 1536).is_err());
        // Turing: at most 64 KiB (encoded 17), 1024 threads per SM.
        assert_eq!(sm_shared_config(75, 0, [256, 1, 1], 1024).unwrap().max, 17);
        assert!(sm_shared_config(75, 65 * 1024, [32, 1, 1], 1024).is_err());
        assert_eq!(max_blocks_per_sm(75), 16);
        // The copy kernel's blocks (1 KiB, the reserve) on the H200: eight 256-thread blocks
        // resident, room for nine; sixteen of 128 threads, room for seventeen; thirty-two of
        // 64 (the block limit); two of 1024.
        for (threads, kib) in [(256, 16), (128, 32), (64, 64), (1024, 8), (1, 64)] {
            let c = sm_shared_config(90, 1024, [threads, 1, 1], 2048).unwrap();
            assert_eq!(
                (c.min, c.target, c.max),
                (enc(8), enc(kib), enc(228)),
                "{threads}"
            );
        }
        // sm_89 keeps at most 24 blocks: 25 KiB, so 32.
        assert_eq!(
            sm_shared_config(89, 1024, [32, 1, 1], 1536).unwrap().target,
            enc(32)
        );
        // Threads not a multiple of a warp take whole warps; degenerate inputs do not divide
        // by zero or overflow.
        assert_eq!(
            sm_shared_config(90, 1024, [200, 1, 1], 2048),
            sm_shared_config(90, 1024, [224, 1, 1], 2048)
        );
        // A block's threads are the product of its dimensions.
        assert_eq!(
            sm_shared_config(90, 1024, [16, 8, 1], 2048),
            sm_shared_config(90, 1024, [128, 1, 1], 2048)
        );
        assert_eq!(
            sm_shared_config(90, 1024, [0, 1, 1], 2048).unwrap().target,
            enc(64)
        );
        assert_eq!(
            sm_shared_config(90, 1024, [256, 1, 1], 0).unwrap().target,
            enc(8)
        );
        assert_eq!(
            sm_shared_config(90, 228 * 1024, [1, 1, 1], u32::MAX)
                .unwrap()
                .target,
            enc(228)
        );
    }

    #[test]
    fn local_memory() {
        assert_eq!(local_memory_per_thread(0), Ok(0x240));
        assert_eq!(local_memory_per_thread(0x100), Ok(0x340));
        assert_eq!(local_memory_per_thread(1), Ok(0x260));
        assert!(local_memory_per_thread(u32::MAX).is_err());
        // AD102-like: 48 warps/SM, 2 SMs/TPC, 6 TPCs/GPC, 12 GPCs.
        let g = SlmGeometry {
            max_warps_per_sm: 48,
            sms_per_tpc: 2,
            tpcs_per_gpc: 6,
            gpcs: 12,
        };
        let s = slm_size(0x240, &g).unwrap();
        assert_eq!(s.per_thread, 0x240);
        // 0x240 * 32 = 18432 (a multiple of 512) * 96 warps per TPC = 1769472 (54 * 32 KiB).
        assert_eq!(s.bytes_per_tpc, 1_769_472);
        // * 72 TPCs = 127401984 = 972 * 128 KiB.
        assert_eq!(s.total, 127_401_984);
        // Rounding: 1 byte per thread -> 32 -> 1024 per warp; 96 warps -> 96 KiB.
        let s = slm_size(1, &g).unwrap();
        assert_eq!((s.per_thread, s.bytes_per_tpc), (32, 96 * 1024));
        assert_eq!(s.total % 0x2_0000, 0);
        let huge = SlmGeometry {
            max_warps_per_sm: u32::MAX,
            sms_per_tpc: u32::MAX,
            tpcs_per_gpc: u32::MAX,
            gpcs: u32::MAX,
        };
        assert!(slm_size(u32::MAX, &huge).is_err());
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn constant_bank_0() {
        let v = DriverAreaValues {
            block: [128, 2, 1],
            grid: [40, 5, 3],
            shared_window: DEFAULT_SHARED_WINDOW,
            local_window: DEFAULT_LOCAL_WINDOW,
            const_bank3: 0x12_3456_7800,
        };
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        // sm_80 / sm_89: bank 3's address at 0x50.
        let area = DriverArea::for_sm(89);
        assert_eq!(
            (area, DriverArea::for_sm(80)),
            (DriverArea::Ampere, DriverArea::Ampere)
        );
        let mut cb = [0u8; 0x200];
        write_driver_area(area, &mut cb, &v).unwrap();
        assert_eq!(u64_at(&cb, 0x50), 0x12_3456_7800);
        assert_eq!(u32_at(&cb, 10 * 4), 0xfffdc0);
        assert!(write_driver_area(area, &mut cb[..0x57], &v).is_err());
        // sm_90: parameters at 0x210 (ptxas's EIATTR_PARAM_CBANK for the fixtures).
        let area = DriverArea::for_sm(90);
        assert_eq!(area, DriverArea::Hopper);
        let size = cbuf0_size(area, 0x210, 0xc).unwrap();
        assert_eq!(size, 0x300);
        let mut cb = [0u8; 0x300];
        write_driver_area(area, &mut cb, &v).unwrap();
        assert_eq!(
            [u32_at(&cb, 0), u32_at(&cb, 4), u32_at(&cb, 8)],
            [128, 2, 1]
        );
        assert_eq!(
            [u32_at(&cb, 0xc), u32_at(&cb, 0x10), u32_at(&cb, 0x14)],
            [40, 5, 3]
        );
        // tinygrad's dwords 6..11: shared window, local window, 0xfffdc0.
        assert_eq!(u32_at(&cb, 6 * 4), 0);
        assert_eq!(u32_at(&cb, 7 * 4), 0x7294);
        assert_eq!(u32_at(&cb, 9 * 4), 0x7293);
        assert_eq!(u32_at(&cb, 10 * 4), 0xfffdc0);
        assert_eq!(u64_at(&cb, 0xd0), 0x12_3456_7800);
        write_param(
            &mut cb,
            0x210,
            0xc,
            0,
            &0x1122_3344_5566_7788u64.to_le_bytes(),
        )
        .unwrap();
        write_param(&mut cb, 0x210, 0xc, 8, &7u32.to_le_bytes()).unwrap();
        assert_eq!(u32_at(&cb, 0x210), 0x5566_7788);
        assert_eq!(u32_at(&cb, 0x218), 7);
        assert_eq!(
            write_param(&mut cb, 0x210, 0xc, 8, &[0; 8]),
            Err(LaunchError::ParamOutOfRange {
                offset: 8,
                size: 8,
                param_size: 0xc
            })
        );
        assert!(matches!(
            write_param(&mut cb[..0x214], 0x210, 0xc, 0, &[0; 8]),
            Err(LaunchError::BufferTooSmall { .. })
        ));

        // Blackwell: ntid at 0x360, nctaid at 0x370, SP at dword 223, windows at dwords 188..191.
        let area = DriverArea::for_sm(120);
        assert_eq!(area, DriverArea::Blackwell);
        assert_eq!(cbuf0_size(area, 0x380, 0), Ok(0x400));
        let mut cb = [0u8; 0x400];
        write_driver_area(area, &mut cb, &v).unwrap();
        assert_eq!(u64_at(&cb, 0x120), 0x12_3456_7800);
        assert_eq!(u32_at(&cb, 0x360), 128);
        assert_eq!(u32_at(&cb, 0x378), 3);
        assert_eq!(u32_at(&cb, 223 * 4), 0xfffdc0);
        assert_eq!(u32_at(&cb, 189 * 4), 0x7294);
        assert_eq!(u32_at(&cb, 191 * 4), 0x7293);
        assert!(matches!(
            write_driver_area(area, &mut cb[..0x37c], &v),
            Err(LaunchError::BufferTooSmall { .. })
        ));
        assert!(cbuf0_size(area, 0xffff, 0xffff).is_err());
    }
}
