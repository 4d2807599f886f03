//! Two GPUs of the kernel driver as peers: what RM says about the path between them, and the
//! UVM call that enables it.
//!
//! * `NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2` on the client, with the two GPUs' ids (the
//!   `gpu_id` of `NV_ESC_CARD_INFO`): read/write/atomics support, NVLink / PCIe / BAR1 / C2C,
//!   the status of each capability (chipset, topology, regkey) and the peer ids. It is what UVM
//!   itself asks (`getSystemP2PCaps` in `src/nvidia/src/kernel/rmapi/nv_gpu_ops.c`).
//! * `UVM_ENABLE_PEER_ACCESS` works only for PCIe peers: UVM answers `NV_ERR_INVALID_DEVICE`
//!   for NVLink peers (`uvm_gpu_retain_pcie_peer_access` in `uvm_gpu.c`), which it enables by
//!   itself when the second GPU is registered (`uvm_va_space.c`, "Enable NVLINK and SMC peers").
//!   So the link type decides whether to call it ([`P2pCaps::needs_uvm_enable`]).
//!
//! Then memory of one GPU is mapped for the other with `UVM_MAP_EXTERNAL_ALLOCATION` naming the
//! other GPU's UUID in `perGpuAttributes` ([`super::Uvm::map_external_allocation`]), in the one
//! UVM VA space both GPUs are registered in (tinygrad's `_gpu_map` does the same).
#![allow(non_camel_case_types, non_snake_case)]

use nvbare_core::rm::{Handle, Rm, RmError};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// `NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2` (`ctrl0000system.h`).
pub const NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2: u32 = 0x12b;
/// `NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS`.
pub const NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS: usize = 32;
/// `NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS_SQUARED`.
pub const NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS_SQUARED: usize = 1024;
/// `NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE`.
pub const NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE: usize = 9;
/// `NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER`.
pub const NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER: u32 = 0xffff_ffff;

/// `p2pCaps` bits (`NV0000_CTRL_SYSTEM_GET_P2P_CAPS_*_SUPPORTED`).
pub mod caps {
    /// `WRITES_SUPPORTED` 0:0.
    pub const WRITES: u32 = 1 << 0;
    /// `READS_SUPPORTED` 1:1.
    pub const READS: u32 = 1 << 1;
    /// `PROP_SUPPORTED` 2:2.
    pub const PROP: u32 = 1 << 2;
    /// `NVLINK_SUPPORTED` 3:3.
    pub const NVLINK: u32 = 1 << 3;
    /// `ATOMICS_SUPPORTED` 4:4.
    pub const ATOMICS: u32 = 1 << 4;
    /// `LOOPBACK_SUPPORTED` 5:5.
    pub const LOOPBACK: u32 = 1 << 5;
    /// `PCI_SUPPORTED` 6:6.
    pub const PCI: u32 = 1 << 6;
    /// `C2C_SUPPORTED` 12:12.
    pub const C2C: u32 = 1 << 12;
    /// `PCI_BAR1_SUPPORTED` 13:13.
    pub const PCI_BAR1: u32 = 1 << 13;
}

/// `p2pCapsStatus` indices (`NV0000_CTRL_P2P_CAPS_INDEX_*`).
pub mod index {
    /// `READ`.
    pub const READ: usize = 0;
    /// `WRITE`.
    pub const WRITE: usize = 1;
    /// `NVLINK`.
    pub const NVLINK: usize = 2;
    /// `ATOMICS`.
    pub const ATOMICS: usize = 3;
    /// `PROP`.
    pub const PROP: usize = 4;
    /// `LOOPBACK`.
    pub const LOOPBACK: usize = 5;
    /// `PCI`.
    pub const PCI: usize = 6;
    /// `C2C`.
    pub const C2C: usize = 7;
    /// `PCI_BAR1`.
    pub const PCI_BAR1: usize = 8;
}

/// `NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS` (8348 bytes, 570.144 and 580.142 alike).
/// Fields as in the header.
#[repr(C)]
#[allow(missing_docs)]
#[derive(Debug, Clone, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS {
    pub gpuIds: [u32; NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS],
    pub gpuCount: u32,
    pub p2pCaps: u32,
    pub p2pOptimalReadCEs: u32,
    pub p2pOptimalWriteCEs: u32,
    pub p2pCapsStatus: [u8; NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE],
    pub _pad0: [u8; 3],
    pub busPeerIds: [u32; NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS_SQUARED],
    pub busEgmPeerIds: [u32; NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS_SQUARED],
}

/// The name of a `NV0000_P2P_CAPS_STATUS_*` value.
pub fn status_name(s: u8) -> &'static str {
    match s {
        0 => "OK",
        1 => "CHIPSET_NOT_SUPPORTED",
        2 => "GPU_NOT_SUPPORTED",
        3 => "IOH_TOPOLOGY_NOT_SUPPORTED",
        4 => "DISABLED_BY_REGKEY",
        5 => "NOT_SUPPORTED",
        6 => "NVLINK_SETUP_FAILED",
        _ => "unknown status",
    }
}

/// How two GPUs reach each other, by RM's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pLink {
    /// NVLink (direct or through NVSwitch).
    NvLink,
    /// Chip-to-chip (Grace Hopper).
    C2c,
    /// PCIe, through BAR1.
    PcieBar1,
    /// PCIe (mailbox P2P).
    Pcie,
}

impl std::fmt::Display for P2pLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            P2pLink::NvLink => "NVLink",
            P2pLink::C2c => "C2C",
            P2pLink::PcieBar1 => "PCIe BAR1 P2P",
            P2pLink::Pcie => "PCIe P2P",
        })
    }
}

/// RM's P2P capabilities of a pair of GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct P2pCaps {
    /// Raw `p2pCaps`.
    pub caps: u32,
    /// `p2pCapsStatus`.
    pub status: [u8; NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE],
    /// Peer id the first GPU uses for the second, and the second for the first.
    pub peer_ids: [Option<u32>; 2],
}

impl P2pCaps {
    /// Reads the answer for the two GPUs asked about (`gpuIds[0]`, `gpuIds[1]`).
    pub fn from_params(p: &NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS) -> P2pCaps {
        let id = |i: usize| {
            p.busPeerIds
                .get(i)
                .copied()
                .filter(|&v| v != NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER)
        };
        P2pCaps {
            caps: p.p2pCaps,
            status: p.p2pCapsStatus,
            // busPeerIds[X * gpuCount + Y], gpuCount 2 (nv_gpu_ops.c getSystemP2PCaps).
            peer_ids: [id(1), id(2)],
        }
    }

    /// Both reads and writes work.
    pub fn read_write(&self) -> bool {
        self.caps & caps::READS != 0 && self.caps & caps::WRITES != 0
    }

    /// The link, if RM reports a usable one.
    pub fn link(&self) -> Option<P2pLink> {
        if !self.read_write() {
            return None;
        }
        if self.caps & caps::NVLINK != 0 {
            Some(P2pLink::NvLink)
        } else if self.caps & caps::C2C != 0 {
            Some(P2pLink::C2c)
        } else if self.caps & caps::PCI_BAR1 != 0 {
            Some(P2pLink::PcieBar1)
        } else if self.caps & caps::PCI != 0 {
            Some(P2pLink::Pcie)
        } else {
            None
        }
    }

    /// Whether `UVM_ENABLE_PEER_ACCESS` must be called (PCIe peers only; UVM enables NVLink
    /// and C2C peers at registration and rejects the call for them).
    pub fn needs_uvm_enable(&self) -> bool {
        matches!(self.link(), Some(P2pLink::Pcie | P2pLink::PcieBar1))
    }

    /// Why the GPUs are not peers, from the status table (for error messages).
    pub fn why_not(&self) -> String {
        let mut parts = Vec::new();
        for (name, i) in [
            ("read", index::READ),
            ("write", index::WRITE),
            ("NVLink", index::NVLINK),
            ("PCIe", index::PCI),
            ("PCIe BAR1", index::PCI_BAR1),
        ] {
            if let Some(&s) = self.status.get(i) {
                parts.push(format!("{name} {}", status_name(s)));
            }
        }
        format!(
            "RM reports no peer-to-peer path (p2pCaps {:#x}; {})",
            self.caps,
            parts.join(", ")
        )
    }
}

/// Asks RM about the path between the GPUs with ids `gpu_ids` (`NV_ESC_CARD_INFO` `gpu_id`).
pub fn p2p_caps<R: Rm>(rm: &mut R, gpu_ids: [u32; 2]) -> Result<P2pCaps, RmError> {
    let mut p = NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS::new_zeroed();
    p.gpuIds[0] = gpu_ids[0];
    p.gpuIds[1] = gpu_ids[1];
    p.gpuCount = 2;
    let client: Handle = rm.client();
    rm.control(
        client,
        NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2,
        p.as_mut_bytes(),
    )?;
    Ok(P2pCaps::from_params(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn layout_matches_580() {
        // gcc over ctrl0000system.h (580.142): 32 ids, 4 words, 9 status bytes padded to 156,
        // then two 1024-entry u32 matrices.
        type P = NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS;
        assert_eq!(size_of::<P>(), 8348);
        assert_eq!(offset_of!(P, gpuCount), 128);
        assert_eq!(offset_of!(P, p2pCaps), 132);
        assert_eq!(offset_of!(P, p2pOptimalReadCEs), 136);
        assert_eq!(offset_of!(P, p2pOptimalWriteCEs), 140);
        assert_eq!(offset_of!(P, p2pCapsStatus), 144);
        assert_eq!(offset_of!(P, busPeerIds), 156);
        assert_eq!(offset_of!(P, busEgmPeerIds), 4252);
    }

    fn params(
        caps: u32,
        status: [u8; 9],
        ids: [u32; 4],
    ) -> NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS {
        let mut p = NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS::new_zeroed();
        p.p2pCaps = caps;
        p.p2pCapsStatus = status;
        p.busPeerIds[..4].copy_from_slice(&ids);
        p
    }

    #[test]
    fn links_and_what_uvm_needs() {
        let inv = NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER;
        let nvl = P2pCaps::from_params(&params(
            caps::READS | caps::WRITES | caps::NVLINK | caps::ATOMICS,
            [0; 9],
            [inv, 0, 1, inv],
        ));
        assert_eq!(nvl.link(), Some(P2pLink::NvLink));
        assert!(!nvl.needs_uvm_enable());
        assert_eq!(nvl.peer_ids, [Some(0), Some(1)]);
        let pci = P2pCaps::from_params(&params(
            caps::READS | caps::WRITES | caps::PCI,
            [0; 9],
            [inv, 2, 3, inv],
        ));
        assert_eq!(pci.link(), Some(P2pLink::Pcie));
        assert!(pci.needs_uvm_enable());
        let none = P2pCaps::from_params(&params(0, [3, 3, 5, 5, 5, 0, 3, 5, 5], [inv; 4]));
        assert_eq!(none.link(), None);
        assert_eq!(none.peer_ids, [None, None]);
        let why = none.why_not();
        assert!(why.contains("IOH_TOPOLOGY_NOT_SUPPORTED"), "{why}");
        // Writes only is not enough for copies both ways.
        let wo = P2pCaps::from_params(&params(caps::WRITES | caps::PCI, [0; 9], [inv; 4]));
        assert_eq!(wo.link(), None);
    }
}
