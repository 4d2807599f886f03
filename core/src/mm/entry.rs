//! Page-table entries: the `dev_mmu.h` layouts as `bitfield-struct` types, and a
//! format-independent view ([`PteAttrs`], [`TableRef`], [`DirEntry`], [`DualEntry`]) with
//! encode/decode for both versions.
//!
//! Layouts: version 2 from `kernel-open/nvidia-uvm/hwref/turing/tu102/dev_mmu.h` (the full
//! header; the `published/` copy is trimmed), version 3 from
//! `src/common/inc/swref/published/hopper/gh100/dev_mmu.h` (570.144). Each field's doc comment
//! repeats the header's `hi:lo`; the tests check every field position against those numbers.
//!
//! Where the header defines overlapping fields for different apertures (v2 `ADDRESS_SYS` 53:8
//! vs `ADDRESS_VID` 32:8 + `ADDRESS_VID_PEER` 35:33, v2 `COMPTAGLINE` 55:36, v3 `ADDRESS_VID`
//! 39:12 inside `ADDRESS` 51:12), the struct declares the widest field and the narrower views
//! are checks in the encoder.

#![allow(non_camel_case_types)]

use bitfield_struct::bitfield;

use super::MmError;
use crate::chip::MmuVersion;

/// Where a page-directory entry points (`NV_MMU_VER*_PDE_APERTURE_*`; 0 is INVALID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableAperture {
    /// `VIDEO_MEMORY` (1).
    Video,
    /// `SYSTEM_COHERENT_MEMORY` (2).
    SysCoherent,
    /// `SYSTEM_NON_COHERENT_MEMORY` (3).
    SysNonCoherent,
}

impl TableAperture {
    /// The PDE `APERTURE` field value.
    pub const fn field(self) -> u8 {
        match self {
            TableAperture::Video => 1,
            TableAperture::SysCoherent => 2,
            TableAperture::SysNonCoherent => 3,
        }
    }

    /// Decodes a PDE `APERTURE` field (None for INVALID).
    pub const fn from_field(v: u8) -> Option<TableAperture> {
        match v & 3 {
            1 => Some(TableAperture::Video),
            2 => Some(TableAperture::SysCoherent),
            3 => Some(TableAperture::SysNonCoherent),
            _ => None,
        }
    }

    /// Whether this is host memory.
    pub const fn is_sys(self) -> bool {
        !matches!(self, TableAperture::Video)
    }
}

/// Where a PTE points (`NV_MMU_VER*_PTE_APERTURE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PteAperture {
    /// `VIDEO_MEMORY` (0): local VRAM.
    Video,
    /// `PEER_MEMORY` (1): another GPU's VRAM, with its peer id (0..=7).
    Peer(u8),
    /// `SYSTEM_COHERENT_MEMORY` (2): host memory, snooped.
    SysCoherent,
    /// `SYSTEM_NON_COHERENT_MEMORY` (3): host memory, not snooped.
    SysNonCoherent,
}

impl PteAperture {
    const fn field(self) -> u8 {
        match self {
            PteAperture::Video => 0,
            PteAperture::Peer(_) => 1,
            PteAperture::SysCoherent => 2,
            PteAperture::SysNonCoherent => 3,
        }
    }
}

/// `NV_MMU_PTE_KIND_GENERIC_MEMORY` (0x06 in both headers): plain, uncompressed memory.
pub const KIND_GENERIC_MEMORY: u8 = 0x06;
/// `NV_MMU_PTE_KIND_PITCH` (0x00).
pub const KIND_PITCH: u8 = 0x00;

/// What a page maps to and how it may be accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PteAttrs {
    /// Target memory.
    pub aperture: PteAperture,
    /// Writes and atomics fault (v2 `READ_ONLY`, v3 PCF RO).
    pub read_only: bool,
    /// May be cached in the GPU L2 (v2 `VOL` = !cached, v3 PCF UNCACHED = !cached).
    pub cached: bool,
    /// Atomics allowed (v2 `ATOMIC_DISABLE` = !atomics, v3 PCF NO_ATOMIC = !atomics).
    pub atomics: bool,
    /// Privileged-only (v2 `PRIVILEGE`, v3 PCF PRIVILEGE).
    pub privileged: bool,
    /// Access counting enabled (v3 PCF ACE vs ACD; v2 has no such bit and ignores it).
    pub access_counting: bool,
    /// Memory kind (8 bits in v2, 4 bits in v3).
    pub kind: u8,
}

impl PteAttrs {
    /// Read-write, cached, atomic VRAM of kind GENERIC_MEMORY.
    pub const fn vram() -> PteAttrs {
        PteAttrs {
            aperture: PteAperture::Video,
            read_only: false,
            cached: true,
            atomics: true,
            privileged: false,
            access_counting: false,
            kind: KIND_GENERIC_MEMORY,
        }
    }

    /// Read-write coherent host memory, not cached in the GPU L2 (so CPU writes are seen).
    pub const fn sysmem() -> PteAttrs {
        PteAttrs {
            aperture: PteAperture::SysCoherent,
            cached: false,
            ..PteAttrs::vram()
        }
    }

    /// Another GPU's VRAM through the PEER aperture with peer id `id` (NVLink or PCIe P2P set
    /// up with that GPU). Not cached in this GPU's L2: RM's default for peer memory
    /// (`NVOS32_ATTR2_P2P_GPU_CACHEABLE_DEFAULT` = uncached, `dmaIsDefaultGpuUncached_GM107`).
    /// The id must be below 8 (checked when the PTE is encoded).
    pub const fn peer(id: u8) -> PteAttrs {
        PteAttrs {
            aperture: PteAperture::Peer(id),
            cached: false,
            ..PteAttrs::vram()
        }
    }

    /// Another GPU's VRAM through its BAR1 over PCIe (BAR1 P2P): system memory at the peer's
    /// BAR1 bus address, non-coherent (no snoop), uncached, no atomics (PCIe peers have none),
    /// kind GENERIC_MEMORY, as `dmaAllocBar1P2PMapping_GH100` maps it. Compute the address with
    /// [`super::peer::PeerBar1Window::bus_address`].
    pub const fn peer_bar1() -> PteAttrs {
        PteAttrs {
            aperture: PteAperture::SysNonCoherent,
            cached: false,
            atomics: false,
            ..PteAttrs::vram()
        }
    }

    /// The same attributes, read-only.
    pub const fn read_only(self) -> PteAttrs {
        PteAttrs {
            read_only: true,
            ..self
        }
    }
}

/// A decoded valid PTE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pte {
    /// Physical (VRAM, peer) or bus (host) address of the page.
    pub addr: u64,
    /// Attributes.
    pub attrs: PteAttrs,
}

/// A page-directory entry's target: the next-level table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableRef {
    /// Where the table is.
    pub aperture: TableAperture,
    /// Its address (4 KiB aligned; 256 B suffices for a big-page table).
    pub addr: u64,
}

/// A decoded single (8-byte) directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirEntry {
    /// Nothing below.
    Invalid,
    /// Points at a table.
    Table(TableRef),
    /// A huge PTE (only meaningful where the level allows pages).
    Page(Pte),
}

/// A decoded dual (16-byte) PD0 entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DualEntry {
    /// Neither half valid.
    Invalid,
    /// Big and/or small page table (at least one is `Some`).
    Tables {
        /// The 64 KiB page table.
        big: Option<TableRef>,
        /// The 4 KiB page table.
        small: Option<TableRef>,
    },
    /// A 2 MiB PTE in the low 64 bits.
    Page(Pte),
}

// ---------------------------------------------------------------------------------------------
// Version 2 (tu102 dev_mmu.h)
// ---------------------------------------------------------------------------------------------

/// `NV_MMU_VER2_PDE` (8 bytes).
#[bitfield(u64)]
#[derive(PartialEq, Eq)]
pub struct NV_MMU_VER2_PDE {
    /// 0:0 IS_PTE (also VALID; 0 for a PDE)
    pub is_pte: bool,
    /// 2:1 APERTURE (0 INVALID, 1 VIDEO_MEMORY, 2 SYSTEM_COHERENT, 3 SYSTEM_NON_COHERENT)
    #[bits(2)]
    pub aperture: u8,
    /// 3:3 VOL
    pub vol: bool,
    #[bits(1)]
    __: u8,
    /// 5:5 NO_ATS
    pub no_ats: bool,
    #[bits(2)]
    __: u8,
    /// 53:8 ADDRESS_SYS (address >> 12); ADDRESS_VID is (35-3):8 with ADDRESS_VID_PEER 35:33
    #[bits(46)]
    pub address_sys: u64,
    #[bits(10)]
    __: u16,
}

/// `NV_MMU_VER2_DUAL_PDE` (16 bytes): big-page table in the low half, 4 KiB table in the high.
///
/// The header's `NO_ATS` 5:5 overlaps `ADDRESS_BIG_SYS` 53:(8-4); nvbare leaves it 0.
#[bitfield(u128)]
#[derive(PartialEq, Eq)]
pub struct NV_MMU_VER2_DUAL_PDE {
    /// 0:0 IS_PTE
    pub is_pte: bool,
    /// 2:1 APERTURE_BIG
    #[bits(2)]
    pub aperture_big: u8,
    /// 3:3 VOL_BIG
    pub vol_big: bool,
    /// 53:4 ADDRESS_BIG_SYS (address >> 8); ADDRESS_BIG_VID is (35-3):(8-4)
    #[bits(50)]
    pub address_big_sys: u64,
    #[bits(11)]
    __: u16,
    /// 66:65 APERTURE_SMALL
    #[bits(2)]
    pub aperture_small: u8,
    /// 67:67 VOL_SMALL
    pub vol_small: bool,
    #[bits(4)]
    __: u8,
    /// 117:72 ADDRESS_SMALL_SYS (address >> 12); ADDRESS_SMALL_VID is (99-3):72
    #[bits(46)]
    pub address_small_sys: u64,
    #[bits(10)]
    __: u16,
}

/// `NV_MMU_VER2_PTE` (8 bytes).
///
/// `COMPTAGLINE` (20+35):36 overlaps `ADDRESS_SYS`; nvbare maps no compressible kinds.
#[bitfield(u64)]
#[derive(PartialEq, Eq)]
pub struct NV_MMU_VER2_PTE {
    /// 0:0 VALID
    pub valid: bool,
    /// 2:1 APERTURE (0 VIDEO_MEMORY, 1 PEER_MEMORY, 2 SYSTEM_COHERENT, 3 SYSTEM_NON_COHERENT)
    #[bits(2)]
    pub aperture: u8,
    /// 3:3 VOL
    pub vol: bool,
    /// 4:4 ENCRYPTED
    pub encrypted: bool,
    /// 5:5 PRIVILEGE
    pub privilege: bool,
    /// 6:6 READ_ONLY
    pub read_only: bool,
    /// 7:7 ATOMIC_DISABLE
    pub atomic_disable: bool,
    /// 53:8 ADDRESS_SYS (address >> 12); ADDRESS_VID is (35-3):8, ADDRESS_VID_PEER 35:(36-3)
    #[bits(46)]
    pub address_sys: u64,
    #[bits(2)]
    __: u8,
    /// 63:56 KIND
    #[bits(8)]
    pub kind: u8,
}

// ---------------------------------------------------------------------------------------------
// Version 3 (gh100 dev_mmu.h)
// ---------------------------------------------------------------------------------------------

/// `NV_MMU_VER3_PDE` (8 bytes).
#[bitfield(u64)]
#[derive(PartialEq, Eq)]
pub struct NV_MMU_VER3_PDE {
    /// 0:0 IS_PTE (also VALID)
    pub is_pte: bool,
    /// 2:1 APERTURE (0 INVALID, 1 VIDEO_MEMORY, 2 SYSTEM_COHERENT, 3 SYSTEM_NON_COHERENT)
    #[bits(2)]
    pub aperture: u8,
    /// 5:3 PCF (see [`V3_PDE_PCF_VALID_CACHED_ATS_NOT_ALLOWED`])
    #[bits(3)]
    pub pcf: u8,
    #[bits(6)]
    __: u8,
    /// 51:12 ADDRESS (address >> 12)
    #[bits(40)]
    pub address: u64,
    #[bits(12)]
    __: u16,
}

/// `NV_MMU_VER3_DUAL_PDE` (16 bytes).
#[bitfield(u128)]
#[derive(PartialEq, Eq)]
pub struct NV_MMU_VER3_DUAL_PDE {
    /// 0:0 IS_PTE
    pub is_pte: bool,
    /// 2:1 APERTURE_BIG
    #[bits(2)]
    pub aperture_big: u8,
    /// 5:3 PCF_BIG
    #[bits(3)]
    pub pcf_big: u8,
    #[bits(2)]
    __: u8,
    /// 51:8 ADDRESS_BIG (address >> 8)
    #[bits(44)]
    pub address_big: u64,
    #[bits(13)]
    __: u16,
    /// 66:65 APERTURE_SMALL
    #[bits(2)]
    pub aperture_small: u8,
    /// 69:67 PCF_SMALL
    #[bits(3)]
    pub pcf_small: u8,
    #[bits(6)]
    __: u8,
    /// 115:76 ADDRESS_SMALL (address >> 12)
    #[bits(40)]
    pub address_small: u64,
    #[bits(12)]
    __: u16,
}

/// `NV_MMU_VER3_PTE` (8 bytes).
#[bitfield(u64)]
#[derive(PartialEq, Eq)]
pub struct NV_MMU_VER3_PTE {
    /// 0:0 VALID
    pub valid: bool,
    /// 2:1 APERTURE (0 VIDEO_MEMORY, 1 PEER_MEMORY, 2 SYSTEM_COHERENT, 3 SYSTEM_NON_COHERENT)
    #[bits(2)]
    pub aperture: u8,
    /// 7:3 PCF (bit 0 UNCACHED, 1 PRIVILEGE, 2 RO, 3 NO_ATOMIC, 4 ACD for a valid PTE)
    #[bits(5)]
    pub pcf: u8,
    /// 11:8 KIND
    #[bits(4)]
    pub kind: u8,
    /// 51:12 ADDRESS (address >> 12; ADDRESS_VID is 39:12)
    #[bits(40)]
    pub address: u64,
    #[bits(9)]
    __: u16,
    /// 63:61 PEER_ID
    #[bits(3)]
    pub peer_id: u8,
}

/// `NV_MMU_VER3_PDE_PCF_VALID_CACHED_ATS_NOT_ALLOWED`: used for tables in VRAM.
pub const V3_PDE_PCF_VALID_CACHED_ATS_NOT_ALLOWED: u8 = 2;
/// `NV_MMU_VER3_PDE_PCF_VALID_UNCACHED_ATS_NOT_ALLOWED`: used for tables in host memory.
pub const V3_PDE_PCF_VALID_UNCACHED_ATS_NOT_ALLOWED: u8 = 3;

/// `NV_MMU_VER3_PTE_PCF` bits of a valid PTE (`..._UNCACHED_...` = 1, `PRIVILEGE_...` = 2,
/// `..._RO_...` = 4, `..._NO_ATOMIC_...` = 8, `..._ACD` = 0x10).
pub mod v3_pcf {
    /// Not cached in L2.
    pub const UNCACHED: u8 = 1 << 0;
    /// Privileged access only.
    pub const PRIVILEGE: u8 = 1 << 1;
    /// Read-only.
    pub const RO: u8 = 1 << 2;
    /// Atomics fault.
    pub const NO_ATOMIC: u8 = 1 << 3;
    /// Access counting disabled.
    pub const ACD: u8 = 1 << 4;
}

const fn fits(value: u64, bits: u32) -> bool {
    bits >= 64 || value >> bits == 0
}

fn check_addr(addr: u64, shift: u32, field_bits: u32) -> Result<u64, MmError> {
    let align = 1u64 << shift;
    if !addr.is_multiple_of(align) {
        return Err(MmError::Misaligned {
            what: "physical address",
            value: addr,
            align,
        });
    }
    let v = addr >> shift;
    if !fits(v, field_bits) {
        return Err(MmError::AddressTooWide {
            addr,
            bits: field_bits + shift,
        });
    }
    Ok(v)
}

/// Bits of the v2 video-memory address fields (`ADDRESS_VID` (35-3):8 = 25 bits).
const V2_VID_BITS: u32 = 25;
/// Bits of the v2 big-page-table video address (`ADDRESS_BIG_VID` (35-3):4 = 29 bits).
const V2_BIG_VID_BITS: u32 = 29;
/// Bits of the v3 video-memory PTE address (`ADDRESS_VID` 39:12 = 28 bits).
const V3_VID_BITS: u32 = 28;

/// Encodes a valid PTE mapping `pa` (4 KiB aligned) with `attrs`.
pub fn encode_pte(v: MmuVersion, pa: u64, attrs: &PteAttrs) -> Result<u64, MmError> {
    let peer = match attrs.aperture {
        PteAperture::Peer(id) if id > 7 => {
            return Err(MmError::BadAttribute {
                what: "peer id",
                value: id as u64,
            });
        }
        PteAperture::Peer(id) => id,
        _ => 0,
    };
    match v {
        MmuVersion::V2 => {
            let addr_field = match attrs.aperture {
                PteAperture::Video => check_addr(pa, 12, V2_VID_BITS)?,
                // ADDRESS_VID + ADDRESS_VID_PEER at 35:33 (bit 25 of the field).
                PteAperture::Peer(_) => check_addr(pa, 12, V2_VID_BITS)? | (peer as u64) << 25,
                _ => check_addr(pa, 12, 46)?,
            };
            Ok(NV_MMU_VER2_PTE::new()
                .with_valid(true)
                .with_aperture(attrs.aperture.field())
                .with_vol(!attrs.cached)
                .with_privilege(attrs.privileged)
                .with_read_only(attrs.read_only)
                .with_atomic_disable(!attrs.atomics)
                .with_address_sys(addr_field)
                .with_kind(attrs.kind)
                .into_bits())
        }
        MmuVersion::V3 => {
            if attrs.kind > 0xf {
                return Err(MmError::BadAttribute {
                    what: "v3 PTE kind",
                    value: attrs.kind as u64,
                });
            }
            let addr_field = match attrs.aperture {
                PteAperture::Video => check_addr(pa, 12, V3_VID_BITS)?,
                _ => check_addr(pa, 12, 40)?,
            };
            let mut pcf = 0;
            if !attrs.cached {
                pcf |= v3_pcf::UNCACHED;
            }
            if attrs.privileged {
                pcf |= v3_pcf::PRIVILEGE;
            }
            if attrs.read_only {
                pcf |= v3_pcf::RO;
            }
            if !attrs.atomics {
                pcf |= v3_pcf::NO_ATOMIC;
            }
            if !attrs.access_counting {
                pcf |= v3_pcf::ACD;
            }
            Ok(NV_MMU_VER3_PTE::new()
                .with_valid(true)
                .with_aperture(attrs.aperture.field())
                .with_pcf(pcf)
                .with_kind(attrs.kind)
                .with_address(addr_field)
                .with_peer_id(peer)
                .into_bits())
        }
    }
}

/// Decodes a PTE; `None` if it is not valid.
pub fn decode_pte(v: MmuVersion, raw: u64) -> Option<Pte> {
    match v {
        MmuVersion::V2 => {
            let p = NV_MMU_VER2_PTE::from_bits(raw);
            if !p.valid() {
                return None;
            }
            let field = p.address_sys();
            let (aperture, addr) = match p.aperture() {
                0 => (PteAperture::Video, (field & ((1 << V2_VID_BITS) - 1)) << 12),
                1 => (
                    PteAperture::Peer(((field >> 25) & 7) as u8),
                    (field & ((1 << V2_VID_BITS) - 1)) << 12,
                ),
                2 => (PteAperture::SysCoherent, field << 12),
                _ => (PteAperture::SysNonCoherent, field << 12),
            };
            Some(Pte {
                addr,
                attrs: PteAttrs {
                    aperture,
                    read_only: p.read_only(),
                    cached: !p.vol(),
                    atomics: !p.atomic_disable(),
                    privileged: p.privilege(),
                    access_counting: false,
                    kind: p.kind(),
                },
            })
        }
        MmuVersion::V3 => {
            let p = NV_MMU_VER3_PTE::from_bits(raw);
            if !p.valid() {
                return None;
            }
            let aperture = match p.aperture() {
                0 => PteAperture::Video,
                1 => PteAperture::Peer(p.peer_id()),
                2 => PteAperture::SysCoherent,
                _ => PteAperture::SysNonCoherent,
            };
            let field = if aperture == PteAperture::Video {
                p.address() & ((1 << V3_VID_BITS) - 1)
            } else {
                p.address()
            };
            let pcf = p.pcf();
            Some(Pte {
                addr: field << 12,
                attrs: PteAttrs {
                    aperture,
                    read_only: pcf & v3_pcf::RO != 0,
                    cached: pcf & v3_pcf::UNCACHED == 0,
                    atomics: pcf & v3_pcf::NO_ATOMIC == 0,
                    privileged: pcf & v3_pcf::PRIVILEGE != 0,
                    access_counting: pcf & v3_pcf::ACD == 0,
                    kind: p.kind(),
                },
            })
        }
    }
}

/// Encodes a single (8-byte) PDE pointing at `t`.
pub fn encode_pde(v: MmuVersion, t: TableRef) -> Result<u64, MmError> {
    match v {
        MmuVersion::V2 => {
            let bits = if t.aperture.is_sys() { 46 } else { V2_VID_BITS };
            Ok(NV_MMU_VER2_PDE::new()
                .with_aperture(t.aperture.field())
                .with_vol(t.aperture.is_sys())
                .with_no_ats(true)
                .with_address_sys(check_addr(t.addr, 12, bits)?)
                .into_bits())
        }
        MmuVersion::V3 => Ok(NV_MMU_VER3_PDE::new()
            .with_aperture(t.aperture.field())
            .with_pcf(v3_pde_pcf(t.aperture))
            .with_address(check_addr(t.addr, 12, 40)?)
            .into_bits()),
    }
}

fn v3_pde_pcf(a: TableAperture) -> u8 {
    if a.is_sys() {
        V3_PDE_PCF_VALID_UNCACHED_ATS_NOT_ALLOWED
    } else {
        V3_PDE_PCF_VALID_CACHED_ATS_NOT_ALLOWED
    }
}

/// Decodes a single (8-byte) directory entry.
pub fn decode_pde(v: MmuVersion, raw: u64) -> DirEntry {
    if raw & 1 != 0 {
        return match decode_pte(v, raw) {
            Some(p) => DirEntry::Page(p),
            None => DirEntry::Invalid,
        };
    }
    let (aperture, addr) = match v {
        MmuVersion::V2 => {
            let p = NV_MMU_VER2_PDE::from_bits(raw);
            let ap = TableAperture::from_field(p.aperture());
            let field = match ap {
                Some(TableAperture::Video) => p.address_sys() & ((1 << V2_VID_BITS) - 1),
                _ => p.address_sys(),
            };
            (ap, field << 12)
        }
        MmuVersion::V3 => {
            let p = NV_MMU_VER3_PDE::from_bits(raw);
            (TableAperture::from_field(p.aperture()), p.address() << 12)
        }
    };
    match aperture {
        Some(aperture) => DirEntry::Table(TableRef { aperture, addr }),
        None => DirEntry::Invalid,
    }
}

/// Encodes a dual PD0 entry as (low, high) 64-bit words. Both halves `None` gives zeros.
pub fn encode_dual_pde(
    v: MmuVersion,
    big: Option<TableRef>,
    small: Option<TableRef>,
) -> Result<(u64, u64), MmError> {
    let bits: u128 = match v {
        MmuVersion::V2 => {
            let mut e = NV_MMU_VER2_DUAL_PDE::new();
            if let Some(b) = big {
                let w = if b.aperture.is_sys() {
                    50
                } else {
                    V2_BIG_VID_BITS
                };
                e = e
                    .with_aperture_big(b.aperture.field())
                    .with_vol_big(b.aperture.is_sys())
                    .with_address_big_sys(check_addr(b.addr, 8, w)?);
            }
            if let Some(s) = small {
                let w = if s.aperture.is_sys() { 46 } else { V2_VID_BITS };
                e = e
                    .with_aperture_small(s.aperture.field())
                    .with_vol_small(s.aperture.is_sys())
                    .with_address_small_sys(check_addr(s.addr, 12, w)?);
            }
            e.into_bits()
        }
        MmuVersion::V3 => {
            let mut e = NV_MMU_VER3_DUAL_PDE::new();
            if let Some(b) = big {
                e = e
                    .with_aperture_big(b.aperture.field())
                    .with_pcf_big(v3_pde_pcf(b.aperture))
                    .with_address_big(check_addr(b.addr, 8, 44)?);
            }
            if let Some(s) = small {
                e = e
                    .with_aperture_small(s.aperture.field())
                    .with_pcf_small(v3_pde_pcf(s.aperture))
                    .with_address_small(check_addr(s.addr, 12, 40)?);
            }
            e.into_bits()
        }
    };
    Ok((bits as u64, (bits >> 64) as u64))
}

/// Decodes a dual PD0 entry from its (low, high) words.
pub fn decode_dual_pde(v: MmuVersion, lo: u64, hi: u64) -> DualEntry {
    if lo & 1 != 0 {
        return match decode_pte(v, lo) {
            Some(p) => DualEntry::Page(p),
            None => DualEntry::Invalid,
        };
    }
    let raw = (hi as u128) << 64 | lo as u128;
    let (big, small) = match v {
        MmuVersion::V2 => {
            let e = NV_MMU_VER2_DUAL_PDE::from_bits(raw);
            let big = TableAperture::from_field(e.aperture_big()).map(|aperture| {
                let f = e.address_big_sys();
                let f = if aperture.is_sys() {
                    f
                } else {
                    f & ((1 << V2_BIG_VID_BITS) - 1)
                };
                TableRef {
                    aperture,
                    addr: f << 8,
                }
            });
            let small = TableAperture::from_field(e.aperture_small()).map(|aperture| {
                let f = e.address_small_sys();
                let f = if aperture.is_sys() {
                    f
                } else {
                    f & ((1 << V2_VID_BITS) - 1)
                };
                TableRef {
                    aperture,
                    addr: f << 12,
                }
            });
            (big, small)
        }
        MmuVersion::V3 => {
            let e = NV_MMU_VER3_DUAL_PDE::from_bits(raw);
            let big = TableAperture::from_field(e.aperture_big()).map(|aperture| TableRef {
                aperture,
                addr: e.address_big() << 8,
            });
            let small = TableAperture::from_field(e.aperture_small()).map(|aperture| TableRef {
                aperture,
                addr: e.address_small() << 12,
            });
            (big, small)
        }
    };
    if big.is_none() && small.is_none() {
        DualEntry::Invalid
    } else {
        DualEntry::Tables { big, small }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (OFFSET, BITS) of a field from the header's hi:lo.
    const fn hl(hi: usize, lo: usize) -> (usize, usize) {
        (lo, hi - lo + 1)
    }

    #[test]
    fn v2_field_positions_match_tu102_dev_mmu_h() {
        type P = NV_MMU_VER2_PDE;
        assert_eq!((P::IS_PTE_OFFSET, P::IS_PTE_BITS), hl(0, 0));
        assert_eq!((P::APERTURE_OFFSET, P::APERTURE_BITS), hl(2, 1));
        assert_eq!((P::VOL_OFFSET, P::VOL_BITS), hl(3, 3));
        assert_eq!((P::NO_ATS_OFFSET, P::NO_ATS_BITS), hl(5, 5));
        assert_eq!((P::ADDRESS_SYS_OFFSET, P::ADDRESS_SYS_BITS), hl(53, 8));
        type D = NV_MMU_VER2_DUAL_PDE;
        assert_eq!((D::IS_PTE_OFFSET, D::IS_PTE_BITS), hl(0, 0));
        assert_eq!((D::APERTURE_BIG_OFFSET, D::APERTURE_BIG_BITS), hl(2, 1));
        assert_eq!((D::VOL_BIG_OFFSET, D::VOL_BIG_BITS), hl(3, 3));
        assert_eq!(
            (D::ADDRESS_BIG_SYS_OFFSET, D::ADDRESS_BIG_SYS_BITS),
            hl(53, 4)
        );
        assert_eq!(
            (D::APERTURE_SMALL_OFFSET, D::APERTURE_SMALL_BITS),
            hl(66, 65)
        );
        assert_eq!((D::VOL_SMALL_OFFSET, D::VOL_SMALL_BITS), hl(67, 67));
        assert_eq!(
            (D::ADDRESS_SMALL_SYS_OFFSET, D::ADDRESS_SMALL_SYS_BITS),
            hl(117, 72)
        );
        type T = NV_MMU_VER2_PTE;
        assert_eq!((T::VALID_OFFSET, T::VALID_BITS), hl(0, 0));
        assert_eq!((T::APERTURE_OFFSET, T::APERTURE_BITS), hl(2, 1));
        assert_eq!((T::VOL_OFFSET, T::VOL_BITS), hl(3, 3));
        assert_eq!((T::ENCRYPTED_OFFSET, T::ENCRYPTED_BITS), hl(4, 4));
        assert_eq!((T::PRIVILEGE_OFFSET, T::PRIVILEGE_BITS), hl(5, 5));
        assert_eq!((T::READ_ONLY_OFFSET, T::READ_ONLY_BITS), hl(6, 6));
        assert_eq!((T::ATOMIC_DISABLE_OFFSET, T::ATOMIC_DISABLE_BITS), hl(7, 7));
        assert_eq!((T::ADDRESS_SYS_OFFSET, T::ADDRESS_SYS_BITS), hl(53, 8));
        assert_eq!((T::KIND_OFFSET, T::KIND_BITS), hl(63, 56));
        // NV_MMU_VER2_PDE__SIZE 8, NV_MMU_VER2_DUAL_PDE__SIZE 16, NV_MMU_VER2_PTE__SIZE 8.
        assert_eq!(core::mem::size_of::<P>(), 8);
        assert_eq!(core::mem::size_of::<D>(), 16);
        assert_eq!(core::mem::size_of::<T>(), 8);
    }

    #[test]
    fn v3_field_positions_match_gh100_dev_mmu_h() {
        type P = NV_MMU_VER3_PDE;
        assert_eq!((P::IS_PTE_OFFSET, P::IS_PTE_BITS), hl(0, 0));
        assert_eq!((P::APERTURE_OFFSET, P::APERTURE_BITS), hl(2, 1));
        assert_eq!((P::PCF_OFFSET, P::PCF_BITS), hl(5, 3));
        assert_eq!((P::ADDRESS_OFFSET, P::ADDRESS_BITS), hl(51, 12));
        type D = NV_MMU_VER3_DUAL_PDE;
        assert_eq!((D::APERTURE_BIG_OFFSET, D::APERTURE_BIG_BITS), hl(2, 1));
        assert_eq!((D::PCF_BIG_OFFSET, D::PCF_BIG_BITS), hl(5, 3));
        assert_eq!((D::ADDRESS_BIG_OFFSET, D::ADDRESS_BIG_BITS), hl(51, 8));
        assert_eq!(
            (D::APERTURE_SMALL_OFFSET, D::APERTURE_SMALL_BITS),
            hl(66, 65)
        );
        assert_eq!((D::PCF_SMALL_OFFSET, D::PCF_SMALL_BITS), hl(69, 67));
        assert_eq!(
            (D::ADDRESS_SMALL_OFFSET, D::ADDRESS_SMALL_BITS),
            hl(115, 76)
        );
        type T = NV_MMU_VER3_PTE;
        assert_eq!((T::VALID_OFFSET, T::VALID_BITS), hl(0, 0));
        assert_eq!((T::APERTURE_OFFSET, T::APERTURE_BITS), hl(2, 1));
        assert_eq!((T::PCF_OFFSET, T::PCF_BITS), hl(7, 3));
        assert_eq!((T::KIND_OFFSET, T::KIND_BITS), hl(11, 8));
        assert_eq!((T::ADDRESS_OFFSET, T::ADDRESS_BITS), hl(51, 12));
        assert_eq!((T::PEER_ID_OFFSET, T::PEER_ID_BITS), hl(63, 61));
        assert_eq!(core::mem::size_of::<P>(), 8);
        assert_eq!(core::mem::size_of::<D>(), 16);
        assert_eq!(core::mem::size_of::<T>(), 8);
    }

    #[test]
    fn known_encodings() {
        // v3 VRAM PTE at 0x1234_5000: VALID, APERTURE VIDEO (0), PCF ACD (0x10 << 3),
        // KIND GENERIC_MEMORY (6 << 8), ADDRESS 0x12345 << 12.
        let e = encode_pte(MmuVersion::V3, 0x1234_5000, &PteAttrs::vram()).unwrap();
        assert_eq!(e, 1 | (0x10 << 3) | (6 << 8) | (0x12345 << 12));
        // v3 sysmem read-only PTE: APERTURE 2, PCF UNCACHED|RO|ACD = 0x15.
        let e = encode_pte(
            MmuVersion::V3,
            0x1_0000_0000,
            &PteAttrs::sysmem().read_only(),
        )
        .unwrap();
        assert_eq!(e, 1 | (2 << 1) | (0x15 << 3) | (6 << 8) | (0x10_0000 << 12));
        // v2 VRAM PTE: VALID, ADDRESS_VID at bit 8, KIND at 56.
        let e = encode_pte(MmuVersion::V2, 0x1234_5000, &PteAttrs::vram()).unwrap();
        assert_eq!(e, 1 | (0x12345 << 8) | (6 << 56));
        // v2 sysmem PTE: APERTURE 2, VOL.
        let e = encode_pte(MmuVersion::V2, 0x1_0000_0000, &PteAttrs::sysmem()).unwrap();
        assert_eq!(e, 1 | (2 << 1) | (1 << 3) | (0x10_0000 << 8) | (6 << 56));
        // v2 peer 5: APERTURE 1, ADDRESS_VID_PEER 35:33.
        let attrs = PteAttrs {
            aperture: PteAperture::Peer(5),
            ..PteAttrs::vram()
        };
        let e = encode_pte(MmuVersion::V2, 0x2000, &attrs).unwrap();
        assert_eq!(e, 1 | (1 << 1) | (2 << 8) | (5 << 33) | (6 << 56));
        // v3 PDE in VRAM at 0x20_0000: APERTURE 1, PCF 2, ADDRESS 0x200 << 12.
        let t = TableRef {
            aperture: TableAperture::Video,
            addr: 0x20_0000,
        };
        assert_eq!(
            encode_pde(MmuVersion::V3, t).unwrap(),
            (1 << 1) | (2 << 3) | (0x200 << 12)
        );
        // v2 PDE: APERTURE 1, NO_ATS, ADDRESS at bit 8.
        assert_eq!(
            encode_pde(MmuVersion::V2, t).unwrap(),
            (1 << 1) | (1 << 5) | (0x200 << 8)
        );
        // v3 dual: big table at 0x3000 (shift 8 at bit 8), small at 0x4000 (shift 12 at 76).
        let big = TableRef {
            aperture: TableAperture::Video,
            addr: 0x3000,
        };
        let small = TableRef {
            aperture: TableAperture::SysCoherent,
            addr: 0x4000,
        };
        let (lo, hi) = encode_dual_pde(MmuVersion::V3, Some(big), Some(small)).unwrap();
        assert_eq!(lo, (1 << 1) | (2 << 3) | (0x30 << 8));
        assert_eq!(hi, (2 << 1) | (3 << 3) | (0x4 << 12));
        // v2 dual: big at bit 4 (shift 8), small at bit 72 (= 8 of the high word).
        let (lo, hi) = encode_dual_pde(MmuVersion::V2, Some(big), Some(small)).unwrap();
        assert_eq!(lo, (1 << 1) | (0x30 << 4));
        assert_eq!(hi, (2 << 1) | (1 << 3) | (0x4 << 8));
    }

    #[test]
    fn roundtrips_and_limits() {
        for v in [MmuVersion::V2, MmuVersion::V3] {
            for attrs in [
                PteAttrs::vram(),
                PteAttrs::sysmem().read_only(),
                PteAttrs {
                    aperture: PteAperture::SysNonCoherent,
                    privileged: true,
                    atomics: false,
                    ..PteAttrs::vram()
                },
                PteAttrs {
                    aperture: PteAperture::Peer(7),
                    ..PteAttrs::vram()
                },
            ] {
                let raw = encode_pte(v, 0x7654_3000, &attrs).unwrap();
                let p = decode_pte(v, raw).unwrap();
                assert_eq!(p.addr, 0x7654_3000);
                let mut want = attrs;
                if v == MmuVersion::V2 {
                    want.access_counting = false;
                }
                assert_eq!(p.attrs, want);
                assert_eq!(decode_pde(v, raw), DirEntry::Page(p));
            }
            let t = TableRef {
                aperture: TableAperture::SysNonCoherent,
                addr: 0x8_0000_0000,
            };
            assert_eq!(decode_pde(v, encode_pde(v, t).unwrap()), DirEntry::Table(t));
            let (lo, hi) = encode_dual_pde(v, None, Some(t)).unwrap();
            assert_eq!(
                decode_dual_pde(v, lo, hi),
                DualEntry::Tables {
                    big: None,
                    small: Some(t)
                }
            );
            assert_eq!(encode_dual_pde(v, None, None).unwrap(), (0, 0));
            assert_eq!(decode_dual_pde(v, 0, 0), DualEntry::Invalid);
            assert_eq!(decode_pde(v, 0), DirEntry::Invalid);
            assert_eq!(decode_pte(v, 0), None);
            assert!(matches!(
                encode_pte(v, 0x1001, &PteAttrs::vram()),
                Err(MmError::Misaligned { .. })
            ));
        }
        // v2 VRAM addresses stop at 128 GiB (ADDRESS_VID is 25 bits of 4 KiB pages).
        assert!(matches!(
            encode_pte(MmuVersion::V2, 1 << 37, &PteAttrs::vram()),
            Err(MmError::AddressTooWide { bits: 37, .. })
        ));
        assert!(encode_pte(MmuVersion::V2, 1 << 37, &PteAttrs::sysmem()).is_ok());
        // v3 VRAM addresses stop at 1 TiB (ADDRESS_VID 39:12).
        assert!(encode_pte(MmuVersion::V3, (1 << 40) - 4096, &PteAttrs::vram()).is_ok());
        assert!(encode_pte(MmuVersion::V3, 1 << 40, &PteAttrs::vram()).is_err());
        // v3 kind is 4 bits.
        let bad = PteAttrs {
            kind: 0x10,
            ..PteAttrs::vram()
        };
        assert!(matches!(
            encode_pte(MmuVersion::V3, 0, &bad),
            Err(MmError::BadAttribute { .. })
        ));
        assert!(encode_pte(MmuVersion::V2, 0, &bad).is_ok());
        let bad_peer = PteAttrs {
            aperture: PteAperture::Peer(8),
            ..PteAttrs::vram()
        };
        assert!(encode_pte(MmuVersion::V3, 0, &bad_peer).is_err());
    }
}
