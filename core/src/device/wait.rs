//! Waits: spin, then poll with the backend's clock under the doorbell watchdog, watching the
//! error notifiers and the backend's events; a fault or a timeout gathers a report and
//! re-creates the channels (recovery).

use alloc::string::ToString;
use alloc::vec::Vec;
use core::time::Duration;

use zerocopy::{FromZeros, IntoBytes};

use super::backend::{Backend, GpuMemory};
use super::error::{
    ChannelKind, DeviceError, FaultReport, MmuFaultRecord, Recovery, SmErrorRecord,
};
use super::ops::{DoorbellRetries, Inner, chan_index, other};
use super::{DeviceInfo, DeviceOptions};
use crate::hal::{Clock, PollError, poll_until};
use crate::rm::Rm;
use crate::rm::ctrl::*;

/// SM error states read back for a report.
const MAX_SM_REPORTS: usize = 8;

/// What [`poll_until`] ends with.
enum WaitEnd {
    Timeout(Duration),
    Fault,
    Err(DeviceError),
}

impl From<PollError> for WaitEnd {
    fn from(e: PollError) -> Self {
        WaitEnd::Timeout(e.waited)
    }
}

/// How often a wait reads the backend's events (an RC arrives by event on a GSP system).
const EVENT_CHECK: Duration = Duration::from_millis(2);

/// What the doorbell watchdog of a wait remembers between its checks.
struct Watchdog {
    /// Each channel's timeline value when last looked at, and its USERD `GPGet` when it was
    /// last read (only at a check, only for a channel whose timeline stood still).
    seen: Vec<(Option<u64>, Option<u32>)>,
    /// Time without progress before the doorbells are rung again.
    interval: Duration,
    /// When progress was last looked at.
    checked: Duration,
}

impl<B: Backend> Inner<B> {
    fn notifier_status(&self) -> Result<Option<(usize, u32)>, DeviceError> {
        for (i, c) in self.chans.iter().enumerate() {
            let mut n = NvNotification::default();
            c.notifier.read(0, n.as_mut_bytes())?;
            if n.status != 0 {
                return Ok(Some((i, n.info32)));
            }
        }
        Ok(None)
    }

    /// Waits until channel `ci`'s timeline reaches `value`. A fault or a timeout gathers a
    /// report, re-creates the channels, and fails.
    pub(super) fn wait(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        ci: usize,
        value: u64,
        what: &'static str,
    ) -> Result<(), DeviceError> {
        let sem_off = self.chans[ci].sem_offset;
        let reached =
            |sem: &B::Memory| -> Result<bool, DeviceError> { Ok(sem.read_u64(sem_off)? >= value) };
        let mut retries = DoorbellRetries::default();
        let outcome = if reached(&self.sem)? {
            Ok(())
        } else {
            self.kick_all()?;
            let clock = self.backend.clock();
            // Spin first: most waits on real hardware end within microseconds.
            let spun: Result<(), WaitEnd> =
                poll_until(clock, opts.spin, Duration::ZERO, what, || {
                    reached(&self.sem)
                        .map(|r| r.then_some(()))
                        .map_err(WaitEnd::Err)
                });
            match spun {
                Err(WaitEnd::Timeout(_)) => {
                    self.poll_until_fault(opts, ci, value, what, &mut retries)
                }
                r => r,
            }
        };
        self.doorbell_retries.all += retries.all;
        self.doorbell_retries.unfetched += retries.unfetched;
        let end = match outcome {
            Ok(()) => {
                self.chans[ci].seen = self.chans[ci].seen.max(value);
                return Ok(());
            }
            Err(e) => e,
        };
        match end {
            WaitEnd::Err(e) => Err(e),
            WaitEnd::Fault => {
                let mut report = self.gather_report(info, ci, value, retries.all)?;
                report.recovery = self.recover(info, opts);
                Err(DeviceError::Fault(alloc::boxed::Box::new(report)))
            }
            WaitEnd::Timeout(waited) => {
                let mut report = self.gather_report(info, ci, value, retries.all)?;
                report.recovery = self.recover(info, opts);
                Err(DeviceError::Timeout {
                    what,
                    waited,
                    report: alloc::boxed::Box::new(report),
                })
            }
        }
    }

    /// [`Inner::poll_with_watchdog`] in slices of [`EVENT_CHECK`], reading the backend's
    /// events between them: a channel reset (RC) reported by event ends the wait as a fault
    /// even when no error notifier was written (whether GSP-RM writes it is unknown,
    /// docs/assumptions.md).
    fn poll_until_fault(
        &mut self,
        opts: &DeviceOptions,
        ci: usize,
        value: u64,
        what: &'static str,
        retries: &mut DoorbellRetries,
    ) -> Result<(), WaitEnd> {
        let start = self.backend.clock().now();
        let mut dog = Watchdog {
            seen: self.timelines_done().map(|d| (d, None)).collect(),
            interval: opts.tuning.doorbell_retry,
            checked: start,
        };
        loop {
            let spent = self.backend.clock().now().saturating_sub(start);
            let slice = opts.timeout.saturating_sub(spent).min(EVENT_CHECK);
            match self.poll_with_watchdog(opts, slice, ci, value, what, retries, &mut dog) {
                Err(WaitEnd::Timeout(_)) => {}
                r => return r,
            }
            if self.rc_event().is_some() {
                return Err(WaitEnd::Fault);
            }
            let spent = self.backend.clock().now().saturating_sub(start);
            if spent >= opts.timeout {
                return Err(WaitEnd::Timeout(spent));
            }
        }
    }

    /// Takes the backend's pending events into [`Inner::pending_events`]; the first reset of
    /// one of this device's channels among them (an event naming another channel id, e.g.
    /// one re-created since, does not count), if any.
    fn rc_event(&mut self) -> Option<u32> {
        for _ in 0..64 {
            match self.backend.poll_events() {
                Some(e) => self.pending_events.push(e),
                None => break,
            }
        }
        let ours = |chid: u32| self.chans.iter().any(|c| c.fifo.token() & 0xfff == chid);
        self.pending_events
            .iter()
            .filter(|e| e.chid.is_none_or(ours))
            .find_map(|e| e.rc)
    }

    /// The slow part of [`Inner::wait`]: polls channel `ci`'s timeline for `value` with delays,
    /// watching the error notifiers, until the timeout. Watchdog (module docs of
    /// `channel::gpfifo`): when no channel moved (timeline, and `GPGet` of those with
    /// unfinished work) for a retry interval, it rings the doorbell of each channel with
    /// unfinished work again, counting them in `retries`. The H200 lost doorbells while another
    /// process set up its channels; ringing again when none was lost is harmless. The interval
    /// doubles while nothing moves (a long kernel), up to `MAX_RETRY`. Between checks it reads
    /// only host memory ([`Inner::watch_progress`] says why).
    #[allow(clippy::too_many_arguments)]
    fn poll_with_watchdog(
        &self,
        opts: &DeviceOptions,
        timeout: Duration,
        ci: usize,
        value: u64,
        what: &'static str,
        retries: &mut DoorbellRetries,
        dog: &mut Watchdog,
    ) -> Result<(), WaitEnd> {
        const MAX_RETRY: Duration = Duration::from_millis(10);
        let clock = self.backend.clock();
        let sem_off = self.chans[ci].sem_offset;
        let Watchdog {
            seen,
            interval,
            checked,
        } = dog;
        poll_until(clock, timeout, opts.poll_interval, what, || {
            if self
                .sem
                .read_u64(sem_off)
                .map_err(|e| WaitEnd::Err(e.into()))?
                >= value
            {
                return Ok(Some(()));
            }
            let now = clock.now();
            if now.saturating_sub(*checked) >= *interval {
                *checked = now;
                if self.watch_progress(seen) {
                    *interval = opts.tuning.doorbell_retry;
                } else {
                    self.ring_unfinished(seen, *interval, retries);
                    *interval = interval
                        .saturating_mul(2)
                        .min(MAX_RETRY.max(opts.tuning.doorbell_retry));
                }
            }
            match self.notifier_status() {
                Ok(Some(_)) => Err(WaitEnd::Fault),
                Ok(None) => Ok(None),
                Err(e) => Err(WaitEnd::Err(e)),
            }
        })
    }

    /// Each channel's completed timeline value (semaphore memory, which the CPU reads cheaply).
    fn timelines_done(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        self.chans
            .iter()
            .map(|c| self.sem.read_u64(c.sem_offset).ok())
    }

    /// One check of the doorbell watchdog: whether any channel moved since the last check
    /// (its timeline, or for a channel with unfinished work whose timeline stood still, its
    /// `GPGet`), updating `seen`. `GPGet` lives in USERD, which the kernel-driver backend
    /// places in video memory: a read crosses PCIe into a GPU that may be saturating its
    /// memory, and eight such reads as every long wait began made a synchronized 64 MiB
    /// device-to-device copy ~40 µs slower than CUDA's on an H100 (docs/performance.md,
    /// "Waits and USERD reads"). So it is read only here, for the channels the watchdog
    /// could ring.
    fn watch_progress(&self, seen: &mut [(Option<u64>, Option<u32>)]) -> bool {
        let mut moved = false;
        for ((c, done), (seen_done, seen_get)) in
            self.chans.iter().zip(self.timelines_done()).zip(seen)
        {
            if done != *seen_done {
                moved = true;
                *seen_done = done;
                *seen_get = None;
            } else if done.is_some_and(|d| d < c.submitted) {
                let get = c.fifo_get().ok();
                moved |= seen_get.is_some() && get != *seen_get;
                *seen_get = get;
            }
        }
        moved
    }

    /// Rings the doorbell of each channel with unfinished work again (nothing moved for
    /// `interval`), counting the rings that found published entries unfetched.
    fn ring_unfinished(
        &self,
        seen: &[(Option<u64>, Option<u32>)],
        interval: Duration,
        retries: &mut DoorbellRetries,
    ) {
        for (c, (done, get)) in self.chans.iter().zip(seen) {
            if done.is_some_and(|d| d < c.submitted) {
                c.fifo.ring_doorbell(&self.usermode);
                retries.all += 1;
                if *get != Some(c.fifo.published()) {
                    retries.unfetched += 1;
                }
                log::debug!(
                    "{:?} channel: no progress for {:?} (timeline {done:?} of {}, GPGet \
                     {get:?}, GPPut {}); doorbell rung again",
                    c.kind,
                    interval,
                    c.submitted,
                    c.fifo.published()
                );
            }
        }
    }

    pub(super) fn synchronize(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        for ci in 0..self.chans.len() {
            self.wait_channel(info, opts, ci)?;
        }
        Ok(())
    }

    /// Waits until everything submitted on stream [`Inner::cur`] has finished.
    pub(super) fn synchronize_stream(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        for ci in [self.compute_ci(), self.copy_ci()] {
            self.wait_channel(info, opts, ci)?;
        }
        Ok(())
    }

    /// Waits for everything submitted on channel `ci`.
    pub(super) fn wait_channel(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        ci: usize,
    ) -> Result<(), DeviceError> {
        let v = self.chans[ci].submitted;
        if v <= self.chans[ci].seen {
            // A wait saw it reached (an idle stream's channels, mostly): nothing to read.
            return Ok(());
        }
        let what = match self.chans[ci].kind {
            ChannelKind::Compute => "the compute channel",
            ChannelKind::Copy => "the copy channel",
        };
        self.wait(info, opts, ci, v, what)
    }

    pub(super) fn wait_value(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        channel: ChannelKind,
        value: u64,
    ) -> Result<(), DeviceError> {
        let ci = chan_index(self.cur, channel);
        self.wait(info, opts, ci, value, "submitted work")
    }

    // ------------------------------------------------------------------------------------------
    // Fault reports and recovery.

    /// The report of a wait for `wanted` on channel `ci` that failed after ringing doorbells
    /// again `doorbell_retries` times.
    fn gather_report(
        &mut self,
        info: &DeviceInfo,
        ci: usize,
        wanted: u64,
        doorbell_retries: u64,
    ) -> Result<FaultReport, DeviceError> {
        let mut r = FaultReport {
            channel: Some(self.chans[ci].kind),
            wanted,
            reached: self.completed(ci).unwrap_or(0),
            fetch: self.chans[ci]
                .fifo_get()
                .ok()
                .map(|get| (get, self.chans[ci].fifo.published())),
            doorbell_retries,
            ..Default::default()
        };
        if r.reached < self.chans[ci].seen {
            r.went_back_from = Some(self.chans[ci].seen);
        }
        if let Some((_, code)) = self.notifier_status().ok().flatten() {
            r.rc = Some(code);
        }
        // Events taken while waiting come first; an RC among them names the reset when the
        // notifier does not.
        r.rc = r.rc.or(self.rc_event());
        if let Some(dbg) = self.debugger {
            let mut m = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS::default();
            match self.backend.rm().control(
                dbg,
                NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO,
                m.as_mut_bytes(),
            ) {
                Ok(()) => {
                    let n = (m.count as usize).min(m.mmuFaultInfoList.len());
                    for e in m.mmuFaultInfoList.iter().take(n) {
                        r.mmu_faults.push(MmuFaultRecord {
                            address: e.faultAddress,
                            fault_type: e.faultType,
                            access_type: e.accessType,
                        });
                    }
                }
                Err(e) => r
                    .events
                    .push(alloc::format!("MMU fault info unavailable: {e}")),
            }
            let mut s = NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS::new_zeroed();
            s.hTargetChannel = self.chans[ci & !1].handle.0;
            s.numSMsToRead = info
                .gr
                .sm_count()
                .min(NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL as u32);
            match self.backend.rm().control(
                dbg,
                NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES,
                s.as_mut_bytes(),
            ) {
                Ok(()) => {
                    r.mmu_fault_flag = s.mmuFault.valid != 0;
                    let n = s.numSMsToRead as usize;
                    for (i, e) in s.smErrorStateArray.iter().take(n).enumerate() {
                        let clear = e.hwwGlobalEsr == 0 && e.hwwWarpEsr == 0 && e.hwwEsrAddr == 0;
                        if !clear && r.sm_errors.len() < MAX_SM_REPORTS {
                            r.sm_errors.push(SmErrorRecord {
                                sm: s.startingSM + i as u32,
                                global_esr: e.hwwGlobalEsr,
                                warp_esr: e.hwwWarpEsr,
                                pc: e.hwwWarpEsrPc64,
                                address: e.hwwEsrAddr,
                            });
                        }
                    }
                }
                Err(e) => r
                    .events
                    .push(alloc::format!("SM error states unavailable: {e}")),
            }
        }
        // And those that arrived since (GSP-RM sends them while it answers the controls above).
        let _ = self.rc_event();
        for e in self.pending_events.drain(..).take(64) {
            r.events.push(e.text);
        }
        if self.chans[ci].kind == ChannelKind::Compute
            && let Some((slot, k)) = self.last_kernel
        {
            r.kernel = self.slots.get(slot).and_then(|s| s.kernels.get(k)).cloned();
        }
        Ok(r)
    }

    /// Frees the channel group and builds it again; abandoned work counts as complete.
    fn recover(&mut self, info: &DeviceInfo, opts: &DeviceOptions) -> Recovery {
        if self.recovering {
            // The new channels failed too (e.g. broken page tables): give up instead of
            // recursing; the outer recovery then declares the device dead.
            return Recovery::Failed("the re-created channels failed as well".to_string());
        }
        self.recovering = true;
        let r = self.try_recover(info, opts);
        self.recovering = false;
        match r {
            Ok(()) => Recovery::ChannelsRecreated,
            Err(e) => {
                let msg = e.to_string();
                self.dead = Some(alloc::format!("channel recovery failed: {msg}"));
                Recovery::Failed(msg)
            }
        }
    }

    fn try_recover(&mut self, info: &DeviceInfo, opts: &DeviceOptions) -> Result<(), DeviceError> {
        if let Some(d) = self.debugger.take() {
            let _ = self.backend.rm().free(d);
        }
        self.backend.rm().free(self.tsg)?;
        let subs: Vec<u64> = self.chans.iter().map(|c| c.submitted).collect();
        for (i, c) in self.chans.iter_mut().enumerate() {
            c.notifier.zero(0, c.notifier.size())?;
            c.ring.zero(0, c.ring.size())?;
            c.arena.reset();
            c.unwritten = None;
            c.held_after = None;
            c.own_wait = None;
            self.sem.write_u64(c.sem_offset, c.submitted)?;
            c.synced_other = subs[other(i)];
            c.caches_dirty = true;
        }
        self.fast.reset();
        self.create_channels(info, opts)
    }
}
