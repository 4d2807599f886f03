//! Stream capture: between cuStreamBeginCapture and cuStreamEndCapture, the kernels, copies,
//! memsets and graph launches a program queues on a stream become a graph's nodes, in order,
//! instead of running. One stream per capture: an event recorded in a capturing stream or
//! waited for by one (how CUDA joins other streams into a capture) is refused with
//! `CUDA_ERROR_NOT_SUPPORTED`, and, as every error during capture does in CUDA, invalidates
//! the capture: cuStreamEndCapture then answers `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
//! A wait on the capturing stream (cuStreamSynchronize, cuStreamQuery, cuCtxSynchronize)
//! answers `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates it too.

use std::ffi::c_uint;
use std::sync::Arc;

use super::graph::{GraphObj, Work};
use super::{handle, id, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuError, CuResult, err, null};
use crate::state::{self, StreamObj};

/// Where a stream's capture stands.
#[derive(Debug, Default)]
pub(crate) enum Capture {
    /// Not capturing: work runs.
    #[default]
    Idle,
    /// Capturing into `graph`.
    Active {
        /// The nodes so far.
        graph: Arc<GraphObj>,
    },
    /// An error ended the capture; cuStreamEndCapture reports it.
    Invalidated,
}

/// A stream that is capturing (actively or invalidated).
pub(crate) struct Capturing(Arc<StreamObj>);

fn lock(s: &StreamObj) -> std::sync::MutexGuard<'_, Capture> {
    s.capture.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `h` is a default-stream handle (null, `CU_STREAM_LEGACY`, `_PER_THREAD`): those
/// never capture.
fn is_default(h: CUstream) -> bool {
    let h = h as usize;
    h == 0 || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD
}

/// The capture in progress on stream `h`, if any. An unknown handle is
/// `CUDA_ERROR_INVALID_HANDLE`, as the call would say without capture.
pub(crate) fn capturing(h: CUstream) -> CuResult<Option<Capturing>> {
    if is_default(h) {
        return Ok(None);
    }
    let s = state::get(|o| &o.streams, id(h), "stream")?;
    let busy = !matches!(*lock(&s), Capture::Idle);
    Ok(busy.then_some(Capturing(s)))
}

impl Capturing {
    /// Appends the work `w` builds; an error invalidates the capture and is returned.
    pub(crate) fn add(&self, w: impl FnOnce() -> CuResult<Vec<Work>>) -> CuResult<()> {
        // Built and given handles before the capture's lock is taken: building resolves
        // addresses under the objects' lock, which is never taken inside a capture's.
        let built = w().map(|works| {
            let mut o = state::objects();
            works
                .into_iter()
                .map(|w| (o.handle(), w))
                .collect::<Vec<_>>()
        });
        let mut c = lock(&self.0);
        match (&*c, built) {
            (Capture::Active { graph }, Ok(nodes)) => {
                graph
                    .nodes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(nodes);
                Ok(())
            }
            (Capture::Active { .. }, Err(e)) => {
                *c = Capture::Invalidated;
                Err(e)
            }
            (_, _) => Err(err(
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                "the stream's capture was invalidated by an earlier error; end it with \
                 cuStreamEndCapture",
            )),
        }
    }

    /// Refuses `what` with `code` during capture, invalidating the capture.
    pub(crate) fn refuse(&self, code: CUresult, what: &str) -> CuError {
        *lock(&self.0) = Capture::Invalidated;
        err(
            code,
            format!("{what} while the stream is capturing (the capture is now invalidated)"),
        )
    }
}

/// Refuses a wait on the context `ctx` while one of its streams captures (cuCtxSynchronize).
pub(crate) fn refuse_if_any_capturing(ctx: usize, what: &str) -> CuResult<()> {
    let streams: Vec<Arc<StreamObj>> = state::objects()
        .streams
        .values()
        .filter(|s| s.ctx == ctx)
        .cloned()
        .collect();
    for s in streams {
        if matches!(*lock(&s), Capture::Active { .. }) {
            return Err(Capturing(s).refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, what));
        }
    }
    Ok(())
}

fn begin(h: CUstream, mode: c_uint) -> CuResult<()> {
    state::driver()?;
    if is_default(h) {
        return Err(err(
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            "the default stream cannot be captured: capture a stream from cuStreamCreate",
        ));
    }
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(err(
            CUDA_ERROR_INVALID_VALUE,
            format!("capture mode {mode}"),
        ));
    }
    let s = state::get(|o| &o.streams, id(h), "stream")?;
    let mut c = lock(&s);
    if !matches!(*c, Capture::Idle) {
        return Err(err(
            CUDA_ERROR_ILLEGAL_STATE,
            "the stream is already capturing",
        ));
    }
    *c = Capture::Active {
        graph: Arc::new(GraphObj::default()),
    };
    Ok(())
}

entry! {
    /// Modes are accepted and not told apart: every mode refuses the same waits (see the
    /// module's comment).
    fn cuStreamBeginCapture_v2(h: CUstream, mode: c_uint) {
        begin(h, mode)
    }

    /// CUDA 10.0's form, without a mode: `CU_STREAM_CAPTURE_MODE_GLOBAL`.
    fn cuStreamBeginCapture(h: CUstream) {
        begin(h, CU_STREAM_CAPTURE_MODE_GLOBAL)
    }

    fn cuStreamEndCapture(h: CUstream, pgraph: *mut CUgraph) {
        state::driver()?;
        if pgraph.is_null() {
            return Err(null("phGraph"));
        }
        if is_default(h) {
            return Err(err(CUDA_ERROR_ILLEGAL_STATE, "the default stream is not capturing"));
        }
        let s = state::get(|o| &o.streams, id(h), "stream")?;
        let was = std::mem::take(&mut *lock(&s));
        match was {
            Capture::Idle => Err(err(CUDA_ERROR_ILLEGAL_STATE, "the stream is not capturing")),
            Capture::Invalidated => {
                // SAFETY: the caller's out-pointer (checked non-null above).
                unsafe { put(pgraph, std::ptr::null_mut(), "phGraph")? };
                Err(err(
                    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                    "the capture was invalidated by an error during it: no graph",
                ))
            }
            Capture::Active { graph } => {
                let mut o = state::objects();
                let g = o.handle();
                o.graphs.insert(g, graph);
                drop(o);
                // SAFETY: the caller's out-pointer (checked non-null above).
                unsafe { put(pgraph, handle(g), "phGraph") }
            }
        }
    }

    fn cuStreamIsCapturing(h: CUstream, status: *mut c_uint) {
        state::driver()?;
        if status.is_null() {
            return Err(null("captureStatus"));
        }
        let st = if is_default(h) {
            CU_STREAM_CAPTURE_STATUS_NONE
        } else {
            let s = state::get(|o| &o.streams, id(h), "stream")?;
            match *lock(&s) {
                Capture::Idle => CU_STREAM_CAPTURE_STATUS_NONE,
                Capture::Active { .. } => CU_STREAM_CAPTURE_STATUS_ACTIVE,
                Capture::Invalidated => CU_STREAM_CAPTURE_STATUS_INVALIDATED,
            }
        };
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(status, st, "captureStatus") }
    }
}
