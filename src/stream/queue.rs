//! What is queued on a stream, and knowing when it has completed, at no cost per graph launch.
//!
//! A [`StreamQueue`] is the crate's side of one CUDA stream: the raw handle, a process-unique id, a
//! marker pool, and its *tail*: the graph launch queued last, while no marker follows it yet.
//! An [`ExecLaunches`] is an executable graph's side: how many launches it issued, the queue of
//! the latest one, and a marker of that launch once one exists.
//!
//! A graph launch records nothing (`Exec::launch` is one `cuGraphLaunch`). A marker of the
//! latest launch is recorded only when it is needed, and always directly after that launch in
//! its stream's order, so it completes when the launch has and waits for nothing queued later:
//!
//! - before the crate queues other work on that stream ([`QueueGuard::seal`], which [`QueueGuard::mark`]
//!   and every stream operation of the crate go through), the tail launch gets its marker;
//! - when somebody asks for one ([`ExecLaunches::so_far`]), the latest launch is still its
//!   stream's tail (otherwise it would have been sealed), so a marker recorded now follows it
//!   directly.
//!
//! Launches of one `cudaGraphExec_t` never overlap: CUDA orders each launch after the earlier
//! ones, whatever their streams (`cudaGraphLaunch`). So the latest launch completing means all
//! have, and one marker covers them all. A waiter never waits for later work on the stream
//! (such as a host node of another graph blocked on a lock the waiter holds).
//!
//! Work queued through a stream's raw handle (`Stream::raw` with the `unsafe` calls of
//! `result`) is not seen here: a marker recorded after it waits for it too (longer, never
//! shorter, than the launch).
//!
//! Lock order: an allocation's use list, then a launch log's gate, then a queue's tail, then a
//! launch log's state. Locks held while waiting for the GPU: a synchronous helper's
//! (`crate::stream::track::with_gpu_idle`) use lists and gates; and, only where recording a
//! marker fails (`mark_queued`'s fallback: the stream is synchronised instead), a stream
//! operation's use lists and tail (with, for a collective, its communicators' locks and the
//! later ranks' tails). That wait is for work already queued, which takes none of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::driver as dr;
use crate::result::runtime as rt;
use crate::stream::marker::{Marker, MarkerPool};
use crate::sys;

/// One CUDA stream, as the crate tracks it (the inside of a `Stream`).
pub(crate) struct StreamQueue {
    raw: sys::cudaStream_t,
    pub(crate) device: Device,
    /// Never reused within a process (raw handles are): what markers name their stream by.
    id: u64,
    tail: Mutex<TailState>,
    /// The owner of a stream this queue does not own (a cudarc `CudaStream`, kept alive by
    /// this): the stream is not destroyed with the queue. `None` for the crate's own streams.
    borrowed: Option<Box<dyn std::any::Any + Send + Sync>>,
}

struct TailState {
    pool: MarkerPool,
    /// The graph launch queued last, while no marker follows it: its log and launch number.
    launch: Option<(Weak<ExecLaunches>, u64)>,
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

// SAFETY: a CUDA stream handle may be used from any thread; the runtime serialises access.
// The tail (marker pool and tail launch) is behind a mutex.
unsafe impl Send for StreamQueue {}
// SAFETY: as above.
unsafe impl Sync for StreamQueue {}

impl StreamQueue {
    /// Creates a non-blocking stream on `device`.
    pub(crate) fn new(device: &Device) -> Result<Arc<StreamQueue>> {
        device.bind()?;
        // SAFETY: the stream is owned by the returned value and destroyed in its Drop.
        let raw = unsafe { rt::stream_create(sys::cudaStreamNonBlocking)? };
        // SAFETY: created above, on `device`, and owned by the queue.
        Ok(unsafe { Self::with_raw(device, raw, None) })
    }

    /// A queue of a stream another library owns; `owner` keeps it alive and is dropped with
    /// the queue instead of destroying the stream.
    ///
    /// # Safety
    /// `raw` is one stream (not a per-thread name) of `device`'s primary context, and stays
    /// valid while `owner` lives.
    pub(crate) unsafe fn borrowed(
        device: &Device,
        raw: sys::cudaStream_t,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Arc<StreamQueue> {
        // SAFETY: the caller's contract.
        unsafe { Self::with_raw(device, raw, Some(owner)) }
    }

    /// # Safety
    /// `raw` is a stream of `device`: owned by the queue when `borrowed` is `None`, else kept
    /// alive by `borrowed`.
    unsafe fn with_raw(
        device: &Device,
        raw: sys::cudaStream_t,
        borrowed: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Arc<StreamQueue> {
        Arc::new(StreamQueue {
            raw,
            device: device.clone(),
            id: NEXT_STREAM.fetch_add(1, Ordering::Relaxed),
            tail: Mutex::new(TailState {
                pool: MarkerPool::new(device),
                launch: None,
            }),
            borrowed,
        })
    }

    /// What keeps a stream another library owns alive (`None` for the crate's own streams).
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn owner(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.borrowed.as_deref()
    }

    /// The raw handle.
    pub(crate) fn raw(&self) -> sys::cudaStream_t {
        self.raw
    }

    /// Locks the tail: work queued while the guard lives has a known place in the stream.
    pub(crate) fn lock(self: &Arc<Self>) -> QueueGuard<'_> {
        QueueGuard {
            queue: self,
            state: self.tail.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

impl Drop for StreamQueue {
    fn drop(&mut self) {
        if self.borrowed.is_some() {
            // Its owner (dropped with this) destroys it, or not.
            return;
        }
        // Work still queued runs to completion (CUDA releases the stream afterwards).
        // SAFETY: the handle is live and this is its last owner; what queued work uses is kept
        // alive by the markers in the objects' use lists and by the `Exec`s, not the stream.
        if let Err(e) = unsafe { rt::stream_destroy(self.raw) } {
            self.device.defer("a stream", e);
        }
    }
}

/// A locked queue tail (see [`StreamQueue::lock`]).
pub(crate) struct QueueGuard<'a> {
    queue: &'a Arc<StreamQueue>,
    state: MutexGuard<'a, TailState>,
}

impl QueueGuard<'_> {
    /// The raw stream, for queuing work while the tail is locked.
    pub(crate) fn raw(&self) -> sys::cudaStream_t {
        self.queue.raw
    }

    /// Marks the work just queued at the tail (see [`Queued`]). If no marker can be
    /// recorded, the tail is released and the stream waited for instead (longer, never
    /// shorter), so that nothing the work uses is freed, or read or written by the host,
    /// before it ran.
    pub(crate) fn mark_queued(mut self) -> Queued {
        let marked = self.mark();
        let raw = self.queue.raw;
        drop(self);
        settle(marked, || {
            // SAFETY: the stream is live: the caller holds the `Stream` this guard locked.
            unsafe { rt::stream_synchronize(raw) }
        })
    }

    /// Gives the graph launch at the tail its marker, before other work is queued after it.
    /// On error, nothing changed.
    pub(crate) fn seal(&mut self) -> Result<()> {
        if self.state.launch.is_some() {
            self.mark()?;
        }
        Ok(())
    }

    /// A marker recorded now: it completes when the work queued so far on the stream has. A
    /// graph launch at the tail takes it as the marker of that launch (nothing lies between).
    pub(crate) fn mark(&mut self) -> Result<Arc<Marker>> {
        // SAFETY: the stream is live and of the pool's device (made together in `StreamQueue::new`).
        let m = unsafe { self.state.pool.record(self.queue.raw, self.queue.id)? };
        if let Some((log, n)) = self.state.launch.take() {
            if let Some(log) = log.upgrade() {
                log.marked(n, &m);
            }
        }
        Ok(m)
    }

    /// Launches `exec` (which `log` counts) on the stream. A launch of another graph at the
    /// tail is sealed first; a launch of the same graph needs no marker (this one completing
    /// implies it has).
    ///
    /// # Safety
    /// `exec` is a live executable graph of the stream's device, and what its launches use
    /// stays alive and unaccessed by the host until `log` says they completed.
    pub(crate) unsafe fn launch(
        &mut self,
        log: &Arc<ExecLaunches>,
        exec: sys::cudaGraphExec_t,
    ) -> Result<()> {
        let same = matches!(&self.state.launch, Some((w, _)) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(log)));
        if !same {
            self.seal()?;
        }
        // SAFETY: the caller's contract; the stream is live. A stream name (the default
        // stream, handle 0, as a cudarc default stream wraps it) goes to the runtime, which
        // resolves it in the device's primary context; a stream goes to the driver, which costs
        // less per launch (`result::driver::graph_launch`).
        unsafe {
            if self.queue.raw.is_null() {
                rt::graph_launch(exec, self.queue.raw)?
            } else {
                dr::graph_launch(exec, self.queue.raw)?
            }
        };
        let n = log.launched(self.queue);
        match &mut self.state.launch {
            Some((_, at)) if same => *at = n,
            slot => *slot = Some((Arc::downgrade(log), n)),
        }
        Ok(())
    }
}

/// The launches of one executable graph (see the module docs).
#[derive(Default)]
pub(crate) struct ExecLaunches {
    state: Mutex<LogState>,
    /// Held across each launch of the graph (`Exec::launch`), and by a synchronous helper
    /// while it waits for and then accesses memory the graph uses
    /// (`crate::stream::track::with_gpu_idle`): no launch of the graph starts in between.
    gate: Mutex<()>,
}

#[derive(Default)]
struct LogState {
    /// Launches issued so far (counted after the launch call returned).
    launches: u64,
    /// The queue of the latest launch.
    queue: Option<Arc<StreamQueue>>,
    /// A marker that completes when launch number `.0` has (so every launch up to it).
    marker: Option<(u64, Arc<Marker>)>,
}

impl ExecLaunches {
    pub(crate) fn new() -> Arc<ExecLaunches> {
        Arc::new(ExecLaunches::default())
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a guard of [`ExecLaunches::hold_launches`] lives now (for tests).
    #[cfg(test)]
    pub(crate) fn launches_held(&self) -> bool {
        self.gate.try_lock().is_err()
    }

    /// Holds the graph's launches back while the guard lives (see the field `gate`). Lock
    /// order: after the use lists, before a queue's tail.
    pub(crate) fn hold_launches(&self) -> MutexGuard<'_, ()> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a launch on `queue` (its tail locked by the caller); returns its number.
    fn launched(&self, queue: &Arc<StreamQueue>) -> u64 {
        let mut s = self.lock();
        s.launches += 1;
        if !s.queue.as_ref().is_some_and(|q| Arc::ptr_eq(q, queue)) {
            s.queue = Some(queue.clone());
        }
        s.launches
    }

    /// Takes `m` as the marker of launch `n`, if that is still the latest.
    fn marked(&self, n: u64, m: &Arc<Marker>) {
        let mut s = self.lock();
        if s.launches == n {
            s.marker = Some((n, m.clone()));
        }
    }

    /// A marker that completes when every launch issued so far has, and waits for nothing
    /// queued after the latest one; `None` before the first launch. Records one when the
    /// latest launch has none yet (it is then still its stream's tail).
    pub(crate) fn so_far(&self) -> Result<Option<Arc<Marker>>> {
        loop {
            let (n, queue) = {
                let s = self.lock();
                match (&s.marker, &s.queue) {
                    _ if s.launches == 0 => return Ok(None),
                    (Some((at, m)), _) if *at == s.launches => return Ok(Some(m.clone())),
                    (_, Some(q)) => (s.launches, q.clone()),
                    (_, None) => unreachable!("a launch notes its queue"),
                }
            };
            let mut tail = queue.lock();
            {
                let s = self.lock();
                if s.launches != n {
                    // Launched again meanwhile (perhaps on another stream): look again.
                    continue;
                }
                if let Some((at, m)) = &s.marker {
                    if *at == n {
                        // Sealed meanwhile.
                        return Ok(Some(m.clone()));
                    }
                }
            }
            // Launch `n` has no marker, so no work was queued after it: it is the tail.
            debug_assert!(matches!(&tail.state.launch, Some((w, at))
                if *at == n && std::ptr::eq(w.as_ptr(), self)));
            return tail.mark().map(Some);
        }
    }

    /// Waits for every launch issued so far (never for later work on their streams).
    pub(crate) fn wait(&self) -> Result<()> {
        match self.so_far()? {
            Some(m) => m.wait(),
            None => Ok(()),
        }
    }
}

/// What became of work just queued at a tail ([`QueueGuard::mark_queued`]).
#[derive(Debug)]
pub(crate) enum Queued<M = Arc<Marker>> {
    /// The work's marker: note it on everything the work uses.
    Marked(M),
    /// No marker could be recorded (the error says why), but the stream was waited for: the
    /// work has run, so what it used needs no marker.
    Ran(Error),
    /// Neither a marker nor a wait (the error is the marker's): the work may still run, as far
    /// as anyone can tell. What it uses must never be freed; the caller leaks it. (Both calls
    /// failing means the context is broken, so the work is not running, but nothing proves it.)
    Unknown(Error),
}

/// [`QueueGuard::mark_queued`]'s decision: the marker if there is one, else the outcome of
/// `wait` (called only then).
fn settle<M>(marked: Result<M>, wait: impl FnOnce() -> Result<()>) -> Queued<M> {
    match marked {
        Ok(m) => Queued::Marked(m),
        Err(e) => match wait() {
            Ok(()) => Queued::Ran(e),
            Err(_) => Queued::Unknown(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_without_a_marker_is_waited_for_or_reported_unknown() {
        let failed = || Error::Invalid("no marker".into());
        // A marker: no wait.
        let q = settle(Ok(7), || panic!("waited although marked"));
        assert!(matches!(q, Queued::Marked(7)));
        // No marker, the wait succeeds: the work ran.
        let mut waited = false;
        let q: Queued<u8> = settle(Err(failed()), || {
            waited = true;
            Ok(())
        });
        assert!(
            waited && matches!(q, Queued::Ran(Error::Invalid(_))),
            "{q:?}"
        );
        // No marker and no wait: unknown, with the marker's error.
        let q: Queued<u8> = settle(Err(failed()), || Err(Error::Invalid("no wait".into())));
        assert!(
            matches!(&q, Queued::Unknown(Error::Invalid(m)) if m == "no marker"),
            "{q:?}"
        );
    }
}
