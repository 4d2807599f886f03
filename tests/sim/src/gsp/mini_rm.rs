//! A small [`RmService`] for testing the GSP transport before the full RM model exists: an
//! object tree per client that accepts NV01_ROOT, NV01_DEVICE_0 and NV20_SUBDEVICE_0, a real
//! control (`NV2080_CTRL_CMD_GPU_GET_NAME_STRING`), and a test-only control that transforms
//! params of any size so tests can check both directions of large transfers.

use std::collections::HashMap;

use nvbare_core::rm::{Handle, RmStatus, class};

use crate::bar0::SimCore;
use crate::rm_service::{RmCaller, RmService};

/// `NV2080_CTRL_CMD_GPU_GET_NAME_STRING` (`ctrl2080gpu.h`): `{u32 flags; union{u8[128],
/// u16[128]}}` = 260 bytes.
pub const NV2080_CTRL_CMD_GPU_GET_NAME_STRING: u32 = 0x2080_0110;
/// Size of its params.
pub const GET_NAME_STRING_PARAMS_SIZE: usize = 260;

/// Test-only control (not NVIDIA's): on the client, replaces every params byte `b` at index
/// `i` with [`transform_byte`]`(b, i)`. Any size is accepted.
pub const MINI_RM_CTRL_CMD_TEST_TRANSFORM: u32 = 0x0000_ff01;

/// What [`MINI_RM_CTRL_CMD_TEST_TRANSFORM`] does to byte `b` at index `i`.
pub fn transform_byte(b: u8, i: usize) -> u8 {
    b.wrapping_add(1) ^ (i.wrapping_mul(31) as u8)
}

const NV_ERR_INSERT_DUPLICATE_NAME: RmStatus = RmStatus(0x19);
const NV_ERR_INVALID_CLASS: RmStatus = RmStatus(0x22);
const NV_ERR_INVALID_CLIENT: RmStatus = RmStatus(0x23);
const NV_ERR_INVALID_OBJECT_HANDLE: RmStatus = RmStatus(0x33);
const NV_ERR_INVALID_OBJECT_PARENT: RmStatus = RmStatus(0x36);
const NV_ERR_INVALID_PARAM_STRUCT: RmStatus = RmStatus(0x3a);
const NV_ERR_NOT_SUPPORTED: RmStatus = RmStatus(0x56);
const NV_ERR_OBJECT_NOT_FOUND: RmStatus = RmStatus(0x57);

/// `sizeof(NV0080_ALLOC_PARAMETERS)` (`cl0080.h`, 8-byte aligned).
const NV0080_ALLOC_PARAMETERS_SIZE: usize = 56;

/// The minimal RM.
#[derive(Debug, Default)]
pub struct MiniRm {
    /// (client, object) -> (parent, class).
    objects: HashMap<(u32, u32), (u32, u32)>,
    /// Name reported by GET_NAME_STRING.
    pub gpu_name: String,
    /// Calls served.
    pub calls: u64,
}

impl MiniRm {
    /// An RM reporting `gpu_name`.
    pub fn new(gpu_name: &str) -> Self {
        MiniRm {
            objects: HashMap::new(),
            gpu_name: gpu_name.to_string(),
            calls: 0,
        }
    }

    /// Live objects (clients included).
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    fn class_of(&self, client: u32, h: u32) -> Option<u32> {
        self.objects.get(&(client, h)).map(|o| o.1)
    }
}

impl RmService for MiniRm {
    fn alloc(
        &mut self,
        _core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        object: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus> {
        self.calls += 1;
        let c = caller.client.0;
        if class == class::NV01_ROOT {
            if object.0 != c || !(parent.0 == 0 || parent.0 == c) {
                return Err(NV_ERR_INVALID_OBJECT_PARENT);
            }
            if self.objects.contains_key(&(c, c)) {
                return Err(NV_ERR_INSERT_DUPLICATE_NAME);
            }
            self.objects.insert((c, c), (0, class));
            return Ok(());
        }
        if self.class_of(c, c) != Some(class::NV01_ROOT) {
            return Err(NV_ERR_INVALID_CLIENT);
        }
        if object.0 == 0 || object.0 == c {
            return Err(NV_ERR_INVALID_OBJECT_HANDLE);
        }
        if self.objects.contains_key(&(c, object.0)) {
            return Err(NV_ERR_INSERT_DUPLICATE_NAME);
        }
        let parent_class = self.class_of(c, parent.0);
        match class {
            class::NV01_DEVICE_0 => {
                if parent_class != Some(class::NV01_ROOT) {
                    return Err(NV_ERR_INVALID_OBJECT_PARENT);
                }
                if params.len() != NV0080_ALLOC_PARAMETERS_SIZE {
                    return Err(NV_ERR_INVALID_PARAM_STRUCT);
                }
            }
            class::NV20_SUBDEVICE_0 => {
                if parent_class != Some(class::NV01_DEVICE_0) {
                    return Err(NV_ERR_INVALID_OBJECT_PARENT);
                }
                if params.len() != 4 {
                    return Err(NV_ERR_INVALID_PARAM_STRUCT);
                }
            }
            _ => return Err(NV_ERR_INVALID_CLASS),
        }
        self.objects.insert((c, object.0), (parent.0, class));
        Ok(())
    }

    fn control(
        &mut self,
        _core: &mut SimCore,
        caller: RmCaller,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus> {
        self.calls += 1;
        let c = caller.client.0;
        let Some(cls) = self.class_of(c, object.0) else {
            return Err(NV_ERR_OBJECT_NOT_FOUND);
        };
        match (cls, cmd) {
            (class::NV20_SUBDEVICE_0, NV2080_CTRL_CMD_GPU_GET_NAME_STRING) => {
                if params.len() != GET_NAME_STRING_PARAMS_SIZE {
                    return Err(NV_ERR_INVALID_PARAM_STRUCT);
                }
                let name = self.gpu_name.as_bytes();
                let n = name.len().min(127);
                params[4..].fill(0);
                params[4..4 + n].copy_from_slice(&name[..n]);
                Ok(())
            }
            (class::NV01_ROOT, MINI_RM_CTRL_CMD_TEST_TRANSFORM) => {
                for (i, b) in params.iter_mut().enumerate() {
                    *b = transform_byte(*b, i);
                }
                Ok(())
            }
            _ => Err(NV_ERR_NOT_SUPPORTED),
        }
    }

    fn free(
        &mut self,
        _core: &mut SimCore,
        caller: RmCaller,
        _parent: Handle,
        object: Handle,
    ) -> Result<(), RmStatus> {
        self.calls += 1;
        let c = caller.client.0;
        if !self.objects.contains_key(&(c, object.0)) {
            return Err(NV_ERR_OBJECT_NOT_FOUND);
        }
        if object.0 == c {
            self.objects.retain(|k, _| k.0 != c);
            return Ok(());
        }
        let mut doomed = vec![object.0];
        while let Some(h) = doomed.pop() {
            self.objects.remove(&(c, h));
            doomed.extend(
                self.objects
                    .iter()
                    .filter(|(k, v)| k.0 == c && v.0 == h)
                    .map(|(k, _)| k.1),
            );
        }
        Ok(())
    }
}
