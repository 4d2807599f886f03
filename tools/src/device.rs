//! The device-string grammar shared by every subcommand (`--device`).
//!
//! * `sim` or `sim:CHIP`: the built-in simulated GPU (CHIP: ad102, gh100, gb202; default gh100),
//!   driven bare metal (GSP boot with the real firmware, GSP RPC, our page tables);
//! * `nvidia:N`: GPU N through the nvidia kernel driver (the kernel-driver adapter);
//! * `vfio:DOMAIN:BUS:DEV.FN`: a GPU bound to vfio-pci, driven bare-metal.

use std::fmt;
use std::str::FromStr;

use nvbare_core::chip::Chipset;
use nvbare_pci_host::Bdf;
use nvbare_sim::ChipModel;

/// A parsed `--device` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The simulated GPU playing this chip, driven bare metal.
    Sim(Chipset),
    /// GPU index N of the nvidia kernel driver (`/dev/nvidiaN`).
    Nvidia(u32),
    /// A GPU bound to vfio-pci.
    Vfio(Bdf),
}

impl Default for DeviceSpec {
    fn default() -> Self {
        DeviceSpec::Sim(Chipset::GH100)
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Sim(c) => write!(f, "sim:{}", c.name().to_ascii_lowercase()),
            DeviceSpec::Nvidia(n) => write!(f, "nvidia:{n}"),
            DeviceSpec::Vfio(b) => write!(f, "vfio:{b}"),
        }
    }
}

/// Why a device string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{problem}\nvalid forms: sim[:CHIP] (CHIP: {chips}; default gh100), nvidia:N (e.g. nvidia:0), vfio:DOMAIN:BUS:DEV.FN (e.g. vfio:0000:01:00.0)"
)]
pub struct DeviceSpecError {
    problem: String,
    chips: String,
}

fn spec_error(problem: String) -> DeviceSpecError {
    let chips: Vec<String> = ChipModel::names().map(|n| n.to_ascii_lowercase()).collect();
    DeviceSpecError {
        problem,
        chips: chips.join(", "),
    }
}

fn sim_chip(chip: &str) -> Result<Chipset, DeviceSpecError> {
    Chipset::from_name(chip)
        .filter(|cs| ChipModel::for_chipset(*cs).is_some())
        .ok_or_else(|| spec_error(format!("the simulator has no chip {chip:?}")))
}

impl DeviceSpec {
    /// The simulated chip, for `sim:` devices.
    pub fn sim_chip(&self) -> Option<Chipset> {
        match self {
            DeviceSpec::Sim(c) => Some(*c),
            _ => None,
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = DeviceSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind, arg) {
            ("sim", None) => Ok(DeviceSpec::default()),
            ("sim", Some(chip)) => sim_chip(chip).map(DeviceSpec::Sim),
            ("sim-rm", _) => Err(spec_error(
                "sim-rm is gone: the RM-level simulator is for unit tests only \
                 (nvbare_sim::backend::SimBackend); `sim:CHIP` is the simulated GPU, driven bare \
                 metal"
                    .into(),
            )),
            ("nvidia", Some(n)) => n
                .parse::<u32>()
                .map(DeviceSpec::Nvidia)
                .map_err(|_| spec_error(format!("{n:?} is not a GPU index"))),
            ("vfio", Some(bdf)) => bdf
                .parse::<Bdf>()
                .map(DeviceSpec::Vfio)
                .map_err(|e| spec_error(e.to_string())),
            _ => Err(spec_error(format!("unknown device {s:?}"))),
        }
    }
}

/// Opens a GPU bound to vfio-pci for the bare-metal path: sysfs from `NVBARE_SYSFS_ROOT` (or
/// `/sys`), VFIO's no-IOMMU mode only with `NVBARE_VFIO_NOIOMMU=1`. Every command that takes
/// `--device vfio:BDF` goes through here.
pub fn open_vfio(bdf: Bdf) -> Result<nvbare_pci_host::vfio::VfioGpu, crate::CliError> {
    let sysfs = nvbare_pci_host::Sysfs::from_env();
    let opts = nvbare_pci_host::vfio::OpenOptions::from_env();
    Ok(nvbare_pci_host::vfio::VfioGpu::open_with(
        &sysfs, bdf, &opts,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            "sim".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Sim(Chipset::GH100)
        );
        assert_eq!(
            "sim:AD102".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Sim(Chipset::AD102)
        );
        assert_eq!(
            "sim:gb202".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Sim(Chipset::GB202)
        );
        assert_eq!(
            "nvidia:3".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Nvidia(3)
        );
        assert_eq!(
            "vfio:0000:01:00.0"
                .parse::<DeviceSpec>()
                .unwrap()
                .to_string(),
            "vfio:0000:01:00.0"
        );
    }

    #[test]
    fn rejects_with_the_valid_forms() {
        for bad in [
            "",
            "gpu0",
            "sim:",
            "sim:tu102",
            "sim:xyz",
            "sim-rm",
            "sim-rm:gh100",
            "nvidia",
            "nvidia:x",
            "vfio:1",
        ] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains("valid forms"), "{bad}: {e}");
        }
    }
}
