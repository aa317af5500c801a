//! NVRTC calls (`libnvrtc`): run-time compilation of CUDA C++.

use std::ffi::{c_char, CStr, CString};
use std::ptr;

use crate::error::{Error, Library, Result};
use crate::load::{self, ffi};
use crate::sys;

const LIB: Library = Library::Nvrtc;

/// Turns an `nvrtcResult` into a `Result`.
pub fn check(call: &'static str, status: sys::nvrtcResult) -> Result<()> {
    if status == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    let name = load::nvrtc()
        .ok()
        .and_then(|lib| lib.nvrtcGetErrorString.as_ref().ok())
        // SAFETY: returns a static NUL-terminated string for any status.
        .map(|f| {
            unsafe { CStr::from_ptr(f(status)) }
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_else(|| format!("nvrtcResult({})", status.0));
    Err(Error::Nvrtc {
        call,
        code: status.0 as i32,
        name,
    })
}

macro_rules! nv {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib = load::nvrtc()?;
        check(stringify!($f), ffi!(lib, LIB, $f($($arg),*)))
    }};
}

/// `nvrtcVersion`: (major, minor).
///
/// # Safety
/// None beyond loading NVRTC.
pub unsafe fn version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    nv!(nvrtcVersion(&mut major, &mut minor))?;
    Ok((major, minor))
}

/// `nvrtcGetNumSupportedArchs` + `nvrtcGetSupportedArchs`: the `sm_XX` numbers NVRTC can
/// compile for.
///
/// # Safety
/// None beyond loading NVRTC.
pub unsafe fn supported_archs() -> Result<Vec<i32>> {
    let mut n = 0;
    nv!(nvrtcGetNumSupportedArchs(&mut n))?;
    let mut archs = vec![0; n.max(0) as usize];
    nv!(nvrtcGetSupportedArchs(archs.as_mut_ptr()))?;
    Ok(archs)
}

/// `nvrtcCreateProgram` with no in-memory headers.
///
/// # Safety
/// The program must be destroyed with [`destroy_program`].
pub unsafe fn create_program(source: &CStr, name: &CStr) -> Result<sys::nvrtcProgram> {
    let mut p = ptr::null_mut();
    nv!(nvrtcCreateProgram(
        &mut p,
        source.as_ptr(),
        name.as_ptr(),
        0,
        ptr::null(),
        ptr::null()
    ))?;
    Ok(p)
}

/// `nvrtcDestroyProgram`.
///
/// # Safety
/// `prog` is live and not used afterwards.
pub unsafe fn destroy_program(mut prog: sys::nvrtcProgram) -> Result<()> {
    nv!(nvrtcDestroyProgram(&mut prog))
}

/// `nvrtcAddNameExpression`.
///
/// # Safety
/// `prog` is live and not yet compiled.
pub unsafe fn add_name_expression(prog: sys::nvrtcProgram, expr: &CStr) -> Result<()> {
    nv!(nvrtcAddNameExpression(prog, expr.as_ptr()))
}

/// `nvrtcGetLoweredName`: the mangled name of a name expression.
///
/// # Safety
/// `prog` is live and compiled, and `expr` was added before compiling.
pub unsafe fn lowered_name(prog: sys::nvrtcProgram, expr: &CStr) -> Result<String> {
    let mut out: *const c_char = ptr::null();
    nv!(nvrtcGetLoweredName(prog, expr.as_ptr(), &mut out))?;
    Ok(CStr::from_ptr(out).to_string_lossy().into_owned())
}

/// `nvrtcCompileProgram`: returns the raw status so the caller can fetch the log on failure.
///
/// # Safety
/// `prog` is live.
pub unsafe fn compile_program(
    prog: sys::nvrtcProgram,
    options: &[CString],
) -> Result<sys::nvrtcResult> {
    let lib = load::nvrtc()?;
    let ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    Ok(ffi!(
        lib,
        LIB,
        nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr())
    ))
}

/// `nvrtcGetProgramLogSize` + `nvrtcGetProgramLog`.
///
/// # Safety
/// `prog` is live.
pub unsafe fn program_log(prog: sys::nvrtcProgram) -> Result<String> {
    let mut n = 0usize;
    nv!(nvrtcGetProgramLogSize(prog, &mut n))?;
    let mut buf = vec![0u8; n.max(1)];
    nv!(nvrtcGetProgramLog(prog, buf.as_mut_ptr().cast()))?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `nvrtcGetCUBINSize` + `nvrtcGetCUBIN`.
///
/// # Safety
/// `prog` is live and was compiled for a real `sm_XX` architecture.
pub unsafe fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut n = 0usize;
    nv!(nvrtcGetCUBINSize(prog, &mut n))?;
    let mut buf = vec![0u8; n];
    nv!(nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()))?;
    Ok(buf)
}

/// `nvrtcGetPTXSize` + `nvrtcGetPTX` (NUL-terminated, as the driver's JIT linker takes it).
///
/// # Safety
/// `prog` is live and was compiled for a virtual `compute_XX` architecture.
pub unsafe fn ptx(prog: sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut n = 0usize;
    nv!(nvrtcGetPTXSize(prog, &mut n))?;
    let mut buf = vec![0u8; n];
    nv!(nvrtcGetPTX(prog, buf.as_mut_ptr().cast()))?;
    Ok(buf)
}

/// `nvrtcGetLTOIRSize` + `nvrtcGetLTOIR`.
///
/// # Safety
/// `prog` is live and was compiled with `-dlto`.
pub unsafe fn lto_ir(prog: sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut n = 0usize;
    nv!(nvrtcGetLTOIRSize(prog, &mut n))?;
    let mut buf = vec![0u8; n];
    nv!(nvrtcGetLTOIR(prog, buf.as_mut_ptr().cast()))?;
    Ok(buf)
}
