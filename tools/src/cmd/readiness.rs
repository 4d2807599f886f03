//! Whether a GPU that sysfs shows is ready for nvbare's bare-metal path (`--device vfio:BDF`),
//! and what to do when it is not: `nvbare list` prints it, `nvbare list --json` carries it.
//!
//! Everything here comes from files (sysfs, `/dev/vfio`, the firmware directory): nothing opens
//! the GPU, so `list` stays safe to run while another program drives it.

use std::path::{Path, PathBuf};

use nvbare::backend::firmware::FirmwareSource;
use nvbare_core::chip::Chipset;
use nvbare_pci_host::bind::{VFIO_PCI, human};
use nvbare_pci_host::{PciFunction, Sysfs};
use serde::Serialize;

/// The environment variable that replaces `/dev` (as for the nvidia adapter's device nodes).
pub const DEV_ROOT_ENV: &str = "NVBARE_DEV_ROOT";

/// The directory standing for `/dev`: `$NVBARE_DEV_ROOT` when set, so tests can fake
/// `/dev/vfio/GROUP`.
pub fn dev_root() -> PathBuf {
    match std::env::var_os(DEV_ROOT_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/dev"),
    }
}

/// Which kind of driver holds the GPU, as far as nvbare cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverKind {
    /// vfio-pci: what `--device vfio:BDF` needs.
    VfioPci,
    /// nvidia.ko: usable as `--device nvidia:N`, or to be moved with `nvbare bind`.
    Nvidia,
    /// No driver bound.
    None,
    /// Anything else (nouveau, pci-stub, ...).
    Other,
}

impl DriverKind {
    /// Classifies a sysfs driver name.
    pub fn of(driver: Option<&str>) -> DriverKind {
        match driver {
            Some(VFIO_PCI) => DriverKind::VfioPci,
            Some("nvidia") => DriverKind::Nvidia,
            None => DriverKind::None,
            Some(_) => DriverKind::Other,
        }
    }
}

/// How BAR1 compares with VRAM (bare metal reaches VRAM through BAR1, and hands out only the
/// VRAM below its end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bar1Verdict {
    /// BAR1 is at least as large as VRAM.
    Covers,
    /// BAR1 is absent, below the minimum, or smaller than VRAM while the GPU offers a larger
    /// size (a rebind resizes it).
    TooSmall,
    /// BAR1 is smaller than VRAM and cannot grow (Turing has no Resizable BAR): bare metal
    /// works, with device memory limited to what BAR1 covers.
    Limits,
    /// VRAM is not known from sysfs; nvbare checks when it opens the GPU.
    Unknown,
}

/// One GPU's readiness for `--device vfio:BDF` (the `readiness` object of `list --json`).
#[derive(Debug, Clone, Serialize)]
pub struct Readiness {
    /// Every check passed (unknown BAR1 coverage does not count against it).
    pub ready: bool,
    /// The device string to pass once ready (`vfio:BDF`), or the kernel-driver one.
    pub device: String,
    /// The driver's kind.
    pub driver: DriverKind,
    /// The driver's name, if one is bound.
    pub driver_name: Option<String>,
    /// IOMMU group (none: the IOMMU is off).
    pub iommu_group: Option<u32>,
    /// `/dev/vfio/GROUP`, when there is a group.
    pub vfio_node: Option<PathBuf>,
    /// Whether that node exists (vfio-pci creates it when it takes the group).
    pub vfio_node_exists: bool,
    /// The BAR register of the VRAM window: 1 on bare hardware; 2 where a hypervisor made
    /// BAR0 64-bit (seen on an H200 VM), which nvbare's VFIO path does not map yet.
    pub bar1_index: Option<u8>,
    /// BAR1 (the VRAM window) size in bytes, if it has one.
    pub bar1_bytes: Option<u64>,
    /// The largest BAR1 the GPU offers (`resource1_resize`), when the kernel can resize it.
    pub bar1_max_bytes: Option<u64>,
    /// VRAM bytes, at most: the model's memory size, when this model is known.
    pub vram_bytes: Option<u64>,
    /// BAR1 against VRAM.
    pub bar1: Bar1Verdict,
    /// The chip, from the PCI device id's block (decides the firmware directory).
    pub chip: Option<String>,
    /// Whether the GSP firmware that chip boots with is in the firmware directory.
    pub firmware_present: Option<bool>,
    /// The firmware directory looked in.
    pub firmware_dir: PathBuf,
    /// What to do, in order, to make it ready (empty when ready).
    pub advice: Vec<String>,
}

/// PCI device id blocks of each chip (NVIDIA numbers each chip's boards within one block).
const CHIP_BLOCKS: &[(u16, u16, Chipset)] = &[
    (0x1e00, 0x1e7f, Chipset::TU102),
    (0x1e80, 0x1eff, Chipset::TU104),
    (0x1f00, 0x1f7f, Chipset::TU106),
    (0x1f80, 0x1fff, Chipset::TU117),
    (0x2080, 0x20ff, Chipset::GA100),
    (0x2180, 0x21ff, Chipset::TU116),
    (0x2200, 0x227f, Chipset::GA102),
    (0x2300, 0x237f, Chipset::GH100),
    (0x2400, 0x247f, Chipset::GA103),
    (0x2480, 0x24ff, Chipset::GA104),
    (0x2500, 0x257f, Chipset::GA106),
    (0x2580, 0x25ff, Chipset::GA107),
    (0x2680, 0x26ff, Chipset::AD102),
    (0x2700, 0x277f, Chipset::AD103),
    (0x2780, 0x27ff, Chipset::AD104),
    (0x2800, 0x287f, Chipset::AD106),
    (0x2880, 0x28ff, Chipset::AD107),
    (0x2900, 0x297f, Chipset::GB100),
    (0x2b80, 0x2bff, Chipset::GB202),
    (0x2c00, 0x2c7f, Chipset::GB203),
    (0x2d00, 0x2d7f, Chipset::GB206),
    (0x2d80, 0x2dff, Chipset::GB207),
    (0x2f00, 0x2f7f, Chipset::GB205),
];

/// The chip of an NVIDIA PCI device id, when its block is known.
pub fn chip_of_device_id(device: u16) -> Option<Chipset> {
    CHIP_BLOCKS
        .iter()
        .find(|(lo, hi, _)| (*lo..=*hi).contains(&device))
        .map(|(_, _, c)| *c)
}

/// Memory of common boards, in GiB rounded up (an upper bound on what GSP-RM reports), so that
/// `list` can compare BAR1 with VRAM without opening the GPU.
const VRAM_GIB: &[(u16, u64)] = &[
    (0x1e07, 11),  // RTX 2080 Ti
    (0x1eb8, 16),  // T4
    (0x20b0, 40),  // A100 SXM4 40 GB
    (0x20b2, 80),  // A100 SXM4 80 GB
    (0x20b5, 80),  // A100 PCIe 80 GB
    (0x2204, 24),  // RTX 3090
    (0x2330, 80),  // H100 SXM5
    (0x2331, 80),  // H100 PCIe
    (0x2335, 141), // H200 (143771 MiB measured, docs/hardware.md)
    (0x2684, 24),  // RTX 4090
    (0x26b9, 48),  // L40S
    (0x27b8, 24),  // L4
    (0x2b85, 32),  // RTX 5090
];

/// The memory of a board by PCI device id (an upper bound), when the model is in the table.
pub fn vram_of_device_id(device: u16) -> Option<u64> {
    VRAM_GIB
        .iter()
        .find(|(id, _)| *id == device)
        .map(|(_, g)| g << 30)
}

/// Where to look, for [`assess`].
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The sysfs tree.
    pub sysfs: &'a Sysfs,
    /// The directory standing for `/dev`.
    pub dev: &'a Path,
    /// The firmware directory.
    pub firmware: &'a FirmwareSource,
}

fn bar1_verdict(bar1: Option<u64>, vram: Option<u64>, max: Option<u64>) -> Bar1Verdict {
    let min = nvbare_core::device::baremetal::MIN_BAR1;
    match (bar1, vram) {
        (None, _) => Bar1Verdict::TooSmall,
        (Some(b), _) if b < min => Bar1Verdict::TooSmall,
        (Some(b), Some(v)) if b >= v => Bar1Verdict::Covers,
        // The GPU offers a larger BAR1 than it has: a rebind resizes it.
        (Some(b), _) if max.is_some_and(|m| b < m) => Bar1Verdict::TooSmall,
        (Some(_), Some(_)) => Bar1Verdict::Limits,
        // Every chip nvbare drives has more than 256 MiB of VRAM.
        (Some(b), None) if b <= 256 << 20 => Bar1Verdict::Limits,
        (Some(_), None) => Bar1Verdict::Unknown,
    }
}

fn bar1_advice(r: &Readiness, bdf: &str) -> String {
    let size = r.bar1_bytes.map_or("absent".to_string(), human);
    let vram = match r.vram_bytes {
        Some(v) => format!("VRAM ({} for this model)", human(v)),
        None => "VRAM".to_string(),
    };
    let enough = |m: u64| r.vram_bytes.is_none_or(|v| m >= v);
    match r.bar1_max_bytes {
        Some(m) if r.bar1_bytes.is_none_or(|b| b < m) && enough(m) => {
            let how = if r.driver == DriverKind::VfioPci {
                format!("run `nvbare unbind {bdf}` then `nvbare bind {bdf}`")
            } else {
                format!("run `nvbare bind {bdf}`")
            };
            format!(
                "BAR1 is {size}, smaller than {vram}: {how}, which resizes it to {} (resizable \
                 BAR)",
                human(m)
            )
        }
        Some(m) => format!(
            "BAR1 is {size}, smaller than {vram}, and the largest size the GPU offers ({}) is \
             too: nvbare cannot drive it bare metal; use it through nvidia.ko (--device \
             nvidia:N)",
            human(m)
        ),
        None => format!(
            "BAR1 is {size}, smaller than {vram}, and the kernel offers no resize: resizable BAR \
             is needed (enable Above 4G Decoding and Resizable BAR in the firmware setup; Linux \
             6.1 or later), or use the GPU through nvidia.ko (--device nvidia:N)"
        ),
    }
}

/// What `f` (a GPU) lacks for `--device vfio:BDF`. `nvidia_index` is its `nvidia:N`, when the
/// kernel driver has it.
pub fn assess(ctx: &Context<'_>, f: &PciFunction, nvidia_index: Option<u32>) -> Readiness {
    let bdf = f.bdf.to_string();
    let driver = DriverKind::of(f.driver.as_deref());
    let vfio_node = f
        .iommu_group
        .map(|g| ctx.dev.join("vfio").join(g.to_string()));
    let vfio_node_exists = vfio_node.as_deref().is_some_and(Path::exists);
    // The VRAM window is the first memory BAR after BAR0 (sysfs lists a 64-bit BAR once).
    let window = f.bars.iter().find(|b| b.index > 0);
    let bar1_index = window.map(|b| b.index);
    let bar1_bytes = window.map(|b| b.size);
    // A resize bitmap the kernel cannot give (absent, unreadable) just means "no resize".
    let bar1_max_bytes = ctx
        .sysfs
        .resize_sizes(f.bdf, bar1_index.unwrap_or(1))
        .ok()
        .flatten()
        .filter(|m| *m != 0)
        .map(|m| (1u64 << 20) << (63 - m.leading_zeros()).min(43));
    let vram_bytes = vram_of_device_id(f.device);
    let chip = chip_of_device_id(f.device);
    let missing_fw = chip.map(|c| ctx.firmware.missing(c));
    let mut r = Readiness {
        ready: false,
        device: match (driver, nvidia_index) {
            (DriverKind::Nvidia, Some(n)) => format!("nvidia:{n}"),
            _ => format!("vfio:{bdf}"),
        },
        driver,
        driver_name: f.driver.clone(),
        iommu_group: f.iommu_group,
        vfio_node,
        vfio_node_exists,
        bar1_index,
        bar1_bytes,
        bar1_max_bytes,
        vram_bytes,
        bar1: bar1_verdict(bar1_bytes, vram_bytes, bar1_max_bytes),
        chip: chip.map(|c| c.name().to_string()),
        firmware_present: missing_fw.as_ref().map(Option::is_none),
        firmware_dir: ctx.firmware.dir.clone(),
        advice: Vec::new(),
    };
    let mut advice = Vec::new();
    if f.iommu_group.is_none() {
        advice.push(
            "no IOMMU group: the IOMMU is off; enable VT-d / AMD-Vi in the firmware setup and \
             boot with `intel_iommu=on iommu=pt` (or `amd_iommu=on iommu=pt`), see docs/vfio.md"
                .to_string(),
        );
    }
    match driver {
        DriverKind::VfioPci => {}
        DriverKind::Nvidia => advice.push(format!(
            "on nvidia.ko: run `nvbare bind {bdf}` to move it to vfio-pci (or use it through \
             the kernel driver: {})",
            nvidia_index.map_or("`nvbare info` shows its nvidia:N".to_string(), |n| format!(
                "--device nvidia:{n}"
            ))
        )),
        DriverKind::None | DriverKind::Other => advice.push(format!(
            "driver {}: run `nvbare bind {bdf}` to give it to vfio-pci",
            f.driver.as_deref().unwrap_or("none")
        )),
    }
    if let (DriverKind::VfioPci, false, Some(p)) = (driver, vfio_node_exists, &r.vfio_node) {
        advice.push(format!(
            "{} does not exist: is vfio-pci loaded (`modprobe vfio-pci`)? then run `nvbare bind \
             {bdf}` again",
            p.display()
        ));
    }
    if let Some(i) = bar1_index.filter(|i| *i != 1) {
        advice.push(format!(
            "the VRAM window is BAR{i}, not BAR1 (BAR0 is 64-bit here, as some hypervisors \
             present it): nvbare's VFIO path maps BAR1 and cannot drive this layout yet; use \
             --device nvidia:N"
        ));
    }
    if r.bar1 == Bar1Verdict::TooSmall {
        advice.push(bar1_advice(&r, &bdf));
    }
    match (chip, &missing_fw) {
        (Some(c), Some(Some(_))) => advice.push(format!(
            "GSP firmware for {c} is not in {}: run `nvbare fw fetch` (or `bash \
             tools/fetch-firmware.sh`)",
            ctx.firmware.dir.display()
        )),
        (None, _) => advice.push(
            "chip not known from the PCI device id: make sure the firmware is fetched (`nvbare \
             fw fetch`); `nvbare info --device vfio:BDF` identifies it once bound"
                .to_string(),
        ),
        _ => {}
    }
    if let Some(c) = chip
        && !nvbare_core::gsp::boot::BARE_METAL_CHIPS.contains(&c)
    {
        let supported: Vec<&str> = nvbare_core::gsp::boot::BARE_METAL_CHIPS
            .iter()
            .map(|c| c.name())
            .collect();
        advice.push(format!(
            "{c} is not yet supported for bare metal (nvbare boots {}): use it through the              nvidia driver, --device nvidia:N",
            supported.join(", ")
        ));
    }
    r.ready = advice.is_empty();
    r.advice = advice;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_map_to_chips_and_memory() {
        assert_eq!(chip_of_device_id(0x2335), Some(Chipset::GH100));
        assert_eq!(chip_of_device_id(0x2684), Some(Chipset::AD102));
        assert_eq!(chip_of_device_id(0x2b85), Some(Chipset::GB202));
        assert_eq!(chip_of_device_id(0xfff0), None);
        assert_eq!(vram_of_device_id(0x2684), Some(24 << 30));
        assert_eq!(vram_of_device_id(0xfff0), None);
        assert!(CHIP_BLOCKS.windows(2).all(|w| w[0].1 < w[1].0));
    }

    #[test]
    fn bar1_verdicts() {
        use Bar1Verdict::*;
        let g = 1u64 << 30;
        assert_eq!(bar1_verdict(Some(32 * g), Some(24 * g), None), Covers);
        assert_eq!(bar1_verdict(Some(256 << 20), Some(24 * g), None), Limits);
        assert_eq!(
            bar1_verdict(Some(256 << 20), Some(24 * g), Some(32 * g)),
            TooSmall
        );
        assert_eq!(bar1_verdict(Some(256 << 20), None, None), Limits);
        assert_eq!(bar1_verdict(Some(32 << 20), Some(24 * g), None), TooSmall);
        assert_eq!(bar1_verdict(Some(8 * g), None, Some(32 * g)), TooSmall);
        assert_eq!(bar1_verdict(Some(32 * g), None, Some(32 * g)), Unknown);
        assert_eq!(bar1_verdict(None, None, None), TooSmall);
    }
}
