//! cuFFT calls (`libcufft`).

use std::ffi::{c_void, CStr};

use crate::error::{Error, Library, Result};
use crate::load::{self, ffi};
use crate::sys;

const LIB: Library = Library::Cufft;

/// The name of a `cufftResult`.
pub fn status_name(status: sys::cufftResult) -> &'static str {
    match status.0 {
        0 => "CUFFT_SUCCESS",
        1 => "CUFFT_INVALID_PLAN",
        2 => "CUFFT_ALLOC_FAILED",
        3 => "CUFFT_INVALID_TYPE",
        4 => "CUFFT_INVALID_VALUE",
        5 => "CUFFT_INTERNAL_ERROR",
        6 => "CUFFT_EXEC_FAILED",
        7 => "CUFFT_SETUP_FAILED",
        8 => "CUFFT_INVALID_SIZE",
        9 => "CUFFT_UNALIGNED_DATA",
        11 => "CUFFT_INVALID_DEVICE",
        13 => "CUFFT_NO_WORKSPACE",
        14 => "CUFFT_NOT_IMPLEMENTED",
        16 => "CUFFT_NOT_SUPPORTED",
        17 => "CUFFT_MISSING_DEPENDENCY",
        18 => "CUFFT_NVRTC_FAILURE",
        19 => "CUFFT_NVJITLINK_FAILURE",
        20 => "CUFFT_NVSHMEM_FAILURE",
        _ => "CUFFT_UNKNOWN_ERROR",
    }
}

/// Turns a `cufftResult` into a `Result`.
pub fn check(call: &'static str, status: sys::cufftResult) -> Result<()> {
    if status == sys::cufftResult_t::CUFFT_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cufft {
            call,
            code: status.0 as i32,
            name: status_name(status),
        })
    }
}

macro_rules! cf {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib = load::cufft()?;
        check(stringify!($f), ffi!(lib, LIB, $f($($arg),*)))
    }};
}

/// `cufftGetVersion`.
///
/// # Safety
/// None beyond loading cuFFT.
pub unsafe fn version() -> Result<i32> {
    let mut v = 0;
    cf!(cufftGetVersion(&mut v))?;
    Ok(v)
}

/// `cufftCreate`.
///
/// # Safety
/// The handle must be destroyed with [`destroy`].
pub unsafe fn create() -> Result<sys::cufftHandle> {
    let mut h = 0;
    cf!(cufftCreate(&mut h))?;
    Ok(h)
}

/// `cufftDestroy`.
///
/// # Safety
/// `plan` is live and not used afterwards (no queued work uses it).
pub unsafe fn destroy(plan: sys::cufftHandle) -> Result<()> {
    cf!(cufftDestroy(plan))
}

/// `cufftSetAutoAllocation`.
///
/// # Safety
/// `plan` is live and not yet made.
pub unsafe fn set_auto_allocation(plan: sys::cufftHandle, auto: bool) -> Result<()> {
    cf!(cufftSetAutoAllocation(plan, auto as i32))
}

/// `cufftSetWorkArea`.
///
/// # Safety
/// `area` is device memory of at least the plan's work size, valid while the plan runs.
pub unsafe fn set_work_area(plan: sys::cufftHandle, area: *mut c_void) -> Result<()> {
    cf!(cufftSetWorkArea(plan, area))
}

/// `cufftSetStream`.
///
/// # Safety
/// Both are live.
pub unsafe fn set_stream(plan: sys::cufftHandle, stream: sys::cudaStream_t) -> Result<()> {
    cf!(cufftSetStream(plan, stream))
}

/// `cufftXtSetJITCallback`: attaches an LTO callback; must come before the plan is made.
///
/// # Safety
/// `lto_ir` is LTO-IR defining `symbol` with the signature `kind` requires; `caller_info`
/// points to a device pointer valid whenever the plan runs.
pub unsafe fn set_jit_callback(
    plan: sys::cufftHandle,
    symbol: &CStr,
    lto_ir: &[u8],
    kind: sys::cufftXtCallbackType,
    caller_info: *mut *mut c_void,
) -> Result<()> {
    cf!(cufftXtSetJITCallback(
        plan,
        symbol.as_ptr(),
        lto_ir.as_ptr().cast(),
        lto_ir.len(),
        kind,
        caller_info
    ))
}

/// `cufftMakePlanMany64`; returns the work size in bytes.
///
/// # Safety
/// `plan` is live; the embed arrays are `null` or `n.len()` long.
#[allow(clippy::too_many_arguments)] // reason: mirrors the C call one to one
pub unsafe fn make_plan_many64(
    plan: sys::cufftHandle,
    n: &mut [i64],
    inembed: Option<&mut [i64]>,
    istride: i64,
    idist: i64,
    onembed: Option<&mut [i64]>,
    ostride: i64,
    odist: i64,
    kind: sys::cufftType,
    batch: i64,
) -> Result<usize> {
    let mut work = 0usize;
    let ptr = |e: Option<&mut [i64]>| e.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    cf!(cufftMakePlanMany64(
        plan,
        n.len() as i32,
        n.as_mut_ptr(),
        ptr(inembed),
        istride,
        idist,
        ptr(onembed),
        ostride,
        odist,
        kind,
        batch,
        &mut work
    ))?;
    Ok(work)
}

/// `cufftMakePlanMany` (32-bit sizes; the variant LTO callbacks work with); returns the work
/// size in bytes.
///
/// # Safety
/// As [`make_plan_many64`].
#[allow(clippy::too_many_arguments)] // reason: mirrors the C call one to one
pub unsafe fn make_plan_many(
    plan: sys::cufftHandle,
    n: &mut [i32],
    inembed: Option<&mut [i32]>,
    istride: i32,
    idist: i32,
    onembed: Option<&mut [i32]>,
    ostride: i32,
    odist: i32,
    kind: sys::cufftType,
    batch: i32,
) -> Result<usize> {
    let mut work = 0usize;
    let ptr = |e: Option<&mut [i32]>| e.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    cf!(cufftMakePlanMany(
        plan,
        n.len() as i32,
        n.as_mut_ptr(),
        ptr(inembed),
        istride,
        idist,
        ptr(onembed),
        ostride,
        odist,
        kind,
        batch,
        &mut work
    ))?;
    Ok(work)
}

/// Executes the plan made for `kind` (`cufftExecC2C`, `R2C`, `C2R`, `Z2Z`, `D2Z` or `Z2D`);
/// `direction` matters for C2C/Z2Z only.
///
/// # Safety
/// `input` and `output` are device memory of the sizes the plan needs; the plan is made.
pub unsafe fn exec(
    plan: sys::cufftHandle,
    kind: sys::cufftType,
    input: *mut c_void,
    output: *mut c_void,
    direction: i32,
) -> Result<()> {
    use sys::cufftType as T;
    match kind {
        T::CUFFT_C2C => cf!(cufftExecC2C(plan, input.cast(), output.cast(), direction)),
        T::CUFFT_R2C => cf!(cufftExecR2C(plan, input.cast(), output.cast())),
        T::CUFFT_C2R => cf!(cufftExecC2R(plan, input.cast(), output.cast())),
        T::CUFFT_Z2Z => cf!(cufftExecZ2Z(plan, input.cast(), output.cast(), direction)),
        T::CUFFT_D2Z => cf!(cufftExecD2Z(plan, input.cast(), output.cast())),
        T::CUFFT_Z2D => cf!(cufftExecZ2D(plan, input.cast(), output.cast())),
    }
}
