//! `--device nvidia:N`: GPUs driven through the nvidia kernel driver (the kernel-driver
//! adapter in `nvbare_pci_host::nvidia`, cargo feature `nvidia-kmod`).

use std::io::Write;

use crate::CliError;

#[cfg(feature = "nvidia-kmod")]
pub use enabled::*;

#[cfg(feature = "nvidia-kmod")]
mod enabled {
    use super::*;
    use nvbare_core::rm::class::class_name;
    use nvbare_pci_host::nvidia::{KernelGpu, KmodError, select_classes};

    fn class(id: Option<u32>) -> String {
        match id {
            Some(id) => match class_name(id) {
                Some(n) => format!("{n} ({id:#06x})"),
                None => format!("{id:#06x}"),
            },
            None => "none offered".to_string(),
        }
    }

    fn io(e: std::io::Error) -> CliError {
        CliError::Runtime(format!("writing output: {e}"))
    }

    /// Opens GPU `index` through the nvidia kernel driver.
    pub fn open_gpu(index: u32) -> Result<KernelGpu, CliError> {
        Ok(KernelGpu::open(index)?)
    }

    /// Maps the usermode block and reads its GPU timer twice: proves the doorbell mapping works
    /// without ringing it.
    fn doorbell_check(gpu: &mut KernelGpu, class: Option<u32>) -> String {
        use nvbare_core::hal::Mmio;
        use nvbare_core::regs::RelativeRegister;
        use nvbare_core::regs::usermode::{MappedUsermode, NVC361_TIME_0, NVC361_TIME_1};
        let Some(class) = class else {
            return "no usermode class offered".into();
        };
        let subdevice = gpu.subdevice();
        let (rm, node) = gpu.rm_and_node();
        let window = match rm.map_usermode(node, subdevice, class) {
            Ok(w) => w,
            Err(e) => return format!("mapping the usermode block failed: {e}"),
        };
        let t0 = NVC361_TIME_0::offset_of::<MappedUsermode>();
        let t1 = NVC361_TIME_1::offset_of::<MappedUsermode>();
        // TIME_1, TIME_0, TIME_1 again: a consistent 64-bit value when the high word held.
        let time = |w: &dyn Mmio| {
            let mut hi = w.read32(t1);
            for _ in 0..3 {
                let lo = w.read32(t0);
                let hi2 = w.read32(t1);
                if hi2 == hi {
                    return (u64::from(hi) << 32) | u64::from(lo);
                }
                hi = hi2;
            }
            u64::from(hi) << 32
        };
        let a = time(&window);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = time(&window);
        format!(
            "usermode block mapped ({} bytes), NVC361_TIME {} ns after a 2 ms sleep{}",
            window.size(),
            b.wrapping_sub(a),
            if b > a { "" } else { " (NOT TICKING)" }
        )
    }

    /// `nvbare info --device nvidia:N --json`: what RM reports about the GPU, as a report.
    pub fn report(index: u32) -> Result<crate::cmd::info_json::InfoReport, CliError> {
        use crate::cmd::info_json::{ChipFacts, ClassRef, GrFacts, InfoReport};
        let mut gpu = open_gpu(index)?;
        let chip = gpu.chip()?;
        let classes = gpu.class_list().map_err(KmodError::from)?;
        let gr = gpu.gr_info().map_err(KmodError::from)?;
        let vram = gpu.vram().map_err(KmodError::from)?;
        let uuid = gpu.uuid()?;
        let sel = select_classes(&classes);
        let spec = crate::DeviceSpec::Nvidia(index);
        let mut r = InfoReport::new(&spec, gpu.card().to_string());
        let card = gpu.card();
        r.pci_id = Some(format!("{:04x}:{:04x}", card.vendor_id, card.device_id));
        r.vram_mib = Some(vram.total >> 20);
        let mut facts = ChipFacts::of(&chip);
        let pick = |c: Option<u32>, d: ClassRef| c.map_or(d, ClassRef::new);
        facts.compute = pick(sel.compute, facts.compute);
        facts.gpfifo = pick(sel.gpfifo, facts.gpfifo);
        facts.copy = pick(sel.copy, facts.copy);
        facts.usermode = pick(sel.usermode, facts.usermode);
        r.chip = Some(facts);
        r.gr = Some(GrFacts {
            sm_version: gr.sm_version,
            sms: gr.sm_count(),
            tpcs: gr.tpcs,
            sm_per_tpc: gr.sm_per_tpc,
            gpcs: gr.gpcs,
            tpc_per_gpc: gr.tpc_per_gpc,
            max_warps_per_sm: gr.max_warps_per_sm,
        });
        r.rm_version = Some(gpu.driver().version().to_string());
        r.classes = classes.iter().map(|c| ClassRef::new(*c)).collect();
        r.extra
            .insert("driver", format!("nvidia.ko {}", gpu.driver().version()));
        r.extra.insert("uuid", uuid.to_string());
        r.extra
            .insert("vram_heap_mib", (vram.heap >> 20).to_string());
        r.extra
            .insert("vram_free_mib", (vram.free >> 20).to_string());
        r.extra
            .insert("doorbell", doorbell_check(&mut gpu, sel.usermode));
        Ok(r)
    }

    /// `nvbare info --device nvidia:N`: what RM reports about the GPU.
    pub fn info(out: &mut dyn Write, index: u32) -> Result<(), CliError> {
        let mut gpu = open_gpu(index)?;
        let chip = gpu.chip()?;
        let classes = gpu.class_list().map_err(KmodError::from)?;
        let gr = gpu.gr_info().map_err(KmodError::from)?;
        let vram = gpu.vram().map_err(KmodError::from)?;
        let uuid = gpu.uuid()?;
        let sel = select_classes(&classes);
        let card = gpu.card().clone();
        let version = gpu.driver().version().clone();
        let i = chip.info;
        let mib = |b: u64| b >> 20;
        let w = &mut *out;
        writeln!(w, "device    nvidia:{index} ({card})").map_err(io)?;
        writeln!(w, "driver    nvidia.ko {version} (r580 layouts)").map_err(io)?;
        writeln!(w, "uuid      {uuid}").map_err(io)?;
        writeln!(w, "chip      {chip}").map_err(io)?;
        writeln!(
            w,
            "sm        sm_{} ({:#x}), {} SMs ({} TPCs x {} SM/TPC), {} GPCs, {} warps/SM",
            gr.sm(),
            gr.sm_version,
            gr.sm_count(),
            gr.tpcs,
            gr.sm_per_tpc,
            gr.gpcs,
            gr.max_warps_per_sm
        )
        .map_err(io)?;
        writeln!(
            w,
            "vram      {} MiB total, {} MiB heap, {} MiB free",
            mib(vram.total),
            mib(vram.heap),
            mib(vram.free)
        )
        .map_err(io)?;
        writeln!(w, "compute   {}", class(sel.compute)).map_err(io)?;
        writeln!(w, "gpfifo    {}", class(sel.gpfifo)).map_err(io)?;
        writeln!(w, "copy      {}", class(sel.copy)).map_err(io)?;
        writeln!(w, "usermode  {}", class(sel.usermode)).map_err(io)?;
        writeln!(w, "qmd       {:?} ({} bytes)", i.qmd, i.qmd.size()).map_err(io)?;
        writeln!(w, "doorbell  {}", doorbell_check(&mut gpu, sel.usermode)).map_err(io)?;
        write!(w, "classes   {}:", classes.len()).map_err(io)?;
        for (k, c) in classes.iter().enumerate() {
            if k % 12 == 0 && k > 0 {
                write!(w, "\n         ").map_err(io)?;
            }
            write!(w, " {c:#06x}").map_err(io)?;
        }
        writeln!(w).map_err(io)?;
        Ok(())
    }
}

/// Without the adapter compiled in, every `nvidia:N` request fails with this.
#[cfg(not(feature = "nvidia-kmod"))]
pub fn info(_out: &mut dyn Write, index: u32) -> Result<(), CliError> {
    Err(not_built(index))
}

/// Without the adapter compiled in, every `nvidia:N` request fails with this.
#[cfg(not(feature = "nvidia-kmod"))]
pub fn report(index: u32) -> Result<crate::cmd::info_json::InfoReport, CliError> {
    Err(not_built(index))
}

/// The error for `nvidia:N` in a build without the `nvidia-kmod` feature.
#[cfg(not(feature = "nvidia-kmod"))]
pub fn not_built(index: u32) -> CliError {
    nvbare::backend::open::not_built(index).into()
}
