//! RM class ids (`src/common/sdk/nvidia/inc/class/cl*.h`). Identical in r535, r570 and r580.
#![allow(missing_docs)] // the names are NVIDIA's; each constant's doc is its header

// Objects of the client tree.
/// `cl0000.h`
pub const NV01_ROOT: u32 = 0x0000_0000;
/// `cl0041.h` (client handle chosen by RM)
pub const NV01_ROOT_CLIENT: u32 = 0x0000_0041;
/// `cl0080.h`
pub const NV01_DEVICE_0: u32 = 0x0000_0080;
/// `cl2080.h`
pub const NV20_SUBDEVICE_0: u32 = 0x0000_2080;
/// `cl90f1.h`
pub const FERMI_VASPACE_A: u32 = 0x0000_90f1;
/// `cla06c.h` (TSG)
pub const KEPLER_CHANNEL_GROUP_A: u32 = 0x0000_a06c;
/// `cl9067.h` (subcontext)
pub const FERMI_CONTEXT_SHARE_A: u32 = 0x0000_9067;
/// `cl83de.h`
pub const GT200_DEBUGGER: u32 = 0x0000_83de;
/// `cl0079.h`
pub const NV01_EVENT_OS_EVENT: u32 = 0x0000_0079;

// Memory.
pub const NV01_MEMORY_SYSTEM: u32 = 0x0000_003e;
pub const NV01_MEMORY_LOCAL_USER: u32 = 0x0000_0040;
pub const NV01_MEMORY_VIRTUAL: u32 = 0x0000_0070;
pub const NV01_MEMORY_SYSTEM_OS_DESCRIPTOR: u32 = 0x0000_0071;
pub const NV50_MEMORY_VIRTUAL: u32 = 0x0000_50a0;

// Usermode (doorbell) blocks.
pub const VOLTA_USERMODE_A: u32 = 0x0000_c361;
pub const TURING_USERMODE_A: u32 = 0x0000_c461;
pub const AMPERE_USERMODE_A: u32 = 0x0000_c561;
pub const HOPPER_USERMODE_A: u32 = 0x0000_c661;
pub const BLACKWELL_USERMODE_A: u32 = 0x0000_c761;

// Host (GPFIFO) classes.
pub const VOLTA_CHANNEL_GPFIFO_A: u32 = 0x0000_c36f;
pub const TURING_CHANNEL_GPFIFO_A: u32 = 0x0000_c46f;
pub const AMPERE_CHANNEL_GPFIFO_A: u32 = 0x0000_c56f;
pub const HOPPER_CHANNEL_GPFIFO_A: u32 = 0x0000_c86f;
pub const BLACKWELL_CHANNEL_GPFIFO_A: u32 = 0x0000_c96f;
pub const BLACKWELL_CHANNEL_GPFIFO_B: u32 = 0x0000_ca6f;

// Compute classes.
pub const TURING_COMPUTE_A: u32 = 0x0000_c5c0;
pub const AMPERE_COMPUTE_A: u32 = 0x0000_c6c0;
pub const AMPERE_COMPUTE_B: u32 = 0x0000_c7c0;
pub const ADA_COMPUTE_A: u32 = 0x0000_c9c0;
pub const HOPPER_COMPUTE_A: u32 = 0x0000_cbc0;
pub const BLACKWELL_COMPUTE_A: u32 = 0x0000_cdc0;
pub const BLACKWELL_COMPUTE_B: u32 = 0x0000_cec0;

// Copy-engine classes.
pub const TURING_DMA_COPY_A: u32 = 0x0000_c5b5;
pub const AMPERE_DMA_COPY_A: u32 = 0x0000_c6b5;
pub const AMPERE_DMA_COPY_B: u32 = 0x0000_c7b5;
pub const HOPPER_DMA_COPY_A: u32 = 0x0000_c8b5;
pub const BLACKWELL_DMA_COPY_A: u32 = 0x0000_c9b5;
pub const BLACKWELL_DMA_COPY_B: u32 = 0x0000_cab5;

/// What kind of engine class an id is, for picking the newest class of each kind from a class
/// list (UVM's `findDeviceClasses` keeps the numerically highest of each kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassKind {
    /// A `*_COMPUTE_*` class.
    Compute,
    /// A `*_CHANNEL_GPFIFO_*` class.
    Gpfifo,
    /// A `*_DMA_COPY_*` class.
    Copy,
    /// A `*_USERMODE_*` class.
    Usermode,
}

/// Classifies a class id by its low byte, which encodes the class family in NVIDIA's scheme.
pub fn class_kind(class: u32) -> Option<ClassKind> {
    if !(0xc000..=0xffff).contains(&class) {
        return None;
    }
    match class & 0xff {
        0xc0 => Some(ClassKind::Compute),
        0x6f => Some(ClassKind::Gpfifo),
        0xb5 => Some(ClassKind::Copy),
        0x61 => Some(ClassKind::Usermode),
        _ => None,
    }
}

/// Every class id above with its name, for printing and for parsing names.
pub const CLASS_NAMES: &[(u32, &str)] = &[
    (NV01_ROOT, "NV01_ROOT"),
    (NV01_ROOT_CLIENT, "NV01_ROOT_CLIENT"),
    (NV01_DEVICE_0, "NV01_DEVICE_0"),
    (NV20_SUBDEVICE_0, "NV20_SUBDEVICE_0"),
    (FERMI_VASPACE_A, "FERMI_VASPACE_A"),
    (KEPLER_CHANNEL_GROUP_A, "KEPLER_CHANNEL_GROUP_A"),
    (FERMI_CONTEXT_SHARE_A, "FERMI_CONTEXT_SHARE_A"),
    (GT200_DEBUGGER, "GT200_DEBUGGER"),
    (NV01_EVENT_OS_EVENT, "NV01_EVENT_OS_EVENT"),
    (NV01_MEMORY_SYSTEM, "NV01_MEMORY_SYSTEM"),
    (NV01_MEMORY_LOCAL_USER, "NV01_MEMORY_LOCAL_USER"),
    (NV01_MEMORY_VIRTUAL, "NV01_MEMORY_VIRTUAL"),
    (
        NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
        "NV01_MEMORY_SYSTEM_OS_DESCRIPTOR",
    ),
    (NV50_MEMORY_VIRTUAL, "NV50_MEMORY_VIRTUAL"),
    (VOLTA_USERMODE_A, "VOLTA_USERMODE_A"),
    (TURING_USERMODE_A, "TURING_USERMODE_A"),
    (AMPERE_USERMODE_A, "AMPERE_USERMODE_A"),
    (HOPPER_USERMODE_A, "HOPPER_USERMODE_A"),
    (BLACKWELL_USERMODE_A, "BLACKWELL_USERMODE_A"),
    (VOLTA_CHANNEL_GPFIFO_A, "VOLTA_CHANNEL_GPFIFO_A"),
    (TURING_CHANNEL_GPFIFO_A, "TURING_CHANNEL_GPFIFO_A"),
    (AMPERE_CHANNEL_GPFIFO_A, "AMPERE_CHANNEL_GPFIFO_A"),
    (HOPPER_CHANNEL_GPFIFO_A, "HOPPER_CHANNEL_GPFIFO_A"),
    (BLACKWELL_CHANNEL_GPFIFO_A, "BLACKWELL_CHANNEL_GPFIFO_A"),
    (BLACKWELL_CHANNEL_GPFIFO_B, "BLACKWELL_CHANNEL_GPFIFO_B"),
    (TURING_COMPUTE_A, "TURING_COMPUTE_A"),
    (AMPERE_COMPUTE_A, "AMPERE_COMPUTE_A"),
    (AMPERE_COMPUTE_B, "AMPERE_COMPUTE_B"),
    (ADA_COMPUTE_A, "ADA_COMPUTE_A"),
    (HOPPER_COMPUTE_A, "HOPPER_COMPUTE_A"),
    (BLACKWELL_COMPUTE_A, "BLACKWELL_COMPUTE_A"),
    (BLACKWELL_COMPUTE_B, "BLACKWELL_COMPUTE_B"),
    (TURING_DMA_COPY_A, "TURING_DMA_COPY_A"),
    (AMPERE_DMA_COPY_A, "AMPERE_DMA_COPY_A"),
    (AMPERE_DMA_COPY_B, "AMPERE_DMA_COPY_B"),
    (HOPPER_DMA_COPY_A, "HOPPER_DMA_COPY_A"),
    (BLACKWELL_DMA_COPY_A, "BLACKWELL_DMA_COPY_A"),
    (BLACKWELL_DMA_COPY_B, "BLACKWELL_DMA_COPY_B"),
];

/// Human-readable name of a class id, when it is one of those above.
pub fn class_name(class: u32) -> Option<&'static str> {
    CLASS_NAMES
        .iter()
        .find(|(c, _)| *c == class)
        .map(|(_, n)| *n)
}

/// The class id NVIDIA names `name` (case-insensitive), when it is one of those above.
pub fn class_by_name(name: &str) -> Option<u32> {
    CLASS_NAMES
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(c, _)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(class_kind(HOPPER_COMPUTE_A), Some(ClassKind::Compute));
        assert_eq!(class_kind(HOPPER_CHANNEL_GPFIFO_A), Some(ClassKind::Gpfifo));
        assert_eq!(class_kind(HOPPER_DMA_COPY_A), Some(ClassKind::Copy));
        assert_eq!(class_kind(HOPPER_USERMODE_A), Some(ClassKind::Usermode));
        assert_eq!(class_kind(FERMI_VASPACE_A), None);
        assert_eq!(class_kind(0xcb97), None); // HOPPER_A (3D)
    }

    #[test]
    fn names_round_trip() {
        for (c, n) in CLASS_NAMES {
            assert_eq!(class_name(*c), Some(*n));
            assert_eq!(class_by_name(&n.to_lowercase()), Some(*c));
        }
        assert_eq!(class_name(HOPPER_COMPUTE_A), Some("HOPPER_COMPUTE_A"));
        assert_eq!(class_by_name("HOPPER_COMPUTE_B"), None);
    }
}
