//! NCCL collectives across the GPUs of this process: communicators ([`Communicators`], one
//! [`Comm`] per rank), the collectives as DAG nodes ([`Dag::add_all_reduce`](crate::Dag::add_all_reduce) and the others in
//! `dag/nodes/nccl.rs`) and the same collectives called directly on streams
//! ([`Communicators::all_reduce`], …).
//!
//! NCCL is loaded at run time ([`load::nccl`](crate::load::nccl)); without it every call here
//! returns [`Error::LibraryNotFound`]. It is loaded only when `NCCL_NVLS_ENABLE` is set (NVLink
//! multicast must be off: start the program with `NCCL_NVLS_ENABLE=0`, or call
//! [`load::set_nccl_nvls_off`](crate::load::set_nccl_nvls_off) first thing in `main`; see
//! [`load::nccl_nvls_setting`](crate::load::nccl_nvls_setting)).
//!
//! # The rules NCCL imposes, and how the crate keeps them
//!
//! - **Calls on one communicator never run concurrently**: every NCCL call of a rank takes
//!   that rank's lock; calls spanning several ranks take their locks in rank order.
//! - **Every rank issues the same collectives, in the same order.** In a graph, the order is
//!   the DAG's: the collective nodes of one DAG must be ordered by its dependencies (a chain),
//!   and [`Communicators::instantiate`] checks that the ranks' DAGs match (same collectives
//!   with the same counts, types, operators and roots; every send matched by a receive) and
//!   cannot wait on each other in a cycle.
//! - **One thread driving several ranks must group their calls** (a lone call may block
//!   waiting for the others): the stream calls here issue all ranks inside one
//!   `ncclGroupStart`/`ncclGroupEnd`; graph capture of each rank's collectives runs on its own
//!   thread, concurrently, inside [`Communicators::instantiate`], which is therefore the only
//!   way to instantiate a DAG with collective nodes ([`Dag::instantiate`](crate::Dag::instantiate), [`Dag::lower`](crate::Dag::lower) on a
//!   [`CudaBackend`](crate::CudaBackend) and [`Exec::update`](crate::Exec::update) refuse them
//!   with an error naming the node, instead of risking a hang).
//!
//! # Launch rules for the graphs
//!
//! [`Communicators::instantiate`] returns one [`Exec`](crate::Exec) per rank. Each launch of
//! rank `r`'s graph (on a stream of rank `r`'s device) runs rank `r`'s part of every
//! collective in it, which completes only when the other ranks run theirs: **launch every
//! rank's graph the same number of times**, in the same order relative to other work on the
//! communicator (other graphs with its collectives, the stream calls here). From one thread,
//! launching rank 0's graph, then rank 1's, … cannot deadlock: a launch only queues work.
//! A rank whose graph is never launched leaves the others' kernels waiting on their GPUs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::{Device, DeviceKey};
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, DeviceRepr};
use crate::result::nccl as nc;
use crate::stream::queue::Queued;
use crate::stream::track::{self, GpuUses};
use crate::stream::Stream;
use crate::sys;

mod collective;
mod graphs;
mod matching;

pub(crate) use collective::{collective_error, for_each_collective, Collective, Kind, OwnerCheck};
use matching::check_group;
pub(crate) use matching::{match_ranks, RankOps};

/// An element type NCCL reduces and moves: `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `f32`,
/// `f64`.
pub trait NcclType: DeviceRepr + sealed::Sealed {
    /// NCCL's data type.
    const DTYPE: sys::ncclDataType_t;
    /// The type's name, for labels and errors.
    const NAME: &'static str;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! nccl_types {
    ($($t:ty => $d:ident,)*) => {$(
        impl sealed::Sealed for $t {}
        impl NcclType for $t {
            const DTYPE: sys::ncclDataType_t = sys::ncclDataType_t::$d;
            const NAME: &'static str = stringify!($t);
        }
    )*};
}
nccl_types! {
    i8 => ncclInt8,
    u8 => ncclUint8,
    i32 => ncclInt32,
    u32 => ncclUint32,
    i64 => ncclInt64,
    u64 => ncclUint64,
    f32 => ncclFloat32,
    f64 => ncclFloat64,
}

/// How a reduction combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The maximum.
    Max,
    /// The minimum.
    Min,
    /// The mean (the sum divided by the number of ranks; integer division for integers).
    Avg,
}

impl ReduceOp {
    pub(crate) fn raw(self) -> sys::ncclRedOp_t {
        match self {
            ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
            ReduceOp::Prod => sys::ncclRedOp_t::ncclProd,
            ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
            ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
            ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
        }
    }
    /// Lower-case name (`sum`, `max`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }
}

static NEXT_CLIQUE: AtomicU64 = AtomicU64::new(1);

/// All ranks of one set of communicators.
pub(crate) struct Clique {
    /// Unique in the process (what nodes and `instantiate` match communicators by).
    pub(crate) id: u64,
    /// One raw communicator per rank; empty for a recording clique.
    raw: Vec<sys::ncclComm_t>,
    /// The device (or recording backend) of each rank.
    pub(crate) keys: Vec<DeviceKey>,
    /// The devices, for a real clique.
    pub(crate) devices: Vec<Device>,
    /// Taken for every NCCL call on a rank's communicator (NCCL forbids concurrent calls).
    locks: Vec<Mutex<()>>,
    /// Stream calls that used each rank's communicator (graph launches are covered by the
    /// `Exec`s, which hold the communicators through their DAGs).
    uses: Vec<GpuUses>,
}

// SAFETY: NCCL communicator handles may be used from any thread; the crate makes every call on
// rank `r`'s handle with `locks[r]` held, so no two calls on one communicator overlap, and the
// handles are destroyed only in `Drop` (no reference is left then).
unsafe impl Send for Clique {}
// SAFETY: as above: shared access only makes calls under the rank's lock.
unsafe impl Sync for Clique {}

impl Clique {
    fn lock(&self, rank: usize) -> MutexGuard<'_, ()> {
        self.locks[rank].lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(crate) fn is_recording(&self) -> bool {
        self.raw.is_empty()
    }
}

impl Drop for Clique {
    fn drop(&mut self) {
        if self.raw.is_empty() {
            return;
        }
        // Stream calls may still be queued: wait for them. (No Exec refers to the clique any
        // more: each holds it through its DAG until its launches completed.)
        let mut waited = true;
        for (u, d) in self.uses.iter().zip(&self.devices) {
            if let Err(e) = u.wait() {
                d.defer(
                    "an NCCL communicator (waiting for its collectives; leaked)",
                    e,
                );
                waited = false;
            }
        }
        if !waited {
            // A collective may still run on a communicator: none is destroyed under it.
            return;
        }
        // One thread destroys every rank: NCCL asks for a group then.
        // SAFETY: the handles are owned, unused from now on, and their work has completed.
        let r = unsafe {
            nc::group_start().and_then(|()| {
                let mut first = Ok(());
                for &c in &self.raw {
                    if let Err(e) = nc::comm_destroy(c) {
                        first = first.and(Err(e));
                    }
                }
                let end = nc::group_end();
                first.and(end)
            })
        };
        if let Err(e) = r {
            self.devices[0].defer("NCCL communicators", e);
        }
    }
}

/// One communicator per device, in this process (`ncclCommInitAll`): rank `i` is on the
/// `i`-th device given. Cheap to clone; the communicators are destroyed (together) when the
/// last clone, [`Comm`] and DAG node using them are gone, after the work queued with them.
#[derive(Clone)]
pub struct Communicators {
    pub(crate) clique: Arc<Clique>,
}

impl std::fmt::Debug for Communicators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicators")
            .field("ranks", &self.clique.keys)
            .finish()
    }
}

/// One rank of [`Communicators`]: what a collective node or call of that rank uses. Cheap to
/// clone (it holds the communicators alive).
#[derive(Clone)]
pub struct Comm {
    pub(crate) clique: Arc<Clique>,
    pub(crate) rank: usize,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Comm(rank {} of {} on {})",
            self.rank,
            self.ranks(),
            self.key()
        )
    }
}

impl Communicators {
    /// One communicator per device of `devices` (distinct devices; rank `i` is on
    /// `devices[i]`), with `ncclCommInitAll`. Loads NCCL (a typed error when it is missing).
    pub fn new(devices: &[Device]) -> Result<Communicators> {
        if devices.is_empty() {
            return Err(Error::RankMismatch {
                call: "Communicators::new",
                problem: "needs at least one device".into(),
            });
        }
        let ordinals: Vec<i32> = devices.iter().map(|d| d.ordinal() as i32).collect();
        for (i, o) in ordinals.iter().enumerate() {
            if ordinals[..i].contains(o) {
                return Err(Error::RankMismatch {
                    call: "Communicators::new",
                    problem: format!("device {o} is given twice (one rank per device)"),
                });
            }
        }
        crate::load::nccl()?;
        // SAFETY: the ordinals name existing devices (each `Device` was opened); the handles
        // are owned by the clique, which destroys them once.
        let raw = unsafe { nc::comm_init_all(&ordinals)? };
        Ok(Communicators {
            clique: Arc::new(Clique {
                id: NEXT_CLIQUE.fetch_add(1, Ordering::Relaxed),
                keys: devices.iter().map(Device::key).collect(),
                devices: devices.to_vec(),
                locks: devices.iter().map(|_| Mutex::new(())).collect(),
                uses: devices.iter().map(|_| GpuUses::default()).collect(),
                raw,
            }),
        })
    }

    /// Communicators of no NCCL library: one placeholder rank per key (see
    /// [`Communicators::recording`]).
    pub(crate) fn placeholders(keys: Vec<DeviceKey>) -> Communicators {
        Communicators {
            clique: Arc::new(Clique {
                id: NEXT_CLIQUE.fetch_add(1, Ordering::Relaxed),
                devices: Vec::new(),
                locks: keys.iter().map(|_| Mutex::new(())).collect(),
                uses: keys.iter().map(|_| GpuUses::default()).collect(),
                keys,
                raw: Vec::new(),
            }),
        }
    }

    /// The number of ranks.
    pub fn len(&self) -> usize {
        self.clique.keys.len()
    }

    /// Whether there are no ranks (never: [`Communicators::new`] needs one device).
    pub fn is_empty(&self) -> bool {
        self.clique.keys.is_empty()
    }

    /// Rank `rank`'s communicator.
    pub fn comm(&self, rank: usize) -> Result<Comm> {
        if rank >= self.len() {
            return Err(Error::NoSuchRank {
                rank,
                ranks: self.len(),
            });
        }
        Ok(Comm {
            clique: self.clique.clone(),
            rank,
        })
    }

    /// Every rank's communicator, in rank order.
    pub fn comms(&self) -> Vec<Comm> {
        (0..self.len())
            .map(|rank| Comm {
                clique: self.clique.clone(),
                rank,
            })
            .collect()
    }

    /// What NCCL reports for each rank: (ranks, CUDA ordinal, rank). A check that the
    /// communicators are what the crate thinks they are.
    pub fn nccl_info(&self) -> Result<Vec<(usize, usize, usize)>> {
        let c = &self.clique;
        if c.is_recording() {
            return Err(recording_error());
        }
        (0..self.len())
            .map(|r| {
                let _g = c.lock(r);
                // SAFETY: the handle is live; the rank's lock is held.
                let (n, d, rank) = unsafe { nc::comm_info(c.raw[r])? };
                Ok((n as usize, d as usize, rank as usize))
            })
            .collect()
    }

    /// The error of an asynchronous NCCL operation on any rank (`Ok` when there is none).
    pub fn async_error(&self) -> Result<()> {
        let c = &self.clique;
        if c.is_recording() {
            return Ok(());
        }
        for r in 0..self.len() {
            let _g = c.lock(r);
            // SAFETY: the handle is live; the rank's lock is held.
            let e = unsafe { nc::comm_async_error(c.raw[r])? };
            nc::check("ncclCommGetAsyncError (an earlier collective)", e)?;
        }
        Ok(())
    }

    /// Runs one group of per-rank calls on the ranks' streams: checks the buffers (first, so
    /// that recording communicators check them too) and the streams, takes every rank's lock
    /// (in rank order), issues all calls inside one NCCL group, then notes the work on the
    /// buffers and communicators.
    fn run_group(
        &self,
        parts: &[Collective],
        streams: &[&Stream],
        what: &'static str,
    ) -> Result<()> {
        let c = &self.clique;
        for (rank, (p, &key)) in parts.iter().zip(&c.keys).enumerate() {
            p.check_owners(OwnerCheck::Call { call: what, rank }, key)?;
        }
        if c.is_recording() {
            return Err(recording_error());
        }
        if streams.len() != self.len() || parts.len() != self.len() {
            return Err(Error::RankMismatch {
                call: what,
                problem: format!(
                    "{} ranks, but {} streams and {} ranks' buffers were given",
                    self.len(),
                    streams.len(),
                    parts.len()
                ),
            });
        }
        for (r, s) in streams.iter().enumerate() {
            s.check_device(&c.devices[r], &format!("rank {r}'s collective"))?;
        }
        check_group(self, parts, what)?;
        let _guards: Vec<_> = (0..self.len()).map(|r| c.lock(r)).collect();
        // Every use list locked before queuing, marked before unlocking: ordered with the
        // synchronous helpers.
        let mut allocs = Vec::new();
        for p in parts {
            p.for_each_allocation(&mut |a| allocs.push(a.clone()));
        }
        let mut uses = track::lock_all(
            "a stream collective",
            c.uses.iter().chain(allocs.iter().map(|a| &a.uses)),
        )?;
        // The streams' tails, in rank order (distinct: one device per rank).
        let mut tails = Vec::with_capacity(streams.len());
        for s in streams {
            tails.push(s.queue()?);
        }
        // SAFETY: every part was checked (lengths against the communicator size, buffers of
        // the rank's device, in-place rules); the buffers are kept alive until the work ran by
        // the markers noted below; every rank's lock is held; all ranks are in one group.
        let issued = unsafe {
            nc::group_start()?;
            let mut r = Ok(());
            for (rank, p) in parts.iter().enumerate() {
                r = r.and_then(|()| p.issue(c.raw[rank], tails[rank].raw()));
            }
            let end = nc::group_end();
            r.and(end)
        };
        // Marked even when a call failed: a rank's work may be queued already, and its buffers
        // and communicator must not be freed before it ran.
        // A rank whose work can be neither marked nor waited for keeps its buffers forever.
        let mut first_error = None;
        for (rank, (p, t)) in parts.iter().zip(tails).enumerate() {
            match t.mark_queued() {
                Queued::Marked(m) => {
                    uses.add_marker_on(&c.uses[rank], &m);
                    p.for_each_allocation(&mut |a| uses.add_marker_on(&a.uses, &m));
                }
                Queued::Ran(e) => {
                    first_error.get_or_insert(e);
                }
                Queued::Unknown(e) => {
                    uses.add_lost_on(&c.uses[rank]);
                    p.for_each_allocation(&mut |a| {
                        uses.add_lost_on(&a.uses);
                        std::mem::forget(Arc::clone(a));
                    });
                    first_error.get_or_insert(e);
                }
            }
        }
        issued.and(first_error.map_or(Ok(()), Err))
    }

    /// `ncclSend` + `ncclRecv` on every rank, in one group: rank `r` sends `sends[r]` to rank
    /// `to[r]` and receives `recvs[r]` from rank `from[r]` (a rank may send to itself).
    pub fn send_recv<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        to: &[usize],
        recvs: &[&DeviceBuffer<T>],
        from: &[usize],
        streams: &[&Stream],
    ) -> Result<()> {
        if to.len() != self.len() || from.len() != self.len() {
            return Err(Error::RankMismatch {
                call: "send_recv",
                problem: format!(
                    "{} ranks, but {} destinations and {} sources",
                    self.len(),
                    to.len(),
                    from.len()
                ),
            });
        }
        let mut rank = 0;
        let parts = self.per_rank(sends, recvs, "send_recv", |comm, s, r| {
            let p = Collective::p2p(comm, Some((s, to[rank])), Some((r, from[rank])));
            rank += 1;
            p
        })?;
        self.run_group(&parts, streams, "send_recv")
    }

    /// Each rank's part of the stream call `call`, made by `make` from the rank's buffers.
    fn per_rank<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        recvs: &[&DeviceBuffer<T>],
        call: &'static str,
        mut make: impl FnMut(&Comm, &DeviceBuffer<T>, &DeviceBuffer<T>) -> Result<Collective, String>,
    ) -> Result<Vec<Collective>> {
        if sends.len() != self.len() || recvs.len() != self.len() {
            return Err(Error::RankMismatch {
                call,
                problem: format!(
                    "{} ranks, but {} send and {} receive buffers",
                    self.len(),
                    sends.len(),
                    recvs.len()
                ),
            });
        }
        self.comms()
            .iter()
            .zip(sends.iter().zip(recvs))
            .map(|(comm, (s, r))| {
                make(comm, s, r).map_err(|problem| Error::CollectiveCall {
                    call: format!("{call} (rank {})", comm.rank),
                    problem,
                })
            })
            .collect()
    }
}

/// The stream calls of the collectives' table ([`for_each_collective!`]): one method per
/// row, `name(&self, sends, recvs, <the row's fields>, streams)`.
macro_rules! stream_calls {
    ($(
        $(#[$sdoc:meta])* stream $stream:ident;
        $(#[$ddoc:meta])* dag $dag:ident;
        kind $kind:ident { $($field:ident: $ty:ty),* } $rank:tt
    )*) => {
        impl Communicators {$(
            $(#[$sdoc])*
            pub fn $stream<T: NcclType>(
                &self,
                sends: &[&DeviceBuffer<T>],
                recvs: &[&DeviceBuffer<T>],
                $($field: $ty,)*
                streams: &[&Stream],
            ) -> Result<()> {
                let kind = Kind::$kind { $($field),* };
                let parts = self.per_rank(sends, recvs, stringify!($stream), |comm, s, r| {
                    Collective::make(comm, kind, s, r)
                })?;
                self.run_group(&parts, streams, stringify!($stream))
            }
        )*}
    };
}
for_each_collective!(stream_calls);

pub(crate) fn recording_error() -> Error {
    Error::Placeholder {
        what: "this Communicators".into(),
        problem: "it was made for RecordingBackends and has no NCCL behind it",
    }
}

impl Comm {
    /// This communicator's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// The number of ranks of its [`Communicators`].
    pub fn ranks(&self) -> usize {
        self.clique.keys.len()
    }
    /// The device (or recording backend) of this rank.
    pub fn key(&self) -> DeviceKey {
        self.clique.keys[self.rank]
    }
    /// The device of this rank (`None` for recording communicators).
    pub fn device(&self) -> Option<&Device> {
        self.clique.devices.get(self.rank)
    }
    /// Whether `other` is a rank of the same [`Communicators`].
    pub fn same_communicators(&self, other: &Comm) -> bool {
        Arc::ptr_eq(&self.clique, &other.clique)
    }
    /// The raw communicator with the rank's lock held, for the crate's own calls.
    pub(crate) fn with_raw<R>(&self, f: impl FnOnce(sys::ncclComm_t) -> Result<R>) -> Result<R> {
        if self.clique.is_recording() {
            return Err(recording_error());
        }
        let _g = self.clique.lock(self.rank);
        f(self.clique.raw[self.rank])
    }
}
