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

/// The sizes and data layout of a batched plan, in the integer type of the call that makes it:
/// `i32` for `cufftMakePlanMany` (the variant LTO callbacks work with), `i64` for
/// `cufftMakePlanMany64`. The embed arrays are `None` or as long as `n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanShape<T> {
    /// Sizes, one per dimension.
    pub n: Vec<T>,
    /// Input embedding (advanced layout), if any.
    pub inembed: Option<Vec<T>>,
    /// Input stride.
    pub istride: T,
    /// Input distance between batches.
    pub idist: T,
    /// Output embedding, if any.
    pub onembed: Option<Vec<T>>,
    /// Output stride.
    pub ostride: T,
    /// Output distance between batches.
    pub odist: T,
    /// Transforms in the batch.
    pub batch: T,
}

impl PlanShape<i64> {
    /// The same shape in 32-bit integers, if every value fits.
    pub fn narrow(&self) -> Option<PlanShape<i32>> {
        let one = |x: i64| i32::try_from(x).ok();
        let all = |v: &[i64]| v.iter().map(|&x| one(x)).collect::<Option<Vec<i32>>>();
        let opt = |v: &Option<Vec<i64>>| match v {
            None => Some(None),
            Some(v) => all(v).map(Some),
        };
        Some(PlanShape {
            n: all(&self.n)?,
            inembed: opt(&self.inembed)?,
            istride: one(self.istride)?,
            idist: one(self.idist)?,
            onembed: opt(&self.onembed)?,
            ostride: one(self.ostride)?,
            odist: one(self.odist)?,
            batch: one(self.batch)?,
        })
    }
}

/// The integer types cuFFT makes batched plans with (`i32`, `i64`).
pub trait PlanInt: Copy + private::Sealed {
    /// `cufftMakePlanMany` or `cufftMakePlanMany64`; returns the work size in bytes.
    ///
    /// # Safety
    /// `plan` is live and not made yet.
    unsafe fn make_plan(
        plan: sys::cufftHandle,
        shape: &mut PlanShape<Self>,
        kind: sys::cufftType,
    ) -> Result<usize>;
}

mod private {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

macro_rules! plan_int {
    ($t:ty, $call:ident) => {
        impl PlanInt for $t {
            unsafe fn make_plan(
                plan: sys::cufftHandle,
                s: &mut PlanShape<$t>,
                kind: sys::cufftType,
            ) -> Result<usize> {
                let mut work = 0usize;
                let ptr = |e: &mut Option<Vec<$t>>| {
                    e.as_mut().map_or(std::ptr::null_mut(), |v| v.as_mut_ptr())
                };
                let (inembed, onembed) = (ptr(&mut s.inembed), ptr(&mut s.onembed));
                cf!($call(
                    plan,
                    s.n.len() as i32,
                    s.n.as_mut_ptr(),
                    inembed,
                    s.istride,
                    s.idist,
                    onembed,
                    s.ostride,
                    s.odist,
                    kind,
                    s.batch,
                    &mut work
                ))?;
                Ok(work)
            }
        }
    };
}
plan_int!(i32, cufftMakePlanMany);
plan_int!(i64, cufftMakePlanMany64);

/// `cufftMakePlanMany` / `cufftMakePlanMany64`, by the shape's integer type; returns the work
/// size in bytes.
///
/// # Safety
/// `plan` is live and not made yet; the embed arrays are `None` or `shape.n.len()` long.
pub unsafe fn make_plan_many<T: PlanInt>(
    plan: sys::cufftHandle,
    shape: &mut PlanShape<T>,
    kind: sys::cufftType,
) -> Result<usize> {
    // SAFETY: the caller's contract.
    unsafe { T::make_plan(plan, shape, kind) }
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
