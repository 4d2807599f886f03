//! Chip identification and the per-chip table.
//!
//! [`identify`] turns `NV_PMC_BOOT_0`/`NV_PMC_BOOT_42` into a [`Chip`]: the [`Chipset`], its
//! [`Architecture`] and revision, and a static [`ChipInfo`] row with everything that differs
//! between chips and that the rest of the driver keys off: class ids, MMU format, QMD version,
//! boot method and firmware directory. Adding a chip is one row in [`CHIPS`].

use core::fmt;

use crate::hal::Mmio;
use crate::regs::Register;
use crate::regs::pmc::{NV_PMC_BOOT_0, NV_PMC_BOOT_42};
use crate::rm::class::*;

/// GPU architecture (the `NV_PMC_BOOT_42_ARCHITECTURE` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Architecture {
    /// 0x16: TU10x.
    Turing,
    /// 0x17: GA10x.
    Ampere,
    /// 0x18: GH100.
    Hopper,
    /// 0x19: AD10x.
    Ada,
    /// 0x1a (GB10x) and 0x1b (GB20x).
    Blackwell,
}

impl Architecture {
    /// Name as NVIDIA markets it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Turing => "Turing",
            Self::Ampere => "Ampere",
            Self::Hopper => "Hopper",
            Self::Ada => "Ada",
            Self::Blackwell => "Blackwell",
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// GPU page-table format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmuVersion {
    /// GMMU format version 2 (Pascal to Ada): 49-bit VA, PDE3..PDE0.
    V2,
    /// GMMU format version 3 (Hopper on): 57-bit VA, extra PDE4, PCF bits.
    V3,
}

/// Compute queue meta-data (QMD) layout used to launch kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QmdVersion {
    /// V02_02 (Turing; 256 bytes). NVIDIA declares it in `clc3c0qmd.h` (VOLTA_COMPUTE_A);
    /// `clc5c0qmd.h` (TURING_COMPUTE_A) declares V02_03. Mesa NVK launches Turing with V02_02,
    /// and so does nvbare ([`crate::channel::qmd::V02`]).
    V02_02,
    /// V03_00 (Ampere, Ada; 256 bytes).
    V03_00,
    /// V04_00 (Hopper; 384 bytes, `clcbc0qmd.h`).
    V04_00,
    /// V05_00 (Blackwell; 384 bytes).
    V05_00,
}

impl QmdVersion {
    /// Size of the QMD in bytes.
    pub fn size(self) -> usize {
        match self {
            Self::V02_02 | Self::V03_00 => 256,
            Self::V04_00 | Self::V05_00 => 384,
        }
    }
}

/// How the GSP is brought up from cold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootMethod {
    /// Turing/Ampere/Ada: FWSEC-FRTS from the VBIOS on the GSP falcon, then booter_load on SEC2.
    Booter,
    /// Hopper/Blackwell: a chain-of-trust message to the FSP, which boots the GSP-FMC.
    FspChainOfTrust,
}

/// The engine classes a chip's RM offers for compute work (the newest of each kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassIds {
    /// `*_COMPUTE_*`.
    pub compute: u32,
    /// `*_CHANNEL_GPFIFO_*`.
    pub gpfifo: u32,
    /// `*_DMA_COPY_*`.
    pub copy: u32,
    /// `*_USERMODE_*`.
    pub usermode: u32,
}

/// Chip implementations nvbare knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Chipset {
    TU102,
    TU104,
    TU106,
    TU116,
    TU117,
    GA100,
    GA102,
    GA103,
    GA104,
    GA106,
    GA107,
    GH100,
    AD102,
    AD103,
    AD104,
    AD106,
    AD107,
    GB100,
    GB102,
    GB202,
    GB203,
    GB205,
    GB206,
    GB207,
}

/// Everything that differs per chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChipInfo {
    /// The implementation.
    pub chipset: Chipset,
    /// Its name, e.g. "GH100".
    pub name: &'static str,
    /// `NV_PMC_BOOT_42_CHIP_ID` (architecture << 4 | implementation), e.g. 0x180.
    pub chip_id: u16,
    /// The architecture.
    pub architecture: Architecture,
    /// Compute, GPFIFO, copy and usermode classes.
    pub classes: ClassIds,
    /// Page-table format.
    pub mmu: MmuVersion,
    /// QMD layout.
    pub qmd: QmdVersion,
    /// GSP boot method.
    pub boot: BootMethod,
    /// Directory under `nvidia/` in linux-firmware holding this chip's GSP files.
    pub firmware_dir: &'static str,
    /// The `<family>` of the GSP-RM image's `.fwsignature_<family>` section.
    pub gsp_signature_family: &'static str,
    /// Shader model as `major * 10 + minor` (e.g. 90 for sm_90).
    pub sm: u16,
    /// BAR0 offset of the PCI config-space mirror (`pciConfigMirrorBase`).
    pub pci_config_mirror: u32,
}

impl ChipInfo {
    /// Whether the driver can launch compute work on this chip (it has a supported QMD):
    /// every chip in the table does, Turing with QMD V02_02.
    pub fn can_launch(&self) -> bool {
        matches!(
            self.qmd,
            QmdVersion::V02_02 | QmdVersion::V03_00 | QmdVersion::V04_00 | QmdVersion::V05_00
        )
    }

    /// Whether the compute class has `SEND_SIGNALING_PCAS2_B` (a 4-bit `PCAS_ACTION`:
    /// prefetch, invalidate-and-schedule, ...; AMPERE_COMPUTE_A on). TURING_COMPUTE_A has only
    /// `SEND_SIGNALING_PCAS_B` (0x2bc) with an `INVALIDATE` and a `SCHEDULE` bit (`clc5c0.h`,
    /// open-gpu-kernel-modules 570.144), what Mesa NVK launches Volta and Turing with, so a QMD
    /// cannot be prefetched ahead of its launch there.
    pub fn has_pcas2(&self) -> bool {
        !matches!(self.qmd, QmdVersion::V02_02)
    }

    /// Whether the copy class takes 64-bit semaphore payloads (`SET_SEMAPHORE_PAYLOAD_UPPER`,
    /// `LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE`: AMPERE_DMA_COPY_A on). TURING_DMA_COPY_A has
    /// neither (`clc5b5.h`, open-gpu-kernel-modules 570.144): its releases are 32-bit.
    pub fn ce_semaphore64(&self) -> bool {
        !matches!(self.architecture, Architecture::Turing)
    }
}

const TURING: ClassIds = ClassIds {
    compute: TURING_COMPUTE_A,
    gpfifo: TURING_CHANNEL_GPFIFO_A,
    copy: TURING_DMA_COPY_A,
    usermode: TURING_USERMODE_A,
};
const GA100_CLASSES: ClassIds = ClassIds {
    compute: AMPERE_COMPUTE_A,
    gpfifo: AMPERE_CHANNEL_GPFIFO_A,
    copy: AMPERE_DMA_COPY_A,
    usermode: AMPERE_USERMODE_A,
};
const GA10X_CLASSES: ClassIds = ClassIds {
    compute: AMPERE_COMPUTE_B,
    gpfifo: AMPERE_CHANNEL_GPFIFO_A,
    copy: AMPERE_DMA_COPY_B,
    usermode: AMPERE_USERMODE_A,
};
const ADA_CLASSES: ClassIds = ClassIds {
    compute: ADA_COMPUTE_A,
    gpfifo: AMPERE_CHANNEL_GPFIFO_A,
    copy: AMPERE_DMA_COPY_B,
    usermode: AMPERE_USERMODE_A,
};
const HOPPER_CLASSES: ClassIds = ClassIds {
    compute: HOPPER_COMPUTE_A,
    gpfifo: HOPPER_CHANNEL_GPFIFO_A,
    copy: HOPPER_DMA_COPY_A,
    usermode: HOPPER_USERMODE_A,
};
// GB10x has no BLACKWELL_USERMODE_A (g_gpu_class_list.c, 580.142).
const GB10X_CLASSES: ClassIds = ClassIds {
    compute: BLACKWELL_COMPUTE_A,
    gpfifo: BLACKWELL_CHANNEL_GPFIFO_A,
    copy: BLACKWELL_DMA_COPY_A,
    usermode: HOPPER_USERMODE_A,
};
const GB20X_CLASSES: ClassIds = ClassIds {
    compute: BLACKWELL_COMPUTE_B,
    gpfifo: BLACKWELL_CHANNEL_GPFIFO_B,
    copy: BLACKWELL_DMA_COPY_B,
    usermode: BLACKWELL_USERMODE_A,
};

macro_rules! chips {
    ($( $cs:ident $id:literal $arch:ident $cls:ident $mmu:ident $qmd:ident $boot:ident
        $fw:literal $sig:literal $sm:literal $mirror:literal ;)*) => {
        /// The per-chip table (classes from `g_gpu_class_list.c`, 580.142; firmware directories
        /// from linux-firmware's WHENCE).
        pub const CHIPS: &[ChipInfo] = &[$(
            ChipInfo {
                chipset: Chipset::$cs,
                name: stringify!($cs),
                chip_id: $id,
                architecture: Architecture::$arch,
                classes: $cls,
                mmu: MmuVersion::$mmu,
                qmd: QmdVersion::$qmd,
                boot: BootMethod::$boot,
                firmware_dir: $fw,
                gsp_signature_family: $sig,
                sm: $sm,
                pci_config_mirror: $mirror,
            },
        )*];
    };
}

chips! {
    TU102 0x162 Turing TURING V2 V02_02 Booter "tu102" "tu10x" 75 0x88000;
    TU104 0x164 Turing TURING V2 V02_02 Booter "tu102" "tu10x" 75 0x88000;
    TU106 0x166 Turing TURING V2 V02_02 Booter "tu102" "tu10x" 75 0x88000;
    TU117 0x167 Turing TURING V2 V02_02 Booter "tu116" "tu11x" 75 0x88000;
    TU116 0x168 Turing TURING V2 V02_02 Booter "tu116" "tu11x" 75 0x88000;
    GA100 0x170 Ampere GA100_CLASSES V2 V03_00 Booter "ga100" "ga100" 80 0x88000;
    GA102 0x172 Ampere GA10X_CLASSES V2 V03_00 Booter "ga102" "ga10x" 86 0x88000;
    GA103 0x173 Ampere GA10X_CLASSES V2 V03_00 Booter "ga102" "ga10x" 86 0x88000;
    GA104 0x174 Ampere GA10X_CLASSES V2 V03_00 Booter "ga102" "ga10x" 86 0x88000;
    GA106 0x176 Ampere GA10X_CLASSES V2 V03_00 Booter "ga102" "ga10x" 86 0x88000;
    GA107 0x177 Ampere GA10X_CLASSES V2 V03_00 Booter "ga102" "ga10x" 86 0x88000;
    GH100 0x180 Hopper HOPPER_CLASSES V3 V04_00 FspChainOfTrust "gh100" "gh100" 90 0x92000;
    AD102 0x192 Ada ADA_CLASSES V2 V03_00 Booter "ad102" "ad10x" 89 0x88000;
    AD103 0x193 Ada ADA_CLASSES V2 V03_00 Booter "ad102" "ad10x" 89 0x88000;
    AD104 0x194 Ada ADA_CLASSES V2 V03_00 Booter "ad102" "ad10x" 89 0x88000;
    AD106 0x196 Ada ADA_CLASSES V2 V03_00 Booter "ad102" "ad10x" 89 0x88000;
    AD107 0x197 Ada ADA_CLASSES V2 V03_00 Booter "ad102" "ad10x" 89 0x88000;
    GB100 0x1a0 Blackwell GB10X_CLASSES V3 V05_00 FspChainOfTrust "gb100" "gb10x" 100 0x92000;
    GB102 0x1a2 Blackwell GB10X_CLASSES V3 V05_00 FspChainOfTrust "gb100" "gb10x" 100 0x92000;
    GB202 0x1b2 Blackwell GB20X_CLASSES V3 V05_00 FspChainOfTrust "gb202" "gb20x" 120 0x92000;
    GB203 0x1b3 Blackwell GB20X_CLASSES V3 V05_00 FspChainOfTrust "gb202" "gb20x" 120 0x92000;
    GB205 0x1b5 Blackwell GB20X_CLASSES V3 V05_00 FspChainOfTrust "gb202" "gb20x" 120 0x92000;
    GB206 0x1b6 Blackwell GB20X_CLASSES V3 V05_00 FspChainOfTrust "gb202" "gb20x" 120 0x92000;
    GB207 0x1b7 Blackwell GB20X_CLASSES V3 V05_00 FspChainOfTrust "gb202" "gb20x" 120 0x92000;
}

impl Chipset {
    /// This chip's row in [`CHIPS`].
    pub fn info(self) -> &'static ChipInfo {
        // Every variant has exactly one row (checked by a test); fall back to the first row
        // rather than panic if that were ever violated.
        CHIPS
            .iter()
            .find(|c| c.chipset == self)
            .unwrap_or(&CHIPS[0])
    }

    /// Looks up a chip by `NV_PMC_BOOT_42_CHIP_ID` (architecture << 4 | implementation).
    pub fn from_chip_id(chip_id: u16) -> Option<Chipset> {
        CHIPS
            .iter()
            .find(|c| c.chip_id == chip_id)
            .map(|c| c.chipset)
    }

    /// Looks up a chip by name, case-insensitively ("gh100", "AD102").
    pub fn from_name(name: &str) -> Option<Chipset> {
        CHIPS
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .map(|c| c.chipset)
    }

    /// Name, e.g. "GH100".
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for Chipset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An identified GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chip {
    /// The per-chip table row.
    pub info: &'static ChipInfo,
    /// Major revision (0xa for "A1").
    pub major_revision: u8,
    /// Minor revision (1 for "A1").
    pub minor_revision: u8,
    /// Raw `NV_PMC_BOOT_0`.
    pub boot0: u32,
    /// Raw `NV_PMC_BOOT_42`.
    pub boot42: u32,
}

impl Chip {
    /// The implementation.
    pub fn chipset(&self) -> Chipset {
        self.info.chipset
    }

    /// The architecture.
    pub fn architecture(&self) -> Architecture {
        self.info.architecture
    }
}

impl fmt::Display for Chip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}), revision {:X}{:X}",
            self.info.name, self.info.architecture, self.major_revision, self.minor_revision
        )
    }
}

/// Why a chip could not be identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChipError {
    /// BOOT_0 reads all ones: the BAR is not mapped or the device fell off the bus.
    NoResponse {
        /// What BOOT_0 read.
        boot0: u32,
    },
    /// Older than Turing: these chips have no GSP and nvbare cannot drive them.
    Unsupported {
        /// Raw `NV_PMC_BOOT_0`.
        boot0: u32,
        /// Raw `NV_PMC_BOOT_42`.
        boot42: u32,
        /// The chip id decoded from them.
        chip_id: u16,
    },
    /// A chip id nvbare does not know.
    Unknown {
        /// Raw `NV_PMC_BOOT_0`.
        boot0: u32,
        /// Raw `NV_PMC_BOOT_42`.
        boot42: u32,
        /// The chip id decoded from them.
        chip_id: u16,
    },
}

impl fmt::Display for ChipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ChipError::NoResponse { boot0 } => write!(
                f,
                "NV_PMC_BOOT_0 reads {boot0:#010x}: the GPU is not responding (BAR0 not \
                 mapped, device powered down or fallen off the bus); check `lspci -vv` and dmesg"
            ),
            ChipError::Unsupported {
                boot0,
                boot42,
                chip_id,
            } => write!(
                f,
                "chip id {chip_id:#x} (NV_PMC_BOOT_0 = {boot0:#010x}, NV_PMC_BOOT_42 = \
                 {boot42:#010x}) is older than Turing and has no GSP; nvbare supports \
                 Turing through Blackwell"
            ),
            ChipError::Unknown {
                boot0,
                boot42,
                chip_id,
            } => write!(
                f,
                "unknown NVIDIA chip: NV_PMC_BOOT_0 = {boot0:#010x}, NV_PMC_BOOT_42 = \
                 {boot42:#010x} (chip id {chip_id:#x}); nvbare knows TU10x, GA10x, AD10x, \
                 GH100, GB10x and GB20x - please report these values"
            ),
        }
    }
}

impl core::error::Error for ChipError {}

/// Identifies a chip from raw `NV_PMC_BOOT_0` and `NV_PMC_BOOT_42` values.
///
/// BOOT_42 is authoritative (as in RM and nova-core); BOOT_0 is used to detect a dead device
/// and for chips that leave BOOT_42 zero.
pub fn identify(boot0: u32, boot42: u32) -> Result<Chip, ChipError> {
    if boot0 == u32::MAX {
        return Err(ChipError::NoResponse { boot0 });
    }
    let b0 = NV_PMC_BOOT_0::from(boot0);
    let b42 = NV_PMC_BOOT_42::from(boot42);
    let (chip_id, major, minor) = if boot42 != 0 && boot42 != u32::MAX {
        (b42.chip_id(), b42.major_revision(), b42.minor_revision())
    } else {
        (b0.chip_id(), b0.major_revision(), b0.minor_revision())
    };
    if let Some(cs) = Chipset::from_chip_id(chip_id) {
        return Ok(Chip {
            info: cs.info(),
            major_revision: major,
            minor_revision: minor,
            boot0,
            boot42,
        });
    }
    if chip_id < 0x160 {
        Err(ChipError::Unsupported {
            boot0,
            boot42,
            chip_id,
        })
    } else {
        Err(ChipError::Unknown {
            boot0,
            boot42,
            chip_id,
        })
    }
}

/// Reads the identification registers through `bar0` and identifies the chip.
pub fn identify_mmio<M: Mmio + ?Sized>(bar0: &M) -> Result<Chip, ChipError> {
    let boot0 = NV_PMC_BOOT_0::read(bar0).into();
    let boot42 = NV_PMC_BOOT_42::read(bar0).into();
    identify(boot0, boot42)
}

/// The `NV_PMC_BOOT_0`/`NV_PMC_BOOT_42` pair a chip of revision `major.minor` reports, as laid
/// out by `nv_ref.h` (used by the simulator and by tests).
pub fn boot_registers(chipset: Chipset, major: u8, minor: u8) -> (u32, u32) {
    let info = chipset.info();
    let arch = (info.chip_id >> 4) as u32;
    let imp = (info.chip_id & 0xf) as u32;
    let major = (major & 0xf) as u32;
    let minor = (minor & 0xf) as u32;
    let boot0 = ((arch & 0x1f) << 24) | (imp << 20) | ((arch >> 5) << 8) | (major << 4) | minor;
    let boot42 = (arch << 24) | (imp << 20) | (major << 16) | (minor << 12);
    (boot0, boot42)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Chipset; 24] = [
        Chipset::TU102,
        Chipset::TU104,
        Chipset::TU106,
        Chipset::TU116,
        Chipset::TU117,
        Chipset::GA100,
        Chipset::GA102,
        Chipset::GA103,
        Chipset::GA104,
        Chipset::GA106,
        Chipset::GA107,
        Chipset::GH100,
        Chipset::AD102,
        Chipset::AD103,
        Chipset::AD104,
        Chipset::AD106,
        Chipset::AD107,
        Chipset::GB100,
        Chipset::GB102,
        Chipset::GB202,
        Chipset::GB203,
        Chipset::GB205,
        Chipset::GB206,
        Chipset::GB207,
    ];

    #[test]
    fn every_chipset_has_one_row() {
        assert_eq!(CHIPS.len(), ALL.len());
        for cs in ALL {
            assert_eq!(
                CHIPS.iter().filter(|c| c.chipset == cs).count(),
                1,
                "{cs:?}"
            );
            assert_eq!(cs.info().chipset, cs);
            assert_eq!(Chipset::from_name(cs.name()), Some(cs));
        }
    }

    #[test]
    fn identifies_real_boot_values() {
        // nouveau prints BOOT_0; these are rev A1 parts.
        let c = identify(0x1920_00a1, 0x192a_1000).unwrap();
        assert_eq!(c.chipset(), Chipset::AD102);
        assert_eq!(c.architecture(), Architecture::Ada);
        assert_eq!((c.major_revision, c.minor_revision), (0xa, 1));
        let c = identify(0x1800_00a1, 0x180a_1000).unwrap();
        assert_eq!(c.chipset(), Chipset::GH100);
        assert_eq!(c.info.classes.compute, HOPPER_COMPUTE_A);
        assert_eq!(c.info.mmu, MmuVersion::V3);
        assert_eq!(c.info.qmd, QmdVersion::V04_00);
        assert_eq!(c.info.boot, BootMethod::FspChainOfTrust);
        let c = identify(0x1b20_00a1, 0x1b2a_1000).unwrap();
        assert_eq!(c.chipset(), Chipset::GB202);
        assert_eq!(c.info.qmd, QmdVersion::V05_00);
    }

    #[test]
    fn boot_registers_roundtrip() {
        for cs in ALL {
            let (b0, b42) = boot_registers(cs, 0xa, 1);
            let c = identify(b0, b42).unwrap();
            assert_eq!(c.chipset(), cs);
            // BOOT_0 alone identifies the chip too.
            assert_eq!(identify(b0, 0).unwrap().chipset(), cs);
        }
        assert_eq!(
            boot_registers(Chipset::AD102, 0xa, 1),
            (0x1920_00a1, 0x192a_1000)
        );
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(matches!(
            identify(u32::MAX, u32::MAX),
            Err(ChipError::NoResponse { .. })
        ));
        // Volta (GV100, 0x140).
        assert!(matches!(
            identify(0x1400_00a1, 0x140a_1000),
            Err(ChipError::Unsupported { .. })
        ));
        // Garbage 0x3f architecture (tinygrad's "KeyError: 63").
        let e = identify(0, 0x3f00_0000).unwrap_err();
        assert!(matches!(e, ChipError::Unknown { chip_id: 0x3f0, .. }));
    }

    #[test]
    fn gsp_signature_families_follow_openrm() {
        // nv_firmware_get_chip_family (570.144,
        // src/nvidia/arch/nvalloc/common/inc/nv-firmware-chip-family-select.h): Turing up to
        // TU106 is tu10x, later Turing tu11x; GA100 is ga100, other Ampere ga10x.
        for c in CHIPS {
            let (arch, imp) = (c.chip_id >> 4, c.chip_id & 0xf);
            let want = match arch {
                0x16 if imp <= 6 => "tu10x",
                0x16 => "tu11x",
                0x17 if imp == 0 => "ga100",
                0x17 => "ga10x",
                0x18 => "gh100",
                0x19 => "ad10x",
                0x1a => "gb10x",
                0x1b => "gb20x",
                _ => panic!("{}: no firmware family for architecture {arch:#x}", c.name),
            };
            assert_eq!(c.gsp_signature_family, want, "{}", c.name);
        }
    }

    #[test]
    fn hopper_uses_no_ampere_classes() {
        let h = Chipset::GH100.info();
        for c in [
            h.classes.compute,
            h.classes.copy,
            h.classes.gpfifo,
            h.classes.usermode,
        ] {
            assert!(c >= 0xc600, "{c:#x}");
        }
    }
}
