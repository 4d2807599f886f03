//! Allocation parameter structs for the objects device bring-up creates.
//!
//! Each struct has the name and field names of the NVIDIA header it mirrors (so the open driver
//! can be grepped for them), `#[repr(C)]` layout with explicit padding, and a test of its size
//! and field offsets against the header. Layouts are those of 570.144 (GSP-RM firmware) and
//! 580.142 (kernel driver), identical unless a type carries an `_R570`/`_R580` suffix; for those
//! a builder ([`VaSpaceAlloc`]) produces the right bytes for an [`RmAbi`].
//!
//! Alloc params are not size-checked by RM (it reads the size its class descriptor names), so a
//! wrong layout is silently misread: the offset tests are the only guard.
#![allow(non_camel_case_types, non_snake_case)]
#![allow(missing_docs)] // field names are NVIDIA's; the header named on each struct documents them

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::RmAbi;

/// Implements `Default` as all-zero bytes (RM's convention for "not set").
macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t as FromZeros>::new_zeroed()
            }
        }
    )*};
}
pub(crate) use zeroed_default;

/// `NV0080_ALLOC_PARAMETERS` (`class/cl0080.h`): params of `NV01_DEVICE_0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV0080_ALLOC_PARAMETERS {
    pub deviceId: u32,
    pub hClientShare: u32,
    pub hTargetClient: u32,
    pub hTargetDevice: u32,
    pub flags: u32,
    pub _pad0: u32,
    pub vaSpaceSize: u64,
    pub vaStartInternal: u64,
    pub vaLimitInternal: u64,
    pub vaMode: u32,
    pub _pad1: u32,
}

/// `NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES` (`nvos.h`).
pub const NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES: u32 = 0;
/// `NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE`.
pub const NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE: u32 = 1;
/// `NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES`.
pub const NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES: u32 = 2;

/// `NV2080_ALLOC_PARAMETERS` (`class/cl2080.h`): params of `NV20_SUBDEVICE_0`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_ALLOC_PARAMETERS {
    pub subDeviceId: u32,
}

/// `NV_VASPACE_ALLOCATION_PARAMETERS` as of 570.144 (`nvos.h`): 48 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV_VASPACE_ALLOCATION_PARAMETERS_R570 {
    pub index: u32,
    pub flags: u32,
    pub vaSize: u64,
    pub vaStartInternal: u64,
    pub vaLimitInternal: u64,
    pub bigPageSize: u32,
    pub _pad0: u32,
    pub vaBase: u64,
}

/// `NV_VASPACE_ALLOCATION_PARAMETERS` as of 580.142: 56 bytes (`pasid` appended at 580.65.06).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV_VASPACE_ALLOCATION_PARAMETERS_R580 {
    pub index: u32,
    pub flags: u32,
    pub vaSize: u64,
    pub vaStartInternal: u64,
    pub vaLimitInternal: u64,
    pub bigPageSize: u32,
    pub _pad0: u32,
    pub vaBase: u64,
    pub pasid: u32,
    pub _pad1: u32,
}

/// `NV_VASPACE_ALLOCATION_INDEX_GPU_NEW`: create a new VA space.
pub const NV_VASPACE_ALLOCATION_INDEX_GPU_NEW: u32 = 0;
/// `NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED` (BIT(3)): page tables owned by UVM or by us.
pub const NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED: u32 = 1 << 3;
/// `NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING` (BIT(6)); UVM registration needs it.
pub const NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING: u32 = 1 << 6;
/// `NV_VASPACE_ALLOCATION_FLAGS_PTETABLE_HEAP_MANAGED` (BIT(13)): what the kernel RM asks for
/// its golden-context VA space (`kgraphicsCreateGoldenImageChannel_IMPL`).
pub const NV_VASPACE_ALLOCATION_FLAGS_PTETABLE_HEAP_MANAGED: u32 = 1 << 13;

/// A `FERMI_VASPACE_A` allocation, independent of the RM version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VaSpaceAlloc {
    /// `index` (`NV_VASPACE_ALLOCATION_INDEX_GPU_NEW`).
    pub index: u32,
    /// `NV_VASPACE_ALLOCATION_FLAGS_*`.
    pub flags: u32,
    /// Size of the VA space in bytes (0: RM default).
    pub va_size: u64,
    /// Lowest usable VA.
    pub va_base: u64,
    /// Big page size (0: the GPU's default).
    pub big_page_size: u32,
    /// r580 only; ignored for r570.
    pub pasid: u32,
}

/// The `FERMI_VASPACE_A` params in the layout of one RM version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VaSpaceParams {
    /// 48-byte layout.
    R570(NV_VASPACE_ALLOCATION_PARAMETERS_R570),
    /// 56-byte layout.
    R580(NV_VASPACE_ALLOCATION_PARAMETERS_R580),
}

impl VaSpaceAlloc {
    /// The params in the layout `abi` expects.
    pub fn encode(&self, abi: RmAbi) -> VaSpaceParams {
        match abi {
            RmAbi::R570 => VaSpaceParams::R570(NV_VASPACE_ALLOCATION_PARAMETERS_R570 {
                index: self.index,
                flags: self.flags,
                vaSize: self.va_size,
                vaStartInternal: 0,
                vaLimitInternal: 0,
                bigPageSize: self.big_page_size,
                _pad0: 0,
                vaBase: self.va_base,
            }),
            RmAbi::R580 => VaSpaceParams::R580(NV_VASPACE_ALLOCATION_PARAMETERS_R580 {
                index: self.index,
                flags: self.flags,
                vaSize: self.va_size,
                vaStartInternal: 0,
                vaLimitInternal: 0,
                bigPageSize: self.big_page_size,
                _pad0: 0,
                vaBase: self.va_base,
                pasid: self.pasid,
                _pad1: 0,
            }),
        }
    }

    /// Reads params of either layout back (by size), for RM models.
    pub fn decode(bytes: &[u8]) -> Option<VaSpaceAlloc> {
        if let Ok(p) = NV_VASPACE_ALLOCATION_PARAMETERS_R580::read_from_bytes(bytes) {
            return Some(VaSpaceAlloc {
                index: p.index,
                flags: p.flags,
                va_size: p.vaSize,
                va_base: p.vaBase,
                big_page_size: p.bigPageSize,
                pasid: p.pasid,
            });
        }
        let p = NV_VASPACE_ALLOCATION_PARAMETERS_R570::read_from_bytes(bytes).ok()?;
        Some(VaSpaceAlloc {
            index: p.index,
            flags: p.flags,
            va_size: p.vaSize,
            va_base: p.vaBase,
            big_page_size: p.bigPageSize,
            pasid: 0,
        })
    }
}

impl VaSpaceParams {
    /// The bytes to pass to `Rm::alloc`.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        match self {
            VaSpaceParams::R570(p) => p.as_mut_bytes(),
            VaSpaceParams::R580(p) => p.as_mut_bytes(),
        }
    }

    /// The bytes, read-only.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            VaSpaceParams::R570(p) => p.as_bytes(),
            VaSpaceParams::R580(p) => p.as_bytes(),
        }
    }
}

/// `NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS` (`nvos.h`): params of `KEPLER_CHANNEL_GROUP_A`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS {
    pub hObjectError: u32,
    pub hObjectEccError: u32,
    pub hVASpace: u32,
    pub engineType: u32,
    pub bIsCallingContextVgpuPlugin: u8,
    pub _pad0: [u8; 3],
}

/// `NV_CTXSHARE_ALLOCATION_PARAMETERS` (`nvos.h`): params of `FERMI_CONTEXT_SHARE_A`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV_CTXSHARE_ALLOCATION_PARAMETERS {
    pub hVASpace: u32,
    pub flags: u32,
    pub subctxId: u32,
}

/// `NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC` (field 1:0).
pub const NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC: u32 = 0;
/// `NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC`.
pub const NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC: u32 = 1;

/// `NV_MEMORY_DESC_PARAMS` (`alloc/alloc_channel.h`): a physical memory descriptor, used by
/// clients that own channel memory themselves (GSP-RM's clients on bare metal).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV_MEMORY_DESC_PARAMS {
    pub base: u64,
    pub size: u64,
    pub addressSpace: u32,
    pub cacheAttrib: u32,
}

/// `ADDR_SYSMEM` for [`NV_MEMORY_DESC_PARAMS::addressSpace`] (`NV_ADDRESS_SPACE`,
/// `generated/g_mem_desc_nvoc.h`).
pub const ADDR_SYSMEM: u32 = 1;
/// `ADDR_FBMEM`.
pub const ADDR_FBMEM: u32 = 2;

/// `NV_MAX_SUBDEVICES` (`nvlimits.h`).
pub const NV_MAX_SUBDEVICES: usize = 8;
/// `CC_CHAN_ALLOC_IV_SIZE_DWORD`.
pub const CC_CHAN_ALLOC_IV_SIZE_DWORD: usize = 3;
/// `CC_CHAN_ALLOC_NONCE_SIZE_DWORD`.
pub const CC_CHAN_ALLOC_NONCE_SIZE_DWORD: usize = 8;

/// `NV_CHANNEL_ALLOC_PARAMS` = `NV_CHANNELGPFIFO_ALLOCATION_PARAMETERS`
/// (`alloc/alloc_channel.h`): params of every `*_CHANNEL_GPFIFO_*` class. 368 bytes in 570.144
/// and 580.142 (`tpcConfigID` was added in 570).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV_CHANNEL_ALLOC_PARAMS {
    pub hObjectError: u32,
    pub hObjectBuffer: u32,
    pub gpFifoOffset: u64,
    pub gpFifoEntries: u32,
    pub flags: u32,
    pub hContextShare: u32,
    pub hVASpace: u32,
    pub hUserdMemory: [u32; NV_MAX_SUBDEVICES],
    pub userdOffset: [u64; NV_MAX_SUBDEVICES],
    pub engineType: u32,
    pub cid: u32,
    pub subDeviceId: u32,
    pub hObjectEccError: u32,
    pub instanceMem: NV_MEMORY_DESC_PARAMS,
    pub userdMem: NV_MEMORY_DESC_PARAMS,
    pub ramfcMem: NV_MEMORY_DESC_PARAMS,
    pub mthdbufMem: NV_MEMORY_DESC_PARAMS,
    pub hPhysChannelGroup: u32,
    pub internalFlags: u32,
    pub errorNotifierMem: NV_MEMORY_DESC_PARAMS,
    pub eccErrorNotifierMem: NV_MEMORY_DESC_PARAMS,
    pub ProcessID: u32,
    pub SubProcessID: u32,
    pub encryptIv: [u32; CC_CHAN_ALLOC_IV_SIZE_DWORD],
    pub decryptIv: [u32; CC_CHAN_ALLOC_IV_SIZE_DWORD],
    pub hmacNonce: [u32; CC_CHAN_ALLOC_NONCE_SIZE_DWORD],
    pub tpcConfigID: u32,
    pub _pad0: u32,
}

/// `NVOS04_FLAGS_DELAY_CHANNEL_SCHEDULING` (6:6): do not schedule until GPFIFO_SCHEDULE.
pub const NVOS04_FLAGS_DELAY_CHANNEL_SCHEDULING_TRUE: u32 = 1 << 6;

/// `NV_MEMORY_ALLOCATION_PARAMS` (`nvos.h`): params of `NV01_MEMORY_LOCAL_USER` and
/// `NV01_MEMORY_SYSTEM`. 128 bytes in 570.144 and 580.142 (`numaNode` added in 570).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV_MEMORY_ALLOCATION_PARAMS {
    pub owner: u32,
    pub r#type: u32,
    pub flags: u32,
    pub width: u32,
    pub height: u32,
    pub pitch: i32,
    pub attr: u32,
    pub attr2: u32,
    pub format: u32,
    pub comprCovg: u32,
    pub zcullCovg: u32,
    pub _pad0: u32,
    pub rangeLo: u64,
    pub rangeHi: u64,
    pub size: u64,
    pub alignment: u64,
    pub offset: u64,
    pub limit: u64,
    pub address: u64,
    pub ctagOffset: u32,
    pub hVASpace: u32,
    pub internalflags: u32,
    pub tag: u32,
    pub numaNode: i32,
    pub _pad1: u32,
}

/// `NVOS32_TYPE_IMAGE`.
pub const NVOS32_TYPE_IMAGE: u32 = 0;
/// `NVOS32_TYPE_NOTIFIER`.
pub const NVOS32_TYPE_NOTIFIER: u32 = 13;

/// `NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT`.
pub const NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT: u32 = 0x1;
/// `NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE`.
pub const NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE: u32 = 0x100;
/// `NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED`.
pub const NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED: u32 = 0x4000;
/// `NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED`.
pub const NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED: u32 = 0x8000;
/// `NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM`.
pub const NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM: u32 = 0x10000;

/// `NVOS32_ATTR_PAGE_SIZE` (24:23) values.
pub mod attr {
    /// Shift of `NVOS32_ATTR_PAGE_SIZE`.
    pub const PAGE_SIZE_SHIFT: u32 = 23;
    /// `NVOS32_ATTR_PAGE_SIZE_4KB`.
    pub const PAGE_SIZE_4KB: u32 = 1 << PAGE_SIZE_SHIFT;
    /// `NVOS32_ATTR_PAGE_SIZE_BIG`.
    pub const PAGE_SIZE_BIG: u32 = 2 << PAGE_SIZE_SHIFT;
    /// `NVOS32_ATTR_PAGE_SIZE_HUGE`.
    pub const PAGE_SIZE_HUGE: u32 = 3 << PAGE_SIZE_SHIFT;
    /// `NVOS32_ATTR_LOCATION` (26:25) `_VIDMEM`.
    pub const LOCATION_VIDMEM: u32 = 0;
    /// `NVOS32_ATTR_LOCATION_PCI`.
    pub const LOCATION_PCI: u32 = 1 << 25;
    /// Mask of `NVOS32_ATTR_LOCATION`.
    pub const LOCATION_MASK: u32 = 3 << 25;
    /// `NVOS32_ATTR_PHYSICALITY_CONTIGUOUS` (28:27).
    pub const PHYSICALITY_CONTIGUOUS: u32 = 2 << 27;
    /// `NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS`.
    pub const PHYSICALITY_ALLOW_NONCONTIGUOUS: u32 = 3 << 27;
    /// `NVOS32_ATTR_COHERENCY_UNCACHED` (31:29).
    pub const COHERENCY_UNCACHED: u32 = 0;
    /// `NVOS32_ATTR_COHERENCY_CACHED`.
    pub const COHERENCY_CACHED: u32 = 1 << 29;
    /// `NVOS32_ATTR2_GPU_CACHEABLE_YES` (attr2 3:2).
    pub const ATTR2_GPU_CACHEABLE_YES: u32 = 1 << 2;
    /// `NVOS32_ATTR2_GPU_CACHEABLE_NO`.
    pub const ATTR2_GPU_CACHEABLE_NO: u32 = 2 << 2;
    /// `NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB` (attr2 21:20).
    pub const ATTR2_PAGE_SIZE_HUGE_2MB: u32 = 1 << 20;
}

/// `NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS` (`class/cl0070.h`): params of `NV01_MEMORY_VIRTUAL`,
/// a VA range reservation that memory is later mapped into.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS {
    pub offset: u64,
    pub limit: u64,
    pub hVASpace: u32,
    pub _pad0: u32,
}

/// `NV83DE_ALLOC_PARAMETERS` (`class/cl83de.h`): params of `GT200_DEBUGGER`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV83DE_ALLOC_PARAMETERS {
    pub hDebuggerClient_Obsolete: u32,
    pub hAppClient: u32,
    pub hClass3dObject: u32,
}

/// `NV_HOPPER_USERMODE_A_PARAMS` (`nvos.h`): optional params of `HOPPER_USERMODE_A`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV_HOPPER_USERMODE_A_PARAMS {
    pub bBar1Mapping: u8,
    pub bPriv: u8,
}

zeroed_default!(
    NV0080_ALLOC_PARAMETERS,
    NV_VASPACE_ALLOCATION_PARAMETERS_R570,
    NV_VASPACE_ALLOCATION_PARAMETERS_R580,
    NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS,
    NV_CHANNEL_ALLOC_PARAMS,
    NV_MEMORY_ALLOCATION_PARAMS,
);

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    // Offsets from open-gpu-kernel-modules 570.144 and 580.142 (see each struct's header);
    // they are the x86-64 layouts of those headers, also listed in rm-abi.md §3.

    #[test]
    fn nv0080_alloc() {
        type T = NV0080_ALLOC_PARAMETERS;
        assert_eq!(size_of::<T>(), 56);
        assert_eq!(offset_of!(T, hClientShare), 4);
        assert_eq!(offset_of!(T, hTargetClient), 8);
        assert_eq!(offset_of!(T, hTargetDevice), 12);
        assert_eq!(offset_of!(T, flags), 16);
        assert_eq!(offset_of!(T, vaSpaceSize), 24);
        assert_eq!(offset_of!(T, vaStartInternal), 32);
        assert_eq!(offset_of!(T, vaLimitInternal), 40);
        assert_eq!(offset_of!(T, vaMode), 48);
        assert_eq!(size_of::<NV2080_ALLOC_PARAMETERS>(), 4);
    }

    #[test]
    fn vaspace_r570_r580() {
        type A = NV_VASPACE_ALLOCATION_PARAMETERS_R570;
        type B = NV_VASPACE_ALLOCATION_PARAMETERS_R580;
        assert_eq!(size_of::<A>(), 48);
        assert_eq!(size_of::<B>(), 56);
        for (flags, size, start, limit, big, base) in [
            (
                offset_of!(A, flags),
                offset_of!(A, vaSize),
                offset_of!(A, vaStartInternal),
                offset_of!(A, vaLimitInternal),
                offset_of!(A, bigPageSize),
                offset_of!(A, vaBase),
            ),
            (
                offset_of!(B, flags),
                offset_of!(B, vaSize),
                offset_of!(B, vaStartInternal),
                offset_of!(B, vaLimitInternal),
                offset_of!(B, bigPageSize),
                offset_of!(B, vaBase),
            ),
        ] {
            assert_eq!(
                (flags, size, start, limit, big, base),
                (4, 8, 16, 24, 32, 40)
            );
        }
        assert_eq!(offset_of!(B, pasid), 48);
    }

    #[test]
    fn vaspace_builder_round_trips_per_abi() {
        let a = VaSpaceAlloc {
            index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
            flags: NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING
                | NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
            va_size: 0x1_ffff_fb00_0000,
            va_base: 0x1000,
            big_page_size: 0,
            pasid: 7,
        };
        let r570 = a.encode(RmAbi::R570);
        let r580 = a.encode(RmAbi::R580);
        assert_eq!(r570.as_bytes().len(), 48);
        assert_eq!(r580.as_bytes().len(), 56);
        // flags 0x48 at offset 4, vaBase at 40, as the H200 run used.
        assert_eq!(r580.as_bytes()[4], 0x48);
        assert_eq!(r570.as_bytes()[40..48], 0x1000u64.to_le_bytes());
        let back = VaSpaceAlloc::decode(r580.as_bytes()).unwrap();
        assert_eq!(back, a);
        let back = VaSpaceAlloc::decode(r570.as_bytes()).unwrap();
        assert_eq!(back, VaSpaceAlloc { pasid: 0, ..a });
        assert!(VaSpaceAlloc::decode(&[0; 40]).is_none());
    }

    #[test]
    fn channel_group_and_ctxshare() {
        type T = NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS;
        assert_eq!(size_of::<T>(), 20);
        assert_eq!(offset_of!(T, hObjectEccError), 4);
        assert_eq!(offset_of!(T, hVASpace), 8);
        assert_eq!(offset_of!(T, engineType), 12);
        assert_eq!(offset_of!(T, bIsCallingContextVgpuPlugin), 16);
        type C = NV_CTXSHARE_ALLOCATION_PARAMETERS;
        assert_eq!(size_of::<C>(), 12);
        assert_eq!(offset_of!(C, flags), 4);
        assert_eq!(offset_of!(C, subctxId), 8);
    }

    #[test]
    fn channel_alloc_params() {
        type T = NV_CHANNEL_ALLOC_PARAMS;
        assert_eq!(size_of::<NV_MEMORY_DESC_PARAMS>(), 24);
        assert_eq!(offset_of!(NV_MEMORY_DESC_PARAMS, addressSpace), 16);
        assert_eq!(offset_of!(NV_MEMORY_DESC_PARAMS, cacheAttrib), 20);
        assert_eq!(size_of::<T>(), 368);
        assert_eq!(offset_of!(T, hObjectBuffer), 4);
        assert_eq!(offset_of!(T, gpFifoOffset), 8);
        assert_eq!(offset_of!(T, gpFifoEntries), 16);
        assert_eq!(offset_of!(T, flags), 20);
        assert_eq!(offset_of!(T, hContextShare), 24);
        assert_eq!(offset_of!(T, hVASpace), 28);
        assert_eq!(offset_of!(T, hUserdMemory), 32);
        assert_eq!(offset_of!(T, userdOffset), 64);
        assert_eq!(offset_of!(T, engineType), 128);
        assert_eq!(offset_of!(T, cid), 132);
        assert_eq!(offset_of!(T, subDeviceId), 136);
        assert_eq!(offset_of!(T, hObjectEccError), 140);
        assert_eq!(offset_of!(T, instanceMem), 144);
        assert_eq!(offset_of!(T, userdMem), 168);
        assert_eq!(offset_of!(T, ramfcMem), 192);
        assert_eq!(offset_of!(T, mthdbufMem), 216);
        assert_eq!(offset_of!(T, hPhysChannelGroup), 240);
        assert_eq!(offset_of!(T, internalFlags), 244);
        assert_eq!(offset_of!(T, errorNotifierMem), 248);
        assert_eq!(offset_of!(T, eccErrorNotifierMem), 272);
        assert_eq!(offset_of!(T, ProcessID), 296);
        assert_eq!(offset_of!(T, SubProcessID), 300);
        assert_eq!(offset_of!(T, encryptIv), 304);
        assert_eq!(offset_of!(T, decryptIv), 316);
        assert_eq!(offset_of!(T, hmacNonce), 328);
        assert_eq!(offset_of!(T, tpcConfigID), 360);
    }

    #[test]
    fn memory_alloc_params() {
        type T = NV_MEMORY_ALLOCATION_PARAMS;
        assert_eq!(size_of::<T>(), 128);
        assert_eq!(offset_of!(T, r#type), 4);
        assert_eq!(offset_of!(T, flags), 8);
        assert_eq!(offset_of!(T, pitch), 20);
        assert_eq!(offset_of!(T, attr), 24);
        assert_eq!(offset_of!(T, attr2), 28);
        assert_eq!(offset_of!(T, format), 32);
        assert_eq!(offset_of!(T, comprCovg), 36);
        assert_eq!(offset_of!(T, zcullCovg), 40);
        assert_eq!(offset_of!(T, rangeLo), 48);
        assert_eq!(offset_of!(T, rangeHi), 56);
        assert_eq!(offset_of!(T, size), 64);
        assert_eq!(offset_of!(T, alignment), 72);
        assert_eq!(offset_of!(T, offset), 80);
        assert_eq!(offset_of!(T, limit), 88);
        assert_eq!(offset_of!(T, address), 96);
        assert_eq!(offset_of!(T, ctagOffset), 104);
        assert_eq!(offset_of!(T, hVASpace), 108);
        assert_eq!(offset_of!(T, internalflags), 112);
        assert_eq!(offset_of!(T, tag), 116);
        assert_eq!(offset_of!(T, numaNode), 120);
    }

    #[test]
    fn small_alloc_params() {
        type V = NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS;
        assert_eq!(size_of::<V>(), 24);
        assert_eq!(offset_of!(V, limit), 8);
        assert_eq!(offset_of!(V, hVASpace), 16);
        type D = NV83DE_ALLOC_PARAMETERS;
        assert_eq!(size_of::<D>(), 12);
        assert_eq!(offset_of!(D, hAppClient), 4);
        assert_eq!(offset_of!(D, hClass3dObject), 8);
        assert_eq!(size_of::<NV_HOPPER_USERMODE_A_PARAMS>(), 2);
    }

    #[test]
    fn attr_bits() {
        // NVOS32_ATTR_PAGE_SIZE 24:23, LOCATION 26:25, PHYSICALITY 28:27 (nvos.h).
        assert_eq!(attr::PAGE_SIZE_HUGE, 0x0180_0000);
        assert_eq!(attr::LOCATION_PCI, 0x0200_0000);
        assert_eq!(attr::PHYSICALITY_CONTIGUOUS, 0x1000_0000);
    }
}
