//! Which queued GPU work uses an object, so that nothing is freed, overwritten or read by the
//! host while that work may still use it.
//!
//! - A [`Marker`] (`crate::marker`) is a CUDA event recorded on a stream right after some work:
//!   it completes when that work has.
//! - Every allocation and module has a [`Uses`] list: the markers of stream operations that used
//!   it (at most one per stream: a newer marker on a stream implies the older ones), and the
//!   [`LaunchLog`] of every executable graph that refers to it now.
//! - Waiting for an object ([`Uses::wait`], [`wait_locked`]) waits for those markers and for
//!   the launches of those graphs (the event their last node records). `Drop` of an allocation or module waits before
//!   freeing; host reads and writes of pinned memory wait before touching it, and synchronous
//!   device helpers wait before running.
//!
//! Lock order: only use lists have locks (a `LaunchLog` is an event and a counter); a launch
//! takes the lists of its pinned allocations in address order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::device::Device;
use crate::error::Result;
use crate::marker::Marker;
use crate::sys;

/// The launches of one executable graph.
///
/// Launches of one `cudaGraphExec_t` never overlap: CUDA orders each launch after the previous
/// launches of the same executable graph, whatever their streams (`cudaGraphLaunch`). So the
/// latest launch completing means every launch has, and one event covers them all: the graph
/// ends with an event-record node that records `event` as part of every launch (no
/// `cudaEventRecord` call per launch). Waiting for the log waits for exactly this graph's
/// launches, never for later work queued on their streams.
pub(crate) struct LaunchLog {
    /// Recorded by every launch, after all of the graph's work.
    event: Marker,
    /// Launches issued so far (counted after `cudaGraphLaunch` returned).
    launches: AtomicU64,
}

impl LaunchLog {
    pub(crate) fn new(device: &Device) -> Result<Arc<LaunchLog>> {
        Ok(Arc::new(LaunchLog {
            event: Marker::for_graph(device)?,
            launches: AtomicU64::new(0),
        }))
    }

    /// The event the graph's event-record node records.
    pub(crate) fn event(&self) -> sys::cudaEvent_t {
        self.event.raw()
    }

    /// Notes a launch (after `cudaGraphLaunch` returned).
    pub(crate) fn launched(&self) {
        self.launches.fetch_add(1, Ordering::Release);
    }

    /// Launches issued so far.
    pub(crate) fn launches(&self) -> u64 {
        self.launches.load(Ordering::Acquire)
    }

    /// Waits for every launch issued so far.
    pub(crate) fn wait(&self) -> Result<()> {
        if self.launches() == 0 {
            return Ok(());
        }
        self.event.wait()
    }

    /// Whether every launch issued so far has completed.
    pub(crate) fn done(&self) -> Result<bool> {
        if self.launches() == 0 {
            return Ok(true);
        }
        self.event.done()
    }
}

/// Something queued GPU work uses an object through.
pub(crate) enum User {
    /// A stream operation (or the last launches of a graph that no longer refers to it).
    Marker(Arc<Marker>),
    /// An executable graph that refers to the object now: every launch of it may use it.
    Graph(Weak<LaunchLog>),
}

/// The GPU work that may still use one object.
#[derive(Default)]
pub(crate) struct Uses {
    list: Mutex<Vec<User>>,
}

impl Uses {
    /// Locks the list. While it is held, no executable graph that refers to the object can be
    /// launched (the launch of a graph using pinned memory takes this lock) and no stream
    /// operation on it can be noted.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<User>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a stream operation's marker (replacing an older marker of the same stream).
    pub(crate) fn add_marker(&self, marker: &Arc<Marker>) {
        add_marker_locked(&mut self.lock(), marker);
    }

    /// Notes that the graph of `log` refers to the object now.
    pub(crate) fn add_graph(&self, log: &Arc<LaunchLog>) {
        let mut list = self.lock();
        list.retain(|u| !matches!(u, User::Graph(w) if w.strong_count() == 0));
        let present = list
            .iter()
            .any(|u| matches!(u, User::Graph(w) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(log))));
        if !present {
            list.push(User::Graph(Arc::downgrade(log)));
        }
    }

    /// Notes that the graph of `log` no longer refers to the object: its launches so far still
    /// may, so `so_far` (a marker that completes when they have, or `None` when none may still
    /// run) replaces the graph entry.
    pub(crate) fn end_graph(&self, log: &Arc<LaunchLog>, so_far: Option<&Arc<Marker>>) {
        let mut list = self.lock();
        list.retain(|u| !matches!(u, User::Graph(w) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(log))));
        if let Some(m) = so_far {
            add_marker_locked(&mut list, m);
        }
    }

    /// Waits for every use, with the list locked.
    pub(crate) fn wait(&self) -> Result<()> {
        wait_locked(&mut self.lock())
    }
}

fn add_marker_locked(list: &mut Vec<User>, marker: &Arc<Marker>) {
    for u in list.iter_mut() {
        if let User::Marker(m) = u {
            if m.stream() == marker.stream() {
                *m = marker.clone();
                return;
            }
        }
    }
    list.push(User::Marker(marker.clone()));
}

/// Waits for every use in a locked list; completed markers and graphs that are gone are
/// dropped from it.
pub(crate) fn wait_locked(list: &mut Vec<User>) -> Result<()> {
    for u in list.iter() {
        match u {
            User::Marker(m) => m.wait()?,
            User::Graph(w) => {
                if let Some(log) = w.upgrade() {
                    log.wait()?;
                }
            }
        }
    }
    list.retain(|u| matches!(u, User::Graph(w) if w.strong_count() > 0));
    Ok(())
}

thread_local! {
    static IN_HOST_NODE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` marked as running inside a host node (CUDA's callback thread), where waiting for
/// GPU work would deadlock.
pub(crate) fn as_host_node(f: impl FnOnce()) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_HOST_NODE.with(|c| c.set(false));
        }
    }
    IN_HOST_NODE.with(|c| c.set(true));
    let _reset = Reset;
    f();
}

/// Whether the calling thread is running a host node.
pub(crate) fn in_host_node() -> bool {
    IN_HOST_NODE.try_with(|c| c.get()).unwrap_or(false)
}
