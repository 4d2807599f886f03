//! Peers on bare metal: another GPU's video memory through its BAR1 (PCIe BAR1 P2P), and its
//! host memory when both GPUs share one DMA address space.
//!
//! ```text
//! GPU A's PTE:  SYS_NONCOHERENT, address = (B's BAR1 as A's DMA sees it) + (B's VRAM address)
//!               └─ A's DMA ─> IOMMU (the group's shared domain) ─> B's BAR1 (physical mode) ─> B's VRAM
//! ```
//!
//! This is RM's Hopper BAR1 P2P (`dmaAllocBar1P2PMapping_GH100`: "a normal SYSMEM mapping from
//! source GPU VA to the target GPU BAR1 region") and tinygrad's PCI path (`BAR1 base +
//! paddr`); the bare-metal backend keeps BAR1 in physical mode over the whole framebuffer, so
//! every VRAM address of the peer has a BAR1 address ([`crate::mm::PeerBar1Window`]).
//!
//! The core cannot see IOMMU domains or where a BAR landed on the bus: the embedder says so
//! with a [`PeerPlatform`] per GPU ([`super::BareMetalOptions::peer`]): the DMA address space
//! the GPU's DMA uses (a VFIO container, one simulated host) and the bus address at which its
//! BAR1 is visible to the other GPUs' DMA in that space. Two GPUs are peers when they share the
//! DMA address space, are of the same chip (RM's `areGpusP2PCompatible`) and the peer's BAR1
//! is reachable; anything else is [`BackendError::PeerUnsupported`] naming why. Nothing falls
//! back to host memory here.

use alloc::string::String;

use super::{BareMetalBackend, BarePlatform};
use crate::device::{BackendError, GpuMemory, Location, PeerMapping, PeerPathInfo};
use crate::mm::{PAGE_4K, PeerBar1Window, PteAttrs};

/// Where a bare-metal GPU sits among the host's GPUs, as the host layer knows it (the core
/// cannot see IOMMU domains or bus addresses). Filled by whoever opens GPUs as a peer group
/// (a shared VFIO container, a simulated host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPlatform {
    /// The DMA address space the GPU's DMA goes through (an IOMMU domain / VFIO container, a
    /// simulated host). GPUs with the same value reach the same host memory at the same bus
    /// addresses, so a DMA buffer of one is valid for the other.
    pub dma_space: u64,
    /// The bus address in that space at which this GPU's BAR1 is visible to the other GPUs'
    /// DMA, or why it is not (no P2P path, BAR not mapped into the IOMMU, ...).
    pub bar1: Result<u64, String>,
    /// The link, in words, for [`PeerPathInfo::link`] (e.g. `PCIe BAR1 P2P`).
    pub link: String,
}

/// What one backend needs of the other to decide about a peer.
pub(crate) struct PeerView<'a> {
    pub label: &'a str,
    pub chip: &'static crate::chip::ChipInfo,
    pub platform: Option<&'a PeerPlatform>,
    /// BAR1 bytes (the part of VRAM the peer's BAR1 shows, from VRAM address 0).
    pub bar1_size: u64,
}

/// The device part of a backend label (`vfio:0000:01:00.0 (H200, bare metal)` ->
/// `vfio:0000:01:00.0`): a peer error names both GPUs several times, and the device layer's
/// message around it already gives each full label once.
fn short_label(label: &str) -> &str {
    label.split_once(" (").map_or(label, |(spec, _)| spec)
}

fn unsupported(reason: String) -> BackendError {
    BackendError::PeerUnsupported { reason }
}

/// The DMA address space both GPUs share, or why they share none.
fn shared_space(me: &PeerView<'_>, peer: &PeerView<'_>) -> Result<u64, BackendError> {
    let alone = |who: &PeerView<'_>| {
        unsupported(alloc::format!(
            "{} was opened on its own: bare-metal GPUs reach each other only when opened \
             together as one peer group (one IOMMU domain: a shared VFIO container with each \
             GPU's BAR1 mapped for the others' DMA)",
            who.label
        ))
    };
    let a = me.platform.ok_or_else(|| alone(me))?;
    let b = peer.platform.ok_or_else(|| alone(peer))?;
    if a.dma_space != b.dma_space {
        return Err(unsupported(alloc::format!(
            "{} and {} use different DMA address spaces (IOMMU domains {:#x} and {:#x}): neither \
             reaches the other's BAR1 or host memory; open them together as one peer group",
            me.label,
            peer.label,
            a.dma_space,
            b.dma_space
        )));
    }
    Ok(a.dma_space)
}

/// The window through which `me` reaches `peer`'s VRAM, or why there is none.
pub(crate) fn bar1_window(
    me: &PeerView<'_>,
    peer: &PeerView<'_>,
) -> Result<(PeerBar1Window, String), BackendError> {
    if me.chip.chipset != peer.chip.chipset {
        return Err(unsupported(alloc::format!(
            "{} is a {} and {} a {}: RM allows P2P only between GPUs of the same architecture \
             and implementation (areGpusP2PCompatible)",
            me.label,
            me.chip.name,
            peer.label,
            peer.chip.name
        )));
    }
    shared_space(me, peer)?;
    let (Some(mine), Some(theirs)) = (me.platform, peer.platform) else {
        return Err(unsupported("no peer platform".into()));
    };
    let bus = theirs.bar1.clone().map_err(|why| {
        unsupported(alloc::format!(
            "{}'s BAR1 is not reachable from {}: {why}",
            peer.label,
            me.label
        ))
    })?;
    if mine.bar1.as_ref().ok() == Some(&bus) {
        return Err(unsupported(alloc::format!(
            "{} and {} have their BAR1 at the same bus address {bus:#x}: they are the same GPU",
            me.label,
            peer.label
        )));
    }
    let size = peer.bar1_size & !(PAGE_4K - 1);
    let w = PeerBar1Window::new(bus, size, 0).map_err(|e| {
        unsupported(alloc::format!(
            "{}'s BAR1 ({size:#x} bytes at bus address {bus:#x}) is no usable window: {e}",
            peer.label
        ))
    })?;
    Ok((w, theirs.link.clone()))
}

impl<H: BarePlatform> BareMetalBackend<H> {
    pub(crate) fn peer_view(&self) -> PeerView<'_> {
        PeerView {
            label: short_label(&self.label),
            chip: self.rm.chip,
            platform: self.peer.as_ref(),
            bar1_size: self.rm.mm.bar1_size(),
        }
    }

    /// The peer platform the embedder gave (see [`PeerPlatform`]).
    pub fn peer_platform(&self) -> Option<&PeerPlatform> {
        self.peer.as_ref()
    }

    pub(crate) fn peer_enable(&mut self, peer: &Self) -> Result<PeerPathInfo, BackendError> {
        let (w, link) = bar1_window(&self.peer_view(), &peer.peer_view())?;
        if !self.peers_enabled.contains(&w.bus_base()) {
            self.peers_enabled.push(w.bus_base());
        }
        Ok(PeerPathInfo {
            link: alloc::format!("{link}, peer BAR1 at bus address {:#x}", w.bus_base()),
            peer_id: None,
        })
    }

    pub(crate) fn peer_map(
        &mut self,
        peer: &Self,
        mem: &<Self as crate::device::Backend>::Memory,
    ) -> Result<PeerMapping, BackendError> {
        let phys = mem.phys().ok_or(BackendError::Unsupported(
            "mapping peer memory without a physical address",
        ))?;
        let (addr, attrs) = match phys.location {
            Location::Host => {
                shared_space(&self.peer_view(), &peer.peer_view())?;
                (phys.base, PteAttrs::sysmem())
            }
            Location::Device => {
                let (w, _) = bar1_window(&self.peer_view(), &peer.peer_view())?;
                if !self.peers_enabled.contains(&w.bus_base()) {
                    return Err(unsupported(alloc::format!(
                        "peer access from {} to {} is not enabled: call enable_peer first",
                        short_label(&self.label),
                        short_label(&peer.label)
                    )));
                }
                let bus = w.bus_address(phys.base, phys.size).map_err(|e| {
                    unsupported(alloc::format!(
                        "{}'s memory at {:#x}+{:#x} is outside its BAR1: {e}",
                        short_label(&peer.label),
                        phys.base,
                        phys.size
                    ))
                })?;
                (bus, w.attrs())
            }
        };
        let va = self
            .rm
            .mm
            .map_foreign(addr, phys.size, &attrs)
            .map_err(BackendError::from)?;
        Ok(PeerMapping {
            va,
            size: phys.size,
            location: phys.location,
            token: va,
        })
    }

    pub(crate) fn peer_unmap(&mut self, mapping: PeerMapping) -> Result<(), BackendError> {
        Ok(self.rm.mm.unmap_foreign(mapping.token)?)
    }

    /// The BAR1 bus addresses of the peers access is enabled to.
    pub fn peers_enabled(&self) -> &[u64] {
        &self.peers_enabled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chip::Chipset;

    fn platform(space: u64, bar1: Result<u64, &str>) -> PeerPlatform {
        PeerPlatform {
            dma_space: space,
            bar1: bar1.map_err(String::from),
            link: "PCIe BAR1 P2P".into(),
        }
    }

    fn view<'a>(label: &'a str, chip: Chipset, p: Option<&'a PeerPlatform>) -> PeerView<'a> {
        PeerView {
            label,
            chip: chip.info(),
            platform: p,
            bar1_size: 1 << 30,
        }
    }

    #[test]
    fn peer_errors_name_gpus_by_their_device_spec() {
        assert_eq!(
            short_label("sim:gh100#1 (simulated H200, GPU 1 of 2, bare metal)"),
            "sim:gh100#1"
        );
        assert_eq!(
            short_label("vfio:0000:01:00.0 (H200, bare metal)"),
            "vfio:0000:01:00.0"
        );
        assert_eq!(short_label("bare metal"), "bare metal");
        assert_eq!(short_label(""), "");
    }

    fn reason(e: BackendError) -> String {
        match e {
            BackendError::PeerUnsupported { reason } => reason,
            other => panic!("not PeerUnsupported: {other}"),
        }
    }

    #[test]
    fn peers_need_one_dma_space_a_reachable_bar1_and_the_same_chip() {
        let (pa, pb) = (
            platform(7, Ok(0x1000_0000_0000)),
            platform(7, Ok(0x2000_0000_0000)),
        );
        let (a, b) = (
            view("A", Chipset::GH100, Some(&pa)),
            view("B", Chipset::GH100, Some(&pb)),
        );
        let (w, link) = bar1_window(&a, &b).unwrap();
        assert_eq!(w.bus_base(), 0x2000_0000_0000);
        assert_eq!(w.size(), 1 << 30);
        assert_eq!(
            w.bus_address(0x4000_0000 - 0x1000, 0x1000),
            Ok(0x2000_3fff_f000)
        );
        assert_eq!(link, "PCIe BAR1 P2P");
        assert_eq!(bar1_window(&b, &a).unwrap().0.bus_base(), 0x1000_0000_0000);

        let r = reason(bar1_window(&a, &view("C", Chipset::AD102, Some(&pb))).unwrap_err());
        assert!(r.contains("same architecture"), "{r}");
        let r = reason(bar1_window(&a, &view("B", Chipset::GH100, None)).unwrap_err());
        assert!(r.contains("B was opened on its own"), "{r}");
        let other = platform(8, Ok(0x2000_0000_0000));
        let r = reason(bar1_window(&a, &view("B", Chipset::GH100, Some(&other))).unwrap_err());
        assert!(r.contains("different DMA address spaces"), "{r}");
        assert!(shared_space(&a, &view("B", Chipset::GH100, Some(&other))).is_err());
        let dead = platform(7, Err("no P2P path under this root port"));
        let r = reason(bar1_window(&a, &view("B", Chipset::GH100, Some(&dead))).unwrap_err());
        assert!(
            r.contains("B's BAR1 is not reachable from A: no P2P path"),
            "{r}"
        );
        // Host memory needs only the shared space.
        assert_eq!(
            shared_space(&a, &view("B", Chipset::GH100, Some(&dead))),
            Ok(7)
        );
        let same = platform(7, Ok(0x1000_0000_0000));
        let r = reason(bar1_window(&a, &view("A2", Chipset::GH100, Some(&same))).unwrap_err());
        assert!(r.contains("same GPU"), "{r}");
    }
}
