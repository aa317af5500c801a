//! Which queued GPU work uses an object, so that nothing is freed, overwritten or read by the
//! host while that work may still use it.
//!
//! - A [`Marker`] (`crate::stream::marker`) is a CUDA event recorded on a stream right after some work:
//!   it completes when that work has.
//! - Every allocation and module has a [`GpuUses`] list: the markers of stream operations that used
//!   it (at most one per stream: a newer marker on a stream implies the older ones), and the
//!   [`ExecLaunches`] of every executable graph that refers to it now. When a marker of a stream
//!   not in the list is added, markers whose work has completed are dropped first (one event
//!   query each, no allocation), so the list holds only streams whose work may still run: a
//!   long-lived buffer used from a new stream per iteration does not gather markers.
//! - Waiting for an object ([`GpuUses::wait`], [`wait_locked`]) waits for those markers and for
//!   the launches of those graphs (a marker recorded right after the latest launch, see
//!   `crate::stream::queue`). `Drop` of an allocation or module waits before freeing; host reads and
//!   writes of pinned memory wait before touching it, and synchronous device helpers wait
//!   before running.
//!
//! Lock order: use lists, in the address order of their `GpuUses` ([`lock_all`]); then launch logs'
//! gates, in address order; then a stream's tail; then a launch log's state
//! (`crate::stream::queue`). A graph launch takes the lists of its pinned allocations, then its
//! gate; a stream operation takes the lists of everything it uses before queuing and notes its
//! marker before unlocking them ([`Locked::add_marker`]); a synchronous helper takes the lists
//! of what it touches and the gates of the graphs that refer to them, waits, and accesses the
//! memory before unlocking ([`with_gpu_idle`]). So a helper's access and any GPU work that uses
//! the same memory, queued from any thread, never overlap.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::stream::marker::Marker;
use crate::stream::queue::ExecLaunches;

/// What a use list needs of a marker: the stream it marks work on and whether that work has
/// completed. (A trait so that the list's bookkeeping is tested without a GPU.)
pub(crate) trait Mark: Clone {
    /// The stream's process-unique id.
    fn stream(&self) -> u64;
    /// Whether the marked work has completed (an event query).
    fn done(&self) -> Result<bool>;
}

impl Mark for Arc<Marker> {
    fn stream(&self) -> u64 {
        Marker::stream(self)
    }
    fn done(&self) -> Result<bool> {
        Marker::done(self)
    }
}

/// Something queued GPU work uses an object through.
pub(crate) enum User<M = Arc<Marker>> {
    /// A stream operation (or the last launches of a graph that no longer refers to it).
    Marker(M),
    /// An executable graph that refers to the object now: every launch of it may use it.
    Graph(Weak<ExecLaunches>),
    /// Work that may still run and cannot be waited for: queued, but neither its marker could
    /// be recorded nor its stream waited for (`Queued::Unknown`). The object is leaked, and
    /// waiting for it fails for good ([`Error::UntrackedWork`]): host access to it is refused
    /// from then on, since nothing shows when that work ends.
    Lost,
}

/// The GPU work that may still use one object.
#[derive(Default)]
pub(crate) struct GpuUses {
    list: Mutex<Vec<User>>,
}

impl GpuUses {
    /// Locks the list. While it is held, no stream operation on the object can be queued
    /// ([`lock_all`]), and no executable graph that refers to pinned memory can be launched
    /// (its launch takes this lock).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<User>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that the graph of `log` refers to the object now.
    pub(crate) fn add_graph(&self, log: &Arc<ExecLaunches>) {
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
    pub(crate) fn end_graph(&self, log: &Arc<ExecLaunches>, so_far: Option<&Arc<Marker>>) {
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

/// The use lists of the objects one operation uses, locked together ([`lock_all`]), each with
/// the address of its `GpuUses`.
pub(crate) struct Locked<'a>(SmallVec<[(usize, MutexGuard<'a, Vec<User>>); 4]>);

/// Locks the use lists `lists`, each once, in address order (the lock order among use lists),
/// allocating nothing for up to four. Queuing a stream operation with them locked, then noting
/// its marker ([`Locked::add_marker`]) before they are unlocked, orders the operation with the
/// synchronous helpers ([`with_gpu_idle`]).
///
/// Refused (`what` names the caller) from a host node ([`Error::InHostNode`]: a helper on
/// another thread may hold a list while it waits for that very graph) and inside a helper's
/// closure ([`Error::InsideHelper`]: the helper holds the lists and gates, and the locks are
/// not reentrant).
pub(crate) fn lock_all<'a>(
    what: &str,
    lists: impl IntoIterator<Item = &'a GpuUses>,
) -> Result<Locked<'a>> {
    check_not_in_host_node(what)?;
    check_not_in_helper(what)?;
    let mut lists: SmallVec<[&GpuUses; 8]> = lists.into_iter().collect();
    lists.sort_unstable_by_key(|u| *u as *const GpuUses as usize);
    lists.dedup_by_key(|u| *u as *const GpuUses as usize);
    Ok(Locked(
        lists
            .into_iter()
            .map(|u| (u as *const GpuUses as usize, u.lock()))
            .collect(),
    ))
}

impl Locked<'_> {
    /// Notes a stream operation's marker on every list.
    pub(crate) fn add_marker(&mut self, marker: &Arc<Marker>) {
        for (_, list) in &mut self.0 {
            add_marker_locked(list, marker);
        }
    }

    /// Notes on every list that the operation queued work which can be neither marked nor
    /// waited for ([`User::Lost`]).
    pub(crate) fn add_lost(&mut self) {
        for (_, list) in &mut self.0 {
            add_lost_locked(list);
        }
    }

    /// [`Locked::add_lost`] for one of the lists.
    pub(crate) fn add_lost_on(&mut self, uses: &GpuUses) {
        let at = uses as *const GpuUses as usize;
        let (_, list) = self
            .0
            .iter_mut()
            .find(|(a, _)| *a == at)
            .expect("the list was locked with the others");
        add_lost_locked(list);
    }

    /// Notes a marker on one of the lists (when one operation's parts are marked apart, as the
    /// ranks of a collective are).
    pub(crate) fn add_marker_on(&mut self, uses: &GpuUses, marker: &Arc<Marker>) {
        let at = uses as *const GpuUses as usize;
        let (_, list) = self
            .0
            .iter_mut()
            .find(|(a, _)| *a == at)
            .expect("the list was locked with the others");
        add_marker_locked(list, marker);
    }
}

/// Runs `f` once the queued GPU work that uses the objects of `lists` has completed, with no
/// GPU work that uses them able to start until `f` returns: their use lists are locked (no
/// stream operation on them can be queued, [`lock_all`]) and so are the gates of the graphs
/// that refer to them now (none can be launched; one that starts referring to them, by an
/// update, needs a list's lock first). Not from a host node, where the work waited for may
/// include the host node itself, nor inside another helper's `f` (`what` names the caller in
/// those errors); inside `f`, other helpers and stream operations are refused
/// ([`Error::InsideHelper`]).
pub(crate) fn with_gpu_idle<'a, R>(
    what: &str,
    lists: impl IntoIterator<Item = &'a GpuUses>,
    f: impl FnOnce() -> R,
) -> Result<R> {
    let mut locked = lock_all(what, lists)?;
    let mut logs: SmallVec<[Arc<ExecLaunches>; 4]> = SmallVec::new();
    for (_, list) in &locked.0 {
        for u in list.iter() {
            if let User::Graph(w) = u {
                logs.extend(w.upgrade());
            }
        }
    }
    logs.sort_unstable_by_key(|l| Arc::as_ptr(l) as usize);
    logs.dedup_by_key(|l| Arc::as_ptr(l) as usize);
    let _gates: SmallVec<[MutexGuard<'_, ()>; 4]> =
        logs.iter().map(|l| l.hold_launches()).collect();
    for (_, list) in &mut locked.0 {
        wait_locked(list)?;
    }
    Ok(flagged(&IN_HELPER, f))
}

/// Runs `f` with this thread's `flag` set, cleared again when `f` returns or unwinds.
fn flagged<R>(
    flag: &'static std::thread::LocalKey<std::cell::Cell<bool>>,
    f: impl FnOnce() -> R,
) -> R {
    struct Reset(&'static std::thread::LocalKey<std::cell::Cell<bool>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            self.0.with(|c| c.set(false));
        }
    }
    flag.with(|c| c.set(true));
    let _reset = Reset(flag);
    f()
}

fn add_marker_locked<M: Mark>(list: &mut Vec<User<M>>, marker: &M) {
    for u in list.iter_mut() {
        if let User::Marker(m) = u {
            if m.stream() == marker.stream() {
                *m = marker.clone();
                return;
            }
        }
    }
    // A stream the list does not have: drop the markers whose work has completed (and graphs
    // that are gone) before adding it, so the list holds only streams whose work may still
    // run (one event query per entry, only when a new stream comes; `retain` allocates
    // nothing). A marker CUDA cannot answer for is kept.
    list.retain(|u| match u {
        User::Marker(m) => !m.done().unwrap_or(false),
        User::Graph(w) => w.strong_count() > 0,
        User::Lost => true,
    });
    list.push(User::Marker(marker.clone()));
}

fn add_lost_locked<M>(list: &mut Vec<User<M>>) {
    if !list.iter().any(|u| matches!(u, User::Lost)) {
        list.push(User::Lost);
    }
}

/// Waits for every use in a locked list; completed markers and graphs that are gone are
/// dropped from it.
fn wait_locked(list: &mut Vec<User>) -> Result<()> {
    if list.iter().any(|u| matches!(u, User::Lost)) {
        return Err(Error::UntrackedWork);
    }
    for u in list.iter() {
        match u {
            User::Lost => unreachable!("checked above"),
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
    /// Set while a synchronous helper's closure runs on this thread ([`with_gpu_idle`]).
    static IN_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// An error inside a synchronous helper's closure, which holds use lists and launch gates that
/// another helper or stream operation would take again.
pub(crate) fn check_not_in_helper(what: &str) -> Result<()> {
    if IN_HELPER.try_with(|c| c.get()).unwrap_or(false) {
        return Err(Error::InsideHelper {
            what: what.to_string(),
        });
    }
    Ok(())
}

/// An error when called from a host node (CUDA's callback thread must not wait for GPU work).
fn check_not_in_host_node(what: &str) -> Result<()> {
    if in_host_node() {
        return Err(Error::InHostNode {
            what: what.to_string(),
            reason: "waiting for the GPU there would deadlock; inside a host node, use \
                     HostBuffer::as_slice / as_mut_slice (unsafe: the DAG's edges must order \
                     the access)",
        });
    }
    Ok(())
}

/// Runs `f` marked as running inside a host node (CUDA's callback thread), where waiting for
/// GPU work would deadlock.
pub(crate) fn as_host_node(f: impl FnOnce()) {
    flagged(&IN_HOST_NODE, f)
}

/// Whether the calling thread is running a host node.
pub(crate) fn in_host_node() -> bool {
    IN_HOST_NODE.try_with(|c| c.get()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A marker stand-in: its stream and a completion flag the test sets.
    #[derive(Clone)]
    struct Fake {
        stream: u64,
        done: Arc<AtomicBool>,
    }

    impl Mark for Fake {
        fn stream(&self) -> u64 {
            self.stream
        }
        fn done(&self) -> Result<bool> {
            Ok(self.done.load(Ordering::Relaxed))
        }
    }

    fn fake(stream: u64) -> Fake {
        Fake {
            stream,
            done: Arc::new(AtomicBool::new(false)),
        }
    }

    fn streams(list: &[User<Fake>]) -> Vec<u64> {
        list.iter()
            .filter_map(|u| match u {
                User::Marker(m) => Some(m.stream),
                User::Graph(_) | User::Lost => None,
            })
            .collect()
    }

    #[test]
    fn work_that_cannot_be_tracked_refuses_host_access_for_good() {
        let (a, b) = (GpuUses::default(), GpuUses::default());
        lock_all("test", [&a, &b]).unwrap().add_lost();
        let ran = std::cell::Cell::new(false);
        for _ in 0..2 {
            let r = with_gpu_idle("test", [&a], || ran.set(true));
            assert!(matches!(r, Err(Error::UntrackedWork)), "{r:?}");
        }
        assert!(!ran.get(), "the helper's closure never runs");
        assert!(matches!(b.wait(), Err(Error::UntrackedWork)));
        // Noted once however often, and kept when markers of new streams prune the list.
        let mut list: Vec<User<Fake>> = Vec::new();
        add_lost_locked(&mut list);
        add_lost_locked(&mut list);
        let done = fake(1);
        done.done.store(true, Ordering::Relaxed);
        add_marker_locked(&mut list, &done);
        add_marker_locked(&mut list, &fake(2));
        assert_eq!(list.iter().filter(|u| matches!(u, User::Lost)).count(), 1);
        assert_eq!(streams(&list), [2]);
    }

    #[test]
    fn a_helper_holds_back_stream_work_and_the_launches_of_the_graphs_using_the_object() {
        let (a, b) = (GpuUses::default(), GpuUses::default());
        let (log, unrelated) = (ExecLaunches::new(), ExecLaunches::new());
        a.add_graph(&log);
        let seen = with_gpu_idle("test", [&a], || {
            (
                log.launches_held(),
                unrelated.launches_held(),
                a.list.try_lock().is_err(),
                b.list.try_lock().is_err(),
            )
        })
        .unwrap();
        assert_eq!(
            seen,
            (true, false, true, false),
            "(its graph's gate, another graph's gate, its list, another list) held"
        );
        assert!(
            !log.launches_held() && a.list.try_lock().is_ok(),
            "released after"
        );
    }

    #[test]
    fn helpers_and_stream_operations_are_refused_inside_a_helpers_closure() {
        let (a, b) = (GpuUses::default(), GpuUses::default());
        let (nested, queued) = with_gpu_idle("outer", [&a], || {
            (
                with_gpu_idle("inner", [&a], || ()).map(|_| ()),
                lock_all("a stream operation", [&b]).map(|_| ()),
            )
        })
        .unwrap();
        // Without the refusal the nested helper would lock `a` again and never return.
        assert!(
            matches!(&nested, Err(Error::InsideHelper { what }) if what == "inner"),
            "{nested:?}"
        );
        assert!(
            matches!(&queued, Err(Error::InsideHelper { what }) if what == "a stream operation"),
            "{queued:?}"
        );
        // A panicking closure leaves the thread free again.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_gpu_idle("panics", [&a], || panic!("in the closure"))
        }));
        assert!(caught.is_err());
        with_gpu_idle("after", [&a, &b], || ()).unwrap();
        assert!(lock_all("after", [&b]).is_ok());
    }

    #[test]
    fn lists_are_locked_once_each_in_address_order() {
        let lists = [GpuUses::default(), GpuUses::default(), GpuUses::default()];
        let locked = lock_all("a test", [&lists[2], &lists[0], &lists[2], &lists[1]]).unwrap();
        let at: Vec<usize> = locked.0.iter().map(|(a, _)| *a).collect();
        let mut expected: Vec<usize> = lists.iter().map(|l| l as *const GpuUses as usize).collect();
        expected.sort_unstable();
        assert_eq!(at, expected, "each list once, by address");
    }

    #[test]
    fn a_stream_per_iteration_does_not_grow_the_list() {
        let log = ExecLaunches::new();
        let mut list: Vec<User<Fake>> = vec![User::Graph(Arc::downgrade(&log))];
        let mut previous: Option<Fake> = None;
        for stream in 1..=1000 {
            // The previous iteration's work has completed; this one's has not.
            if let Some(p) = previous.take() {
                p.done.store(true, Ordering::Relaxed);
            }
            let m = fake(stream);
            add_marker_locked(&mut list, &m);
            previous = Some(m);
            assert!(
                list.len() <= 2,
                "iteration {stream}: {} entries",
                list.len()
            );
        }
        assert_eq!(streams(&list), [1000]);
        assert!(
            matches!(list[0], User::Graph(_)),
            "a live graph stays listed"
        );
    }

    #[test]
    fn markers_of_work_that_may_run_are_kept_and_one_stream_has_one() {
        let mut list: Vec<User<Fake>> = Vec::new();
        let (a, b) = (fake(1), fake(2));
        add_marker_locked(&mut list, &a);
        add_marker_locked(&mut list, &b);
        let a2 = fake(1);
        add_marker_locked(&mut list, &a2);
        assert_eq!(
            streams(&list),
            [1, 2],
            "a newer marker of a stream replaces its older one"
        );
        assert!(Arc::ptr_eq(
            &a2.done,
            match &list[0] {
                User::Marker(m) => &m.done,
                User::Graph(_) | User::Lost => unreachable!(),
            }
        ));
        // Stream 2's work completed; stream 1's has not: a new stream drops only stream 2's.
        b.done.store(true, Ordering::Relaxed);
        add_marker_locked(&mut list, &fake(3));
        assert_eq!(streams(&list), [1, 3]);
        // A graph that is gone goes too.
        let log = ExecLaunches::new();
        list.push(User::Graph(Arc::downgrade(&log)));
        drop(log);
        add_marker_locked(&mut list, &fake(4));
        assert_eq!(list.len(), 3);
    }
}
