//! Which queued GPU work uses an object, so that nothing is freed, overwritten or read by the
//! host while that work may still use it.
//!
//! - A [`Marker`] (`crate::marker`) is a CUDA event recorded on a stream right after some work:
//!   it completes when that work has.
//! - Every allocation and module has a [`Uses`] list: the markers of stream operations that used
//!   it (at most one per stream: a newer marker on a stream implies the older ones), and the
//!   [`LaunchLog`] of every executable graph that refers to it now.
//! - Waiting for an object ([`Uses::wait`], [`wait_locked`]) waits for those markers and for
//!   the launches of those graphs (a marker recorded right after the latest launch, see
//!   `crate::queue`). `Drop` of an allocation or module waits before freeing; host reads and
//!   writes of pinned memory wait before touching it, and synchronous device helpers wait
//!   before running.
//!
//! Lock order: a use list, then a stream's tail, then a launch log (`crate::queue`); a launch
//! takes the lists of its pinned allocations in address order.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::error::Result;
use crate::marker::Marker;
use crate::queue::LaunchLog;

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
