//! The controls the simulated RM answers, each checked for the class it is sent to and for
//! its params' size as 580 does.

use super::*;

impl RmModel {
    pub(super) fn chid_of(&self, c: Handle, h: Handle) -> Result<(u32, u32, u64), RmStatus> {
        match self.object(c, h)?.kind {
            Kind::Channel { chid, token, tsg } => Ok((chid, token, tsg)),
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    pub(super) fn control_inner(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        object: Handle,
        cmd: u32,
        p: &mut [u8],
    ) -> Result<(), RmStatus> {
        let c = caller.client;
        if let Some(r) = self.gsp_control(core, c, object, cmd, p) {
            return r;
        }
        let class = self.object(c, object)?.class;
        let on = |classes: &[u32]| -> Result<(), RmStatus> {
            if classes.contains(&class) {
                Ok(())
            } else {
                Err(RmStatus::NV_ERR_NOT_SUPPORTED)
            }
        };
        match cmd {
            NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2 => {
                on(&[NV01_ROOT, NV01_ROOT_CLIENT])?;
                build_version(caller.abi, p)
            }
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2 => {
                on(&[NV01_DEVICE_0])?;
                self.class_list(caller.abi, p)
            }
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST | NV2080_CTRL_CMD_GR_GET_INFO => {
                // The pointer forms need the caller's address space; use the _V2 forms.
                Err(RmStatus::NV_ERR_NOT_SUPPORTED)
            }
            NV2080_CTRL_CMD_GR_GET_INFO_V2 => {
                on(&[NV20_SUBDEVICE_0])?;
                self.gr_info(p)
            }
            NV2080_CTRL_CMD_MC_GET_ARCH_INFO => {
                on(&[NV20_SUBDEVICE_0])?;
                self.arch_info(p)
            }
            NV2080_CTRL_CMD_GPU_GET_GID_INFO => {
                on(&[NV20_SUBDEVICE_0])?;
                self.gid_info(p)
            }
            NV2080_CTRL_CMD_PERF_BOOST => {
                on(&[NV20_SUBDEVICE_0])?;
                let b: NV2080_CTRL_PERF_BOOST_PARAMS = ctrl_params(p)?;
                if b.flags & 3 == 3
                    || (b.duration > 3600 && b.duration != NV2080_CTRL_PERF_BOOST_DURATION_INFINITE)
                {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                Ok(())
            }
            NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN => {
                let (_, token, _) = self.chid_of(c, object)?;
                let mut t: NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS = ctrl_params(p)?;
                t.workSubmitToken = token;
                write_back(p, &t);
                Ok(())
            }
            NVA06C_CTRL_CMD_GPFIFO_SCHEDULE => {
                on(&[KEPLER_CHANNEL_GROUP_A])?;
                let enable = ScheduleParams::enable_of(caller.abi, p)
                    .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
                let Kind::ChannelGroup { tsg, .. } = self.object(c, object)?.kind else {
                    return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
                };
                crate::fifo::lock(&self.fifo).set_scheduled(tsg, enable);
                if enable {
                    crate::fifo::lock(&self.fifo).run_all(core);
                }
                Ok(())
            }
            NVA06F_CTRL_CMD_GPFIFO_SCHEDULE => {
                let (_, _, tsg) = self.chid_of(c, object)?;
                let enable = ScheduleParams::enable_of(caller.abi, p)
                    .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
                crate::fifo::lock(&self.fifo).set_scheduled(tsg, enable);
                Ok(())
            }
            NVA06C_CTRL_CMD_SET_TIMESLICE | NVA06C_CTRL_CMD_GET_TIMESLICE => {
                on(&[KEPLER_CHANNEL_GROUP_A])?;
                self.timeslice(c, object, cmd == NVA06C_CTRL_CMD_SET_TIMESLICE, p)
            }
            NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES => {
                on(&[GT200_DEBUGGER])?;
                self.read_all_sm_error_states(c, p)
            }
            NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES => {
                on(&[GT200_DEBUGGER])?;
                let q: NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS = ctrl_params(p)?;
                let (chid, _, _) = self.chid_of(c, Handle(q.hTargetChannel))?;
                if let Some(ch) = crate::fifo::lock(&self.fifo).channel_mut(chid) {
                    ch.clear_errors();
                }
                Ok(())
            }
            NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO => {
                on(&[GT200_DEBUGGER])?;
                self.read_mmu_fault_info(c, object, p)
            }
            _ => Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        }
    }

    /// `NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2`: params of the caller's ABI's size exactly.
    fn class_list(&self, abi: RmAbi, p: &mut [u8]) -> Result<(), RmStatus> {
        let expected = match abi {
            RmAbi::R570 => size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570>(),
            RmAbi::R580 => size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580>(),
        };
        if p.len() != expected {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let mut l = ClassListV2::new(abi);
        if !l.set_classes(&self.rm.class_list()) {
            return Err(RmStatus::NV_ERR_BUFFER_TOO_SMALL);
        }
        p.copy_from_slice(l.as_bytes());
        Ok(())
    }

    /// `NV2080_CTRL_CMD_GR_GET_INFO_V2`: the chip's GR facts by index (0 for unknown ones).
    fn gr_info(&self, p: &mut [u8]) -> Result<(), RmStatus> {
        let mut q: NV2080_CTRL_GR_GET_INFO_V2_PARAMS = ctrl_params(p)?;
        if q.grInfoListSize as usize > NV0080_CTRL_GR_INFO_MAX_SIZE {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let n = q.grInfoListSize as usize;
        for e in q.grInfoList.iter_mut().take(n) {
            if e.index as usize >= NV0080_CTRL_GR_INFO_MAX_SIZE {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            e.data = self.rm.gr.value(e.index).unwrap_or(0);
        }
        write_back(p, &q);
        Ok(())
    }

    /// `NV2080_CTRL_CMD_MC_GET_ARCH_INFO`: architecture, implementation and revision of the chip.
    fn arch_info(&self, p: &mut [u8]) -> Result<(), RmStatus> {
        let mut a: NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS = ctrl_params(p)?;
        let id = self.model.chipset.info().chip_id as u32;
        a.architecture = id & 0xff0;
        a.implementation = id & 0xf;
        a.revision = ((self.model.revision.0 as u32) << 4) | self.model.revision.1 as u32;
        a.subRevision = 0;
        write_back(p, &a);
        Ok(())
    }

    /// `NV2080_CTRL_CMD_GPU_GET_GID_INFO`: a UUID made of the device and chip ids, binary or
    /// as the `GPU-xxxxxxxx-...` string.
    fn gid_info(&self, p: &mut [u8]) -> Result<(), RmStatus> {
        let mut g: NV2080_CTRL_GPU_GET_GID_INFO_PARAMS = ctrl_params(p)?;
        let mut uuid = [0u8; 16];
        uuid[..2].copy_from_slice(&self.model.device_id.to_be_bytes());
        uuid[2..8].copy_from_slice(b"nvbare");
        uuid[8..10].copy_from_slice(&(self.model.chipset.info().chip_id).to_be_bytes());
        g.data = [0; NV2080_GPU_MAX_GID_LENGTH];
        if g.flags & 3 == NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY {
            g.data[..16].copy_from_slice(&uuid);
            g.length = 16;
        } else {
            let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
            let s = format!(
                "GPU-{}-{}-{}-{}-{}",
                &hex[0..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..32]
            );
            g.data[..s.len()].copy_from_slice(s.as_bytes());
            g.length = s.len() as u32 + 1;
        }
        write_back(p, &g);
        Ok(())
    }

    /// `NVA06C_CTRL_CMD_SET_TIMESLICE` / `GET_TIMESLICE` on a channel group.
    fn timeslice(
        &mut self,
        c: Handle,
        tsg: Handle,
        set: bool,
        p: &mut [u8],
    ) -> Result<(), RmStatus> {
        let mut t: NVA06C_CTRL_TIMESLICE_PARAMS = ctrl_params(p)?;
        if let Kind::ChannelGroup { timeslice_us, .. } = &mut self.object_mut(c, tsg)?.kind {
            if set {
                if t.timesliceUs == 0 {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                *timeslice_us = t.timesliceUs;
            } else {
                t.timesliceUs = *timeslice_us;
            }
        }
        write_back(p, &t);
        Ok(())
    }

    /// `NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES`: the target channel's SM error states
    /// from `startingSM`, and its last MMU fault.
    fn read_all_sm_error_states(&self, c: Handle, p: &mut [u8]) -> Result<(), RmStatus> {
        let mut q: NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS = ctrl_params(p)?;
        let (chid, _, _) = self.chid_of(c, Handle(q.hTargetChannel))?;
        let f = crate::fifo::lock(&self.fifo);
        let ch = f.channel(chid).ok_or(RmStatus::NV_ERR_INVALID_CHANNEL)?;
        let e = ch.errors();
        let sms = self.rm.gr.sm_count();
        let n = q
            .numSMsToRead
            .min(NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL as u32)
            .min(sms.saturating_sub(q.startingSM));
        q.smErrorStateArray =
            [NV83DE_SM_ERROR_STATE_REGISTERS::default(); NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL];
        for i in 0..n {
            if let Some(r) = e.sm_errors.get(&(q.startingSM + i))
                && let Some(slot) = q.smErrorStateArray.get_mut(i as usize)
            {
                *slot = *r;
            }
        }
        q.mmuFault.valid = e.mmu_fault_valid as u8;
        q.mmuFault.faultInfo = e.mmu_faults.last().map_or(0, |f| f.faultType);
        q.mmuFaultInfo = q.mmuFault.faultInfo;
        write_back(p, &q);
        Ok(())
    }

    /// `NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO`: the MMU faults of the debugger's channel.
    fn read_mmu_fault_info(
        &self,
        c: Handle,
        debugger: Handle,
        p: &mut [u8],
    ) -> Result<(), RmStatus> {
        let _: NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS = ctrl_params(p)?;
        let Kind::Debugger { chid } = self.object(c, debugger)?.kind else {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
        };
        let mut q = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS::default();
        if let Some(chid) = chid {
            let f = crate::fifo::lock(&self.fifo);
            if let Some(ch) = f.channel(chid) {
                for (slot, e) in q.mmuFaultInfoList.iter_mut().zip(&ch.errors().mmu_faults) {
                    *slot = *e;
                    q.count += 1;
                }
            }
        }
        write_back(p, &q);
        Ok(())
    }
}

/// `NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2`: the version of the RM the caller's ABI is.
fn build_version(abi: RmAbi, p: &mut [u8]) -> Result<(), RmStatus> {
    let mut v: NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS = ctrl_params(p)?;
    let ver = match abi {
        RmAbi::R570 => "570.144",
        RmAbi::R580 => "580.142",
    };
    set_c_str(&mut v.driverVersionBuffer, ver);
    set_c_str(&mut v.versionBuffer, ver);
    set_c_str(&mut v.driverBranch, "nvbare-sim");
    set_c_str(&mut v.titleBuffer, "nvbare simulated RM");
    write_back(p, &v);
    Ok(())
}
