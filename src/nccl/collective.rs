//! The table of the collectives ([`for_each_collective!`]: one row each, which every level
//! expands) and one rank's part of a collective ([`Collective`]: the call, its element type,
//! count and buffers), its checks, and how it is issued to NCCL.

use std::sync::Arc;

use super::{Comm, NcclType};
use crate::device::DeviceKey;
use crate::error::{DagError, Error, Result};
use crate::memory::{Allocation, DeviceBuffer, MemorySpace, Region};
use crate::result::nccl as nc;
use crate::sys;

/// The collectives, one row each: everything the crate says about a collective of one send
/// and one receive buffer per rank, at every level. Each level expands the rows with its own
/// macro (`for_each_collective!(its_macro)`), taking the parts it needs:
///
/// - `stream`: the docs and name of the stream call on [`Communicators`](super::Communicators)
///   (`nccl/mod.rs`: `fn name(&self, sends, recvs, <fields>, streams)`);
/// - `dag`: the docs and name of the builder call on [`Dag`](crate::Dag)
///   (`dag/nodes/nccl.rs`: `fn name(&mut self, comm, send, recv, <fields>)`);
/// - `kind`: the [`Kind`] variant and its fields, which are also the calls' parameters after
///   the buffers; then, for this file: `what` (for errors), `lengths` ([`Lengths`]: how the
///   send and receive lengths relate), an optional `check` of the fields against the number
///   of ranks, `issue` (the call of the `result/nccl.rs` wrapper, given the raw send and
///   receive pointers, NCCL's count, data type, communicator and stream) and `describe` (the
///   words of labels and errors, given the type's name, the count and `" in place"` or `""`).
///
/// Adding a collective is a row here and its wrapper in `result/nccl.rs`. Point-to-point
/// (`Kind::P2p`: optional buffers, a peer per rank, three builder calls) does not have this
/// shape and is written out at each level.
macro_rules! for_each_collective {
    ($then:ident) => {
        $then! {
            /// `ncclAllReduce` on every rank at once: `recvs[r] = op over ranks of sends[r]`, each
            /// rank on `streams[r]` (of its device). `sends[r]` may be `recvs[r]` (in place).
            stream all_reduce;
            /// Adds rank `comm.rank()`'s part of an all-reduce: `recv = op over ranks of send`
            /// (`ncclAllReduce`). `send` and `recv` have the same length and are device memory of
            /// the rank's device; passing one buffer twice reduces in place.
            dag add_all_reduce;
            kind AllReduce { op: $crate::nccl::ReduceOp } {
                what: "an all-reduce",
                lengths: Same,
                issue(s, r, n, dtype, comm, stream) =>
                    nc::all_reduce(s, r, n, dtype, op.raw(), comm, stream),
                describe(t, n, place) => format!("all-reduce {} {t} x{n}{place}", op.as_str()),
            }

            /// `ncclAllGather` on every rank: `recvs[r]` (`ranks * n`) gets every rank's `sends`
            /// (`n` each) in rank order.
            stream all_gather;
            /// Adds rank `comm.rank()`'s part of an all-gather (`ncclAllGather`): `recv` (`ranks`
            /// times the length of `send`, a distinct buffer) gets every rank's `send`, in rank
            /// order.
            dag add_all_gather;
            kind AllGather {} {
                what: "an all-gather",
                lengths: RecvTimesRanks,
                issue(s, r, n, dtype, comm, stream) => nc::all_gather(s, r, n, dtype, comm, stream),
                describe(t, n, _place) => format!("all-gather {t} x{n} per rank"),
            }

            /// `ncclReduceScatter` on every rank: `recvs[r]` (`n`) gets block `r` of the reduction
            /// of the ranks' `sends` (`ranks * n`).
            stream reduce_scatter;
            /// Adds rank `comm.rank()`'s part of a reduce-scatter (`ncclReduceScatter`): `send`
            /// holds `ranks` blocks of `recv`'s length; `recv` (a distinct buffer) gets block
            /// `rank` of the reduction over ranks.
            dag add_reduce_scatter;
            kind ReduceScatter { op: $crate::nccl::ReduceOp } {
                what: "a reduce-scatter",
                lengths: SendTimesRanks,
                issue(s, r, n, dtype, comm, stream) =>
                    nc::reduce_scatter(s, r, n, dtype, op.raw(), comm, stream),
                describe(t, n, _place) =>
                    format!("reduce-scatter {} {t} x{n} per rank", op.as_str()),
            }

            /// `ncclBroadcast` on every rank: every `recvs[r]` gets rank `root`'s `sends[root]`
            /// (the other ranks' sends are not read; a rank's send may be its receive buffer).
            stream broadcast;
            /// Adds rank `comm.rank()`'s part of a broadcast (`ncclBroadcast`): every rank's
            /// `recv` gets rank `root`'s `send` (read on the root only; one buffer passed twice
            /// broadcasts in place).
            dag add_broadcast;
            kind Broadcast { root: usize } {
                what: "a broadcast",
                lengths: Same,
                check(ranks) => if root >= ranks {
                    Err(format!("broadcast root {root} is not a rank ({ranks} ranks)"))
                } else {
                    Ok(())
                },
                issue(s, r, n, dtype, comm, stream) =>
                    nc::broadcast(s, r, n, dtype, root as i32, comm, stream),
                describe(t, n, place) => format!("broadcast {t} x{n} from rank {root}{place}"),
            }
        }
    };
}
pub(crate) use for_each_collective;

/// How a collective's send and receive lengths relate (`n`: NCCL's count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lengths {
    /// Both hold `n` elements; one buffer may be both (in place).
    Same,
    /// The receive buffer holds `ranks` × `n`, the send buffer `n`; distinct buffers.
    RecvTimesRanks,
    /// The send buffer holds `ranks` × `n`, the receive buffer `n`; distinct buffers.
    SendTimesRanks,
}

/// This file's expansion of the table: [`Kind`] and what each collective's row says about one
/// rank's call.
macro_rules! rank_calls {
    ($(
        $(#[$sdoc:meta])* stream $stream:ident;
        $(#[$ddoc:meta])* dag $dag:ident;
        kind $kind:ident { $($field:ident: $ty:ty),* } {
            what: $what:literal,
            lengths: $lengths:ident,
            $(check($ranks:ident) => $check:expr,)?
            issue($s:ident, $r:ident, $n:ident, $dtype:ident, $comm:ident, $st:ident) =>
                $issue:expr,
            describe($t:ident, $count:ident, $place:ident) => $describe:expr $(,)?
        }
    )*) => {
        /// The call.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Kind {
            $(
                #[doc = concat!("`", stringify!($stream), "`.")]
                $kind { $($field: $ty),* },
            )*
            /// Sends to `to` and/or receives from `from`, in one group.
            P2p {
                to: Option<usize>,
                from: Option<usize>,
            },
        }

        impl Kind {
            /// What the call is (for errors) and how its lengths relate; `None` for
            /// point-to-point.
            fn shape(&self) -> Option<(&'static str, Lengths)> {
                match self {
                    $(Kind::$kind { .. } => Some(($what, Lengths::$lengths)),)*
                    Kind::P2p { .. } => None,
                }
            }

            /// The row's `check` of the fields against the number of ranks.
            #[allow(unused_variables)] // reason: a row's check uses the fields it needs, or none
            fn check(&self, ranks: usize) -> Result<(), String> {
                match *self {
                    $(Kind::$kind { $($field),* } => {
                        Ok(()) $(.and_then(|()| {
                            let $ranks = ranks;
                            $check
                        }))?
                    })*
                    Kind::P2p { .. } => Ok(()),
                }
            }

            /// Issues the row's call (not point-to-point: `None`).
            ///
            /// # Safety
            /// As [`Collective::issue`], whose checked parts these are.
            unsafe fn issue_collective(
                &self,
                send: *const std::ffi::c_void,
                recv: *mut std::ffi::c_void,
                count: usize,
                dtype: sys::ncclDataType_t,
                comm: sys::ncclComm_t,
                stream: sys::cudaStream_t,
            ) -> Option<Result<()>> {
                match *self {
                    $(Kind::$kind { $($field),* } => {
                        let ($s, $r, $n, $dtype, $comm, $st) =
                            (send, recv, count, dtype, comm, stream);
                        // SAFETY: the caller's contract.
                        Some(unsafe { $issue })
                    })*
                    Kind::P2p { .. } => None,
                }
            }

            /// The row's words (not point-to-point: `None`).
            fn describe_collective(&self, t: &str, count: usize, place: &str) -> Option<String> {
                match *self {
                    $(Kind::$kind { $($field),* } => {
                        let ($t, $count, $place) = (t, count, place);
                        Some($describe)
                    })*
                    Kind::P2p { .. } => None,
                }
            }
        }
    };
}
for_each_collective!(rank_calls);

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

fn elems(r: &Option<Region>) -> usize {
    r.as_ref().map_or(0, |r| r.len / r.elem.max(1))
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

    /// Rank `comm.rank()`'s part of the collective `kind` (a row of the table, not
    /// point-to-point: see [`Collective::p2p`]), checked: the row's `check`, the lengths, and
    /// distinct buffers where the lengths differ.
    pub(crate) fn make<T: NcclType>(
        comm: &Comm,
        kind: Kind,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
    ) -> Result<Collective, String> {
        let Some((what, lengths)) = kind.shape() else {
            unreachable!("point-to-point is made by Collective::p2p");
        };
        kind.check(comm.ranks())?;
        let (send_side, recv_side) = (("send", send.len()), ("receive", recv.len()));
        match lengths {
            Lengths::Same => check_lengths(what, 1, send_side, recv_side),
            Lengths::RecvTimesRanks => check_lengths(what, comm.ranks(), send_side, recv_side),
            Lengths::SendTimesRanks => check_lengths(what, comm.ranks(), recv_side, send_side),
        }?;
        let (s, r) = (device_region(send), device_region(recv));
        if lengths != Lengths::Same && s.overlaps(&r) {
            return Err(format!(
                "{what}'s send and receive buffers must not overlap"
            ));
        }
        if lengths == Lengths::Same && s.overlaps(&r) && !s.same_memory(&r) {
            return Err(format!(
                "{what}'s send and receive buffers overlap without being the same memory (in \
                 place is one buffer for both)"
            ));
        }
        Ok(Self::new::<T>(kind, Some(s), Some(r)))
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
            if s.overlaps(r) {
                return Err("a node's send and receive buffers must not overlap".into());
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

    /// The NCCL count argument of the call (per rank, as NCCL counts it): the elements of the
    /// buffer that is not `ranks` × it.
    pub(crate) fn count(&self) -> usize {
        match self.kind.shape() {
            Some((_, Lengths::Same | Lengths::RecvTimesRanks)) => elems(&self.send),
            Some((_, Lengths::SendTimesRanks)) => elems(&self.recv),
            None => elems(&self.send).max(elems(&self.recv)),
        }
    }

    /// Whether the call works in place (send and receive the same memory).
    pub(crate) fn in_place(&self) -> bool {
        matches!((&self.send, &self.recv), (Some(s), Some(r)) if s.same_memory(r))
    }

    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        if let Some(s) = &self.send {
            f(&s.alloc);
        }
        if let Some(r) = &self.recv {
            f(&r.alloc);
        }
    }

    /// Every buffer is device memory of `key`: checked for a collective node (the error names
    /// it, [`OwnerCheck::Node`]) or a rank of a stream call ([`OwnerCheck::Call`]).
    pub(crate) fn check_owners(&self, at: OwnerCheck<'_>, key: DeviceKey) -> Result<()> {
        for (what, r) in [("send", &self.send), ("receive", &self.recv)] {
            let Some(r) = r else { continue };
            if r.alloc.space != MemorySpace::Device {
                let problem = format!("the {what} buffer is not device memory");
                return Err(match at {
                    OwnerCheck::Node(node) => collective_error(node, problem),
                    OwnerCheck::Call { call, rank } => Error::CollectiveCall {
                        call: format!("{call} (rank {rank})"),
                        problem,
                    },
                });
            }
            if r.alloc.owner.key() != key {
                let problem = format!(
                    "the {what} buffer belongs to {}, but the collective's rank is on {key}",
                    r.alloc.owner.key()
                );
                return Err(match at {
                    OwnerCheck::Node(node) => Error::WrongDevice {
                        node: Some(node.to_string()),
                        problem,
                    },
                    OwnerCheck::Call { call, rank } => Error::WrongDevice {
                        node: None,
                        problem: format!("{call} (rank {rank}): {problem}"),
                    },
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
            if let Some(issued) = self
                .kind
                .issue_collective(s, r, n, self.dtype, comm, stream)
            {
                return issued;
            }
            let Kind::P2p { to, from } = self.kind else {
                unreachable!("issue_collective issues every other kind");
            };
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

    /// A short description: `all-reduce sum f32 x1024`, `send 256 x u8 to 1`, ….
    pub(crate) fn describe(&self) -> String {
        let t = self.type_name;
        let place = if self.in_place() { " in place" } else { "" };
        if let Some(words) = self.kind.describe_collective(t, self.count(), place) {
            return words;
        }
        let Kind::P2p { to, from } = self.kind else {
            unreachable!("describe_collective describes every other kind");
        };
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
/// An [`Error::Dag`] for a collective (a node, or a stream call's rank).
/// What a collective's buffers are checked for ([`Collective::check_owners`]), which the error
/// names.
#[derive(Clone, Copy)]
pub(crate) enum OwnerCheck<'a> {
    /// A collective node (its name): [`DagError::Collective`] or [`Error::WrongDevice`] with
    /// the node.
    Node(&'a dyn std::fmt::Display),
    /// A rank's part of a stream call, named `all_reduce (rank 1)` in
    /// [`Error::CollectiveCall`], or in the problem of an [`Error::WrongDevice`] without a node.
    Call {
        /// The call, e.g. `all_reduce`.
        call: &'static str,
        /// The rank.
        rank: usize,
    },
}

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
