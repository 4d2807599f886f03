//! What the controls and alloc params nvbare knows look like on the wire: each control's name,
//! command number, the classes it is sent to and its params' fields (name, offset, type) in
//! each RM ABI, and the same for the alloc params of the classes bring-up allocates, so tools
//! can send a control by name, fill params field by field and print a reply decoded.
//!
//! Every field's offset is `offset_of!` on the ABI struct of `rm::ctrl` (whose layouts are
//! tested against NVIDIA's headers) and its Rust type is checked at compile time, so this
//! table cannot drift from the structs.

use super::RmAbi;
use super::alloc::*;
use super::class::*;
use super::ctrl::*;

/// A scalar field's meaning (how a tool prints and parses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// `NvU8` / `NvBool`.
    U8,
    /// `NvU16`.
    U16,
    /// `NvU32`.
    U32,
    /// `NvU64` (`NvP64` for the pointer forms).
    U64,
    /// `NvHandle`.
    Handle,
    /// An `NvU32` class id (printed with its name).
    Class,
}

impl Scalar {
    /// Bytes on the wire.
    pub const fn size(self) -> usize {
        match self {
            Scalar::U8 => 1,
            Scalar::U16 => 2,
            Scalar::U32 | Scalar::Handle | Scalar::Class => 4,
            Scalar::U64 => 8,
        }
    }
}

/// A field's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// One value.
    Scalar(Scalar),
    /// A NUL-terminated string in a buffer of this many bytes.
    Str(usize),
    /// Raw bytes (`length` elsewhere says how many matter, when the header says so).
    Bytes(usize),
    /// `count` values; the first `len_field` of them are valid when that names a field.
    Scalars {
        /// Element type.
        elem: Scalar,
        /// Elements in the array.
        count: usize,
        /// The field holding how many are valid.
        len_field: Option<&'static str>,
    },
    /// `count` structs of `stride` bytes.
    Structs {
        /// The struct's fields.
        fields: &'static [Field],
        /// Bytes per element.
        stride: usize,
        /// Elements in the array.
        count: usize,
        /// The field holding how many are valid.
        len_field: Option<&'static str>,
    },
    /// A nested struct.
    Struct {
        /// Its fields.
        fields: &'static [Field],
        /// Its size.
        size: usize,
    },
}

impl FieldType {
    /// Bytes on the wire.
    pub const fn size(&self) -> usize {
        match *self {
            FieldType::Scalar(s) => s.size(),
            FieldType::Str(n) | FieldType::Bytes(n) => n,
            FieldType::Scalars { elem, count, .. } => elem.size() * count,
            FieldType::Structs { stride, count, .. } => stride * count,
            FieldType::Struct { size, .. } => size,
        }
    }
}

/// One field of a params struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// NVIDIA's name.
    pub name: &'static str,
    /// Byte offset in the struct.
    pub offset: usize,
    /// Its type.
    pub ty: FieldType,
}

/// One params layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// NVIDIA's struct name.
    pub name: &'static str,
    /// `sizeof` the struct.
    pub size: usize,
    /// Its fields, by offset (padding left out).
    pub fields: &'static [Field],
}

/// A control command nvbare knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlDesc {
    /// NVIDIA's name (`NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2`).
    pub name: &'static str,
    /// The command number.
    pub cmd: u32,
    /// The classes of object it is sent to (empty: any, e.g. a channel of any GPFIFO class).
    pub on: &'static [u32],
    /// Its params at r570.
    pub r570: Layout,
    /// Its params at r580.
    pub r580: Layout,
}

impl ControlDesc {
    /// The params layout of `abi`.
    pub fn layout(&self, abi: RmAbi) -> &Layout {
        match abi {
            RmAbi::R570 => &self.r570,
            RmAbi::R580 => &self.r580,
        }
    }
}

/// `Field` for `$t.$name`, checked at compile time to be a `$rust`.
macro_rules! field {
    ($t:ty, $name:ident: $rust:ty => $ty:expr) => {{
        const _: fn(&$t) -> &$rust = |p| &p.$name;
        Field {
            name: unraw(stringify!($name)),
            offset: core::mem::offset_of!($t, $name),
            ty: $ty,
        }
    }};
}

/// `type` for `r#type`: the header's name.
const fn unraw(s: &'static str) -> &'static str {
    match s.as_bytes() {
        [b'r', b'#', ..] => s.split_at(2).1,
        _ => s,
    }
}

macro_rules! layout {
    ($t:ident { $($f:expr),* $(,)? }) => {
        Layout {
            name: stringify!($t),
            size: size_of::<$t>(),
            fields: &[$($f),*],
        }
    };
}

const fn s(x: Scalar) -> FieldType {
    FieldType::Scalar(x)
}

use Scalar::*;

const BUILD_VERSION: Layout = {
    type T = NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS;
    const N: usize = NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE;
    layout!(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS {
        field!(T, driverVersionBuffer: [u8; N] => FieldType::Str(N)),
        field!(T, versionBuffer: [u8; N] => FieldType::Str(N)),
        field!(T, driverBranch: [u8; N] => FieldType::Str(N)),
        field!(T, titleBuffer: [u8; N] => FieldType::Str(N)),
        field!(T, changelistNumber: u32 => s(U32)),
        field!(T, officialChangelistNumber: u32 => s(U32)),
    })
};

const CLASSLIST: Layout = {
    type T = NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS;
    layout!(NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS {
        field!(T, numClasses: u32 => s(U32)),
        field!(T, classList: u64 => s(U64)),
    })
};

macro_rules! classlist_v2 {
    ($t:ident, $n:expr) => {{
        type T = $t;
        layout!($t {
            field!(T, numClasses: u32 => s(U32)),
            field!(T, classList: [u32; $n] => FieldType::Scalars {
                elem: Class,
                count: $n,
                len_field: Some("numClasses"),
            }),
        })
    }};
}

const GR_INFO: &[Field] = {
    type T = NV2080_CTRL_GR_INFO;
    &[
        field!(T, index: u32 => s(U32)),
        field!(T, data: u32 => s(U32)),
    ]
};

const GR_ROUTE_INFO: &[Field] = {
    type T = NV2080_CTRL_GR_ROUTE_INFO;
    &[
        field!(T, flags: u32 => s(U32)),
        field!(T, route: u64 => s(U64)),
    ]
};

const ROUTE: FieldType = FieldType::Struct {
    fields: GR_ROUTE_INFO,
    size: size_of::<NV2080_CTRL_GR_ROUTE_INFO>(),
};

const GR_GET_INFO: Layout = {
    type T = NV2080_CTRL_GR_GET_INFO_PARAMS;
    layout!(NV2080_CTRL_GR_GET_INFO_PARAMS {
        field!(T, grInfoListSize: u32 => s(U32)),
        field!(T, grInfoList: u64 => s(U64)),
        field!(T, grRouteInfo: NV2080_CTRL_GR_ROUTE_INFO => ROUTE),
    })
};

const GR_GET_INFO_V2: Layout = {
    type T = NV2080_CTRL_GR_GET_INFO_V2_PARAMS;
    const N: usize = NV0080_CTRL_GR_INFO_MAX_SIZE;
    layout!(NV2080_CTRL_GR_GET_INFO_V2_PARAMS {
        field!(T, grInfoListSize: u32 => s(U32)),
        field!(T, grInfoList: [NV2080_CTRL_GR_INFO; N] => FieldType::Structs {
            fields: GR_INFO,
            stride: size_of::<NV2080_CTRL_GR_INFO>(),
            count: N,
            len_field: Some("grInfoListSize"),
        }),
        field!(T, grRouteInfo: NV2080_CTRL_GR_ROUTE_INFO => ROUTE),
    })
};

const ARCH_INFO: Layout = {
    type T = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS;
    layout!(NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
        field!(T, architecture: u32 => s(U32)),
        field!(T, implementation: u32 => s(U32)),
        field!(T, revision: u32 => s(U32)),
        field!(T, subRevision: u8 => s(U8)),
    })
};

const GID_INFO: Layout = {
    type T = NV2080_CTRL_GPU_GET_GID_INFO_PARAMS;
    const N: usize = NV2080_GPU_MAX_GID_LENGTH;
    layout!(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS {
        field!(T, index: u32 => s(U32)),
        field!(T, flags: u32 => s(U32)),
        field!(T, length: u32 => s(U32)),
        field!(T, data: [u8; N] => FieldType::Bytes(N)),
    })
};

const PERF_BOOST: Layout = {
    type T = NV2080_CTRL_PERF_BOOST_PARAMS;
    layout!(NV2080_CTRL_PERF_BOOST_PARAMS {
        field!(T, flags: u32 => s(U32)),
        field!(T, duration: u32 => s(U32)),
    })
};

const WORK_SUBMIT_TOKEN: Layout = {
    type T = NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS;
    layout!(NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS {
        field!(T, workSubmitToken: u32 => s(U32)),
    })
};

const SCHEDULE_R570: Layout = {
    type T = NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570;
    layout!(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570 {
        field!(T, bEnable: u8 => s(U8)),
        field!(T, bSkipSubmit: u8 => s(U8)),
    })
};

const SCHEDULE_R580: Layout = {
    type T = NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580;
    layout!(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580 {
        field!(T, bEnable: u8 => s(U8)),
        field!(T, bSkipSubmit: u8 => s(U8)),
        field!(T, bSkipEnable: u8 => s(U8)),
    })
};

const TIMESLICE: Layout = {
    type T = NVA06C_CTRL_TIMESLICE_PARAMS;
    layout!(NVA06C_CTRL_TIMESLICE_PARAMS {
        field!(T, timesliceUs: u64 => s(U64)),
    })
};

const SM_ERROR_STATE: &[Field] = {
    type T = NV83DE_SM_ERROR_STATE_REGISTERS;
    &[
        field!(T, hwwGlobalEsr: u32 => s(U32)),
        field!(T, hwwWarpEsr: u32 => s(U32)),
        field!(T, hwwWarpEsrPc: u32 => s(U32)),
        field!(T, hwwGlobalEsrReportMask: u32 => s(U32)),
        field!(T, hwwWarpEsrReportMask: u32 => s(U32)),
        field!(T, hwwEsrAddr: u64 => s(U64)),
        field!(T, hwwWarpEsrPc64: u64 => s(U64)),
        field!(T, hwwCgaEsr: u32 => s(U32)),
        field!(T, hwwCgaEsrReportMask: u32 => s(U32)),
    ]
};

const MMU_FAULT_INFO: &[Field] = {
    type T = NV83DE_MMU_FAULT_INFO;
    &[
        field!(T, valid: u8 => s(U8)),
        field!(T, faultInfo: u32 => s(U32)),
    ]
};

const READ_ALL_SM_ERROR_STATES: Layout = {
    type T = NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS;
    const N: usize = NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL;
    layout!(NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS {
        field!(T, hTargetChannel: u32 => s(Handle)),
        field!(T, numSMsToRead: u32 => s(U32)),
        field!(T, smErrorStateArray: [NV83DE_SM_ERROR_STATE_REGISTERS; N] => FieldType::Structs {
            fields: SM_ERROR_STATE,
            stride: size_of::<NV83DE_SM_ERROR_STATE_REGISTERS>(),
            count: N,
            len_field: Some("numSMsToRead"),
        }),
        field!(T, mmuFaultInfo: u32 => s(U32)),
        field!(T, mmuFault: NV83DE_MMU_FAULT_INFO => FieldType::Struct {
            fields: MMU_FAULT_INFO,
            size: size_of::<NV83DE_MMU_FAULT_INFO>(),
        }),
        field!(T, startingSM: u32 => s(U32)),
    })
};

const CLEAR_ALL_SM_ERROR_STATES: Layout = {
    type T = NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS;
    layout!(NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS {
        field!(T, hTargetChannel: u32 => s(Handle)),
        field!(T, numSMsToClear: u32 => s(U32)),
    })
};

const MMU_FAULT_ENTRY: &[Field] = {
    type T = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY;
    &[
        field!(T, faultAddress: u64 => s(U64)),
        field!(T, faultType: u32 => s(U32)),
        field!(T, accessType: u32 => s(U32)),
    ]
};

const READ_MMU_FAULT_INFO: Layout = {
    type T = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS;
    const N: usize = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_MAX_ENTRIES;
    layout!(NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS {
        field!(T, mmuFaultInfoList: [NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY; N] =>
            FieldType::Structs {
                fields: MMU_FAULT_ENTRY,
                stride: size_of::<NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY>(),
                count: N,
                len_field: Some("count"),
            }),
        field!(T, count: u32 => s(U32)),
    })
};

/// A control whose params are the same at r570 and r580.
const fn same(name: &'static str, cmd: u32, on: &'static [u32], l: Layout) -> ControlDesc {
    ControlDesc {
        name,
        cmd,
        on,
        r570: l,
        r580: l,
    }
}

const ROOTS: &[u32] = &[NV01_ROOT, NV01_ROOT_CLIENT];
const DEVICE: &[u32] = &[NV01_DEVICE_0];
const SUBDEVICE: &[u32] = &[NV20_SUBDEVICE_0];
const TSG: &[u32] = &[KEPLER_CHANNEL_GROUP_A];
const DEBUGGER: &[u32] = &[GT200_DEBUGGER];

/// The controls nvbare knows, by command number.
pub const CONTROLS: &[ControlDesc] = &[
    same(
        "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2",
        NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
        ROOTS,
        BUILD_VERSION,
    ),
    same(
        "NV0080_CTRL_CMD_GPU_GET_CLASSLIST",
        NV0080_CTRL_CMD_GPU_GET_CLASSLIST,
        DEVICE,
        CLASSLIST,
    ),
    ControlDesc {
        name: "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2",
        cmd: NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
        on: DEVICE,
        r570: classlist_v2!(
            NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570,
            NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R570
        ),
        r580: classlist_v2!(
            NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580,
            NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R580
        ),
    },
    same(
        "NV2080_CTRL_CMD_GPU_GET_GID_INFO",
        NV2080_CTRL_CMD_GPU_GET_GID_INFO,
        SUBDEVICE,
        GID_INFO,
    ),
    same(
        "NV2080_CTRL_CMD_GR_GET_INFO",
        NV2080_CTRL_CMD_GR_GET_INFO,
        SUBDEVICE,
        GR_GET_INFO,
    ),
    same(
        "NV2080_CTRL_CMD_GR_GET_INFO_V2",
        NV2080_CTRL_CMD_GR_GET_INFO_V2,
        SUBDEVICE,
        GR_GET_INFO_V2,
    ),
    same(
        "NV2080_CTRL_CMD_MC_GET_ARCH_INFO",
        NV2080_CTRL_CMD_MC_GET_ARCH_INFO,
        SUBDEVICE,
        ARCH_INFO,
    ),
    same(
        "NV2080_CTRL_CMD_PERF_BOOST",
        NV2080_CTRL_CMD_PERF_BOOST,
        SUBDEVICE,
        PERF_BOOST,
    ),
    same(
        "NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES",
        NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES,
        DEBUGGER,
        READ_ALL_SM_ERROR_STATES,
    ),
    same(
        "NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES",
        NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES,
        DEBUGGER,
        CLEAR_ALL_SM_ERROR_STATES,
    ),
    same(
        "NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO",
        NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO,
        DEBUGGER,
        READ_MMU_FAULT_INFO,
    ),
    ControlDesc {
        name: "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE",
        cmd: NVA06C_CTRL_CMD_GPFIFO_SCHEDULE,
        on: TSG,
        r570: SCHEDULE_R570,
        r580: SCHEDULE_R580,
    },
    same(
        "NVA06C_CTRL_CMD_SET_TIMESLICE",
        NVA06C_CTRL_CMD_SET_TIMESLICE,
        TSG,
        TIMESLICE,
    ),
    same(
        "NVA06C_CTRL_CMD_GET_TIMESLICE",
        NVA06C_CTRL_CMD_GET_TIMESLICE,
        TSG,
        TIMESLICE,
    ),
    ControlDesc {
        name: "NVA06F_CTRL_CMD_GPFIFO_SCHEDULE",
        cmd: NVA06F_CTRL_CMD_GPFIFO_SCHEDULE,
        on: &[],
        r570: SCHEDULE_R570,
        r580: SCHEDULE_R580,
    },
    same(
        "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN",
        NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
        &[],
        WORK_SUBMIT_TOKEN,
    ),
];

/// The control named `name` (NVIDIA's name, case-insensitive).
pub fn control_by_name(name: &str) -> Option<&'static ControlDesc> {
    CONTROLS.iter().find(|c| c.name.eq_ignore_ascii_case(name))
}

/// The control with command number `cmd`.
pub fn control_by_cmd(cmd: u32) -> Option<&'static ControlDesc> {
    CONTROLS.iter().find(|c| c.cmd == cmd)
}

/// Alloc params of a class nvbare knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocDesc {
    /// The class.
    pub class: u32,
    /// Its params at r570.
    pub r570: Layout,
    /// Its params at r580.
    pub r580: Layout,
}

impl AllocDesc {
    /// The params layout of `abi`.
    pub fn layout(&self, abi: RmAbi) -> &Layout {
        match abi {
            RmAbi::R570 => &self.r570,
            RmAbi::R580 => &self.r580,
        }
    }
}

const SUBDEVICE_ALLOC: Layout = {
    type T = NV2080_ALLOC_PARAMETERS;
    layout!(NV2080_ALLOC_PARAMETERS {
        field!(T, subDeviceId: u32 => s(U32)),
    })
};

macro_rules! vaspace_alloc {
    ($t:ident $(, $extra:ident)?) => {{
        type T = $t;
        layout!($t {
            field!(T, index: u32 => s(U32)),
            field!(T, flags: u32 => s(U32)),
            field!(T, vaSize: u64 => s(U64)),
            field!(T, vaStartInternal: u64 => s(U64)),
            field!(T, vaLimitInternal: u64 => s(U64)),
            field!(T, bigPageSize: u32 => s(U32)),
            field!(T, vaBase: u64 => s(U64)),
            $(field!(T, $extra: u32 => s(U32)),)?
        })
    }};
}

const CHANNEL_GROUP_ALLOC: Layout = {
    type T = NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS;
    layout!(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS {
        field!(T, hObjectError: u32 => s(Handle)),
        field!(T, hObjectEccError: u32 => s(Handle)),
        field!(T, hVASpace: u32 => s(Handle)),
        field!(T, engineType: u32 => s(U32)),
        field!(T, bIsCallingContextVgpuPlugin: u8 => s(U8)),
    })
};

const CTXSHARE_ALLOC: Layout = {
    type T = NV_CTXSHARE_ALLOCATION_PARAMETERS;
    layout!(NV_CTXSHARE_ALLOCATION_PARAMETERS {
        field!(T, hVASpace: u32 => s(Handle)),
        field!(T, flags: u32 => s(U32)),
        field!(T, subctxId: u32 => s(U32)),
    })
};

const MEMORY_ALLOC: Layout = {
    type T = NV_MEMORY_ALLOCATION_PARAMS;
    layout!(NV_MEMORY_ALLOCATION_PARAMS {
        field!(T, owner: u32 => s(U32)),
        field!(T, r#type: u32 => s(U32)),
        field!(T, flags: u32 => s(U32)),
        field!(T, attr: u32 => s(U32)),
        field!(T, attr2: u32 => s(U32)),
        field!(T, size: u64 => s(U64)),
        field!(T, alignment: u64 => s(U64)),
        field!(T, offset: u64 => s(U64)),
        field!(T, limit: u64 => s(U64)),
        field!(T, address: u64 => s(U64)),
        field!(T, hVASpace: u32 => s(Handle)),
    })
};

const MEMORY_VIRTUAL_ALLOC: Layout = {
    type T = NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS;
    layout!(NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS {
        field!(T, offset: u64 => s(U64)),
        field!(T, limit: u64 => s(U64)),
        field!(T, hVASpace: u32 => s(Handle)),
    })
};

const fn same_alloc(class: u32, l: Layout) -> AllocDesc {
    AllocDesc {
        class,
        r570: l,
        r580: l,
    }
}

/// The alloc params nvbare knows, by class.
pub const ALLOCS: &[AllocDesc] = &[
    same_alloc(NV20_SUBDEVICE_0, SUBDEVICE_ALLOC),
    AllocDesc {
        class: FERMI_VASPACE_A,
        r570: vaspace_alloc!(NV_VASPACE_ALLOCATION_PARAMETERS_R570),
        r580: vaspace_alloc!(NV_VASPACE_ALLOCATION_PARAMETERS_R580, pasid),
    },
    same_alloc(KEPLER_CHANNEL_GROUP_A, CHANNEL_GROUP_ALLOC),
    same_alloc(FERMI_CONTEXT_SHARE_A, CTXSHARE_ALLOC),
    same_alloc(NV01_MEMORY_LOCAL_USER, MEMORY_ALLOC),
    same_alloc(NV01_MEMORY_SYSTEM, MEMORY_ALLOC),
    same_alloc(NV01_MEMORY_VIRTUAL, MEMORY_VIRTUAL_ALLOC),
];

/// The alloc params of `class`, if nvbare knows them.
pub fn alloc_by_class(class: u32) -> Option<&'static AllocDesc> {
    ALLOCS.iter().find(|a| a.class == class)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields lie inside their struct, in order, without overlapping; arrays' length fields
    /// exist and are scalars.
    fn check_fields(what: &str, fields: &[Field], size: usize) {
        let mut end = 0;
        for f in fields {
            assert!(
                f.offset >= end,
                "{what}.{}: overlaps the field before",
                f.name
            );
            end = f.offset + f.ty.size();
            assert!(end <= size, "{what}.{}: ends at {end}, past {size}", f.name);
            match f.ty {
                FieldType::Scalars { len_field, .. } | FieldType::Structs { len_field, .. } => {
                    if let Some(l) = len_field {
                        let lf = fields.iter().find(|x| x.name == l);
                        assert!(
                            matches!(lf.map(|x| x.ty), Some(FieldType::Scalar(_))),
                            "{what}.{}: length field {l} is not a scalar of the struct",
                            f.name
                        );
                    }
                }
                _ => {}
            }
            match f.ty {
                FieldType::Structs {
                    fields: inner,
                    stride,
                    ..
                } => check_fields(f.name, inner, stride),
                FieldType::Struct {
                    fields: inner,
                    size,
                } => check_fields(f.name, inner, size),
                _ => {}
            }
        }
    }

    #[test]
    fn every_layout_is_consistent() {
        for c in CONTROLS {
            for abi in [RmAbi::R570, RmAbi::R580] {
                let l = c.layout(abi);
                check_fields(l.name, l.fields, l.size);
            }
            assert_eq!(control_by_cmd(c.cmd), Some(c), "{} listed twice", c.name);
            assert_eq!(control_by_name(&c.name.to_lowercase()), Some(c));
        }
    }

    #[test]
    fn every_alloc_layout_is_consistent() {
        for a in ALLOCS {
            for abi in [RmAbi::R570, RmAbi::R580] {
                let l = a.layout(abi);
                check_fields(l.name, l.fields, l.size);
            }
            assert_eq!(alloc_by_class(a.class), Some(a));
        }
        let v = alloc_by_class(FERMI_VASPACE_A).unwrap();
        assert_eq!((v.r570.size, v.r580.size), (48, 56));
        let m = alloc_by_class(NV01_MEMORY_LOCAL_USER).unwrap();
        assert_eq!(m.r580.size, 128);
        assert_eq!(m.r580.fields[1].name, "type");
        assert_eq!(m.r580.fields[1].offset, 4);
    }

    #[test]
    fn sizes_are_the_headers() {
        let cl = control_by_name("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2").unwrap();
        assert_eq!(cl.r570.size, 404);
        assert_eq!(cl.r580.size, 804);
        let b = control_by_cmd(0x13e).unwrap();
        assert_eq!(b.r580.size, 1032);
        let sched = control_by_cmd(NVA06C_CTRL_CMD_GPFIFO_SCHEDULE).unwrap();
        assert_eq!((sched.r570.size, sched.r580.size), (2, 3));
        let gr = control_by_cmd(NV2080_CTRL_CMD_GR_GET_INFO_V2).unwrap();
        let list = gr
            .r580
            .fields
            .iter()
            .find(|f| f.name == "grInfoList")
            .unwrap();
        assert_eq!(list.offset, 4);
        assert_eq!(list.ty.size(), 0x3a * 8);
        assert!(control_by_name("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V3").is_none());
    }
}
