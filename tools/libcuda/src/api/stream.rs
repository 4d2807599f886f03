//! Streams and events, onto nvbare's. Event times are host times: when the event was first
//! seen complete (or, if never polled before completing, when it was recorded); GPU
//! timestamps are not read yet (docs/libcuda.md).

use std::ffi::{c_int, c_uint};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::capture::{self, capturing};
use super::{handle, id, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuResult, err};
use crate::state::{self, EventObj, Recorded, StreamObj};

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

/// Whether the event's work is done, noting when: the time it was first seen done if it was
/// ever seen pending, else the time it was recorded (it finished before anyone looked).
fn poll(e: &EventObj, wait: bool) -> CuResult<bool> {
    let mut rec = e.rec.lock().unwrap_or_else(|p| p.into_inner());
    let Some(r) = rec.as_mut() else {
        return Ok(true);
    };
    if r.done_at.is_some() {
        return Ok(true);
    }
    let mut done = r.ev.is_done()?;
    if !done {
        r.pending = true;
        if wait {
            r.ev.synchronize()?;
            done = true;
        }
    }
    if done {
        r.done_at = Some(if r.pending { Instant::now() } else { r.at });
    }
    Ok(done)
}

/// When the event's work was done (`None`: not yet, or never recorded).
fn done_time(e: &EventObj) -> CuResult<Option<Instant>> {
    if !poll(e, false)? {
        return Ok(None);
    }
    let rec = e.rec.lock().unwrap_or_else(|p| p.into_inner());
    Ok(rec.as_ref().and_then(|r| r.done_at))
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
            Some(r) => Ok(s.wait_event(&r.ev)?),
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
        let recorded = s.record_event()?;
        *e.capture.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *e.rec.lock().unwrap_or_else(|p| p.into_inner()) = Some(Recorded {
            ev: recorded,
            at: Instant::now(),
            pending: false,
            done_at: None,
        });
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

    /// Milliseconds between the host times the two events were seen done (>= 0).
    fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) {
        let (s, e) = (event_of(start)?, event_of(end)?);
        if (s.flags | e.flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return Err(err(CUDA_ERROR_INVALID_HANDLE, "an event made with CU_EVENT_DISABLE_TIMING"));
        }
        let (Some(t0), Some(t1)) = (done_time(&s)?, done_time(&e)?) else {
            let recorded = |x: &EventObj| x.rec.lock().unwrap_or_else(|p| p.into_inner()).is_some();
            if !recorded(&s) || !recorded(&e) {
                return Err(err(CUDA_ERROR_INVALID_HANDLE, "an event that was never recorded"));
            }
            return Err(err(CUDA_ERROR_NOT_READY, "an event's work is in flight"));
        };
        let v = t1.saturating_duration_since(t0).as_secs_f64() * 1e3;
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
