//! A falcon engine at the register level (`dev_falcon_v4.h`, `dev_falcon_second_pri.h`,
//! `dev_riscv_pri.h`, `dev_fbif_v4.h`): engine reset with memory scrubbing, IMEM/DMEM by PIO
//! (IMEMC/IMEMD/IMEMT, DMEMC/DMEMD with auto-increment) and by DMA (DMATRF* from host memory or
//! VRAM through FBIF aperture 0), the boot ROM's registers, CPUCTL start/halt, mailboxes, the
//! RISC-V core's BCR and status.
//!
//! What the CPU runs once started is decided by the boot model ([`super`]): it gets the
//! loaded IMEM/DMEM and registers and answers with a run time and what happens at the end.

use std::collections::HashMap;
use std::time::Duration;

use crate::bar0::SimCore;

/// Bytes of IMEM and DMEM modelled, as `HWCFG` reports them (IMEM_SIZE 8:0 and DMEM_SIZE
/// 17:9, in 256-byte blocks; nine bits cannot say more than 511 blocks). The GSP and SEC2
/// sizes are not public: the driver reads HWCFG where it needs them (assumption C15).
pub const MEM_SIZE: usize = 0x1_0000;
/// How long memory scrubbing takes after a reset.
pub const SCRUB_TIME: Duration = Duration::from_micros(5);

/// Block-relative register offsets (within the engine's 16 KiB PRI window), named after the
/// `NV_PFALCON_FALCON_*`, `NV_PFALCON_FBIF_*`, `NV_PFALCON2_FALCON_*` and `NV_PRISCV_RISCV_*`
/// registers (the last two at +0x1000).
#[allow(missing_docs)]
pub mod off {
    pub const MAILBOX0: u32 = 0x040;
    pub const MAILBOX1: u32 = 0x044;
    pub const OS: u32 = 0x080;
    pub const RM: u32 = 0x084;
    pub const HWCFG2: u32 = 0x0f4;
    pub const CPUCTL: u32 = 0x100;
    pub const BOOTVEC: u32 = 0x104;
    pub const HWCFG: u32 = 0x108;
    pub const DMACTL: u32 = 0x10c;
    pub const DMATRFBASE: u32 = 0x110;
    pub const DMATRFMOFFS: u32 = 0x114;
    pub const DMATRFCMD: u32 = 0x118;
    pub const DMATRFFBOFFS: u32 = 0x11c;
    pub const DMATRFBASE1: u32 = 0x128;
    pub const CPUCTL_ALIAS: u32 = 0x130;
    pub const IMEMC: u32 = 0x180;
    pub const IMEMD: u32 = 0x184;
    pub const IMEMT: u32 = 0x188;
    pub const DMEMC: u32 = 0x1c0;
    pub const DMEMD: u32 = 0x1c4;
    pub const ENGINE: u32 = 0x3c0;
    pub const FBIF_TRANSCFG0: u32 = 0x600;
    pub const FBIF_CTL: u32 = 0x624;
    pub const MOD_SEL: u32 = 0x1180;
    pub const BROM_CURR_UCODE_ID: u32 = 0x1198;
    pub const BROM_ENGIDMASK: u32 = 0x119c;
    pub const BROM_PARAADDR0: u32 = 0x1210;
    pub const RISCV_CPUCTL: u32 = 0x1388;
    pub const RISCV_BCR_CTRL: u32 = 0x1668;
    /// `NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS` (+0x240 above the RISC-V base; tu102 and
    /// ga100 dev_riscv_pri.h), bit 0 ACTIVE_STAT.
    pub const TU102_RISCV_STATUS: u32 = 0x1240;
    /// `NV_PRISCV_RISCV_IRQMASK` on tu102/ga100 (+0x2b4, read-only `R-I4R`; ga102 moved it to
    /// +0x528).
    pub const TU102_RISCV_IRQMASK: u32 = 0x12b4;
}

/// What the falcon CPU is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cpu {
    /// Out of reset, not started.
    Idle,
    /// Running until the given time.
    Running(Duration),
    /// Halted (CPUCTL.HALTED).
    Halted,
}

/// What the RISC-V core is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Riscv {
    /// Not started since its reset (reads HALTED, the reset value).
    Off,
    /// Running (ACTIVE_STAT).
    Active,
    /// Halted.
    Halted,
}

/// Which chip's headers lay out the falcon's RISC-V and FALCON2 registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegLayout {
    /// GA102 and later: `NV_PRISCV_RISCV_CPUCTL`, `BCR_CTRL`, `NV_PFALCON2_FALCON_{MOD_SEL,
    /// BROM_*}`, `HWCFG2.MEM_SCRUBBING`.
    Ga102,
    /// TU102-TU117 and GA100: none of the above at those addresses (tu102 and ga100
    /// dev_riscv_pri.h, dev_falcon_v4.h; tu102 has a `NV_PRISCV_RISCV_CPUCTL` of its own at
    /// +0x268, ga100 none, and neither a BCR); the core's state is
    /// `CORE_SWITCH_RISCV_STATUS` and scrubbing shows in `DMACTL` bits 1 and 2.
    Tu102,
}

impl RegLayout {
    /// Whether `o` (falcon-relative) is a register only GA102 and later define.
    pub fn ga102_only(o: u32) -> bool {
        matches!(
            o,
            off::MOD_SEL
                | off::BROM_CURR_UCODE_ID
                | off::BROM_ENGIDMASK
                | off::BROM_PARAADDR0
                | off::RISCV_CPUCTL
                | off::RISCV_BCR_CTRL
        )
    }
}

/// What an access to a register the chip does not have reads as (a PRI error pattern).
pub const PRI_ERROR: u32 = 0xbadf_5040;

/// One falcon engine.
#[derive(Debug)]
pub struct Falcon {
    /// Whose register layout the engine has.
    pub layout: RegLayout,
    /// "GSP" or "SEC2".
    pub name: &'static str,
    /// PRI base (0x110000, 0x840000).
    pub base: u32,
    /// Whether HWCFG2.RISCV reports a RISC-V core.
    pub has_riscv: bool,
    regs: HashMap<u32, u32>,
    /// IMEM contents.
    pub imem: Vec<u8>,
    /// IMEM tag (virtual block) of each 256-byte block, if written.
    pub imem_tags: Vec<Option<u16>>,
    /// Whether each IMEM block was loaded secure.
    pub imem_secure: Vec<bool>,
    /// DMEM contents.
    pub dmem: Vec<u8>,
    in_reset: bool,
    scrub_until: Duration,
    /// The falcon CPU.
    pub cpu: Cpu,
    /// The RISC-V core.
    pub riscv: Riscv,
    /// Resets seen.
    pub resets: u32,
    /// Starts seen.
    pub starts: u32,
    /// Problems the driver caused (DMA without a usable aperture...), in words.
    pub errors: Vec<String>,
    imem_port: u32,
    dmem_port: u32,
}

impl Falcon {
    /// A falcon at `base`, freshly powered.
    pub fn new(name: &'static str, base: u32, has_riscv: bool) -> Self {
        let mut f = Falcon {
            layout: RegLayout::Ga102,
            name,
            base,
            has_riscv,
            regs: HashMap::new(),
            imem: vec![0; MEM_SIZE],
            imem_tags: vec![None; MEM_SIZE / 256],
            imem_secure: vec![false; MEM_SIZE / 256],
            dmem: vec![0; MEM_SIZE],
            in_reset: false,
            scrub_until: Duration::ZERO,
            cpu: Cpu::Idle,
            riscv: Riscv::Off,
            resets: 0,
            starts: 0,
            errors: Vec::new(),
            imem_port: 0,
            dmem_port: 0,
        };
        f.clear_state();
        f
    }

    /// The same engine with TU102/GA100's register layout.
    pub fn with_layout(mut self, layout: RegLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Refuses an access to a register this chip's headers do not define: records it and
    /// answers `true` (the caller then reads [`PRI_ERROR`] or drops the write).
    fn refuses(&mut self, o: u32, what: &str) -> bool {
        let refused = self.layout == RegLayout::Tu102 && RegLayout::ga102_only(o);
        if refused {
            self.errors.push(format!(
                "{}: {what} of {:#x}, a register tu102/ga100 headers do not define",
                self.name,
                self.base + o
            ));
        }
        refused
    }

    fn clear_state(&mut self) {
        // The engine-level scratch registers (NV_PGSP_MAILBOX(i) at +0x804, the queue heads at
        // +0xc00) are outside the falcon core and survive its reset.
        self.regs.retain(|&o, _| (0x800..0x1000).contains(&o));
        // Reset values: DMA needs a context until the driver says otherwise.
        self.regs.insert(off::DMACTL, 1);
        self.imem.fill(0);
        self.dmem.fill(0);
        self.imem_tags.fill(None);
        self.imem_secure.fill(false);
        self.cpu = Cpu::Idle;
        self.riscv = Riscv::Off;
    }

    /// Whether `offset` (BAR0) is in this engine's window.
    pub fn claims(&self, offset: u32) -> bool {
        (self.base..self.base + 0x4000).contains(&offset)
    }

    /// A stored register value (block-relative).
    pub fn reg(&self, o: u32) -> u32 {
        self.regs.get(&o).copied().unwrap_or(0)
    }

    /// Sets a register (block-relative).
    pub fn set_reg(&mut self, o: u32, v: u32) {
        self.regs.insert(o, v);
    }

    /// (MAILBOX0, MAILBOX1).
    pub fn mailboxes(&self) -> (u32, u32) {
        (self.reg(off::MAILBOX0), self.reg(off::MAILBOX1))
    }

    /// BCR_CTRL selects the RISC-V core.
    pub fn riscv_selected(&self) -> bool {
        self.reg(off::RISCV_BCR_CTRL) & 0x10 != 0
    }

    /// Full reset (power-on or PCI function reset).
    pub fn power_on_reset(&mut self) {
        self.clear_state();
        self.in_reset = false;
        self.scrub_until = Duration::ZERO;
    }

    /// Reads a register; `None` leaves it to the boot model.
    pub fn read(&mut self, core: &SimCore, o: u32) -> u32 {
        let now = core.clock_now();
        if self.refuses(o, "read") {
            return PRI_ERROR;
        }
        match o {
            off::HWCFG2 => {
                let scrubbing = self.in_reset || now < self.scrub_until;
                // MEM_SCRUBBING (bit 12) is ga102's; tu102's HWCFG2 has no such field.
                let scrub_bit = match self.layout {
                    RegLayout::Ga102 => (scrubbing as u32) << 12,
                    RegLayout::Tu102 => 0,
                };
                ((self.has_riscv as u32) << 10) | scrub_bit | (1 << 31)
            }
            off::TU102_RISCV_STATUS if self.layout == RegLayout::Tu102 => {
                (self.riscv == Riscv::Active) as u32
            }
            off::HWCFG => ((MEM_SIZE / 256) as u32) | (((MEM_SIZE / 256) as u32) << 9),
            off::CPUCTL => match self.cpu {
                Cpu::Halted => 1 << 4,
                _ => 0,
            },
            off::DMACTL => {
                let scrubbing = (self.in_reset || now < self.scrub_until) as u32;
                (self.reg(o) & 1) | (scrubbing << 1) | (scrubbing << 2)
            }
            // Transfers complete at once: never full, always idle afterwards.
            off::DMATRFCMD => (self.reg(o) & !0x3) | 0x2,
            off::ENGINE => {
                // RESET_STATUS 10:8: 0 ASSERTED, 2 DEASSERTED (GH100).
                let status = if self.in_reset { 0 } else { 2 };
                (self.in_reset as u32) | (status << 8)
            }
            off::IMEMD => {
                let v = self.mem_word(true, self.imem_port);
                if self.reg(off::IMEMC) & (1 << 25) != 0 {
                    self.imem_port = self.imem_port.wrapping_add(4);
                }
                v
            }
            off::DMEMD => {
                let v = self.mem_word(false, self.dmem_port);
                if self.reg(off::DMEMC) & (1 << 25) != 0 {
                    self.dmem_port = self.dmem_port.wrapping_add(4);
                }
                v
            }
            off::IMEMC => (self.reg(o) & !0x00ff_fffc) | (self.imem_port & 0x00ff_fffc),
            off::DMEMC => (self.reg(o) & !0x00ff_fffc) | (self.dmem_port & 0x00ff_fffc),
            // HALTED resets to 1 (`NV_PRISCV_RISCV_CPUCTL_HALTED_INIT`, gh100/dev_riscv_pri.h):
            // a core that never ran reads halted.
            off::RISCV_CPUCTL => match self.riscv {
                Riscv::Active => 1 << 7,
                Riscv::Halted | Riscv::Off => 1 << 4,
            },
            // VALID reads 1 once a core is selected.
            off::RISCV_BCR_CTRL => self.reg(o) | 1,
            _ => self.reg(o),
        }
    }

    fn mem_word(&self, imem: bool, at: u32) -> u32 {
        let m = if imem { &self.imem } else { &self.dmem };
        let a = at as usize;
        m.get(a..a + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0xdead_dead)
    }

    fn put_word(&mut self, imem: bool, at: u32, v: u32) {
        let m = if imem { &mut self.imem } else { &mut self.dmem };
        let a = at as usize;
        match m.get_mut(a..a + 4) {
            Some(d) => d.copy_from_slice(&v.to_le_bytes()),
            None => self.errors.push(format!(
                "{}: {} PIO write beyond the memory at {a:#x}",
                self.name,
                if imem { "IMEM" } else { "DMEM" }
            )),
        }
    }

    /// Handles a write. Returns `true` when the CPU was asked to start (the boot model then
    /// decides what runs).
    pub fn write(&mut self, core: &SimCore, o: u32, v: u32) -> bool {
        if self.refuses(o, "write") {
            return false;
        }
        if self.layout == RegLayout::Tu102
            && matches!(o, off::TU102_RISCV_STATUS | off::TU102_RISCV_IRQMASK)
        {
            // Both read-only (`R-I4R`): the write does nothing.
            return false;
        }
        match o {
            off::ENGINE => {
                if v & 1 != 0 {
                    if !self.in_reset {
                        self.resets += 1;
                    }
                    self.in_reset = true;
                    self.clear_state();
                } else if self.in_reset {
                    self.in_reset = false;
                    self.scrub_until = core.clock_now() + SCRUB_TIME;
                }
                false
            }
            _ if self.in_reset => {
                self.errors.push(format!(
                    "{}: write {v:#x} to +{o:#x} while in reset",
                    self.name
                ));
                false
            }
            off::CPUCTL => {
                if v & 2 != 0 {
                    return self.start_requested();
                }
                false
            }
            off::CPUCTL_ALIAS => {
                // ALIAS_EN is never set in this model: the write does nothing, as on hardware.
                self.errors.push(format!(
                    "{}: CPUCTL_ALIAS written while CPUCTL.ALIAS_EN is clear",
                    self.name
                ));
                false
            }
            off::DMATRFCMD => {
                self.set_reg(o, v);
                self.dma(core, v);
                false
            }
            off::IMEMC => {
                self.set_reg(o, v);
                self.imem_port = v & 0x00ff_fffc;
                false
            }
            off::DMEMC => {
                self.set_reg(o, v);
                self.dmem_port = v & 0x00ff_fffc;
                false
            }
            off::IMEMT => {
                self.set_reg(o, v);
                false
            }
            off::IMEMD => {
                let at = self.imem_port;
                self.put_word(true, at, v);
                let blk = (at / 256) as usize;
                if at.is_multiple_of(256) {
                    let tag = self.reg(off::IMEMT) as u16;
                    let secure = self.reg(off::IMEMC) & (1 << 28) != 0;
                    if let Some(t) = self.imem_tags.get_mut(blk) {
                        *t = Some(tag);
                    }
                    if let Some(s) = self.imem_secure.get_mut(blk) {
                        *s = secure;
                    }
                    // The tag register auto-increments per block.
                    self.set_reg(off::IMEMT, (tag as u32 + 1) & 0xffff);
                }
                if self.reg(off::IMEMC) & (1 << 24) != 0 {
                    self.imem_port = at.wrapping_add(4);
                }
                false
            }
            off::DMEMD => {
                let at = self.dmem_port;
                self.put_word(false, at, v);
                if self.reg(off::DMEMC) & (1 << 24) != 0 {
                    self.dmem_port = at.wrapping_add(4);
                }
                false
            }
            off::RISCV_BCR_CTRL => {
                self.set_reg(o, v & 0x110);
                false
            }
            _ => {
                self.set_reg(o, v);
                false
            }
        }
    }

    fn start_requested(&mut self) -> bool {
        self.starts += 1;
        true
    }

    /// One 256-byte DMA transfer as DMATRFCMD asks.
    fn dma(&mut self, core: &SimCore, cmd: u32) {
        let imem = cmd & (1 << 4) != 0;
        let write = cmd & (1 << 5) != 0;
        let size = (cmd >> 8) & 7;
        let ctxdma = (cmd >> 12) & 7;
        if write || size != 6 {
            self.errors.push(format!(
                "{}: DMATRFCMD {cmd:#x}: only 256-byte loads are modelled",
                self.name
            ));
            return;
        }
        if self.reg(off::DMACTL) & 1 != 0 && self.reg(off::FBIF_CTL) & 0x80 == 0 {
            self.errors.push(format!(
                "{}: DMA with DMACTL.REQUIRE_CTX set and no ALLOW_PHYS_NO_CTX: dropped",
                self.name
            ));
            return;
        }
        let transcfg = self.reg(off::FBIF_TRANSCFG0 + 4 * ctxdma);
        if transcfg & 0x4 == 0 {
            self.errors.push(format!(
                "{}: DMA through aperture {ctxdma} without MEM_TYPE_PHYSICAL: dropped",
                self.name
            ));
            return;
        }
        let base = ((self.reg(off::DMATRFBASE1) as u64 & 0x1ff) << 32
            | self.reg(off::DMATRFBASE) as u64)
            << 8;
        let fboffs = self.reg(off::DMATRFFBOFFS) as u64;
        let src = base.wrapping_add(fboffs);
        let dest = (self.reg(off::DMATRFMOFFS) & 0xff_ffff) as usize;
        let mut data = [0u8; 256];
        let ok = match transcfg & 3 {
            0 => core.vram.read(src, &mut data).is_ok(),
            _ => core.host.read(src, &mut data).is_ok(),
        };
        if !ok {
            self.errors.push(format!(
                "{}: DMA fault reading {src:#x} (target {})",
                self.name,
                transcfg & 3
            ));
            return;
        }
        let m = if imem { &mut self.imem } else { &mut self.dmem };
        match m.get_mut(dest..dest + 256) {
            Some(d) => d.copy_from_slice(&data),
            None => {
                self.errors
                    .push(format!("{}: DMA to {dest:#x} beyond the memory", self.name));
                return;
            }
        }
        if imem {
            let blk = dest / 256;
            if let Some(t) = self.imem_tags.get_mut(blk) {
                *t = Some((fboffs >> 8) as u16);
            }
            if let Some(s) = self.imem_secure.get_mut(blk) {
                *s = (cmd >> 2) & 3 != 0;
            }
        }
    }

    /// IMEM bytes at virtual address `va` (by tag), `len` bytes, if all blocks are present.
    pub fn imem_by_va(&self, va: u32, len: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        let mut blk_va = va / 256;
        while out.len() < len {
            let phys = self
                .imem_tags
                .iter()
                .position(|t| *t == Some(blk_va as u16))?;
            let b = &self.imem[phys * 256..phys * 256 + 256];
            let n = (len - out.len()).min(256);
            out.extend_from_slice(&b[..n]);
            blk_va += 1;
        }
        Some(out)
    }

    /// Whether the IMEM blocks holding `[va, va + len)` were loaded secure.
    pub fn imem_secure_by_va(&self, va: u32, len: usize) -> bool {
        let blocks = len.div_ceil(256) as u32;
        (0..blocks).all(|i| {
            self.imem_tags
                .iter()
                .position(|t| *t == Some((va / 256 + i) as u16))
                .is_some_and(|p| self.imem_secure[p])
        })
    }
}

impl SimCore {
    /// Current simulated time.
    pub fn clock_now(&self) -> Duration {
        Duration::from_nanos(self.clock.nanos())
    }
}
