//! NCCL collectives across the GPUs of this process: communicators ([`Communicators`], one
//! [`Comm`] per rank), the collectives as DAG nodes ([`Dag::add_all_reduce`] and the others in
//! `dag/nodes/nccl.rs`) and the same collectives called directly on streams
//! ([`Communicators::all_reduce`], …).
//!
//! NCCL is loaded at run time ([`load::nccl`](crate::load::nccl)); without it every call here
//! returns [`Error::LibraryNotFound`]. Before it is loaded the crate switches NVLink multicast
//! off for the process (`NCCL_NVLS_ENABLE=0` unless already set, see
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
//!   way to instantiate a DAG with collective nodes ([`Dag::instantiate`], [`Dag::lower`] on a
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

use crate::dag::Dag;
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
    devices: Vec<Device>,
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
    fn is_recording(&self) -> bool {
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

    /// Placeholder communicators for recording backends (no NCCL, no GPU): rank `i` belongs to
    /// `backends[i]`, so DAGs with collective nodes can be built, validated and lowered to
    /// [`RecordingBackend`](crate::RecordingBackend)s, and checked with
    /// [`Communicators::check_ranks`].
    pub fn recording(backends: &[&crate::RecordingBackend]) -> Communicators {
        use crate::dag::nodes::backend::sealed::Lower;
        Communicators {
            clique: Arc::new(Clique {
                id: NEXT_CLIQUE.fetch_add(1, Ordering::Relaxed),
                keys: backends.iter().map(|b| b.key()).collect(),
                devices: Vec::new(),
                locks: backends.iter().map(|_| Mutex::new(())).collect(),
                uses: backends.iter().map(|_| Uses::default()).collect(),
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

    /// Checks that the DAGs, one per rank (`dags[r]` holds rank `r`'s collective nodes), fit
    /// together, so that their graphs, launched once each, complete. No GPU needed.
    ///
    /// - every collective node of `dags[r]` is of rank `r` of these communicators (a DAG uses
    ///   one [`Communicators`]);
    /// - in each DAG the collective nodes are ordered by its dependencies (a chain: NCCL runs
    ///   one communicator's operations one after the other, in the same order on every rank);
    /// - the ranks' collectives (all-reduce, all-gather, reduce-scatter, broadcast) match in
    ///   order: same call, operator, type, count and root;
    /// - every send from rank `a` to `b` is matched, in order, by a receive of `b` from `a`
    ///   with the same type and count;
    /// - no rank waits for another in a cycle (matched operations taken as one step, each
    ///   rank's operations in order; the send and receive of one
    ///   [`Dag::add_send_recv`] node are one step). The check is conservative: it may refuse
    ///   an order NCCL would get through.
    ///
    /// Errors name the node ([`DagError::Collective`]).
    pub fn check_ranks(&self, dags: &[&Dag]) -> Result<()> {
        crate::dag::nodes::nccl::check_ranks(self, dags)
    }

    /// Instantiates one DAG per rank (`dags[r]` on rank `r`'s device) after
    /// [`Communicators::check_ranks`]: each rank's DAG is validated, lowered and instantiated
    /// on its own thread, all at once, so that NCCL can capture every rank's collectives into
    /// its graph (a rank's capture may wait for the others'). The only way to instantiate a
    /// DAG with collective nodes; see the [module docs](self) for the launch rules.
    pub fn instantiate(&self, dags: &[&Dag]) -> Result<Vec<crate::Exec>> {
        let c = &self.clique;
        if c.is_recording() {
            return Err(recording_error());
        }
        self.check_ranks(dags)?;
        for (dag, d) in dags.iter().zip(&c.devices) {
            dag.validate(d)?;
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = dags
                .iter()
                .zip(&c.devices)
                .enumerate()
                .map(|(rank, (dag, device))| {
                    let id = c.id;
                    s.spawn(move || {
                        crate::dag::nodes::nccl::lowering_rank(id, rank, || dag.instantiate(device))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(p) => std::panic::resume_unwind(p),
                })
                .collect()
        })
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
        crate::dag::nodes::nccl::check_group(self, parts, what)?;
        let _guards: Vec<_> = (0..self.len()).map(|r| c.lock(r)).collect();
        // SAFETY: every part was checked (lengths against the communicator size, buffers of
        // the rank's device, in-place rules); the buffers are kept alive until the work ran by
        // the markers noted below; every rank's lock is held; all ranks are in one group.
        unsafe {
            nc::group_start()?;
            let mut r = Ok(());
            for (rank, p) in parts.iter().enumerate() {
                r = r.and_then(|()| p.issue(c.raw[rank], streams[rank].raw()));
            }
            let end = nc::group_end();
            r.and(end)?;
        }
        for (rank, p) in parts.iter().enumerate() {
            let m = streams[rank].mark()?;
            c.uses[rank].add_marker(&m);
            p.for_each_allocation(&mut |a| a.uses.add_marker(&m));
        }
        Ok(())
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

fn recording_error() -> Error {
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
                return Err(crate::dag::nodes::wrong_device(
                    name,
                    format!(
                        "the {what} buffer belongs to {}, but the collective's rank is on {key}",
                        r.alloc.owner.key()
                    ),
                ));
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
