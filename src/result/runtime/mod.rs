//! CUDA runtime API calls (`libcudart`), grouped by topic.

use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;
use std::ptr;

use crate::error::{Error, Library, Result};
use crate::load::{self, ffi};
use crate::sys;

const LIB: Library = Library::Cudart;

/// Turns a `cudaError_t` into a `Result`, with CUDA's name and message for the error.
pub fn check(call: &'static str, status: sys::cudaError_t) -> Result<()> {
    if status == sys::cudaError::cudaSuccess {
        Ok(())
    } else {
        Err(error(call, status))
    }
}

/// The [`Error::Cuda`] for a failed call.
pub fn error(call: &'static str, status: sys::cudaError_t) -> Error {
    let code = status.0 as i32;
    let (name, message) = match load::cudart() {
        Ok(lib) => {
            let text = |p: *const std::os::raw::c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    // SAFETY: CUDA returns pointers to static NUL-terminated strings.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            };
            let name = lib
                .cudaGetErrorName
                .as_ref()
                // SAFETY: takes any status value and returns a static string.
                .map(|f| text(unsafe { f(status) }))
                .unwrap_or_default();
            let message = lib
                .cudaGetErrorString
                .as_ref()
                // SAFETY: as above.
                .map(|f| text(unsafe { f(status) }))
                .unwrap_or_default();
            (name, message)
        }
        Err(_) => (format!("cudaError({code})"), String::new()),
    };
    Error::Cuda {
        call,
        code,
        name,
        message,
    }
}

macro_rules! rt {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib = load::cudart()?;
        check(stringify!($f), ffi!(lib, LIB, $f($($arg),*)))
    }};
}

// The graph calls, in their own file (they see `rt!` above): `rt::graph_*` as before.
mod graph;
pub use graph::*;

// ---- versions and devices ------------------------------------------------------------------

/// `cudaRuntimeGetVersion`.
///
/// # Safety
/// None beyond loading the runtime.
pub unsafe fn runtime_version() -> Result<i32> {
    let mut v = 0;
    rt!(cudaRuntimeGetVersion(&mut v))?;
    Ok(v)
}

/// `cudaDriverGetVersion`: 0 when no driver is installed.
///
/// # Safety
/// None beyond loading the runtime.
pub unsafe fn driver_version() -> Result<i32> {
    let mut v = 0;
    rt!(cudaDriverGetVersion(&mut v))?;
    Ok(v)
}

/// `cudaGetDeviceCount`.
///
/// # Safety
/// None beyond loading the runtime.
pub unsafe fn device_count() -> Result<i32> {
    let mut n = 0;
    rt!(cudaGetDeviceCount(&mut n))?;
    Ok(n)
}

/// `cudaSetDevice`.
///
/// # Safety
/// `ordinal` must be a valid device ordinal.
pub unsafe fn set_device(ordinal: i32) -> Result<()> {
    rt!(cudaSetDevice(ordinal))
}

/// `cudaGetDevice`.
///
/// # Safety
/// None beyond loading the runtime.
pub unsafe fn get_device() -> Result<i32> {
    let mut d = 0;
    rt!(cudaGetDevice(&mut d))?;
    Ok(d)
}

/// `cudaDeviceCanAccessPeer`: whether `ordinal` can access memory of `peer` (once peer
/// access is enabled).
///
/// # Safety
/// Both must be valid device ordinals.
pub unsafe fn device_can_access_peer(ordinal: i32, peer: i32) -> Result<bool> {
    let mut can = 0;
    rt!(cudaDeviceCanAccessPeer(&mut can, ordinal, peer))?;
    Ok(can != 0)
}

/// `cudaDeviceEnablePeerAccess`: lets the current device access memory of `peer`. Peer
/// access that is already enabled is success (CUDA's `cudaErrorPeerAccessAlreadyEnabled`,
/// which is then cleared from the thread's last error).
///
/// # Safety
/// `peer` must be a valid device ordinal.
pub unsafe fn device_enable_peer_access(peer: i32) -> Result<()> {
    let lib = load::cudart()?;
    let status = ffi!(lib, LIB, cudaDeviceEnablePeerAccess(peer, 0));
    if status == sys::cudaError::cudaErrorPeerAccessAlreadyEnabled {
        // The status is also the thread's last error: clear it, so that a later
        // `cudaGetLastError` does not report it.
        let _ = ffi!(lib, LIB, cudaGetLastError());
        return Ok(());
    }
    check("cudaDeviceEnablePeerAccess", status)
}

/// `cudaDeviceGetAttribute`.
///
/// # Safety
/// `ordinal` must be a valid device ordinal.
pub unsafe fn device_attribute(attr: sys::cudaDeviceAttr, ordinal: i32) -> Result<i32> {
    let mut v = 0;
    rt!(cudaDeviceGetAttribute(&mut v, attr, ordinal))?;
    Ok(v)
}

/// `cudaGetDeviceProperties`.
///
/// # Safety
/// `ordinal` must be a valid device ordinal.
pub unsafe fn device_properties(ordinal: i32) -> Result<sys::cudaDeviceProp> {
    let mut p = MaybeUninit::<sys::cudaDeviceProp>::zeroed();
    rt!(cudaGetDeviceProperties(p.as_mut_ptr(), ordinal))?;
    Ok(p.assume_init())
}

/// `cudaDeviceSynchronize`.
///
/// # Safety
/// None beyond loading the runtime.
pub unsafe fn device_synchronize() -> Result<()> {
    rt!(cudaDeviceSynchronize())
}

/// `cudaGetLastError` (which also clears it).
///
/// # Safety
/// None beyond loading the runtime.
pub unsafe fn get_last_error() -> Result<()> {
    rt!(cudaGetLastError())
}

// ---- memory --------------------------------------------------------------------------------

/// `cudaMalloc`.
///
/// # Safety
/// The memory must be freed with [`free`] once no work uses it.
pub unsafe fn malloc(bytes: usize) -> Result<*mut c_void> {
    let mut p = ptr::null_mut();
    rt!(cudaMalloc(&mut p, bytes))?;
    Ok(p)
}

/// `cudaFree`.
///
/// # Safety
/// `ptr` comes from [`malloc`] and no queued or running work uses it.
pub unsafe fn free(ptr: *mut c_void) -> Result<()> {
    rt!(cudaFree(ptr))
}

/// `cudaHostAlloc` (page-locked host memory).
///
/// # Safety
/// The memory must be freed with [`free_host`].
pub unsafe fn host_alloc(bytes: usize, flags: u32) -> Result<*mut c_void> {
    let mut p = ptr::null_mut();
    rt!(cudaHostAlloc(&mut p, bytes, flags))?;
    Ok(p)
}

/// `cudaFreeHost`.
///
/// # Safety
/// `ptr` comes from [`host_alloc`] and no queued or running work uses it.
pub unsafe fn free_host(ptr: *mut c_void) -> Result<()> {
    rt!(cudaFreeHost(ptr))
}

/// `cudaOccupancyMaxActiveBlocksPerMultiprocessor`: how many blocks of `block_threads` threads
/// and `dynamic_smem` bytes of dynamic shared memory of kernel `func` fit on one multiprocessor
/// at once.
///
/// # Safety
/// `func` is a live kernel handle (a `cudaKernel_t` cast to a pointer).
pub unsafe fn occupancy_max_active_blocks(
    func: *const c_void,
    block_threads: i32,
    dynamic_smem: usize,
) -> Result<i32> {
    let mut n = 0;
    rt!(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &mut n,
        func,
        block_threads,
        dynamic_smem
    ))?;
    Ok(n)
}

/// `cudaMemGetInfo`: free and total device memory of the current device, bytes.
///
/// # Safety
/// No preconditions beyond a current device.
pub unsafe fn mem_get_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    rt!(cudaMemGetInfo(&mut free, &mut total))?;
    Ok((free, total))
}

/// `cudaMemcpy` (synchronous with respect to the host).
///
/// # Safety
/// `dst` and `src` are valid for `bytes` bytes in the memory spaces `kind` names.
pub unsafe fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<()> {
    rt!(cudaMemcpy(dst, src, bytes, kind))
}

/// `cudaMemcpyAsync`.
///
/// # Safety
/// As [`memcpy`], and both stay valid until the copy has run on `stream`.
pub unsafe fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
    stream: sys::cudaStream_t,
) -> Result<()> {
    rt!(cudaMemcpyAsync(dst, src, bytes, kind, stream))
}

/// `cudaMemset`.
///
/// # Safety
/// `dst` is device memory valid for `bytes` bytes.
pub unsafe fn memset(dst: *mut c_void, value: i32, bytes: usize) -> Result<()> {
    rt!(cudaMemset(dst, value, bytes))
}

/// `cudaMemsetAsync`.
///
/// # Safety
/// As [`memset`], valid until the memset has run on `stream`.
pub unsafe fn memset_async(
    dst: *mut c_void,
    value: i32,
    bytes: usize,
    stream: sys::cudaStream_t,
) -> Result<()> {
    rt!(cudaMemsetAsync(dst, value, bytes, stream))
}

// ---- streams and events --------------------------------------------------------------------

/// `cudaStreamCreateWithFlags`.
///
/// # Safety
/// The stream must be destroyed with [`stream_destroy`].
pub unsafe fn stream_create(flags: u32) -> Result<sys::cudaStream_t> {
    let mut s = ptr::null_mut();
    rt!(cudaStreamCreateWithFlags(&mut s, flags))?;
    Ok(s)
}

/// `cudaStreamDestroy`.
///
/// # Safety
/// `stream` is a live stream not used afterwards.
pub unsafe fn stream_destroy(stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaStreamDestroy(stream))
}

/// `cudaStreamQuery`: `Ok(true)` when all work queued on `stream` has completed.
///
/// # Safety
/// `stream` is a live stream.
pub unsafe fn stream_query(stream: sys::cudaStream_t) -> Result<bool> {
    let lib = load::cudart()?;
    let status = ffi!(lib, LIB, cudaStreamQuery(stream));
    if status == sys::cudaError::cudaErrorNotReady {
        return Ok(false);
    }
    check("cudaStreamQuery", status).map(|()| true)
}

/// `cudaPointerGetAttributes`: what memory an address is (device, host, managed or
/// unregistered) and of which device.
///
/// # Safety
/// None beyond CUDA's: any address may be asked about (CUDA only looks it up).
pub unsafe fn pointer_attributes(ptr: *const c_void) -> Result<sys::cudaPointerAttributes> {
    let mut attrs = std::mem::MaybeUninit::<sys::cudaPointerAttributes>::zeroed();
    rt!(cudaPointerGetAttributes(attrs.as_mut_ptr(), ptr))?;
    // SAFETY: CUDA filled the struct (it was zeroed before, and all-zero is a valid value:
    // an unregistered pointer of device 0).
    Ok(unsafe { attrs.assume_init() })
}

/// `cudaStreamSynchronize`.
///
/// # Safety
/// `stream` is a live stream.
pub unsafe fn stream_synchronize(stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaStreamSynchronize(stream))
}

/// `cudaStreamBeginCaptureToGraph`: captures work issued to `stream` into the existing `graph`,
/// after the nodes `deps`.
///
/// # Safety
/// `stream` and `graph` are live; `deps` are nodes of `graph`.
pub unsafe fn stream_begin_capture_to_graph(
    stream: sys::cudaStream_t,
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    mode: sys::cudaStreamCaptureMode,
) -> Result<()> {
    rt!(cudaStreamBeginCaptureToGraph(
        stream,
        graph,
        deps.as_ptr(),
        ptr::null(),
        deps.len(),
        mode
    ))
}

/// `cudaStreamEndCapture`.
///
/// # Safety
/// `stream` is capturing.
pub unsafe fn stream_end_capture(stream: sys::cudaStream_t) -> Result<sys::cudaGraph_t> {
    let mut g = ptr::null_mut();
    rt!(cudaStreamEndCapture(stream, &mut g))?;
    Ok(g)
}

/// `cudaStreamGetCaptureInfo`: the capture status (a raw `cudaStreamCaptureStatus`) and the
/// capture's current dependency set
/// (the nodes the next captured work would depend on), copied out.
///
/// # Safety
/// `stream` is live.
pub unsafe fn stream_capture_dependencies(
    stream: sys::cudaStream_t,
) -> Result<(u32, Vec<sys::cudaGraphNode_t>)> {
    // Read as a plain integer: a status newer than the bindings' Rust enum must not be read as
    // that enum.
    let mut status = 0u32;
    let mut deps: *const sys::cudaGraphNode_t = ptr::null();
    let mut n: usize = 0;
    rt!(cudaStreamGetCaptureInfo(
        stream,
        (&mut status as *mut u32).cast(),
        ptr::null_mut(),
        ptr::null_mut(),
        &mut deps,
        ptr::null_mut(),
        &mut n
    ))?;
    let list = if deps.is_null() || n == 0 {
        Vec::new()
    } else {
        std::slice::from_raw_parts(deps, n).to_vec()
    };
    Ok((status, list))
}

/// `cudaEventCreateWithFlags`.
///
/// # Safety
/// The event must be destroyed with [`event_destroy`].
pub unsafe fn event_create(flags: u32) -> Result<sys::cudaEvent_t> {
    let mut e = ptr::null_mut();
    rt!(cudaEventCreateWithFlags(&mut e, flags))?;
    Ok(e)
}

/// `cudaStreamWaitEvent`: work queued on `stream` after this call waits for `event`.
///
/// # Safety
/// Both handles are live.
pub unsafe fn stream_wait_event(stream: sys::cudaStream_t, event: sys::cudaEvent_t) -> Result<()> {
    rt!(cudaStreamWaitEvent(stream, event, 0))
}

/// `cudaEventDestroy`.
///
/// # Safety
/// `event` is live and not used afterwards.
pub unsafe fn event_destroy(event: sys::cudaEvent_t) -> Result<()> {
    rt!(cudaEventDestroy(event))
}

/// `cudaEventRecord`.
///
/// # Safety
/// `event` and `stream` are live.
pub unsafe fn event_record(event: sys::cudaEvent_t, stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaEventRecord(event, stream))
}

/// `cudaEventSynchronize`.
///
/// # Safety
/// `event` is live.
pub unsafe fn event_synchronize(event: sys::cudaEvent_t) -> Result<()> {
    rt!(cudaEventSynchronize(event))
}

/// `cudaEventQuery`: `Ok(true)` when the work the event marks has completed, `Ok(false)` while
/// it has not (`cudaErrorNotReady`), and an error otherwise.
///
/// # Safety
/// `event` is live.
pub unsafe fn event_query(event: sys::cudaEvent_t) -> Result<bool> {
    let lib = load::cudart()?;
    let status = ffi!(lib, LIB, cudaEventQuery(event));
    if status == sys::cudaError::cudaErrorNotReady {
        return Ok(false);
    }
    check("cudaEventQuery", status).map(|()| true)
}

/// `cudaEventElapsedTime`, in milliseconds.
///
/// # Safety
/// Both events are live, were recorded, and have completed.
pub unsafe fn event_elapsed_ms(start: sys::cudaEvent_t, end: sys::cudaEvent_t) -> Result<f32> {
    let mut ms = 0f32;
    rt!(cudaEventElapsedTime(&mut ms, start, end))?;
    Ok(ms)
}

// ---- libraries and kernels -----------------------------------------------------------------

/// `cudaLibraryLoadData` with no JIT or library options.
///
/// # Safety
/// `image` is a valid cubin, PTX or fatbin image; the library must be unloaded with
/// [`library_unload`].
pub unsafe fn library_load_data(image: &[u8]) -> Result<sys::cudaLibrary_t> {
    let mut l = ptr::null_mut();
    rt!(cudaLibraryLoadData(
        &mut l,
        image.as_ptr().cast(),
        ptr::null_mut(),
        ptr::null_mut(),
        0,
        ptr::null_mut(),
        ptr::null_mut(),
        0
    ))?;
    Ok(l)
}

/// `cudaLibraryUnload`.
///
/// # Safety
/// No kernel of the library is used afterwards.
pub unsafe fn library_unload(library: sys::cudaLibrary_t) -> Result<()> {
    rt!(cudaLibraryUnload(library))
}

/// `cudaLibraryGetKernel`.
///
/// # Safety
/// `library` is loaded.
pub unsafe fn library_get_kernel(
    library: sys::cudaLibrary_t,
    name: &CStr,
) -> Result<sys::cudaKernel_t> {
    let mut k = ptr::null_mut();
    rt!(cudaLibraryGetKernel(&mut k, library, name.as_ptr()))?;
    Ok(k)
}

/// `cudaFuncGetParamInfo`: the offset and size of parameter `index`, or `None` past the last
/// parameter (CUDA answers `cudaErrorInvalidValue` there, which is then cleared from the
/// thread's last error: counting parameters this way is not a failure).
///
/// # Safety
/// `func` is a live kernel.
pub unsafe fn func_param_info(func: *const c_void, index: usize) -> Result<Option<(usize, usize)>> {
    let lib = load::cudart()?;
    let (mut offset, mut size) = (0usize, 0usize);
    let status = ffi!(
        lib,
        LIB,
        cudaFuncGetParamInfo(func, index, &mut offset, &mut size)
    );
    if status == sys::cudaError::cudaErrorInvalidValue {
        // As in `device_enable_peer_access`: the status is also the thread's last error, which
        // a caller's `cudaGetLastError` after loading a kernel would otherwise report.
        let _ = ffi!(lib, LIB, cudaGetLastError());
        return Ok(None);
    }
    check("cudaFuncGetParamInfo", status)?;
    Ok(Some((offset, size)))
}

/// `cudaFuncGetAttributes`.
///
/// # Safety
/// `func` is a live kernel.
pub unsafe fn func_attributes(func: *const c_void) -> Result<sys::cudaFuncAttributes> {
    let mut a = MaybeUninit::<sys::cudaFuncAttributes>::zeroed();
    rt!(cudaFuncGetAttributes(a.as_mut_ptr(), func))?;
    Ok(a.assume_init())
}

/// `cudaFuncSetAttribute`.
///
/// # Safety
/// `func` is a live kernel.
pub unsafe fn func_set_attribute(
    func: *const c_void,
    attr: sys::cudaFuncAttribute,
    value: i32,
) -> Result<()> {
    rt!(cudaFuncSetAttribute(func, attr, value))
}

/// `cudaLaunchKernel`.
///
/// # Safety
/// `func` is a live kernel; `args` points to one pointer per kernel parameter, each to a value
/// of that parameter's size; the launch shape is valid for the kernel and the device.
pub unsafe fn launch_kernel(
    func: *const c_void,
    grid: sys::dim3,
    block: sys::dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: sys::cudaStream_t,
) -> Result<()> {
    rt!(cudaLaunchKernel(
        func, grid, block, args, shared_mem, stream
    ))
}
