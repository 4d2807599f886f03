//! GSP-RM's start as the bootloaders see it: the WPR metadata, the radix3 image, the RM
//! arguments in the LIBOS regions, the CPU-sequencer script and GSP_INIT_DONE.

use super::*;

impl Model {
    pub(super) fn read_host<T: FromBytes>(core: &SimCore, addr: u64) -> Option<T> {
        let mut b = vec![0u8; std::mem::size_of::<T>()];
        core.host.read(addr, &mut b).ok()?;
        T::read_from_bytes(&b).ok()
    }

    /// Checks the WPR metadata the booter / GSP-FMC is given; `Err((code, why))`.
    pub(super) fn check_meta(
        &mut self,
        core: &SimCore,
        addr: u64,
        fmc: bool,
    ) -> Result<GspFwWprMeta, (u32, String)> {
        let codes = if fmc {
            [
                err::FMC_DMA,
                err::FMC_META,
                err::FMC_IMAGE,
                err::FMC_IMAGE,
                err::FMC_IMAGE,
                err::FMC_META,
            ]
        } else {
            [
                err::BOOTER_META_DMA,
                err::BOOTER_META_MAGIC,
                err::BOOTER_IMAGE,
                err::BOOTER_BOOTLOADER,
                err::BOOTER_SIGNATURE,
                err::BOOTER_LAYOUT,
            ]
        };
        if has(&self.faults, BootFault::CorruptWprMeta) {
            let mut b = [0u8; 1];
            if core.host.read(addr, &mut b).is_ok() {
                let _ = core.host.write(addr, &[b[0] ^ 0x10]);
            }
        }
        let m: GspFwWprMeta = Self::read_host(core, addr).ok_or((
            codes[0],
            format!("WPR metadata at {addr:#x} unreadable (DMA fault)"),
        ))?;
        if m.magic != GSP_FW_WPR_META_MAGIC || m.revision != GSP_FW_WPR_META_REVISION {
            return Err((
                codes[1],
                format!("WPR metadata magic {:#x} revision {}", m.magic, m.revision),
            ));
        }
        let fw = self.cfg.firmware.clone();
        // The GSP-RM image, walked through the radix3 tables as the bootloader does.
        if m.sizeOfRadix3Elf != fw.gsp_image_len {
            return Err((
                codes[2],
                format!(
                    "sizeOfRadix3Elf {:#x}, the image is {:#x}",
                    m.sizeOfRadix3Elf, fw.gsp_image_len
                ),
            ));
        }
        let digest = walk_radix3(core, m.sysmemAddrOfRadix3Elf, m.sizeOfRadix3Elf)
            .map_err(|e| (codes[2], format!("radix3 walk: {e}")))?;
        if digest != fw.gsp_image_sha256 {
            return Err((
                codes[2],
                "the radix3-mapped GSP-RM image differs from the real .fwimage".into(),
            ));
        }
        // Bootloader.
        let (c, d, man, _) = fw.bootloader_desc;
        let mut bl = vec![0u8; fw.bootloader.len()];
        let read_ok = core.host.read(m.sysmemAddrOfBootloader, &mut bl).is_ok();
        if !read_ok
            || m.sizeOfBootloader != fw.bootloader.len() as u64
            || bl != fw.bootloader
            || (
                m.bootloaderCodeOffset,
                m.bootloaderDataOffset,
                m.bootloaderManifestOffset,
            ) != (c as u64, d as u64, man as u64)
        {
            return Err((codes[3], "bootloader image, size or code/data/manifest offsets differ from the real bootloader".into()));
        }
        // Signature.
        let mut sig = vec![0u8; fw.gsp_signature.len()];
        if m.sizeOfSignature != sig.len() as u64
            || core.host.read(m.sysmemAddrOfSignature, &mut sig).is_err()
            || sig != fw.gsp_signature
        {
            return Err((
                codes[4],
                format!(
                    "GSP-RM signature is not the real .fwsignature for {}",
                    fw.chip
                ),
            ));
        }
        let layout_ok = if fmc {
            m.frtsSize == 1 << 20
                && m.vgaWorkspaceSize >= 128 << 10
                && m.gspFwHeapSize >= 88 << 20
                && m.nonWprHeapSize != 0
        } else {
            let ordered = m.nonWprHeapOffset == m.gspFwRsvdStart
                && m.nonWprHeapOffset + m.nonWprHeapSize <= m.gspFwWprStart
                && m.gspFwWprStart < m.gspFwHeapOffset
                && m.gspFwHeapOffset + m.gspFwHeapSize <= m.gspFwOffset
                && m.gspFwOffset + m.sizeOfRadix3Elf <= m.bootBinOffset
                && m.bootBinOffset + m.sizeOfBootloader <= m.frtsOffset
                && m.frtsOffset + m.frtsSize <= m.gspFwWprEnd
                && m.gspFwWprEnd <= m.vgaWorkspaceOffset
                && m.vgaWorkspaceOffset + m.vgaWorkspaceSize <= m.fbSize;
            let aligned = m.gspFwOffset.is_multiple_of(0x1_0000)
                && m.bootBinOffset.is_multiple_of(0x1000)
                && m.gspFwHeapOffset.is_multiple_of(1 << 20)
                && m.gspFwWprStart.is_multiple_of(0x2_0000)
                && m.gspFwWprEnd.is_multiple_of(0x2_0000);
            ordered && aligned && m.fbSize == self.fb_size && m.gspFwHeapSize >= 88 << 20
        };
        if !layout_ok {
            return Err((
                codes[5],
                format!("inconsistent FB layout in the WPR metadata: {m:?}"),
            ));
        }
        Ok(m)
    }

    /// Starts the GSP RISC-V core and GSP-RM with the LIBOS arguments at `libos`.
    pub(super) fn start_gsp_rm(&mut self, core: &mut SimCore, libos: u64) {
        if has(&self.faults, BootFault::RiscvNeverActive) {
            return;
        }
        self.gsp.riscv = Riscv::Active;
        self.stats.gsp_rm_starts += 1;
        self.phase("GSP-RM started: found its queues from the LIBOS arguments");
        if self.check_flush_page(core, "starts") {
            self.stats.flush_page_ok += 1;
        }
        // GSP-RM binds BAR1 to its own tables (just below the end of FB, in its reservation).
        let fsp = self.model.chipset.info().boot == BootMethod::FspChainOfTrust;
        bar1::gsp_binds_bar1(core, fsp, ((self.fb_size - (4 << 20)) >> 12) as u32);
        let (init, logs) = match find_rm_args(core, libos) {
            Ok(x) => x,
            Err(e) => {
                // GSP-RM crashes before it creates its queues: no INIT_DONE ever comes.
                self.error(format!("GSP-RM cannot start: {e}"));
                return;
            }
        };
        let booter = self.model.chipset.info().boot == BootMethod::Booter;
        let mut ecfg = EmulatorConfig::new(init, self.model);
        ecfg.send_init_done = false;
        ecfg.trace = self.cfg.trace.clone();
        let emu = GspEmulator::new(ecfg, (self.cfg.rm)(&self.model));
        for f in &self.cfg.gsp_faults {
            emu.inject(*f);
        }
        for (name, addr, size) in &logs {
            emu.attach_log(name, *addr, *size);
        }
        // Whether a cold boot sends a script is not public: both, drawn in random mode (a
        // fault in the script needs one).
        let script = booter
            && (has(&self.faults, BootFault::SequencerPollNeverReady)
                || core
                    .unknowns
                    .pick(unknown::SEQUENCER_AT_COLD_BOOT, &[true, false, true]));
        if script {
            emu.queue_event(EmuEvent::RunCpuSequencer(sequencer_script()));
            self.stats.sequencer_scripts += 1;
            self.seq = SeqState {
                started_at: Some(Self::now(core)),
                ..Default::default()
            };
            self.gsp.set_reg(PGSP_MAILBOX + 4, 0x34ff);
        }
        emu.start(core);
        let doorbell = emu.engine();
        self.rm = Some(RmState {
            emu,
            doorbell,
            libos_args: libos,
            init,
            suspended: false,
            init_sent: false,
            unload: None,
            halted: false,
        });
        self.state_kept = false;
        if !script {
            self.send_init_done(core);
        }
    }

    pub(super) fn send_init_done(&mut self, core: &mut SimCore) {
        if has(&self.faults, BootFault::NoInitDone) {
            return;
        }
        let result = self
            .faults
            .iter()
            .find_map(|f| match f {
                BootFault::InitDoneError(r) => Some(*r),
                _ => None,
            })
            .unwrap_or(0);
        if let Some(rm) = &mut self.rm
            && !rm.init_sent
        {
            rm.init_sent = true;
            rm.emu.queue_event(EmuEvent::InitDone(result));
            rm.emu.pump(core);
        }
    }
}

/// Reads the radix3 tables from `root` as the bootloader does and hashes the image pages.
pub(super) fn walk_radix3(core: &SimCore, root: u64, size: u64) -> Result<[u8; 32], String> {
    use sha2::{Digest, Sha256};
    let entry = |table: u64, i: u64| -> Result<u64, String> {
        let mut b = [0u8; 8];
        core.host
            .read(table + i * 8, &mut b)
            .map_err(|e| format!("table page {table:#x}: {e}"))?;
        match u64::from_le_bytes(b) {
            0 => Err(format!("zero entry {i} in table page {table:#x}")),
            a => Ok(a),
        }
    };
    let pages = size.div_ceil(4096);
    let mut h = Sha256::new();
    let mut page = vec![0u8; 4096];
    let (mut l1, mut l2) = (None, None);
    for j in 0..pages {
        let l1_no = j / (512 * 512);
        let l2_no = j / 512;
        let l1a = match l1 {
            Some((n, a)) if n == l1_no => a,
            _ => {
                let a = entry(root, l1_no)?;
                l1 = Some((l1_no, a));
                a
            }
        };
        let l2a = match l2 {
            Some((n, a)) if n == l2_no => a,
            _ => {
                let a = entry(l1a, l2_no % 512)?;
                l2 = Some((l2_no, a));
                a
            }
        };
        let data = entry(l2a, j % 512)?;
        core.host
            .read(data, &mut page)
            .map_err(|e| format!("image page {j}: {e}"))?;
        let n = (size - j * 4096).min(4096) as usize;
        h.update(&page[..n]);
    }
    Ok(h.finalize().into())
}

/// Finds the message queues as GSP-RM does: LIBOS arguments → "RMARGS" →
/// `GSP_ARGUMENTS_CACHED` → `MESSAGE_QUEUE_INIT_ARGUMENTS`; also the log buffers.
pub(super) fn find_rm_args(
    core: &SimCore,
    libos: u64,
) -> Result<(MESSAGE_QUEUE_INIT_ARGUMENTS, LogRegions), String> {
    let mut rmargs = None;
    let mut logs = Vec::new();
    for i in 0..128u64 {
        let mut b = [0u8; 32];
        core.host
            .read(libos + i * 32, &mut b)
            .map_err(|e| format!("LIBOS argument {i}: {e}"))?;
        let a = LibosMemoryRegionInitArgument::read_from_bytes(&b).map_err(|_| "LIBOS argument")?;
        if a.id8 == 0 {
            break;
        }
        if a.kind != 1 || a.loc != 1 {
            return Err(format!(
                "LIBOS region {i}: kind {} loc {} (CONTIGUOUS/SYSMEM expected)",
                a.kind, a.loc
            ));
        }
        let name: String = a
            .id8
            .to_be_bytes()
            .iter()
            .filter(|&&c| c != 0)
            .map(|&c| c as char)
            .collect();
        if i == 0 && a.id8 != libos_id8("LOGINIT") {
            return Err(format!(
                "the first LIBOS region is {name}, LOGINIT must come first"
            ));
        }
        if a.id8 == libos_id8("RMARGS") {
            rmargs = Some(a);
        } else if name.starts_with("LOG") {
            logs.push((name, a.pa, a.size));
        }
    }
    let r = rmargs.ok_or("no RMARGS region in the LIBOS arguments")?;
    if r.size < std::mem::size_of::<GSP_ARGUMENTS_CACHED>() as u64 {
        return Err(format!("RMARGS region of {} bytes", r.size));
    }
    let args: GSP_ARGUMENTS_CACHED =
        Model::read_host(core, r.pa).ok_or("GSP_ARGUMENTS_CACHED unreadable")?;
    if args.bDmemStack != 1 {
        return Err("GSP_ARGUMENTS_CACHED.bDmemStack is not 1 (r570 needs it)".into());
    }
    if args.gpuInstance != 0
        || args.srInitArguments.oldLevel != 0
        || args.srInitArguments.bInPMTransition != 0
    {
        return Err("GSP_ARGUMENTS_CACHED asks for a resume, not a cold boot".into());
    }
    Ok((args.messageQueueInitArguments, logs))
}

/// The synthetic CPU-sequencer script (see the module documentation).
pub(super) fn sequencer_script() -> Vec<u32> {
    let mb = |i: u32| GSP_BASE + PGSP_MAILBOX + 4 * i;
    vec![
        0,
        mb(0),
        0xcafe_0001, // REG_WRITE
        // REG_MODIFY(addr, mask, val) with val == mask: the register's other bits must stay.
        // What GSP-RM really sends is not public; tinygrad, which boots real Ada GPUs, reads
        // the operands as (addr, val, mask), so the real scripts' REG_MODIFYs cannot tell the
        // two orders apart (docs/witness.md). The operand order itself is tested on the
        // driver's handler directly.
        1,
        mb(1),
        0xff00,
        0xff00,
        2,
        mb(3),
        0xffff,
        0x600d,
        2000,
        0x5e0, // REG_POLL (timeout 2 ms)
        3,
        SEQ_DELAY_US, // DELAY_US
        4,
        mb(0),
        0, // REG_STORE
        5, // CORE_RESET
        6, // CORE_START
        7, // CORE_WAIT_FOR_HALT
        8, // CORE_RESUME
    ]
}

/// The command GSP-RM consumed last: (function, payload). Read from the shared memory the way
/// GSP-RM finds it (page table → command queue header → its read pointer in the status
/// queue's rx header); single-element commands only.
pub(super) fn last_command(
    core: &SimCore,
    init: &MESSAGE_QUEUE_INIT_ARGUMENTS,
) -> Result<(u32, Vec<u8>), String> {
    const PAGE: u64 = 4096;
    // Page `k` of the shared memory, through the self-mapping page table at its start.
    fn page(core: &SimCore, root: u64, k: u64, depth: u32) -> Result<u64, String> {
        let at = if k * 8 < PAGE {
            root + k * 8
        } else if depth < 4 {
            page(core, root, k * 8 / PAGE, depth + 1)? + (k * 8) % PAGE
        } else {
            return Err("page table too deep".into());
        };
        let mut b = [0u8; 8];
        core.host
            .read(at, &mut b)
            .map_err(|e| format!("page table: {e}"))?;
        Ok(u64::from_le_bytes(b))
    }
    let read = |off: u64, dst: &mut [u8]| -> Result<(), String> {
        if off % PAGE + dst.len() as u64 > PAGE {
            return Err("read across a page".into());
        }
        let a = page(core, init.sharedMemPhysAddr, off / PAGE, 0)? + off % PAGE;
        core.host.read(a, dst).map_err(|e| e.to_string())
    };
    let (cmd, stat) = (init.cmdQueueOffset, init.statQueueOffset);
    let mut h = [0u8; std::mem::size_of::<msgqTxHeader>()];
    read(cmd, &mut h)?;
    let tx = msgqTxHeader::read_from_bytes(&h).map_err(|_| "queue header")?;
    let mut rp = [0u8; 4];
    read(stat + RX_HDR_OFF as u64, &mut rp)?;
    let (rp, count) = (u32::from_le_bytes(rp), tx.msgCount.max(1));
    let last = (rp + count - 1) % count;
    let elem = cmd + ENTRY_OFF as u64 + last as u64 * PAGE;
    let head = std::mem::size_of::<GSP_MSG_QUEUE_ELEMENT>();
    let rpc = std::mem::size_of::<rpc_message_header_v03_00>();
    let mut b = vec![0u8; head + rpc + 64];
    read(elem, &mut b)?;
    let hdr = rpc_message_header_v03_00::read_from_bytes(&b[head..head + rpc])
        .map_err(|_| "RPC header")?;
    let len = (hdr.length as usize).saturating_sub(rpc).min(64);
    Ok((hdr.function, b[head + rpc..head + rpc + len].to_vec()))
}
