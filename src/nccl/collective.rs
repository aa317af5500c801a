//! One rank's part of a collective ([`Collective`]: the call, its element type, count and
//! buffers), its checks, and how it is issued to NCCL.

use std::sync::Arc;

use super::{Comm, NcclType, ReduceOp};
use crate::device::DeviceKey;
use crate::error::{DagError, Error, Result};
use crate::memory::{Allocation, DeviceBuffer, MemorySpace, Region};
use crate::result::nccl as nc;
use crate::sys;

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
        check_lengths(
            "an all-reduce",
            1,
            ("send", send.len()),
            ("receive", recv.len()),
        )?;
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
        check_lengths(
            "an all-gather",
            comm.ranks(),
            ("send", send.len()),
            ("receive", recv.len()),
        )?;
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
        check_lengths(
            "a reduce-scatter",
            comm.ranks(),
            ("receive", recv.len()),
            ("send", send.len()),
        )?;
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
        check_lengths(
            "a broadcast",
            1,
            ("send", send.len()),
            ("receive", recv.len()),
        )?;
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
    pub(crate) fn check_owners(
        &self,
        name: &(impl std::fmt::Display + ?Sized),
        key: DeviceKey,
    ) -> Result<()> {
        for (what, r) in [("send", &self.send), ("receive", &self.recv)] {
            let Some(r) = r else { continue };
            if r.alloc.space != MemorySpace::Device {
                return Err(Error::Dag(DagError::Collective {
                    node: name.to_string(),
                    problem: format!("the {what} buffer is not device memory"),
                }));
            }
            if r.alloc.owner.key() != key {
                return Err(Error::WrongDevice {
                    node: Some(name.to_string()),
                    problem: format!(
                        "the {what} buffer belongs to {}, but the collective's rank is on {key}",
                        r.alloc.owner.key()
                    ),
                });
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
pub(crate) fn collective_error(
    node: &(impl std::fmt::Display + ?Sized),
    problem: impl Into<String>,
) -> Error {
    Error::Dag(DagError::Collective {
        node: node.to_string(),
        problem: problem.into(),
    })
}

/// The one length check of the collectives: the `large` buffer holds `ranks` × the `small`
/// one's elements (`ranks` 1: the same number). Each side is (its name, its length): an
/// all-gather's receive buffer holds `ranks` × what it sends; a reduce-scatter's send buffer
/// `ranks` × what it receives.
fn check_lengths(
    what: &str,
    ranks: usize,
    (small_name, small): (&str, usize),
    (large_name, large): (&str, usize),
) -> Result<(), String> {
    match small.checked_mul(ranks) {
        Some(want) if want == large => Ok(()),
        _ if ranks == 1 => Err(format!(
            "{what} sends and receives the same number of elements; the {small_name} buffer \
             has {small} and the {large_name} buffer {large}"
        )),
        want => Err(format!(
            "{what} over {ranks} ranks needs its {large_name} buffer to hold {ranks} x the \
             {small_name} length ({ranks} x {small} = {} elements), but it has {large}",
            want.map_or("more than usize::MAX".to_string(), |w| w.to_string())
        )),
    }
}
