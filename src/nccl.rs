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

use petgraph::graph::DiGraph;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::{Device, DeviceKey};
use crate::error::{DagError, Error, Result};
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, MemorySpace, Region};
use crate::result::nccl as nc;
use crate::stream::Stream;
use crate::sys;
use crate::track::Uses;

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
    uses: Vec<Uses>,
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
        for (u, d) in self.uses.iter().zip(&self.devices) {
            if let Err(e) = u.wait() {
                d.defer("an NCCL communicator (waiting for its collectives)", e);
            }
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
            return Err(Error::Invalid(
                "Communicators::new needs at least one device".into(),
            ));
        }
        let ordinals: Vec<i32> = devices.iter().map(|d| d.ordinal() as i32).collect();
        for (i, o) in ordinals.iter().enumerate() {
            if ordinals[..i].contains(o) {
                return Err(Error::Invalid(format!(
                    "Communicators::new: device {o} is given twice (one rank per device)"
                )));
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
                uses: devices.iter().map(|_| Uses::default()).collect(),
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
                uses: keys.iter().map(|_| Uses::default()).collect(),
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
            return Err(Error::Invalid(format!(
                "rank {rank} does not exist ({} ranks)",
                self.len()
            )));
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

    /// Runs one group of per-rank calls on the ranks' streams: checks the streams, takes every
    /// rank's lock (in rank order), issues all calls inside one NCCL group, then notes the
    /// work on the buffers and communicators.
    fn run_group(&self, parts: &[Collective], streams: &[&Stream], what: &str) -> Result<()> {
        let c = &self.clique;
        if c.is_recording() {
            return Err(recording_error());
        }
        if streams.len() != self.len() || parts.len() != self.len() {
            return Err(Error::Invalid(format!(
                "{what}: {} ranks, but {} streams and {} ranks' buffers were given",
                self.len(),
                streams.len(),
                parts.len()
            )));
        }
        for (r, s) in streams.iter().enumerate() {
            s.check_device(&c.devices[r], &format!("rank {r}'s collective"))?;
            parts[r].check_owners(what, c.keys[r])?;
        }
        check_group(self, parts, what)?;
        let _guards: Vec<_> = (0..self.len()).map(|r| c.lock(r)).collect();
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
        let mut marks = Vec::with_capacity(tails.len());
        for t in &mut tails {
            marks.push(t.mark()?);
        }
        drop(tails);
        for (rank, (p, m)) in parts.iter().zip(&marks).enumerate() {
            c.uses[rank].add_marker(m);
            p.for_each_allocation(&mut |a| a.uses.add_marker(m));
        }
        issued
    }

    /// `ncclAllReduce` on every rank at once: `recvs[r] = op over ranks of sends[r]`, each rank
    /// on `streams[r]` (of its device). `sends[r]` may be `recvs[r]` (in place).
    pub fn all_reduce<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        recvs: &[&DeviceBuffer<T>],
        op: ReduceOp,
        streams: &[&Stream],
    ) -> Result<()> {
        let parts = self.per_rank(sends, recvs, |comm, s, r| {
            Collective::all_reduce(comm, s, r, op)
        })?;
        self.run_group(&parts, streams, "all_reduce")
    }

    /// `ncclAllGather` on every rank: `recvs[r]` (`ranks * n`) gets every rank's `sends` (`n`
    /// each) in rank order.
    pub fn all_gather<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        recvs: &[&DeviceBuffer<T>],
        streams: &[&Stream],
    ) -> Result<()> {
        let parts = self.per_rank(sends, recvs, Collective::all_gather)?;
        self.run_group(&parts, streams, "all_gather")
    }

    /// `ncclReduceScatter` on every rank: `recvs[r]` (`n`) gets block `r` of the reduction of
    /// the ranks' `sends` (`ranks * n`).
    pub fn reduce_scatter<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        recvs: &[&DeviceBuffer<T>],
        op: ReduceOp,
        streams: &[&Stream],
    ) -> Result<()> {
        let parts = self.per_rank(sends, recvs, |comm, s, r| {
            Collective::reduce_scatter(comm, s, r, op)
        })?;
        self.run_group(&parts, streams, "reduce_scatter")
    }

    /// `ncclBroadcast` on every rank: every `recvs[r]` gets rank `root`'s `sends[root]` (the
    /// other ranks' sends are not read; a rank's send may be its receive buffer).
    pub fn broadcast<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        recvs: &[&DeviceBuffer<T>],
        root: usize,
        streams: &[&Stream],
    ) -> Result<()> {
        let parts = self.per_rank(sends, recvs, |comm, s, r| {
            Collective::broadcast(comm, s, r, root)
        })?;
        self.run_group(&parts, streams, "broadcast")
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
            return Err(Error::Invalid(format!(
                "send_recv: {} ranks, but {} destinations and {} sources",
                self.len(),
                to.len(),
                from.len()
            )));
        }
        let mut rank = 0;
        let parts = self.per_rank(sends, recvs, |comm, s, r| {
            let p = Collective::p2p(comm, Some((s, to[rank])), Some((r, from[rank])));
            rank += 1;
            p
        })?;
        self.run_group(&parts, streams, "send_recv")
    }

    fn per_rank<T: NcclType>(
        &self,
        sends: &[&DeviceBuffer<T>],
        recvs: &[&DeviceBuffer<T>],
        mut make: impl FnMut(&Comm, &DeviceBuffer<T>, &DeviceBuffer<T>) -> Result<Collective, String>,
    ) -> Result<Vec<Collective>> {
        if sends.len() != self.len() || recvs.len() != self.len() {
            return Err(Error::Invalid(format!(
                "{} ranks, but {} send and {} receive buffers",
                self.len(),
                sends.len(),
                recvs.len()
            )));
        }
        self.comms()
            .iter()
            .zip(sends.iter().zip(recvs))
            .map(|(comm, (s, r))| {
                make(comm, s, r).map_err(|e| Error::Invalid(format!("rank {}: {e}", comm.rank)))
            })
            .collect()
    }
}

pub(crate) fn recording_error() -> Error {
    Error::WrongDevice(
        "these communicators were made for RecordingBackends and have no NCCL behind them".into(),
    )
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

/// What one rank does in one collective: the call, its element type, count and buffers.
#[derive(Clone, Debug)]
pub(crate) struct Collective {
    pub(crate) kind: Kind,
    pub(crate) dtype: sys::ncclDataType_t,
    pub(crate) type_name: &'static str,
    /// Elements of the send buffer (all-reduce, broadcast: also of the receive buffer).
    pub(crate) send: Option<Region>,
    pub(crate) recv: Option<Region>,
}

/// The call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce(ReduceOp),
    AllGather,
    ReduceScatter(ReduceOp),
    Broadcast {
        root: usize,
    },
    /// Sends to `to` and/or receives from `from`, in one group.
    P2p {
        to: Option<usize>,
        from: Option<usize>,
    },
}

fn elems(r: &Option<Region>) -> usize {
    r.as_ref().map_or(0, |r| r.len / r.elem.max(1))
}

fn same_alloc(a: &Region, b: &Region) -> bool {
    Arc::ptr_eq(&a.alloc, &b.alloc)
}

fn device_region<T: NcclType>(b: &DeviceBuffer<T>) -> Region {
    b.into()
}

impl Collective {
    fn new<T: NcclType>(kind: Kind, send: Option<Region>, recv: Option<Region>) -> Collective {
        Collective {
            kind,
            dtype: T::DTYPE,
            type_name: T::NAME,
            send,
            recv,
        }
    }

    pub(crate) fn all_reduce<T: NcclType>(
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<Collective, String> {
        let _ = comm;
        if send.len() != recv.len() {
            return Err(format!(
                "an all-reduce sends and receives the same number of elements; the send buffer \
                 has {} and the receive buffer {}",
                send.len(),
                recv.len()
            ));
        }
        Ok(Self::new::<T>(
            Kind::AllReduce(op),
            Some(device_region(send)),
            Some(device_region(recv)),
        ))
    }

    pub(crate) fn all_gather<T: NcclType>(
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
    ) -> Result<Collective, String> {
        let n = comm.ranks();
        if recv.len() != n * send.len() {
            return Err(format!(
                "an all-gather over {n} ranks receives {n} x the send length ({} x {} = {} \
                 elements), but the receive buffer has {}",
                n,
                send.len(),
                n * send.len(),
                recv.len()
            ));
        }
        let (s, r) = (device_region(send), device_region(recv));
        if same_alloc(&s, &r) {
            return Err("an all-gather's send and receive buffers must be distinct".into());
        }
        Ok(Self::new::<T>(Kind::AllGather, Some(s), Some(r)))
    }

    pub(crate) fn reduce_scatter<T: NcclType>(
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<Collective, String> {
        let n = comm.ranks();
        if send.len() != n * recv.len() {
            return Err(format!(
                "a reduce-scatter over {n} ranks sends {n} x the receive length ({} x {} = {} \
                 elements), but the send buffer has {}",
                n,
                recv.len(),
                n * recv.len(),
                send.len()
            ));
        }
        let (s, r) = (device_region(send), device_region(recv));
        if same_alloc(&s, &r) {
            return Err("a reduce-scatter's send and receive buffers must be distinct".into());
        }
        Ok(Self::new::<T>(Kind::ReduceScatter(op), Some(s), Some(r)))
    }

    pub(crate) fn broadcast<T: NcclType>(
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        root: usize,
    ) -> Result<Collective, String> {
        if root >= comm.ranks() {
            return Err(format!(
                "broadcast root {root} is not a rank ({} ranks)",
                comm.ranks()
            ));
        }
        if send.len() != recv.len() {
            return Err(format!(
                "a broadcast sends and receives the same number of elements; the send buffer \
                 has {} and the receive buffer {}",
                send.len(),
                recv.len()
            ));
        }
        Ok(Self::new::<T>(
            Kind::Broadcast { root },
            Some(device_region(send)),
            Some(device_region(recv)),
        ))
    }

    pub(crate) fn p2p<T: NcclType>(
        comm: &Comm,
        send: Option<(&DeviceBuffer<T>, usize)>,
        recv: Option<(&DeviceBuffer<T>, usize)>,
    ) -> Result<Collective, String> {
        let n = comm.ranks();
        for (what, peer) in [
            ("send to", send.map(|s| s.1)),
            ("receive from", recv.map(|r| r.1)),
        ] {
            if let Some(p) = peer.filter(|&p| p >= n) {
                return Err(format!("cannot {what} rank {p}: there are {n} ranks"));
            }
        }
        let (to, from) = (send.map(|s| s.1), recv.map(|r| r.1));
        let me = comm.rank;
        if (to == Some(me)) != (from == Some(me)) {
            return Err(format!(
                "a send to its own rank ({me}) needs the matching receive from it in the same \
                 node (add_send_recv), and the other way round"
            ));
        }
        let (s, r) = (
            send.map(|s| device_region(s.0)),
            recv.map(|r| device_region(r.0)),
        );
        if let (Some(s), Some(r)) = (&s, &r) {
            if same_alloc(s, r) {
                return Err("a node's send and receive buffers must be distinct".into());
            }
        }
        if to == Some(me) && elems(&s) != elems(&r) {
            return Err(format!(
                "a rank sending to itself receives what it sends: {} elements sent, {} received",
                elems(&s),
                elems(&r)
            ));
        }
        Ok(Self::new::<T>(Kind::P2p { to, from }, s, r))
    }

    /// The NCCL count argument of the call (per rank, as NCCL counts it).
    pub(crate) fn count(&self) -> usize {
        match self.kind {
            Kind::AllReduce(_) | Kind::Broadcast { .. } | Kind::AllGather => elems(&self.send),
            Kind::ReduceScatter(_) => elems(&self.recv),
            Kind::P2p { .. } => elems(&self.send).max(elems(&self.recv)),
        }
    }

    /// Whether the call works in place (send and receive the same memory).
    pub(crate) fn in_place(&self) -> bool {
        matches!((&self.send, &self.recv), (Some(s), Some(r)) if same_alloc(s, r))
    }

    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        if let Some(s) = &self.send {
            f(&s.alloc);
        }
        if let Some(r) = &self.recv {
            f(&r.alloc);
        }
    }

    /// Every buffer is device memory of `key`.
    pub(crate) fn check_owners(&self, name: &str, key: DeviceKey) -> Result<()> {
        for (what, r) in [("send", &self.send), ("receive", &self.recv)] {
            let Some(r) = r else { continue };
            if r.alloc.space != MemorySpace::Device {
                return Err(Error::Dag(DagError::Collective {
                    node: name.to_string(),
                    problem: format!("the {what} buffer is not device memory"),
                }));
            }
            if r.alloc.owner.key() != key {
                return Err(Error::Dag(DagError::WrongDevice {
                    node: name.to_string(),
                    problem: format!(
                        "the {what} buffer belongs to {}, but the collective's rank is on {key}",
                        r.alloc.owner.key()
                    ),
                }));
            }
        }
        Ok(())
    }

    /// Issues the rank's call(s) on `stream` (P2P parts inside their own group).
    ///
    /// # Safety
    /// `comm` is this rank's live communicator, its lock held; `stream` is live, of its
    /// device; the buffers were checked ([`Collective::check_owners`], lengths when made) and
    /// stay alive until the work ran.
    pub(crate) unsafe fn issue(
        &self,
        comm: sys::ncclComm_t,
        stream: sys::cudaStream_t,
    ) -> Result<()> {
        use std::ffi::c_void;
        let s = self
            .send
            .as_ref()
            .map_or(std::ptr::null(), |r| r.raw_addr() as *const c_void);
        let r = self
            .recv
            .as_ref()
            .map_or(std::ptr::null_mut(), |r| r.raw_addr() as *mut c_void);
        let n = self.count();
        // SAFETY: the caller's contract; the lengths were checked against `count` when the
        // collective was made.
        unsafe {
            match self.kind {
                Kind::AllReduce(op) => nc::all_reduce(s, r, n, self.dtype, op.raw(), comm, stream),
                Kind::AllGather => nc::all_gather(s, r, n, self.dtype, comm, stream),
                Kind::ReduceScatter(op) => {
                    nc::reduce_scatter(s, r, n, self.dtype, op.raw(), comm, stream)
                }
                Kind::Broadcast { root } => {
                    nc::broadcast(s, r, n, self.dtype, root as i32, comm, stream)
                }
                Kind::P2p { to, from } => {
                    nc::group_start()?;
                    let mut res = Ok(());
                    if let Some(to) = to {
                        res = nc::send(s, elems(&self.send), self.dtype, to as i32, comm, stream);
                    }
                    if let Some(from) = from {
                        res = res.and_then(|()| {
                            nc::recv(r, elems(&self.recv), self.dtype, from as i32, comm, stream)
                        });
                    }
                    let end = nc::group_end();
                    res.and(end)
                }
            }
        }
    }

    /// A short description: `all-reduce sum f32 x1024`, `send 256 x u8 to 1`, ….
    pub(crate) fn describe(&self) -> String {
        let t = self.type_name;
        let place = if self.in_place() { " in place" } else { "" };
        match self.kind {
            Kind::AllReduce(op) => {
                format!("all-reduce {} {t} x{}{place}", op.as_str(), self.count())
            }
            Kind::AllGather => format!("all-gather {t} x{} per rank", self.count()),
            Kind::ReduceScatter(op) => {
                format!(
                    "reduce-scatter {} {t} x{} per rank",
                    op.as_str(),
                    self.count()
                )
            }
            Kind::Broadcast { root } => {
                format!("broadcast {t} x{} from rank {root}{place}", self.count())
            }
            Kind::P2p { to, from } => {
                let mut parts = Vec::new();
                if let Some(to) = to {
                    parts.push(format!("send {t} x{} to rank {to}", elems(&self.send)));
                }
                if let Some(from) = from {
                    parts.push(format!("recv {t} x{} from rank {from}", elems(&self.recv)));
                }
                parts.join(" + ")
            }
        }
    }
}
/// An [`Error::Dag`] for a collective (a node, or a stream call's rank).
pub(crate) fn collective_error(node: &str, problem: impl Into<String>) -> Error {
    Error::Dag(DagError::Collective {
        node: node.to_string(),
        problem: problem.into(),
    })
}

// ---- matching the ranks' operations (stream calls here; DAGs in dag/nodes/nccl.rs) ----

/// One rank's collective operations, in order: (node name, collective).
pub(crate) type RankOps<'a> = Vec<(String, &'a Collective)>;

/// The check of [`Communicators::check_ranks`] for one call per rank (the stream calls).
pub(crate) fn check_group(comms: &Communicators, parts: &[Collective], what: &str) -> Result<()> {
    let ranks: Vec<RankOps> = parts
        .iter()
        .enumerate()
        .map(|(r, c)| vec![(format!("{what} (rank {r})"), c)])
        .collect();
    debug_assert_eq!(ranks.len(), comms.len());
    match_ranks(&ranks, what)
}

/// Union-find over `(rank, index)` steps.
struct Steps {
    start: Vec<usize>,
    parent: Vec<usize>,
}

impl Steps {
    fn id(&self, rank: usize, i: usize) -> usize {
        self.start[rank] + i
    }
    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.parent[a] = b;
        }
    }
}

pub(crate) fn match_ranks(ranks: &[RankOps], what: &str) -> Result<()> {
    let n = ranks.len();
    let mut start = Vec::with_capacity(n);
    let mut total = 0;
    for ops in ranks {
        start.push(total);
        total += ops.len();
    }
    let mut steps = Steps {
        start,
        parent: (0..total).collect(),
    };
    let fail = |name: &str, problem: String| -> Error {
        if what.is_empty() {
            collective_error(name, problem)
        } else {
            Error::Invalid(format!("{name}: {problem}"))
        }
    };

    // Collectives: the k-th of every rank is the k-th of rank 0.
    let colls: Vec<Vec<(usize, &(String, &Collective))>> = ranks
        .iter()
        .map(|ops| {
            ops.iter()
                .enumerate()
                .filter(|(_, (_, c))| !matches!(c.kind, Kind::P2p { .. }))
                .collect()
        })
        .collect();
    for r in 1..n {
        for k in 0..colls[0].len().max(colls[r].len()) {
            let (a, b) = (colls[0].get(k), colls[r].get(k));
            match (a, b) {
                (Some((ia, (na, ca))), Some((ib, (nb, cb)))) => {
                    let same =
                        ca.kind == cb.kind && ca.dtype == cb.dtype && ca.count() == cb.count();
                    if !same {
                        return Err(fail(
                            nb,
                            format!(
                                "rank {r}'s collective #{k} ({}) does not match rank 0's \
                                 (`{na}`: {})",
                                cb.describe(),
                                ca.describe()
                            ),
                        ));
                    }
                    let (x, y) = (steps.id(0, *ia), steps.id(r, *ib));
                    steps.union(x, y);
                }
                (Some((_, (na, _))), None) => {
                    return Err(fail(
                        na,
                        format!("rank 0's collective #{k} has no counterpart on rank {r}"),
                    ))
                }
                (None, Some((_, (nb, _)))) => {
                    return Err(fail(
                        nb,
                        format!("rank {r}'s collective #{k} has no counterpart on rank 0"),
                    ))
                }
                (None, None) => {}
            }
        }
    }

    // Point to point: the j-th send a -> b pairs with the j-th receive of b from a.
    for a in 0..n {
        for b in 0..n {
            let sends: Vec<(usize, &(String, &Collective))> = ranks[a]
                .iter()
                .enumerate()
                .filter(|(_, (_, c))| matches!(c.kind, Kind::P2p { to: Some(t), .. } if t == b))
                .collect();
            let recvs: Vec<(usize, &(String, &Collective))> = ranks[b]
                .iter()
                .enumerate()
                .filter(|(_, (_, c))| matches!(c.kind, Kind::P2p { from: Some(f), .. } if f == a))
                .collect();
            for j in 0..sends.len().max(recvs.len()) {
                match (sends.get(j), recvs.get(j)) {
                    (Some((i, (ns, cs))), Some((k, (nr, cr)))) => {
                        let (sc, rc) = (send_count(cs), recv_count(cr));
                        if cs.dtype != cr.dtype || sc != rc {
                            return Err(fail(
                                nr,
                                format!(
                                    "receives {} x{rc} from rank {a}, but the matching send \
                                     (`{ns}`) sends {} x{sc}",
                                    cr.type_name, cs.type_name
                                ),
                            ));
                        }
                        let (x, y) = (steps.id(a, *i), steps.id(b, *k));
                        steps.union(x, y);
                    }
                    (Some((_, (ns, _))), None) => {
                        return Err(fail(
                            ns,
                            format!(
                                "send #{j} from rank {a} to rank {b} has no matching receive on \
                                 rank {b}"
                            ),
                        ))
                    }
                    (None, Some((_, (nr, _)))) => {
                        return Err(fail(
                            nr,
                            format!(
                                "receive #{j} of rank {b} from rank {a} has no matching send on \
                                 rank {a}"
                            ),
                        ))
                    }
                    (None, None) => {}
                }
            }
        }
    }

    // Each rank runs its steps in order; matched steps run together: the step graph must
    // have no cycle (a self-loop: two steps of one rank that must run together).
    let roots: Vec<usize> = (0..total).map(|x| steps.find(x)).collect();
    let mut g: DiGraph<(), ()> = DiGraph::new();
    let nodes: Vec<_> = (0..total).map(|_| g.add_node(())).collect();
    for (r, ops) in ranks.iter().enumerate() {
        for i in 1..ops.len() {
            let (x, y) = (roots[steps.id(r, i - 1)], roots[steps.id(r, i)]);
            if x == y {
                return Err(fail(
                    &ops[i].0,
                    format!(
                        "rank {r} would have to run it together with its earlier `{}` (their \
                         matching operations on other ranks are one step): combine them in one \
                         add_send_recv node",
                        ops[i - 1].0
                    ),
                ));
            }
            g.add_edge(nodes[x], nodes[y], ());
        }
    }
    if let Err(cycle) = petgraph::algo::toposort(&g, None) {
        let at = cycle.node_id().index();
        let (r, i) = (0..n)
            .rev()
            .find_map(|r| {
                let s = steps.start[r];
                (0..ranks[r].len())
                    .find(|&i| roots[s + i] == at)
                    .map(|i| (r, i))
            })
            .unwrap_or((0, 0));
        let name = ranks
            .get(r)
            .and_then(|o| o.get(i))
            .map_or("?", |o| o.0.as_str());
        return Err(fail(
            name,
            format!(
                "the ranks' collective nodes wait for each other in a cycle (through rank \
                 {r}'s `{name}`): reorder them, or pair sends and receives in add_send_recv nodes"
            ),
        ));
    }
    Ok(())
}

fn send_count(c: &Collective) -> usize {
    c.send.as_ref().map_or(0, |r| r.len / r.elem.max(1))
}

fn recv_count(c: &Collective) -> usize {
    c.recv.as_ref().map_or(0, |r| r.len / r.elem.max(1))
}
