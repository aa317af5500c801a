//! NCCL calls (`libnccl.so.2`): communicators, groups and the collectives the crate uses.
//!
//! NCCL's own rules apply to every function here: calls on one communicator must not run
//! concurrently from two threads; every rank of a communicator must issue the same collectives
//! in the same order; one thread that drives several ranks must wrap their calls in
//! [`group_start`] / [`group_end`] (a lone call may block waiting for the other ranks).

use std::ffi::{c_void, CStr};

use crate::error::{Error, Library, Result};
use crate::load::{self, ffi};
use crate::sys;

const LIB: Library = Library::Nccl;

/// NCCL's name for a status (the names of `nccl.h` 2.28).
pub fn status_name(status: sys::ncclResult_t) -> &'static str {
    use sys::ncclResult_t as R;
    match status {
        R::ncclSuccess => "ncclSuccess",
        R::ncclUnhandledCudaError => "ncclUnhandledCudaError",
        R::ncclSystemError => "ncclSystemError",
        R::ncclInternalError => "ncclInternalError",
        R::ncclInvalidArgument => "ncclInvalidArgument",
        R::ncclInvalidUsage => "ncclInvalidUsage",
        R::ncclRemoteError => "ncclRemoteError",
        R::ncclInProgress => "ncclInProgress",
        _ => "ncclResult(unknown)",
    }
}

/// Turns an `ncclResult_t` into a `Result`, with `ncclGetErrorString` and `ncclGetLastError`.
pub fn check(call: &'static str, status: sys::ncclResult_t) -> Result<()> {
    if status == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    let text = |p: *const std::os::raw::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: NCCL returns NUL-terminated strings that stay valid at least until the
            // next NCCL call on this thread; they are copied at once.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let mut message = String::new();
    if let Ok(lib) = load::nccl() {
        if let Ok(f) = lib.ncclGetErrorString.as_ref() {
            // SAFETY: takes any status value and returns a static string.
            message = text(unsafe { f(status) });
        }
        if let Ok(f) = lib.ncclGetLastError.as_ref() {
            // SAFETY: the communicator argument is unused by NCCL (documented: may be NULL).
            let last = text(unsafe { f(std::ptr::null_mut()) });
            if !last.is_empty() {
                message = format!("{message}: {last}");
            }
        }
    }
    Err(Error::Nccl {
        call,
        code: status.0 as i32,
        name: status_name(status),
        message,
    })
}

macro_rules! nccl {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib = load::nccl()?;
        check(stringify!($f), ffi!(lib, LIB, $f($($arg),*)))
    }};
}

/// `ncclGetVersion`: the version code (`22809` is 2.28.9).
///
/// # Safety
/// None beyond loading NCCL.
pub unsafe fn version() -> Result<i32> {
    let mut v = 0;
    nccl!(ncclGetVersion(&mut v))?;
    Ok(v)
}

/// `ncclCommInitAll`: one communicator per device of `devices` (CUDA ordinals, each once), in
/// this process; rank `i` is on `devices[i]`.
///
/// # Safety
/// The ordinals exist. Each communicator returned must be destroyed once, with [`comm_destroy`]
/// (see there for several ranks in one thread).
pub unsafe fn comm_init_all(devices: &[i32]) -> Result<Vec<sys::ncclComm_t>> {
    let mut comms = vec![std::ptr::null_mut(); devices.len()];
    nccl!(ncclCommInitAll(
        comms.as_mut_ptr(),
        devices.len() as i32,
        devices.as_ptr()
    ))?;
    Ok(comms)
}

/// `ncclCommDestroy`.
///
/// # Safety
/// `comm` is live and not used afterwards; the work queued with it has completed. Several ranks
/// destroyed from one thread are destroyed inside one [`group_start`] / [`group_end`].
pub unsafe fn comm_destroy(comm: sys::ncclComm_t) -> Result<()> {
    nccl!(ncclCommDestroy(comm))
}

/// `ncclCommGetAsyncError`: the error of an asynchronous operation of `comm`, if any
/// (`ncclSuccess` otherwise).
///
/// # Safety
/// `comm` is live.
pub unsafe fn comm_async_error(comm: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
    let mut e = sys::ncclResult_t::ncclSuccess;
    nccl!(ncclCommGetAsyncError(comm, &mut e))?;
    Ok(e)
}

/// `ncclCommCount`, `ncclCommCuDevice`, `ncclCommUserRank`: (ranks, CUDA ordinal, rank).
///
/// # Safety
/// `comm` is live.
pub unsafe fn comm_info(comm: sys::ncclComm_t) -> Result<(i32, i32, i32)> {
    let (mut n, mut dev, mut rank) = (0, 0, 0);
    nccl!(ncclCommCount(comm, &mut n))?;
    nccl!(ncclCommCuDevice(comm, &mut dev))?;
    nccl!(ncclCommUserRank(comm, &mut rank))?;
    Ok((n, dev, rank))
}

/// `ncclGroupStart`.
///
/// # Safety
/// Matched by one [`group_end`] on this thread.
pub unsafe fn group_start() -> Result<()> {
    nccl!(ncclGroupStart())
}

/// `ncclGroupEnd`: issues the calls made since the matching [`group_start`].
///
/// # Safety
/// A [`group_start`] on this thread is open; the calls made in the group met their contracts.
pub unsafe fn group_end() -> Result<()> {
    nccl!(ncclGroupEnd())
}

/// `ncclAllReduce` of `count` elements.
///
/// # Safety
/// `comm` and `stream` are live and of the same device; `send` and `recv` are device memory of
/// that device holding `count` elements of `dtype` (equal, or not overlapping) and stay valid
/// until the operation has run; no other thread uses `comm` during the call.
pub unsafe fn all_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: sys::ncclDataType_t,
    op: sys::ncclRedOp_t,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
) -> Result<()> {
    nccl!(ncclAllReduce(send, recv, count, dtype, op, comm, stream))
}

/// `ncclAllGather`: `send_count` elements from each rank into `recv` (`ranks * send_count`).
///
/// # Safety
/// As [`all_reduce`], with `recv` holding `ranks * send_count` elements and `send` not
/// overlapping it (the crate does not use NCCL's in-place form).
pub unsafe fn all_gather(
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    dtype: sys::ncclDataType_t,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
) -> Result<()> {
    nccl!(ncclAllGather(send, recv, send_count, dtype, comm, stream))
}

/// `ncclReduceScatter`: `send` (`ranks * recv_count` elements) reduced, block `rank` into
/// `recv`.
///
/// # Safety
/// As [`all_reduce`], with `send` holding `ranks * recv_count` elements and `recv` not
/// overlapping it.
pub unsafe fn reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    dtype: sys::ncclDataType_t,
    op: sys::ncclRedOp_t,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
) -> Result<()> {
    nccl!(ncclReduceScatter(
        send, recv, recv_count, dtype, op, comm, stream
    ))
}

/// `ncclBroadcast` of `count` elements from rank `root`'s `send` into every rank's `recv`.
///
/// # Safety
/// As [`all_reduce`] (`send` is read on the root only; it may equal `recv`).
pub unsafe fn broadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: sys::ncclDataType_t,
    root: i32,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
) -> Result<()> {
    nccl!(ncclBroadcast(send, recv, count, dtype, root, comm, stream))
}

/// `ncclSend` of `count` elements to rank `peer`.
///
/// # Safety
/// As [`all_reduce`] for `send`; the peer posts a matching [`recv`] (in the same group when it
/// is this rank, or when one thread drives both).
pub unsafe fn send(
    send: *const c_void,
    count: usize,
    dtype: sys::ncclDataType_t,
    peer: i32,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
) -> Result<()> {
    nccl!(ncclSend(send, count, dtype, peer, comm, stream))
}

/// `ncclRecv` of `count` elements from rank `peer`.
///
/// # Safety
/// As [`all_reduce`] for `recv`; the peer posts a matching [`send`].
pub unsafe fn recv(
    recv: *mut c_void,
    count: usize,
    dtype: sys::ncclDataType_t,
    peer: i32,
    comm: sys::ncclComm_t,
    stream: sys::cudaStream_t,
) -> Result<()> {
    nccl!(ncclRecv(recv, count, dtype, peer, comm, stream))
}
