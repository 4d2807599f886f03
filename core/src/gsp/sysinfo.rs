//! `GspSystemInfo` (sent with GSP_SET_SYSTEM_INFO) and `GspStaticConfigInfo` (returned by
//! GET_GSP_STATIC_INFO), r570.144 layouts (`gsp_static_config.h`; offsets checked against
//! `gsp_abi_check.c`). Sub-structures nvbare does not interpret are opaque byte arrays.
#![allow(non_snake_case, non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `GSP_VF_INFO` (40 bytes).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GSP_VF_INFO {
    pub totalVFs: u32,
    pub firstVFOffset: u32,
    pub FirstVFBar0Address: u64,
    pub FirstVFBar1Address: u64,
    pub FirstVFBar2Address: u64,
    pub b64bitBar0: u8,
    pub b64bitBar1: u8,
    pub b64bitBar2: u8,
    pub _pad: [u8; 5],
}

/// `GspSystemInfo` at r570 (928 bytes): what the CPU tells GSP-RM about the system.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct GspSystemInfo {
    /// BAR0 bus address.
    pub gpuPhysAddr: u64,
    /// BAR1 bus address.
    pub gpuPhysFbAddr: u64,
    /// BAR2/3 bus address.
    pub gpuPhysInstAddr: u64,
    pub gpuPhysIoAddr: u64,
    /// bus << 8 | device << 3 | function.
    pub nvDomainBusDeviceFunc: u64,
    pub simAccessBufPhysAddr: u64,
    pub notifyOpSharedSurfacePhysAddr: u64,
    pub pcieAtomicsOpMask: u64,
    pub consoleMemSize: u64,
    pub maxUserVa: u64,
    /// `NV_PCFG` mirror (0x88000 pre-Hopper, 0x92000 on GH100/GB).
    pub pciConfigMirrorBase: u32,
    pub pciConfigMirrorSize: u32,
    /// Config dword 0 (device << 16 | vendor).
    pub PCIDeviceID: u32,
    /// Config dword 0x2c.
    pub PCISubDeviceID: u32,
    pub PCIRevisionID: u32,
    pub pcieAtomicsCplDeviceCapMask: u32,
    pub oorArch: u8,
    pub _pad0: [u8; 7],
    pub clPdbProperties: u64,
    pub Chipset: u32,
    pub bGpuBehindBridge: u8,
    pub bFlrSupported: u8,
    pub b64bBar0Supported: u8,
    pub bMnocAvailable: u8,
    pub chipsetL1ssEnable: u32,
    pub bUpstreamL0sUnsupported: u8,
    pub bUpstreamL1Unsupported: u8,
    pub bUpstreamL1PorSupported: u8,
    pub bUpstreamL1PorMobileOnly: u8,
    pub bSystemHasMux: u8,
    pub upstreamAddressValid: u8,
    /// `BUSINFO`.
    pub FHBBusInfo: [u8; 10],
    /// `BUSINFO`.
    pub chipsetIDInfo: [u8; 10],
    pub _pad1: [u8; 2],
    /// `ACPI_METHOD_DATA` (676 bytes at r570).
    pub acpiMethodData: [u8; 676],
    pub hypervisorType: u32,
    pub bIsPassthru: u8,
    pub _pad2: [u8; 7],
    pub sysTimerOffsetNs: u64,
    pub gspVFInfo: GSP_VF_INFO,
    pub bIsPrimary: u8,
    pub isGridBuild: u8,
    pub _pad3: [u8; 2],
    /// `GSP_PCIE_CONFIG_REG.linkCap`.
    pub pcieConfigReg: u32,
    pub gridBuildCsp: u32,
    pub bPreserveVideoMemoryAllocations: u8,
    pub bTdrEventSupported: u8,
    pub bFeatureStretchVblankCapable: u8,
    pub bEnableDynamicGranularityPageArrays: u8,
    pub bClockBoostSupported: u8,
    pub bRouteDispIntrsToCPU: u8,
    pub _pad4: [u8; 6],
    pub hostPageSize: u64,
}

/// `NV2080_CTRL_GPU_GET_GID_INFO_PARAMS` (268 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct NV2080_CTRL_GPU_GET_GID_INFO_PARAMS {
    pub index: u32,
    pub flags: u32,
    pub length: u32,
    pub data: [u8; 256],
}

/// `NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO` (48 bytes).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO {
    pub base: u64,
    pub limit: u64,
    pub reserved: u64,
    pub performance: u32,
    pub supportCompressed: u8,
    pub supportISO: u8,
    pub bProtected: u8,
    /// `NV2080_CTRL_CMD_FB_GET_FB_REGION_SURFACE_MEM_TYPE_FLAG` (17 bools).
    pub blackList: [u8; 17],
}

/// `NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS` (776 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS {
    pub numFBRegions: u32,
    pub _pad: u32,
    pub fbRegion: [NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO; 16],
}

/// `GspStaticConfigInfo` at r570 (1656 bytes): what GSP-RM found out about the GPU.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct GspStaticConfigInfo {
    pub grCapsBits: [u8; 23],
    pub _pad0: u8,
    pub gidInfo: NV2080_CTRL_GPU_GET_GID_INFO_PARAMS,
    /// `NV2080_CTRL_BIOS_GET_SKU_INFO_PARAMS`.
    pub SKUInfo: [u8; 48],
    pub _pad1: [u8; 4],
    pub fbRegionInfoParams: NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS,
    /// `NV0080_CTRL_GPU_GET_SRIOV_CAPS_PARAMS`.
    pub sriovCaps: [u8; 80],
    pub sriovMaxGfid: u32,
    pub engineCaps: [u32; 3],
    pub poisonFuseEnabled: u8,
    pub _pad2: [u8; 7],
    /// Bytes of VRAM.
    pub fb_length: u64,
    pub fbio_mask: u64,
    pub fb_bus_width: u32,
    pub fb_ram_type: u32,
    pub fbp_mask: u64,
    pub l2_cache_size: u32,
    /// NUL-terminated ASCII.
    pub gpuNameString: [u8; 64],
    pub gpuShortNameString: [u8; 64],
    pub gpuNameString_Unicode: [u16; 64],
    pub bGpuInternalSku: u8,
    pub bIsQuadroGeneric: u8,
    pub bIsQuadroAd: u8,
    pub bIsNvidiaNvs: u8,
    pub bIsVgx: u8,
    pub bGeforceSmb: u8,
    pub bIsTitan: u8,
    pub bIsTesla: u8,
    pub bIsMobile: u8,
    pub bIsGc6Rtd3Allowed: u8,
    pub bIsGc8Rtd3Allowed: u8,
    pub bIsGcOffRtd3Allowed: u8,
    pub bIsGcoffLegacyAllowed: u8,
    pub bIsMigSupported: u8,
    pub RTD3GC6TotalBoardPower: u16,
    pub RTD3GC6PerstDelay: u16,
    pub _pad3: [u8; 2],
    pub bar1PdeBase: u64,
    pub bar2PdeBase: u64,
    pub bVbiosValid: u8,
    pub _pad4: [u8; 3],
    pub vbiosSubVendor: u32,
    pub vbiosSubDevice: u32,
    pub bPageRetirementSupported: u8,
    pub bSplitVasBetweenServerClientRm: u8,
    pub bClRootportNeedsNosnoopWAR: u8,
    pub _pad5: u8,
    /// `VIRTUAL_DISPLAY_GET_NUM_HEADS_PARAMS` {numHeads, maxNumHeads}.
    pub displaylessMaxHeads: [u32; 2],
    /// `VIRTUAL_DISPLAY_GET_MAX_RESOLUTION_PARAMS` {headIndex, maxHResolution, maxVResolution}.
    pub displaylessMaxResolution: [u32; 3],
    pub _pad6: [u8; 4],
    pub displaylessMaxPixels: u64,
    /// Client handle for internal RMAPI control.
    pub hInternalClient: u32,
    /// Device handle for internal RMAPI control.
    pub hInternalDevice: u32,
    /// Subdevice handle for internal RMAPI control.
    pub hInternalSubdevice: u32,
    pub bSelfHostedMode: u8,
    pub bAtsSupported: u8,
    pub bIsGpuUefi: u8,
    pub bIsEfiInit: u8,
    /// `EcidManufacturingInfo[2]` {ecidLow, ecidHigh, ecidExtended}.
    pub ecidInfo: [[u32; 3]; 2],
    /// `FW_WPR_LAYOUT_OFFSET` {nonWprHeapOffset, frtsOffset}.
    pub fwWprLayoutOffset: [u64; 2],
}

impl GspStaticConfigInfo {
    /// `gpuNameString` up to its NUL, if it is UTF-8.
    pub fn gpu_name(&self) -> Option<&str> {
        let n = self
            .gpuNameString
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(64);
        core::str::from_utf8(self.gpuNameString.get(..n)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn system_info_r570_layout() {
        // gsp_abi_check.c at 570.144 (ABI_CHECK_FIELD(GspSystemInfo, ...)).
        assert_eq!(size_of::<GspSystemInfo>(), 928);
        assert_eq!(offset_of!(GspSystemInfo, gpuPhysIoAddr), 24);
        assert_eq!(offset_of!(GspSystemInfo, maxUserVa), 72);
        assert_eq!(offset_of!(GspSystemInfo, pciConfigMirrorBase), 80);
        assert_eq!(offset_of!(GspSystemInfo, PCIDeviceID), 88);
        assert_eq!(offset_of!(GspSystemInfo, PCIRevisionID), 96);
        assert_eq!(offset_of!(GspSystemInfo, oorArch), 104);
        assert_eq!(offset_of!(GspSystemInfo, clPdbProperties), 112);
        assert_eq!(offset_of!(GspSystemInfo, Chipset), 120);
        assert_eq!(offset_of!(GspSystemInfo, bMnocAvailable), 127);
        assert_eq!(offset_of!(GspSystemInfo, chipsetL1ssEnable), 128);
        assert_eq!(offset_of!(GspSystemInfo, bSystemHasMux), 136);
        assert_eq!(offset_of!(GspSystemInfo, FHBBusInfo), 138);
        assert_eq!(offset_of!(GspSystemInfo, chipsetIDInfo), 148);
        assert_eq!(offset_of!(GspSystemInfo, acpiMethodData), 160);
        assert_eq!(offset_of!(GspSystemInfo, hypervisorType), 836);
        assert_eq!(offset_of!(GspSystemInfo, bIsPassthru), 840);
        assert_eq!(offset_of!(GspSystemInfo, sysTimerOffsetNs), 848);
        assert_eq!(offset_of!(GspSystemInfo, gspVFInfo), 856);
        assert_eq!(offset_of!(GspSystemInfo, bIsPrimary), 896);
        assert_eq!(offset_of!(GspSystemInfo, pcieConfigReg), 900);
        assert_eq!(offset_of!(GspSystemInfo, gridBuildCsp), 904);
        assert_eq!(
            offset_of!(GspSystemInfo, bPreserveVideoMemoryAllocations),
            908
        );
        assert_eq!(offset_of!(GspSystemInfo, bRouteDispIntrsToCPU), 913);
        assert_eq!(offset_of!(GspSystemInfo, hostPageSize), 920);
        assert_eq!(size_of::<GSP_VF_INFO>(), 40);
    }

    #[test]
    fn static_info_r570_layout() {
        // gsp_abi_check.c at 570.144 (ABI_CHECK_FIELD(GspStaticConfigInfo, ...)).
        assert_eq!(size_of::<GspStaticConfigInfo>(), 1656);
        assert_eq!(offset_of!(GspStaticConfigInfo, gidInfo), 24);
        assert_eq!(size_of::<NV2080_CTRL_GPU_GET_GID_INFO_PARAMS>(), 268);
        assert_eq!(offset_of!(GspStaticConfigInfo, SKUInfo), 292);
        assert_eq!(offset_of!(GspStaticConfigInfo, fbRegionInfoParams), 344);
        assert_eq!(
            size_of::<NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS>(),
            776
        );
        assert_eq!(
            size_of::<NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO>(),
            48
        );
        assert_eq!(offset_of!(GspStaticConfigInfo, sriovCaps), 1120);
        assert_eq!(offset_of!(GspStaticConfigInfo, sriovMaxGfid), 1200);
        assert_eq!(offset_of!(GspStaticConfigInfo, engineCaps), 1204);
        assert_eq!(offset_of!(GspStaticConfigInfo, poisonFuseEnabled), 1216);
        assert_eq!(offset_of!(GspStaticConfigInfo, fb_length), 1224);
        assert_eq!(offset_of!(GspStaticConfigInfo, fbio_mask), 1232);
        assert_eq!(offset_of!(GspStaticConfigInfo, fb_bus_width), 1240);
        assert_eq!(offset_of!(GspStaticConfigInfo, fbp_mask), 1248);
        assert_eq!(offset_of!(GspStaticConfigInfo, l2_cache_size), 1256);
        assert_eq!(offset_of!(GspStaticConfigInfo, gpuNameString), 1260);
        assert_eq!(offset_of!(GspStaticConfigInfo, gpuShortNameString), 1324);
        assert_eq!(offset_of!(GspStaticConfigInfo, gpuNameString_Unicode), 1388);
        assert_eq!(offset_of!(GspStaticConfigInfo, bGpuInternalSku), 1516);
        assert_eq!(offset_of!(GspStaticConfigInfo, bIsMigSupported), 1529);
        assert_eq!(
            offset_of!(GspStaticConfigInfo, RTD3GC6TotalBoardPower),
            1530
        );
        assert_eq!(offset_of!(GspStaticConfigInfo, RTD3GC6PerstDelay), 1532);
        assert_eq!(offset_of!(GspStaticConfigInfo, bar1PdeBase), 1536);
        assert_eq!(offset_of!(GspStaticConfigInfo, bar2PdeBase), 1544);
        assert_eq!(offset_of!(GspStaticConfigInfo, bVbiosValid), 1552);
        assert_eq!(offset_of!(GspStaticConfigInfo, vbiosSubVendor), 1556);
        assert_eq!(offset_of!(GspStaticConfigInfo, vbiosSubDevice), 1560);
        assert_eq!(
            offset_of!(GspStaticConfigInfo, bPageRetirementSupported),
            1564
        );
        assert_eq!(
            offset_of!(GspStaticConfigInfo, bClRootportNeedsNosnoopWAR),
            1566
        );
        assert_eq!(offset_of!(GspStaticConfigInfo, displaylessMaxHeads), 1568);
        assert_eq!(
            offset_of!(GspStaticConfigInfo, displaylessMaxResolution),
            1576
        );
        assert_eq!(offset_of!(GspStaticConfigInfo, displaylessMaxPixels), 1592);
        assert_eq!(offset_of!(GspStaticConfigInfo, hInternalClient), 1600);
        assert_eq!(offset_of!(GspStaticConfigInfo, hInternalDevice), 1604);
        assert_eq!(offset_of!(GspStaticConfigInfo, hInternalSubdevice), 1608);
        assert_eq!(offset_of!(GspStaticConfigInfo, bSelfHostedMode), 1612);
        assert_eq!(offset_of!(GspStaticConfigInfo, bIsEfiInit), 1615);
        assert_eq!(offset_of!(GspStaticConfigInfo, ecidInfo), 1616);
        assert_eq!(offset_of!(GspStaticConfigInfo, fwWprLayoutOffset), 1640);
    }
}
