//! Running a grid: finding the kernel, checking what the QMD gives it, executing the model.

use nvbare_core::channel::launch::max_threads_for_registers;
use nvbare_core::channel::qmd::LaunchDesc;
use nvbare_core::rm::ctrl::warp_esr;

use super::kernels::{Behavior, KernelModel};
use crate::bar0::SimCore;
use crate::fifo::exec::Ctx;
use crate::gpu_mem::{Access, AddressSpace, MmuFault, gpu_read, gpu_write};

/// How a grid ended.
#[derive(Debug)]
pub(crate) enum GridEnd {
    /// Every thread finished.
    Done,
    /// A thread's load or store faulted.
    Fault {
        fault: MmuFault,
        pc: u64,
        kernel: String,
    },
    /// An SM exception (bad code, bad resources, bad constant access).
    Exception {
        warp_error: u32,
        pc: u64,
        addr: u64,
        reason: String,
    },
    /// A thread spins on `poll_va` (which is zero); `None`: the grid runs longer than the
    /// simulator executes (it never completes here).
    Spinning {
        poll_va: Option<u64>,
        kernel: String,
    },
}

/// Most threads the simulator executes in one grid; a larger grid of a kernel that does work
/// per thread keeps its channel busy forever (the driver's wait times out) instead of keeping
/// the process busy for hours.
pub(crate) const MAX_SIM_THREADS: u128 = 1 << 28;

/// `INVALID_CONST_ADDR`: a constant-bank read outside the bound size.
const INVALID_CONST_ADDR: u32 = 0x0c;
/// `OOR_REG`: the code uses more registers than the launch gave it.
const OOR_REG: u32 = 0x0d;

fn exception(warp_error: u32, pc: u64, addr: u64, reason: String) -> GridEnd {
    GridEnd::Exception {
        warp_error,
        pc,
        addr,
        reason,
    }
}

/// Finds the model whose code is at `pc`. `Err` carries the end to report: a fetch fault if the
/// program address is unmapped, an illegal instruction otherwise.
fn find_model<'k>(
    core: &SimCore,
    space: &dyn AddressSpace,
    ctx: &'k Ctx<'_>,
    pc: u64,
) -> Result<&'k KernelModel, GridEnd> {
    let mut first = [0u8; 16];
    if let Err(f) = gpu_read(core, space, pc, &mut first, Access::Fetch) {
        return Err(GridEnd::Fault {
            fault: f,
            pc,
            kernel: format!("at {pc:#x}"),
        });
    }
    let mut buf = Vec::new();
    for m in ctx.kernels.models() {
        if !m.matches_prefix(&first) {
            continue;
        }
        buf.resize(m.code.len(), 0);
        if gpu_read(core, space, pc, &mut buf, Access::Fetch).is_ok() && m.matches(&buf) {
            return Ok(m);
        }
    }
    Err(exception(
        warp_esr::ILLEGAL_INSTR_ENCODING,
        pc,
        pc,
        format!(
            "the code at {pc:#x} is no kernel the simulator knows (it runs the fixture \
             kernels of tests/fixtures/cubins)"
        ),
    ))
}

/// Reads `N` bytes at `off` of constant buffer `cb` (address, size).
fn cbuf<const N: usize>(
    core: &SimCore,
    space: &dyn AddressSpace,
    cb: Option<(u64, u32)>,
    bank: u32,
    off: u64,
    pc: u64,
) -> Result<[u8; N], GridEnd> {
    let Some((addr, size)) = cb else {
        return Err(exception(
            INVALID_CONST_ADDR,
            pc,
            off,
            format!("constant bank {bank} is not bound in the QMD"),
        ));
    };
    if off + N as u64 > size as u64 {
        return Err(exception(
            INVALID_CONST_ADDR,
            pc,
            off,
            format!("c[{bank}][{off:#x}] is beyond the bank's {size} bytes"),
        ));
    }
    let mut b = [0u8; N];
    gpu_read(core, space, addr + off, &mut b, Access::Read).map_err(|f| GridEnd::Fault {
        fault: f,
        pc,
        kernel: "constant load".into(),
    })?;
    Ok(b)
}

struct Grid<'a> {
    core: &'a SimCore,
    space: &'a dyn AddressSpace,
    d: &'a LaunchDesc,
    m: &'a KernelModel,
    /// `%ntid` as the code reads it (constant bank 0 driver area).
    ntid: [u32; 3],
    /// `%nctaid` as the code reads it.
    nctaid: [u32; 3],
}

/// Bytes the copy model moves per bulk access.
const COPY_CHUNK: u64 = 1 << 20;
/// Most copy units (vectors or bytes) the copy model visits one thread at a time, when the
/// grid does not cover `0..T` exactly once.
const MAX_COPY_UNITS_PER_THREAD_PATH: u64 = 1 << 22;

impl Grid<'_> {
    fn param(&self, ordinal: u32) -> Result<u64, GridEnd> {
        let pc = self.d.program_address;
        let p = self
            .m
            .params
            .iter()
            .find(|p| p.ordinal == ordinal)
            .ok_or_else(|| {
                exception(INVALID_CONST_ADDR, pc, 0, format!("no parameter {ordinal}"))
            })?;
        let off = (self.m.param_base + p.offset) as u64;
        let v = match p.size {
            4 => u32::from_le_bytes(cbuf::<4>(
                self.core,
                self.space,
                self.d.cbufs[0],
                0,
                off,
                pc,
            )?) as u64,
            _ => u64::from_le_bytes(cbuf::<8>(
                self.core,
                self.space,
                self.d.cbufs[0],
                0,
                off,
                pc,
            )?),
        };
        Ok(v)
    }

    fn fault(&self, f: MmuFault) -> GridEnd {
        GridEnd::Fault {
            fault: f,
            pc: self.d.program_address,
            kernel: self.m.name.clone(),
        }
    }

    /// Visits every thread's global x index (`ctaid.x * ntid.x + tid.x`, 32-bit as the PTX
    /// computes it), CTA by CTA, as contiguous runs.
    fn for_each_x_run(
        &self,
        mut f: impl FnMut(u32, u32) -> Result<(), GridEnd>,
    ) -> Result<(), GridEnd> {
        let [gx, gy, gz] = self.d.grid;
        let [bx, by, bz] = self.d.block;
        for _cz in 0..gz {
            for _cy in 0..gy {
                for cx in 0..gx {
                    let start = cx.wrapping_mul(self.ntid[0]);
                    for _t in 0..(by as u64 * bz as u64) {
                        f(start, bx)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `buf[i] (u32) = op(...)` over `i in start..start+len, i < n`, in bulk where possible.
    fn elementwise(
        &self,
        n: u32,
        start: u32,
        len: u32,
        mut body: impl FnMut(u64, u32) -> Result<(), MmuFault>,
    ) -> Result<(), GridEnd> {
        for t in 0..len {
            let i = start.wrapping_add(t);
            if i >= n {
                continue;
            }
            body(i as u64, 1).map_err(|f| self.fault(f))?;
        }
        Ok(())
    }

    /// Copies bytes `at..at + len` from `src` to `dst` through the address space, in chunks.
    fn copy_bulk(&self, src: u64, dst: u64, at: u64, len: u64) -> Result<(), GridEnd> {
        let mut buf = Vec::new();
        let mut done = 0;
        while done < len {
            let n = (len - done).min(COPY_CHUNK);
            buf.resize(n as usize, 0);
            let off = at.wrapping_add(done);
            let (s, d) = (src.wrapping_add(off), dst.wrapping_add(off));
            gpu_read(self.core, self.space, s, &mut buf, Access::Read)
                .map_err(|f| self.fault(f))?;
            gpu_write(self.core, self.space, d, &buf, Access::Write).map_err(|f| self.fault(f))?;
            done += n;
        }
        Ok(())
    }

    /// `nvbare_copy` as `runtime.ptx` runs it. Threads are `t = ctaid.x * ntid.x + tid.x` for
    /// the grid the QMD launches; the stride `T` is what the code reads from constant bank 0.
    /// When the grid's threads are exactly `0..T` (the device layer's launches) the whole range
    /// is copied in bulk; otherwise each thread's share is copied on its own, as the loop
    /// would.
    fn copy(&self) -> Result<(), GridEnd> {
        let (dst, src, len) = (self.param(0)?, self.param(1)?, self.param(2)?);
        let stride = u64::from(self.nctaid[0]) * u64::from(self.ntid[0]);
        let exact = self.d.grid[0] == self.nctaid[0]
            && self.d.block[0] == self.ntid[0]
            && [
                self.d.grid[1],
                self.d.grid[2],
                self.d.block[1],
                self.d.block[2],
            ] == [1; 4];
        // (head bytes, vector count, tail bytes); bytes only when not congruent.
        let congruent = (dst ^ src) & 15 == 0;
        let head = if congruent {
            (src.wrapping_neg() & 15).min(len)
        } else {
            0
        };
        let rest = len - head;
        let (vectors, tail) = if congruent {
            (rest / 16, rest % 16)
        } else {
            (0, 0)
        };
        if exact && stride > 0 {
            // Every unit has a thread; head and tail bytes need t < 16.
            let (h, t) = (head.min(stride), tail.min(stride));
            if !congruent {
                return self.copy_bulk(src, dst, 0, len);
            }
            self.copy_bulk(src, dst, 0, h)?;
            self.copy_bulk(src, dst, head, vectors * 16)?;
            let at = head + vectors * 16;
            return self.copy_bulk(src, dst, at, t);
        }
        if stride == 0 {
            return Ok(());
        }
        let units = if congruent { vectors } else { len };
        let threads = u64::from(self.d.grid[0]) * u64::from(self.d.block[0]);
        if units.saturating_mul(threads.max(1)) / stride.max(1) > MAX_COPY_UNITS_PER_THREAD_PATH {
            return Err(GridEnd::Spinning {
                poll_va: None,
                kernel: format!(
                    "{} over a grid that is not %nctaid x %ntid ({units} units)",
                    self.m.name
                ),
            });
        }
        self.for_each_x_run(|start, n| {
            for k in 0..n {
                let t = u64::from(start.wrapping_add(k));
                if !congruent {
                    let mut i = t;
                    while i < len {
                        self.copy_bulk(src, dst, i, 1)?;
                        i += stride;
                    }
                    continue;
                }
                if t < head {
                    self.copy_bulk(src, dst, t, 1)?;
                }
                let mut i = t;
                while i < vectors {
                    self.copy_bulk(src, dst, head + i * 16, 16)?;
                    i += stride;
                }
                if t < tail {
                    let at = head + vectors * 16 + t;
                    self.copy_bulk(src, dst, at, 1)?;
                }
            }
            Ok(())
        })
    }

    fn run(&self) -> GridEnd {
        match self.try_run() {
            Ok(end) | Err(end) => end,
        }
    }

    fn try_run(&self) -> Result<GridEnd, GridEnd> {
        let pc = self.d.program_address;
        let (core, space) = (self.core, self.space);
        match self.m.behavior {
            Behavior::Empty => {}
            Behavior::Add1 => {
                let buf = self.param(0)?;
                let n = self.param(1)? as u32;
                self.for_each_x_run(|start, len| {
                    let lo = start.min(n);
                    let hi = start.saturating_add(len).min(n);
                    if hi > lo && start.checked_add(len).is_some() {
                        // Bulk: the run does not wrap; fall back per element on a fault so the
                        // fault names the first failing address.
                        let addr = buf.wrapping_add(lo as u64 * 4);
                        let mut v = vec![0u8; (hi - lo) as usize * 4];
                        if gpu_read(core, space, addr, &mut v, Access::Read).is_ok() {
                            for w in v.chunks_exact_mut(4) {
                                let x = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                                w.copy_from_slice(&x.wrapping_add(1).to_le_bytes());
                            }
                            if gpu_write(core, space, addr, &v, Access::Write).is_ok() {
                                return Ok(());
                            }
                        }
                    }
                    self.elementwise(n, start, len, |i, _| {
                        let a = buf.wrapping_add(i * 4);
                        let mut w = [0u8; 4];
                        gpu_read(core, space, a, &mut w, Access::Read)?;
                        let x = u32::from_le_bytes(w).wrapping_add(1);
                        gpu_write(core, space, a, &x.to_le_bytes(), Access::Write)
                    })
                })?;
            }
            Behavior::VectorAdd => {
                let (a, b, c) = (self.param(0)?, self.param(1)?, self.param(2)?);
                let n = self.param(3)? as u32;
                self.for_each_x_run(|start, len| {
                    let lo = start.min(n);
                    let hi = start.saturating_add(len).min(n);
                    if hi > lo && start.checked_add(len).is_some() {
                        let bytes = (hi - lo) as usize * 4;
                        let off = lo as u64 * 4;
                        let (mut va, mut vb) = (vec![0u8; bytes], vec![0u8; bytes]);
                        if gpu_read(core, space, a.wrapping_add(off), &mut va, Access::Read).is_ok()
                            && gpu_read(core, space, b.wrapping_add(off), &mut vb, Access::Read)
                                .is_ok()
                        {
                            for (x, y) in va.chunks_exact_mut(4).zip(vb.chunks_exact(4)) {
                                let s = f32::from_le_bytes([x[0], x[1], x[2], x[3]])
                                    + f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                                x.copy_from_slice(&s.to_le_bytes());
                            }
                            if gpu_write(core, space, c.wrapping_add(off), &va, Access::Write)
                                .is_ok()
                            {
                                return Ok(());
                            }
                        }
                    }
                    self.elementwise(n, start, len, |i, _| {
                        let (mut x, mut y) = ([0u8; 4], [0u8; 4]);
                        gpu_read(core, space, a.wrapping_add(i * 4), &mut x, Access::Read)?;
                        gpu_read(core, space, b.wrapping_add(i * 4), &mut y, Access::Read)?;
                        let s = f32::from_le_bytes(x) + f32::from_le_bytes(y);
                        gpu_write(
                            core,
                            space,
                            c.wrapping_add(i * 4),
                            &s.to_le_bytes(),
                            Access::Write,
                        )
                    })
                })?;
            }
            Behavior::Copy => self.copy()?,
            Behavior::OobWrite => {
                let buf = self.param(0)?;
                let target = buf.wrapping_add(1 << 40);
                let v = 0xdead_beefu32.to_le_bytes();
                self.for_each_x_run(|_, len| {
                    for _ in 0..len {
                        gpu_write(core, space, target, &v, Access::Write)
                            .map_err(|f| self.fault(f))?;
                    }
                    Ok(())
                })?;
            }
            Behavior::SpinForever { bank, offset } => {
                let cb = self.d.cbufs.get(bank as usize).copied().flatten();
                let va = u64::from_le_bytes(cbuf::<8>(core, space, cb, bank, offset, pc)?);
                let mut w = [0u8; 4];
                gpu_read(core, space, va, &mut w, Access::Read).map_err(|f| self.fault(f))?;
                if u32::from_le_bytes(w) == 0 {
                    return Ok(GridEnd::Spinning {
                        poll_va: Some(va),
                        kernel: self.m.name.clone(),
                    });
                }
            }
        }
        Ok(GridEnd::Done)
    }
}

/// Runs the grid the QMD `d` describes.
pub(crate) fn grid(
    core: &SimCore,
    space: &dyn AddressSpace,
    ctx: &Ctx<'_>,
    d: &LaunchDesc,
) -> GridEnd {
    let pc = d.program_address;
    let threads: u64 = d.block.iter().map(|&x| x as u64).product();
    if threads == 0 || threads > 1024 || d.grid.contains(&0) {
        return exception(
            warp_esr::ILLEGAL_INSTR_PARAM,
            pc,
            0,
            format!("launch of grid {:?} x block {:?}", d.grid, d.block),
        );
    }
    let m = match find_model(core, space, ctx, pc) {
        Ok(m) => m,
        Err(end) => return end,
    };
    // SASS of one major version runs on that major only (a cubin for sm_XY on sm_XZ, Z >= Y):
    // checked where Turing is involved, whose sm_75 code nothing else runs and which runs
    // nothing newer.
    let chip_sm = u32::from(ctx.chip.info().sm);
    if (chip_sm == 75 || m.sm == 75) && (m.sm / 10 != chip_sm / 10 || m.sm > chip_sm) {
        return exception(
            warp_esr::ILLEGAL_INSTR_ENCODING,
            pc,
            pc,
            format!(
                "{} is sm_{} code ({}); this GPU is sm_{chip_sm}",
                m.name, m.sm, m.source
            ),
        );
    }
    if d.register_count < m.regcount {
        return exception(
            OOR_REG,
            pc,
            0,
            format!(
                "{}: the QMD gives {} registers per thread, the code uses {}",
                m.name, d.register_count, m.regcount
            ),
        );
    }
    if threads > max_threads_for_registers(d.register_count) as u64 {
        return exception(
            OOR_REG,
            pc,
            0,
            format!(
                "{}: {threads} threads x {} registers do not fit the register file",
                m.name, d.register_count
            ),
        );
    }
    if d.shared_memory_size < m.shared_size {
        return exception(
            warp_esr::OOR_ADDR,
            pc,
            0,
            format!(
                "{}: the QMD gives {} bytes of shared memory, the code uses {}",
                m.name, d.shared_memory_size, m.shared_size
            ),
        );
    }
    let total = d.grid.iter().map(|&x| x as u128).product::<u128>() * threads as u128;
    if total > MAX_SIM_THREADS && m.behavior != Behavior::Empty {
        return GridEnd::Spinning {
            poll_va: None,
            kernel: format!(
                "{} ({total} threads, more than the simulator executes)",
                m.name
            ),
        };
    }
    let area = super::driver_area(m.sm);
    let dims = |off: usize| {
        cbuf::<12>(core, space, d.cbufs[0], 0, off as u64, pc)
            .map(|b| [0, 4, 8].map(|i| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])))
    };
    let ntid = match dims(area.block_dim_offset()) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let nctaid = match dims(area.grid_dim_offset()) {
        Ok(v) => v,
        Err(e) => return e,
    };
    Grid {
        core,
        space,
        d,
        m,
        ntid,
        nctaid,
    }
    .run()
}
