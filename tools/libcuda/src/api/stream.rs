//! Streams and events, onto nvbare's. An event made without `CU_EVENT_DISABLE_TIMING` is
//! recorded as an nvbare timed event: the GPU notes its time there, which
//! cuEventElapsedTime subtracts (docs/libcuda.md).

use std::ffi::{c_int, c_uint};
use std::sync::{Arc, Mutex};

use super::capture::{self, capturing};
use super::{handle, id, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuResult, err};
use crate::state::{self, EventObj, StreamObj};

fn create_stream(ph: *mut CUstream) -> CuResult<usize> {
    let (ch, c) = state::current()?;
    if ph.is_null() {
        return Err(crate::error::null("phStream"));
    }
    let stream = match c.gpu.new_stream() {
        Ok(s) => s,
        Err(_) => {
            // Sharing a stream only adds ordering, which CUDA allows.
            crate::log_once(&format!(
                "more CUDA streams than the {} nvbare streams of {}: the rest share the default \
                 stream",
                state::STREAMS_PER_DEVICE,
                c.gpu.name()
            ));
            c.stream.clone()
        }
    };
    let mut o = state::objects();
    let h = o.handle();
    o.streams.insert(
        h,
        Arc::new(StreamObj {
            ctx: ch,
            stream,
            capture: Mutex::default(),
        }),
    );
    Ok(h)
}

fn event_of(e: CUevent) -> CuResult<Arc<EventObj>> {
    state::get(|o| &o.events, id(e), "event")
}

/// Whether the event's work is done (an event never recorded is), waiting for it if `wait`.
fn poll(e: &EventObj, wait: bool) -> CuResult<bool> {
    let rec = e.rec.lock().unwrap_or_else(|p| p.into_inner());
    let Some(ev) = rec.as_ref() else {
        return Ok(true);
    };
    if wait {
        ev.synchronize()?;
        return Ok(true);
    }
    Ok(ev.is_done()?)
}

/// The GPU time at which recorded event `e` was reached (`None`: not yet).
fn gpu_time(e: &EventObj) -> CuResult<Option<u64>> {
    let rec = e.rec.lock().unwrap_or_else(|p| p.into_inner());
    let ev = rec.as_ref().ok_or_else(|| {
        err(
            CUDA_ERROR_INVALID_HANDLE,
            "an event that was never recorded",
        )
    })?;
    Ok(ev.gpu_time_ns()?)
}

entry! {
    fn cuStreamCreate(ph: *mut CUstream, flags: c_uint) {
        let _ = flags & CU_STREAM_NON_BLOCKING; // no implicit sync with the null stream anyway
        let h = create_stream(ph)?;
        // SAFETY: the caller's out-pointer (checked non-null in create_stream).
        unsafe { put(ph, handle(h), "phStream") }
    }

    /// Priorities are not modelled: every stream is equal.
    fn cuStreamCreateWithPriority(ph: *mut CUstream, flags: c_uint, priority: c_int) {
        let _ = (flags, priority);
        let h = create_stream(ph)?;
        // SAFETY: the caller's out-pointer (checked non-null in create_stream).
        unsafe { put(ph, handle(h), "phStream") }
    }

    /// Forgets the handle; work already queued still runs.
    fn cuStreamDestroy_v2(h: CUstream) {
        state::driver()?;
        state::objects()
            .streams
            .remove(&id(h))
            .map(|_| ())
            .ok_or_else(|| err(CUDA_ERROR_INVALID_HANDLE, format!("stream {:#x}", id(h))))
    }

    fn cuStreamSynchronize(h: CUstream) {
        if let Some(c) = capturing(h)? {
            return Err(c.refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamSynchronize"));
        }
        Ok(state::stream_of(h)?.synchronize()?)
    }

    fn cuStreamQuery(h: CUstream) {
        if let Some(c) = capturing(h)? {
            return Err(c.refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamQuery"));
        }
        let s = state::stream_of(h)?;
        if s.record_event()?.is_done()? {
            Ok(())
        } else {
            Err(err(CUDA_ERROR_NOT_READY, "the stream has work in flight"))
        }
    }

    /// Waits on the GPU for an event of the same device, on the CPU for another's. An event
    /// recorded in a stream capture makes the stream join that capture (api/capture.rs).
    fn cuStreamWaitEvent(h: CUstream, ev: CUevent, flags: c_uint) {
        let _ = flags;
        let e = event_of(ev)?;
        let mark = e
            .capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|m| m.live());
        if let Some(c) = capturing(h)? {
            return match mark {
                Some(m) => c.wait(&m),
                None => Err(c.refuse(
                    CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                    "cuStreamWaitEvent on an event recorded outside the capture",
                )),
            };
        }
        if let Some(m) = mark {
            return capture::join(h, &m);
        }
        let s = state::stream_of(h)?;
        let rec = e.rec.lock().unwrap_or_else(|p| p.into_inner());
        match rec.as_ref() {
            Some(ev) => Ok(s.wait_event(ev)?),
            None => Ok(()),
        }
    }

    fn cuEventCreate(ph: *mut CUevent, flags: c_uint) {
        state::current()?;
        if ph.is_null() {
            return Err(crate::error::null("phEvent"));
        }
        if flags & CU_EVENT_INTERPROCESS != 0 {
            return Err(err(CUDA_ERROR_NOT_SUPPORTED, "CU_EVENT_INTERPROCESS"));
        }
        let mut o = state::objects();
        let h = o.handle();
        o.events.insert(
            h,
            Arc::new(EventObj { flags, rec: Mutex::new(None), capture: Mutex::new(None) }),
        );
        drop(o);
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(ph, handle(h), "phEvent") }
    }

    /// On a capturing stream: marks the capture's point there (no record), for other streams
    /// to join the capture.
    fn cuEventRecord(ev: CUevent, h: CUstream) {
        let e = event_of(ev)?;
        if let Some(c) = capturing(h)? {
            let m = c.mark()?;
            *e.capture.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
            return Ok(());
        }
        let s = state::stream_of(h)?;
        let recorded = if e.flags & CU_EVENT_DISABLE_TIMING != 0 {
            s.record_event()?
        } else {
            s.record_timed_event()?
        };
        *e.capture.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *e.rec.lock().unwrap_or_else(|p| p.into_inner()) = Some(recorded);
        Ok(())
    }

    fn cuEventRecordWithFlags(ev: CUevent, h: CUstream, flags: c_uint) {
        let _ = flags;
        // SAFETY: no pointers are dereferenced.
        match unsafe { cuEventRecord(ev, h) } {
            CUDA_SUCCESS => Ok(()),
            code => Err(err(code, "cuEventRecord failed")),
        }
    }

    fn cuEventQuery(ev: CUevent) {
        if poll(&*event_of(ev)?, false)? {
            Ok(())
        } else {
            Err(err(CUDA_ERROR_NOT_READY, "the event's work is in flight"))
        }
    }

    /// Waits with the facade's deadline.
    fn cuEventSynchronize(ev: CUevent) {
        poll(&*event_of(ev)?, true).map(|_| ())
    }

    /// Milliseconds of GPU time between the two events (negative if `end` came first, as
    /// CUDA's for events of two streams).
    fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) {
        let (s, e) = (event_of(start)?, event_of(end)?);
        if (s.flags | e.flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return Err(err(CUDA_ERROR_INVALID_HANDLE, "an event made with CU_EVENT_DISABLE_TIMING"));
        }
        let (Some(t0), Some(t1)) = (gpu_time(&s)?, gpu_time(&e)?) else {
            return Err(err(CUDA_ERROR_NOT_READY, "an event's work is in flight"));
        };
        let v = (t1 as i128 - t0 as i128) as f64 / 1e6;
        // SAFETY: the caller's out-pointer.
        unsafe { put(ms, v as f32, "pMilliseconds") }
    }

    /// CUDA 13's name for cuEventElapsedTime.
    fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) {
        // SAFETY: the caller's arguments, passed on.
        match unsafe { cuEventElapsedTime(ms, start, end) } {
            CUDA_SUCCESS => Ok(()),
            code => Err(err(code, "cuEventElapsedTime failed")),
        }
    }

    fn cuEventDestroy_v2(ev: CUevent) {
        state::driver()?;
        state::objects()
            .events
            .remove(&id(ev))
            .map(|_| ())
            .ok_or_else(|| err(CUDA_ERROR_INVALID_HANDLE, format!("event {:#x}", id(ev))))
    }
}
