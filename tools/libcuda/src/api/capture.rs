//! Stream capture: between cuStreamBeginCapture and cuStreamEndCapture, the kernels, copies,
//! memsets and graph launches a program queues on a stream become a graph's nodes, in order,
//! instead of running.
//!
//! Other streams join a capture as in CUDA: an event recorded on a capturing stream marks a
//! point of the capture, and a stream that waits for it joins (forks into) the capture; its
//! work becomes nodes of the same graph. The origin stream (the one that began) joins each of
//! them back by waiting for an event recorded on it after its last work; cuStreamEndCapture
//! on the origin then gives the graph and ends the capture on every stream in it. A stream not
//! joined back makes the end `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`, ending a joined stream
//! instead of the origin `CUDA_ERROR_STREAM_CAPTURE_UNMATCHED`, waiting for another capture's
//! event `CUDA_ERROR_STREAM_CAPTURE_MERGE` (both captures are invalidated), for an event
//! recorded outside any capture `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, the legacy default
//! stream waiting for a capture's event `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`. These answers
//! are NVIDIA's library's (`tests/c/capture_check.c` run with both, docs/libcuda.md). A graph
//! here is its nodes in the order they were added, which respects every such dependency (a
//! node is added after what it waits for), so branches of a fork are serialised when the
//! graph runs.
//!
//! As in CUDA, an error during capture invalidates the whole capture: cuStreamEndCapture then
//! answers `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`. A wait on a capturing stream
//! (cuStreamSynchronize, cuStreamQuery, cuCtxSynchronize) answers
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates it too. Capture modes are accepted
//! and not told apart.

use std::collections::{HashMap, HashSet};
use std::ffi::c_uint;
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// In the capture `0` (its origin or a stream that joined it).
    Member(Arc<Session>),
}

/// One capture, shared by the streams in it.
#[derive(Debug)]
pub(crate) struct Session {
    /// The stream that began it (its handle value).
    origin: usize,
    /// The nodes so far.
    graph: Arc<GraphObj>,
    state: Mutex<SessionState>,
}

#[derive(Debug, Default)]
struct SessionState {
    /// An error ended it; cuStreamEndCapture reports it.
    invalid: bool,
    /// cuStreamEndCapture ended it.
    ended: bool,
    /// Nodes each stream has added.
    added: HashMap<usize, u64>,
    /// Streams that joined and have not been joined back to the origin since.
    unjoined: HashSet<usize>,
}

/// A point of a capture an event was recorded at (cuEventRecord on a capturing stream).
#[derive(Debug, Clone)]
pub(crate) struct CaptureMark {
    session: Arc<Session>,
    /// The stream it was recorded on.
    stream: usize,
    /// That stream's node count then.
    added: u64,
}

impl Session {
    fn state(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CaptureMark {
    /// Whether its capture is still going (ended, the event is an ordinary one again).
    pub(crate) fn live(&self) -> bool {
        !self.session.state().ended
    }
}

/// A stream that is in a capture (actively or invalidated).
pub(crate) struct Capturing {
    stream: usize,
    session: Arc<Session>,
}

fn lock(s: &StreamObj) -> MutexGuard<'_, Capture> {
    s.capture.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `h` is a default-stream handle (null, `CU_STREAM_LEGACY`, `_PER_THREAD`): those
/// never capture.
fn is_default(h: CUstream) -> bool {
    let h = h as usize;
    h == 0 || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD
}

/// The capture stream `h` is in, if any. An unknown handle is `CUDA_ERROR_INVALID_HANDLE`, as
/// the call would say without capture.
pub(crate) fn capturing(h: CUstream) -> CuResult<Option<Capturing>> {
    if is_default(h) {
        return Ok(None);
    }
    let s = state::get(|o| &o.streams, id(h), "stream")?;
    let c = lock(&s);
    Ok(match &*c {
        Capture::Idle => None,
        Capture::Member(session) => Some(Capturing {
            stream: id(h),
            session: session.clone(),
        }),
    })
}

impl Capturing {
    /// Appends the work `w` builds; an error invalidates the capture and is returned.
    pub(crate) fn add(&self, w: impl FnOnce() -> CuResult<Vec<Work>>) -> CuResult<()> {
        if self.session.state().invalid {
            return Err(invalidated());
        }
        // Built and given handles before the session's lock is taken: building resolves
        // addresses under the objects' lock, which is never taken inside a session's.
        let built = w().map(|works| {
            let mut o = state::objects();
            works
                .into_iter()
                .map(|w| (o.handle(), w))
                .collect::<Vec<_>>()
        });
        let mut st = self.session.state();
        if st.invalid {
            return Err(invalidated());
        }
        match built {
            Ok(nodes) => {
                *st.added.entry(self.stream).or_default() += nodes.len() as u64;
                if self.stream != self.session.origin {
                    st.unjoined.insert(self.stream);
                }
                self.session
                    .graph
                    .nodes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(nodes);
                Ok(())
            }
            Err(e) => {
                st.invalid = true;
                Err(e)
            }
        }
    }

    /// Refuses `what` with `code` during capture, invalidating the capture.
    pub(crate) fn refuse(&self, code: CUresult, what: &str) -> CuError {
        self.session.state().invalid = true;
        err(
            code,
            format!("{what} while the stream is capturing (the capture is now invalidated)"),
        )
    }

    /// The capture's point on this stream now, for cuEventRecord.
    pub(crate) fn mark(&self) -> CuResult<CaptureMark> {
        let st = self.session.state();
        if st.invalid {
            return Err(invalidated());
        }
        Ok(CaptureMark {
            session: self.session.clone(),
            stream: self.stream,
            added: st.added.get(&self.stream).copied().unwrap_or(0),
        })
    }

    /// This stream waits for `mark` (cuStreamWaitEvent): another capture's point is refused;
    /// on the origin, a point at the end of a joined stream's work joins that stream back.
    pub(crate) fn wait(&self, mark: &CaptureMark) -> CuResult<()> {
        if !Arc::ptr_eq(&self.session, &mark.session) {
            // NVIDIA's library invalidates the capture the event belongs to as well.
            mark.session.state().invalid = true;
            return Err(self.refuse(
                CUDA_ERROR_STREAM_CAPTURE_MERGE,
                "cuStreamWaitEvent on an event of another capture",
            ));
        }
        let mut st = self.session.state();
        if st.invalid {
            return Err(invalidated());
        }
        let now = st.added.get(&mark.stream).copied().unwrap_or(0);
        if self.stream == self.session.origin && mark.added == now {
            st.unjoined.remove(&mark.stream);
        }
        Ok(())
    }
}

fn invalidated() -> CuError {
    err(
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        "the capture was invalidated by an earlier error; end it with cuStreamEndCapture on \
         the stream that began it",
    )
}

/// Stream `h` (not capturing) waits for `mark` of a capture: it joins that capture.
pub(crate) fn join(h: CUstream, mark: &CaptureMark) -> CuResult<()> {
    if is_default(h) {
        mark.session.state().invalid = true;
        return Err(err(
            CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
            "a default stream cannot join a capture (the capture is now invalidated); wait on a \
             stream created by cuStreamCreate",
        ));
    }
    let s = state::get(|o| &o.streams, id(h), "stream")?;
    let mut st = mark.session.state();
    if st.invalid {
        return Err(invalidated());
    }
    // Joined with nothing to join back yet: the origin must still wait for it.
    st.unjoined.insert(id(h));
    drop(st);
    *lock(&s) = Capture::Member(mark.session.clone());
    Ok(())
}

/// Refuses a wait on the context `ctx` while one of its streams captures (cuCtxSynchronize).
pub(crate) fn refuse_if_any_capturing(ctx: usize, what: &str) -> CuResult<()> {
    let streams: Vec<(usize, Arc<StreamObj>)> = state::objects()
        .streams
        .iter()
        .filter(|(_, s)| s.ctx == ctx)
        .map(|(&h, s)| (h, s.clone()))
        .collect();
    for (h, s) in streams {
        let session = match &*lock(&s) {
            Capture::Member(session) => session.clone(),
            Capture::Idle => continue,
        };
        if !session.state().invalid {
            let c = Capturing { stream: h, session };
            return Err(c.refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, what));
        }
    }
    Ok(())
}

/// Ends `session` on every stream in it.
fn end_session(session: &Arc<Session>) {
    session.state().ended = true;
    let streams: Vec<Arc<StreamObj>> = state::objects().streams.values().cloned().collect();
    for s in streams {
        let mut c = lock(&s);
        if matches!(&*c, Capture::Member(m) if Arc::ptr_eq(m, session)) {
            *c = Capture::Idle;
        }
    }
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
    *c = Capture::Member(Arc::new(Session {
        origin: id(h),
        graph: Arc::new(GraphObj::default()),
        state: Mutex::default(),
    }));
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
        let session = match &*lock(&s) {
            Capture::Idle => {
                return Err(err(CUDA_ERROR_ILLEGAL_STATE, "the stream is not capturing"));
            }
            Capture::Member(session) => session.clone(),
        };
        if session.origin != id(h) {
            session.state().invalid = true;
            return Err(err(
                CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
                "the stream joined a capture another stream began: end it there (the capture \
                 is now invalidated)",
            ));
        }
        let (invalid, unjoined) = {
            let st = session.state();
            (st.invalid, st.unjoined.len())
        };
        end_session(&session);
        if invalid || unjoined > 0 {
            // SAFETY: the caller's out-pointer (checked non-null above).
            unsafe { put(pgraph, std::ptr::null_mut(), "phGraph")? };
            return Err(if invalid {
                err(
                    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                    "the capture was invalidated by an error during it: no graph",
                )
            } else {
                err(
                    CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
                    format!(
                        "{unjoined} stream(s) joined the capture and were not joined back (the \
                         origin waits for an event recorded on each after its last work)"
                    ),
                )
            });
        }
        let mut o = state::objects();
        let g = o.handle();
        o.graphs.insert(g, session.graph.clone());
        drop(o);
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(pgraph, handle(g), "phGraph") }
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
            let session = match &*lock(&s) {
                Capture::Idle => None,
                Capture::Member(session) => Some(session.clone()),
            };
            match session {
                None => CU_STREAM_CAPTURE_STATUS_NONE,
                Some(m) if m.state().invalid => CU_STREAM_CAPTURE_STATUS_INVALIDATED,
                Some(_) => CU_STREAM_CAPTURE_STATUS_ACTIVE,
            }
        };
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(status, st, "captureStatus") }
    }
}
