//! `nvbare info`: identify a device and print its per-chip facts.

use std::io::Write;

use nvbare_core::chip::{self, BootMethod, Chip, MmuVersion};
use nvbare_core::hal::PciConfig;
use nvbare_core::mm::vram::FbSizeSource;
use nvbare_core::rm::class::class_name;
use nvbare_sim::{ChipModel, SimConfig, SimGpu};

use super::info_json::{ChipFacts, InfoReport};
use crate::{CliError, DeviceSpec};

fn class(id: u32) -> String {
    match class_name(id) {
        Some(n) => format!("{n} ({id:#06x})"),
        None => format!("{id:#06x}"),
    }
}

/// Prints what the core knows about an identified chip.
pub fn print_chip(out: &mut dyn Write, chip: &Chip) -> std::io::Result<()> {
    let i = chip.info;
    writeln!(out, "chip      {chip}")?;
    writeln!(
        out,
        "boot      NV_PMC_BOOT_0 = {:#010x}, NV_PMC_BOOT_42 = {:#010x}",
        chip.boot0, chip.boot42
    )?;
    writeln!(out, "sm        sm_{}", i.sm)?;
    writeln!(out, "compute   {}", class(i.classes.compute))?;
    writeln!(out, "gpfifo    {}", class(i.classes.gpfifo))?;
    writeln!(out, "copy      {}", class(i.classes.copy))?;
    writeln!(out, "usermode  {}", class(i.classes.usermode))?;
    let mmu = match i.mmu {
        MmuVersion::V2 => "GMMU v2 (49-bit VA, PDE3..PDE0)",
        MmuVersion::V3 => "GMMU v3 (57-bit VA, PDE4..PDE0)",
    };
    writeln!(out, "mmu       {mmu}")?;
    writeln!(out, "qmd       {:?} ({} bytes)", i.qmd, i.qmd.size())?;
    let boot = match i.boot {
        BootMethod::Booter => "FWSEC-FRTS + booter on SEC2",
        BootMethod::FspChainOfTrust => "FSP chain of trust + GSP-FMC",
    };
    writeln!(out, "gsp boot  {boot}")?;
    writeln!(
        out,
        "firmware  nvidia/{}/gsp/ (signature .fwsignature_{})",
        i.firmware_dir, i.gsp_signature_family
    )?;
    Ok(())
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Runs `nvbare info [--device DEV] [--json]`: without a device, every GPU this machine shows.
pub fn run(out: &mut dyn Write, device: Option<DeviceSpec>, json: bool) -> Result<(), CliError> {
    let Some(device) = device else {
        return super::info_all::run(out, &nvbare_pci_host::Sysfs::from_env(), json);
    };
    if json {
        let r = report(device)?;
        return out.write_all(r.to_json()?.as_bytes()).map_err(io);
    }
    match &device {
        DeviceSpec::Sim(cs) => {
            let cs = *cs;
            let (model, gpu) = sim_gpu(cs)?;
            let bar0 = gpu.bar0();
            let chip = chip::identify_mmio(&bar0)?;
            let (id, sub) = sim_ids(&gpu)?;
            let vram_mib = FbSizeSource::for_chip(chip.info).read(&bar0) >> 20;
            writeln!(out, "device    {device} (simulated {})", model.board).map_err(io)?;
            writeln!(
                out,
                "pci       {:04x}:{:04x} subsystem {:04x}:{:04x}",
                id & 0xffff,
                id >> 16,
                sub & 0xffff,
                sub >> 16
            )
            .map_err(io)?;
            writeln!(out, "vram      {vram_mib} MiB").map_err(io)?;
            print_chip(out, &chip).map_err(io)?;
            crate::cmd::device_info::print(out, device)
        }
        DeviceSpec::Nvidia(index) => crate::kmod::info(out, *index),
        DeviceSpec::Vfio(bdf) => {
            let gpu = crate::device::open_vfio(*bdf)?;
            let chip = chip::identify_mmio(gpu.bar0())?;
            print_vfio(out, &gpu).map_err(io)?;
            print_chip(out, &chip).map_err(io)
        }
        DeviceSpec::Remote { host, port, index } => {
            let gpu = crate::device::open_remote(host, *port, *index)?;
            let chip = identify_remote(&device, &gpu)?;
            print_remote(out, &device, &gpu).map_err(io)?;
            print_chip(out, &chip).map_err(io)
        }
    }
}

/// The simulated GPU `info` looks at.
fn sim_gpu(
    cs: nvbare_core::chip::Chipset,
) -> Result<(ChipModel, std::sync::Arc<SimGpu>), CliError> {
    let model = ChipModel::for_chipset(cs)
        .ok_or_else(|| CliError::Usage(format!("the simulator has no {cs} model")))?;
    Ok((model, SimGpu::new(SimConfig::new(model))))
}

/// PCI config dwords 0 (ids) and 0x2c (subsystem) of a simulated GPU.
fn sim_ids(gpu: &std::sync::Arc<SimGpu>) -> Result<(u32, u32), CliError> {
    let pci = gpu.pci();
    let rd = |off| {
        pci.read_config32(off)
            .map_err(|e| CliError::Runtime(e.to_string()))
    };
    Ok((rd(0)?, rd(0x2c)?))
}

fn identify_remote(
    device: &DeviceSpec,
    gpu: &nvbare_pci_host::remote::client::RemoteGpu,
) -> Result<Chip, CliError> {
    chip::identify_mmio(gpu.bar0()).map_err(|e| {
        if gpu.last_error().is_some() {
            crate::baremetal::remote_error(gpu, &format!("{device}: identifying"), e).into()
        } else {
            e.into()
        }
    })
}

/// What `info --device DEV --json` prints.
fn report(device: DeviceSpec) -> Result<InfoReport, CliError> {
    use nvbare_core::hal::Mmio;
    let human = nvbare_pci_host::bind::human;
    match &device {
        DeviceSpec::Sim(cs) => {
            let (model, gpu) = sim_gpu(*cs)?;
            let bar0 = gpu.bar0();
            let chip = chip::identify_mmio(&bar0)?;
            let (id, sub) = sim_ids(&gpu)?;
            let mut r = InfoReport::new(&device, format!("simulated {}", model.board));
            r.set_pci(id, sub);
            r.vram_mib = Some(FbSizeSource::for_chip(chip.info).read(&bar0) >> 20);
            r.chip = Some(ChipFacts::of(&chip));
            r.add_rm_view(device)?;
            Ok(r)
        }
        DeviceSpec::Nvidia(index) => crate::kmod::report(*index),
        DeviceSpec::Vfio(bdf) => {
            let gpu = crate::device::open_vfio(*bdf)?;
            let chip = chip::identify_mmio(gpu.bar0())?;
            let f = gpu.function();
            let mut r = InfoReport::new(&device, f.name().unwrap_or("unknown NVIDIA GPU").into());
            let pci = gpu.pci();
            r.set_pci(
                pci.read_config32(0).unwrap_or(u32::MAX),
                pci.read_config32(0x2c).unwrap_or(u32::MAX),
            );
            r.vram_mib = Some(FbSizeSource::for_chip(chip.info).read(gpu.bar0()) >> 20);
            r.chip = Some(ChipFacts::of(&chip));
            let group = f.iommu_group.map_or("none".into(), |g| g.to_string());
            r.extra.insert("iommu_group", group);
            r.extra.insert("bar0", human(gpu.bar0().size() as u64));
            r.extra.insert("bar1", human(gpu.bar1().size() as u64));
            let dma = if gpu.noiommu() {
                "no-IOMMU"
            } else {
                "IOMMU (type1)"
            };
            r.extra.insert("dma", dma.into());
            Ok(r)
        }
        DeviceSpec::Remote { host, port, index } => {
            let gpu = crate::device::open_remote(host, *port, *index)?;
            let chip = identify_remote(&device, &gpu)?;
            let mut r = InfoReport::new(&device, format!("{:?} on the server", gpu.device().name));
            r.set_pci(
                gpu.pci().read_config32(0).unwrap_or(u32::MAX),
                gpu.pci().read_config32(0x2c).unwrap_or(u32::MAX),
            );
            r.chip = Some(ChipFacts::of(&chip));
            r.extra.insert("bar0", human(gpu.bar0().size() as u64));
            r.extra.insert("bar1", human(gpu.bar1().size() as u64));
            r.extra.insert("server", gpu.addr().to_string());
            Ok(r)
        }
    }
}

/// Prints what the server says about a GPU of a remote PCI server.
fn print_remote(
    out: &mut dyn Write,
    device: &DeviceSpec,
    gpu: &nvbare_pci_host::remote::client::RemoteGpu,
) -> std::io::Result<()> {
    use nvbare_core::hal::Mmio;
    let pci = gpu.pci();
    let id = pci.read_config32(0).unwrap_or(u32::MAX);
    let sub = pci.read_config32(0x2c).unwrap_or(u32::MAX);
    let name = (id & 0xffff == u32::from(nvbare_pci_host::NVIDIA_VENDOR_ID))
        .then(|| nvbare_pci_host::nvidia_device_name((id >> 16) as u16))
        .flatten()
        .unwrap_or("unknown NVIDIA GPU");
    writeln!(
        out,
        "device    {device} ({name}; {:?} on the server, device index {})",
        gpu.device().name,
        gpu.device().dev_id
    )?;
    writeln!(
        out,
        "pci       {:04x}:{:04x} subsystem {:04x}:{:04x}",
        id & 0xffff,
        id >> 16,
        sub & 0xffff,
        sub >> 16
    )?;
    writeln!(
        out,
        "bars      BAR0 {} at {:#x}, BAR1 {} at {:#x} (bus addresses on the server)",
        nvbare_pci_host::bind::human(gpu.bar0().size() as u64),
        gpu.bar0().bus_addr(),
        nvbare_pci_host::bind::human(gpu.bar1().size() as u64),
        gpu.bar1().bus_addr()
    )?;
    writeln!(
        out,
        "dma       the server's host memory (MAP_SYSMEM, contiguous), over TCP to {}",
        gpu.addr()
    )
}

/// Prints what the host knows about a GPU opened through VFIO.
fn print_vfio(out: &mut dyn Write, gpu: &nvbare_pci_host::vfio::VfioGpu) -> std::io::Result<()> {
    use nvbare_core::hal::Mmio;
    let f = gpu.function();
    writeln!(
        out,
        "device    vfio:{} ({})",
        f.bdf,
        f.name().unwrap_or("unknown NVIDIA GPU")
    )?;
    let id = gpu.pci().read_config32(0).unwrap_or(u32::MAX);
    let sub = gpu.pci().read_config32(0x2c).unwrap_or(u32::MAX);
    writeln!(
        out,
        "pci       {:04x}:{:04x} subsystem {:04x}:{:04x}, IOMMU group {}",
        id & 0xffff,
        id >> 16,
        sub & 0xffff,
        sub >> 16,
        f.iommu_group
            .map(|g| g.to_string())
            .unwrap_or_else(|| "none".into())
    )?;
    writeln!(
        out,
        "bars      BAR0 {}, BAR1 {}",
        nvbare_pci_host::bind::human(gpu.bar0().size() as u64),
        nvbare_pci_host::bind::human(gpu.bar1().size() as u64)
    )?;
    let dma = if gpu.noiommu() {
        "physical addresses (VFIO no-IOMMU mode: unsafe)"
    } else {
        "IOMMU (type1), hugepage pool"
    };
    writeln!(out, "dma       {dma}")
}
