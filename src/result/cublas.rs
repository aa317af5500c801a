//! cuBLAS calls (`libcublas`): the few a GEMM node makes.

use std::ffi::c_void;

use crate::error::{Error, Library, Result};
use crate::load::{self, ffi};
use crate::sys;

const LIB: Library = Library::Cublas;

/// The name of a `cublasStatus_t` (a table rather than `cublasGetStatusName`, so that an error
/// is named even when the call that would name it is what failed).
pub fn status_name(status: sys::cublasStatus_t) -> &'static str {
    match status.0 {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "CUBLAS_STATUS_UNKNOWN",
    }
}

/// Turns a `cublasStatus_t` into a `Result`.
pub fn check(call: &'static str, status: sys::cublasStatus_t) -> Result<()> {
    if status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cublas {
            call,
            code: status.0 as i32,
            name: status_name(status),
        })
    }
}

macro_rules! cb {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib = load::cublas()?;
        check(stringify!($f), ffi!(lib, LIB, $f($($arg),*)))
    }};
}

/// `cublasCreate_v2`: a handle on the current device.
///
/// # Safety
/// The handle must be destroyed with [`destroy`], with the same device current.
pub unsafe fn create() -> Result<sys::cublasHandle_t> {
    let mut h = std::ptr::null_mut();
    cb!(cublasCreate_v2(&mut h))?;
    Ok(h)
}

/// `cublasDestroy_v2`.
///
/// # Safety
/// `handle` is live and not used afterwards (no queued or captured work that is still to run
/// needs it).
pub unsafe fn destroy(handle: sys::cublasHandle_t) -> Result<()> {
    cb!(cublasDestroy_v2(handle))
}

/// `cublasGetVersion_v2`: the library's version (`13000` and up for cuBLAS 13.0).
///
/// # Safety
/// `handle` is live.
pub unsafe fn version(handle: sys::cublasHandle_t) -> Result<i32> {
    let mut v = 0;
    cb!(cublasGetVersion_v2(handle, &mut v))?;
    Ok(v)
}

/// `cublasSetStream_v2`. This also resets the handle's workspace to cuBLAS's own pool: call
/// [`set_workspace`] after it.
///
/// # Safety
/// `handle` and `stream` are live, of the same device.
pub unsafe fn set_stream(handle: sys::cublasHandle_t, stream: sys::cudaStream_t) -> Result<()> {
    cb!(cublasSetStream_v2(handle, stream))
}

/// `cublasSetWorkspace_v2`: the device memory cuBLAS uses as scratch for calls on this handle
/// (instead of allocating its own).
///
/// # Safety
/// `handle` is live; `workspace` is device memory of the handle's device, at least `bytes`
/// long and 256-byte aligned, that stays allocated for as long as work enqueued (or captured)
/// with it may run, and that no other work uses meanwhile.
pub unsafe fn set_workspace(
    handle: sys::cublasHandle_t,
    workspace: *mut c_void,
    bytes: usize,
) -> Result<()> {
    cb!(cublasSetWorkspace_v2(handle, workspace, bytes))
}

/// `cublasSetPointerMode_v2`.
///
/// # Safety
/// `handle` is live.
pub unsafe fn set_pointer_mode(
    handle: sys::cublasHandle_t,
    mode: sys::cublasPointerMode_t,
) -> Result<()> {
    cb!(cublasSetPointerMode_v2(handle, mode))
}

/// The operands of [`gemm_ex`] (column-major, as cuBLAS takes them).
#[derive(Clone, Copy, Debug)]
pub struct GemmEx {
    /// `op(A)`.
    pub transa: sys::cublasOperation_t,
    /// `op(B)`.
    pub transb: sys::cublasOperation_t,
    /// Rows of `op(A)` and of `C`.
    pub m: i32,
    /// Columns of `op(B)` and of `C`.
    pub n: i32,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: i32,
    /// `alpha`, of the compute type (a host pointer in host pointer mode).
    pub alpha: *const c_void,
    /// `A`'s device address.
    pub a: *const c_void,
    /// `A`'s leading dimension.
    pub lda: i32,
    /// `B`'s device address.
    pub b: *const c_void,
    /// `B`'s leading dimension.
    pub ldb: i32,
    /// `beta`, like `alpha`.
    pub beta: *const c_void,
    /// `C`'s device address.
    pub c: *mut c_void,
    /// `C`'s leading dimension.
    pub ldc: i32,
    /// The element type of `A`, `B` and `C`.
    pub data_type: sys::cudaDataType,
    /// How the products are accumulated.
    pub compute: sys::cublasComputeType_t,
}

/// `cublasGemmEx`: `C = alpha op(A) op(B) + beta C`, all of one element type, with the default
/// algorithm.
///
/// # Safety
/// `handle` is live, with its stream and workspace set; `alpha` and `beta` point to values of
/// the compute type where the handle's pointer mode says (host or device); `a`, `b` and `c` are
/// device memory of the handle's device holding the matrices their sizes and leading dimensions
/// describe, alive until the work completes; `c` overlaps neither `a` nor `b`.
pub unsafe fn gemm_ex(handle: sys::cublasHandle_t, g: &GemmEx) -> Result<()> {
    cb!(cublasGemmEx(
        handle,
        g.transa,
        g.transb,
        g.m,
        g.n,
        g.k,
        g.alpha,
        g.a,
        g.data_type,
        g.lda,
        g.b,
        g.data_type,
        g.ldb,
        g.beta,
        g.c,
        g.data_type,
        g.ldc,
        g.compute,
        sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    ))
}
