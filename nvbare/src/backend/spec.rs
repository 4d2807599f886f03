//! The device-string grammar shared by [`crate::open`] and every CLI subcommand (`--device`).
//!
//! * `sim` or `sim:CHIP`: the built-in simulated GPU (CHIP: ga100, ad102, gh100, gb202; default gh100),
//!   driven bare metal (GSP boot with the real firmware, GSP RPC, our page tables);
//! * `nvidia:N`: GPU N through the nvidia kernel driver (the kernel-driver adapter);
//! * `vfio:DOMAIN:BUS:DEV.FN`: a GPU bound to vfio-pci, driven bare-metal;
//! * `remote:HOST[:PORT[:N]]`: GPU N (default 0) of a server of tinygrad's remote PCI protocol
//!   (`nvbare serve`, tinygrad's `extra/remote/serve.py`) at HOST:PORT (default port 6667),
//!   driven bare metal over TCP; an IPv6 address goes in brackets (`remote:[::1]:6667`).

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use nvbare_core::chip::Chipset;
use nvbare_pci_host::Bdf;
use nvbare_pci_host::remote::client::{CONNECT_TIMEOUT, RemoteGpu, format_addr};
use nvbare_pci_host::remote::wire::DEFAULT_PORT;
use nvbare_sim::ChipModel;

/// A parsed `--device` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The simulated GPU playing this chip, driven bare metal.
    Sim(Chipset),
    /// GPU index N of the nvidia kernel driver (`/dev/nvidiaN`).
    Nvidia(u32),
    /// A GPU bound to vfio-pci.
    Vfio(Bdf),
    /// A GPU of a remote PCI server (tinygrad's protocol), driven bare metal over TCP.
    Remote {
        /// Host name or IP address (an IPv6 address without its brackets).
        host: String,
        /// TCP port.
        port: u16,
        /// Which of the server's NVIDIA GPUs (its position in the server's list).
        index: u32,
    },
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
            DeviceSpec::Remote { host, port, index } => {
                write!(f, "remote:{}:{index}", format_addr(host, *port))
            }
        }
    }
}

/// Why a device string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{problem}\nvalid forms: sim[:CHIP] (CHIP: {chips}; default gh100), nvidia:N (e.g. nvidia:0), vfio:DOMAIN:BUS:DEV.FN (e.g. vfio:0000:01:00.0), remote:HOST[:PORT[:N]] (GPU N, default 0, of a remote PCI server; port 6667 by default; e.g. remote:127.0.0.1:6667, remote:[::1]:6667:1)"
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

/// Whether `h` can be a host name or an IPv4 address (letters, digits, `-`, `.`, `_`).
fn host_name_ok(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// Parses what follows `remote:`: `HOST[:PORT[:N]]`, `[IPV6][:PORT[:N]]`.
fn parse_remote(s: &str) -> Result<DeviceSpec, DeviceSpecError> {
    let brackets = "an IPv6 address goes in brackets: remote:[::1]:6667";
    let (host, rest) = if let Some(r) = s.strip_prefix('[') {
        let Some((h, rest)) = r.split_once(']') else {
            return Err(spec_error(format!(
                "remote:{s}: no closing ']'; {brackets}"
            )));
        };
        if h.parse::<Ipv6Addr>().is_err() {
            return Err(spec_error(format!(
                "remote:{s}: {h:?} is not an IPv6 address (only those go in brackets)"
            )));
        }
        let rest = match rest {
            "" => None,
            r => Some(
                r.strip_prefix(':')
                    .ok_or_else(|| spec_error(format!("remote:{s}: expected ':PORT' after ']'")))?,
            ),
        };
        (h, rest)
    } else {
        match s.split_once(':') {
            Some((h, r)) => (h, Some(r)),
            None => (s, None),
        }
    };
    if !host.contains(':') && !host_name_ok(host) {
        return Err(spec_error(if host.is_empty() {
            format!("remote:{s}: no host given ({brackets})")
        } else {
            format!("remote:{s}: {host:?} is not a host name or an IP address")
        }));
    }
    let (port, index) = match rest {
        None => (DEFAULT_PORT, 0),
        Some(r) => {
            let (p, n) = match r.split_once(':') {
                Some((p, n)) => (p, Some(n)),
                None => (r, None),
            };
            let port = p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                spec_error(if r.contains("::") || n.is_some_and(|n| n.contains(':')) {
                    format!("remote:{s}: {brackets}")
                } else {
                    format!("remote:{s}: {p:?} is not a TCP port (1..65535)")
                })
            })?;
            let index = match n {
                None => 0,
                Some(n) => n.parse::<u32>().map_err(|_| {
                    spec_error(if n.contains(':') {
                        format!("remote:{s}: {brackets}")
                    } else {
                        format!("remote:{s}: {n:?} is not a GPU index")
                    })
                })?,
            };
            (port, index)
        }
    };
    Ok(DeviceSpec::Remote {
        host: host.to_string(),
        port,
        index,
    })
}

impl DeviceSpec {
    /// Whether this device is driven bare metal by nvbare (GSP boot, RPC, page tables):
    /// `sim:`, `vfio:` and `remote:`.
    pub fn is_bare_metal(&self) -> bool {
        matches!(
            self,
            DeviceSpec::Sim(_) | DeviceSpec::Vfio(_) | DeviceSpec::Remote { .. }
        )
    }

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
            ("remote", Some(addr)) => parse_remote(addr),
            _ => Err(spec_error(format!("unknown device {s:?}"))),
        }
    }
}

/// Opens a GPU bound to vfio-pci for the bare-metal path: sysfs from `NVBARE_SYSFS_ROOT` (or
/// `/sys`), VFIO's no-IOMMU mode only with `NVBARE_VFIO_NOIOMMU=1`. Every `vfio:BDF` device
/// (the library's and the CLI's) is opened here.
pub fn open_vfio(bdf: Bdf) -> Result<nvbare_pci_host::vfio::VfioGpu, super::BackendError> {
    let sysfs = nvbare_pci_host::Sysfs::from_env();
    let opts = nvbare_pci_host::vfio::OpenOptions::from_env();
    Ok(nvbare_pci_host::vfio::VfioGpu::open_with(
        &sysfs, bdf, &opts,
    )?)
}

/// Connects to a remote PCI server and opens its GPU `index` (connect timeout
/// [`CONNECT_TIMEOUT`], 3 s). Every `remote:` device (the library's and the CLI's) is
/// opened here.
pub fn open_remote(host: &str, port: u16, index: u32) -> Result<RemoteGpu, super::BackendError> {
    Ok(RemoteGpu::connect(host, port, index, CONNECT_TIMEOUT)?)
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
        let remote = |host: &str, port, index| DeviceSpec::Remote {
            host: host.into(),
            port,
            index,
        };
        for (s, want, shown) in [
            (
                "remote:127.0.0.1:6667",
                remote("127.0.0.1", 6667, 0),
                "remote:127.0.0.1:6667:0",
            ),
            (
                "remote:gpu-box",
                remote("gpu-box", 6667, 0),
                "remote:gpu-box:6667:0",
            ),
            (
                "remote:gpu-box.lan:7000:2",
                remote("gpu-box.lan", 7000, 2),
                "remote:gpu-box.lan:7000:2",
            ),
            (
                "remote:[::1]",
                remote("::1", 6667, 0),
                "remote:[::1]:6667:0",
            ),
            (
                "remote:[fe80::1]:6000:3",
                remote("fe80::1", 6000, 3),
                "remote:[fe80::1]:6000:3",
            ),
        ] {
            let d = s.parse::<DeviceSpec>().unwrap();
            assert_eq!(d, want, "{s}");
            assert_eq!(d.to_string(), shown);
            assert_eq!(shown.parse::<DeviceSpec>().unwrap(), want, "{shown}");
            assert!(d.is_bare_metal());
        }
        assert!(!DeviceSpec::Nvidia(0).is_bare_metal());
    }

    #[test]
    fn rejects_bad_remote_forms_saying_why() {
        for (bad, why) in [
            ("remote", "unknown device"),
            ("remote:", "no host given"),
            ("remote::6667", "no host given"),
            ("remote:::1", "brackets"),
            ("remote:fe80::1:6667", "brackets"),
            ("remote:h:0", "not a TCP port"),
            ("remote:h:70000", "not a TCP port"),
            ("remote:h:port", "not a TCP port"),
            ("remote:h:", "not a TCP port"),
            ("remote:h:6667:", "not a GPU index"),
            ("remote:h:6667:-1", "not a GPU index"),
            ("remote:h:6667:1:2", "brackets"),
            ("remote:[::1", "no closing"),
            ("remote:[gpu-box]:6667", "not an IPv6 address"),
            ("remote:[::1]6667", "expected ':PORT'"),
            ("remote:gpu box", "not a host name"),
            ("remote:h/x:1", "not a host name"),
        ] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains("valid forms"), "{bad}: {e}");
            assert!(e.contains("remote:HOST[:PORT[:N]]"), "{bad}: {e}");
        }
    }

    #[test]
    fn remote_with_nothing_listening_names_the_address_in_time() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t = std::time::Instant::now();
        let e = open_remote("127.0.0.1", port, 0).unwrap_err().to_string();
        assert!(t.elapsed() < CONNECT_TIMEOUT + std::time::Duration::from_secs(1));
        assert!(
            e.contains(&format!("cannot connect to 127.0.0.1:{port} within 3 s")),
            "{e}"
        );
        assert!(e.contains("nvbare serve"), "{e}");
    }

    #[test]
    fn rejects_with_the_valid_forms() {
        for bad in [
            "",
            "gpu0",
            "sim:",
            "sim:tu106",
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
