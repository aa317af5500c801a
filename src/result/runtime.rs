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
/// parameter (CUDA answers `cudaErrorInvalidValue` there).
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

// ---- graphs: construction ------------------------------------------------------------------

/// `cudaGraphCreate`.
///
/// # Safety
/// The graph must be destroyed with [`graph_destroy`].
pub unsafe fn graph_create() -> Result<sys::cudaGraph_t> {
    let mut g = ptr::null_mut();
    rt!(cudaGraphCreate(&mut g, 0))?;
    Ok(g)
}

/// `cudaGraphDestroy`.
///
/// # Safety
/// `graph` is live and not used afterwards.
pub unsafe fn graph_destroy(graph: sys::cudaGraph_t) -> Result<()> {
    rt!(cudaGraphDestroy(graph))
}

/// `cudaGraphAddKernelNode`: a kernel node without edge data (see `NodeParams::Kernel` for why
/// not the generic call).
///
/// # Safety
/// `graph` is live, `deps` are its nodes; `params.func` is a live kernel of the current
/// device, `params.kernelParams` points to one pointer per kernel parameter, each to a value
/// of that parameter's size, readable during the call (CUDA copies them); the device
/// addresses among the values stay valid while any executable graph made from `graph` can
/// run.
pub unsafe fn graph_add_kernel_node(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    params: &sys::cudaKernelNodeParams,
) -> Result<sys::cudaGraphNode_t> {
    let mut n = ptr::null_mut();
    rt!(cudaGraphAddKernelNode(
        &mut n,
        graph,
        deps.as_ptr(),
        deps.len(),
        params
    ))?;
    Ok(n)
}

/// `cudaGraphAddNode`: the generic call every node kind but 1D copies and kernels without
/// edge data is added with.
///
/// # Safety
/// `graph` is live, `deps` are its nodes, `edges` is empty or has one entry per dependency;
/// `params` names in `type_` the union member that is set, and what it points to is valid for
/// the call (CUDA copies kernel arguments), and — buffers, kernels, host functions and their
/// data — stays valid while any executable graph made from `graph` can run.
pub unsafe fn graph_add_node(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    edges: &[sys::cudaGraphEdgeData],
    params: &mut sys::cudaGraphNodeParams,
) -> Result<sys::cudaGraphNode_t> {
    debug_assert!(edges.is_empty() || edges.len() == deps.len());
    let mut n = ptr::null_mut();
    let edge_ptr = if edges.is_empty() {
        ptr::null()
    } else {
        edges.as_ptr()
    };
    rt!(cudaGraphAddNode(
        &mut n,
        graph,
        deps.as_ptr(),
        edge_ptr,
        deps.len(),
        params
    ))?;
    Ok(n)
}

/// `cudaGraphAddMemcpyNode1D`.
///
/// # Safety
/// `graph` is live, `deps` are its nodes; `dst` and `src` stay valid for `bytes` bytes while any
/// executable graph made from this one can run.
pub unsafe fn graph_add_memcpy_node_1d(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<sys::cudaGraphNode_t> {
    let mut n = ptr::null_mut();
    rt!(cudaGraphAddMemcpyNode1D(
        &mut n,
        graph,
        deps.as_ptr(),
        deps.len(),
        dst,
        src,
        bytes,
        kind
    ))?;
    Ok(n)
}

/// `cudaGraphGetNodes`: every node of `graph`.
///
/// # Safety
/// `graph` is live.
pub unsafe fn graph_nodes(graph: sys::cudaGraph_t) -> Result<Vec<sys::cudaGraphNode_t>> {
    let mut n = 0usize;
    rt!(cudaGraphGetNodes(graph, ptr::null_mut(), &mut n))?;
    let mut nodes = vec![ptr::null_mut(); n];
    rt!(cudaGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n))?;
    nodes.truncate(n);
    Ok(nodes)
}

/// `cudaGraphNodeGetDependencies`: the nodes `node` depends on, copied out.
///
/// # Safety
/// `node` is a node of a live graph.
pub unsafe fn graph_node_dependencies(
    node: sys::cudaGraphNode_t,
) -> Result<Vec<sys::cudaGraphNode_t>> {
    let mut n = 0usize;
    rt!(cudaGraphNodeGetDependencies(
        node,
        ptr::null_mut(),
        ptr::null_mut(),
        &mut n
    ))?;
    let mut deps = vec![ptr::null_mut(); n];
    if n > 0 {
        rt!(cudaGraphNodeGetDependencies(
            node,
            deps.as_mut_ptr(),
            ptr::null_mut(),
            &mut n
        ))?;
    }
    deps.truncate(n);
    Ok(deps)
}

/// `cudaGraphNodeGetType`, read as the raw integer (a type newer than these bindings must
/// not be read as their Rust enum).
///
/// # Safety
/// `node` is a node of a live graph.
pub unsafe fn graph_node_type(node: sys::cudaGraphNode_t) -> Result<u32> {
    let mut t = 0u32;
    rt!(cudaGraphNodeGetType(node, (&mut t as *mut u32).cast()))?;
    Ok(t)
}

/// `cudaGraphDebugDotPrint`.
///
/// # Safety
/// `graph` is live.
pub unsafe fn graph_debug_dot_print(
    graph: sys::cudaGraph_t,
    path: &CStr,
    flags: u32,
) -> Result<()> {
    rt!(cudaGraphDebugDotPrint(graph, path.as_ptr(), flags))
}

// ---- graphs: execution and update ----------------------------------------------------------

/// `cudaGraphInstantiate`.
///
/// # Safety
/// `graph` is live; the result must be destroyed with [`graph_exec_destroy`].
pub unsafe fn graph_instantiate(
    graph: sys::cudaGraph_t,
    flags: u64,
) -> Result<sys::cudaGraphExec_t> {
    let mut e = ptr::null_mut();
    rt!(cudaGraphInstantiate(&mut e, graph, flags as _))?;
    Ok(e)
}

/// `cudaGraphExecGetFlags`: the flags `exec` was instantiated with (CUDA 13.0 was seen to
/// answer 0 for `UseNodePriority` and `Upload`).
///
/// # Safety
/// `exec` is live.
pub unsafe fn graph_exec_flags(exec: sys::cudaGraphExec_t) -> Result<u64> {
    let mut f: std::os::raw::c_ulonglong = 0;
    rt!(cudaGraphExecGetFlags(exec, &mut f))?;
    Ok(f as u64)
}

/// `cudaGraphKernelNodeSetAttribute` with `cudaLaunchAttributePriority`.
///
/// # Safety
/// `node` is a live kernel node.
pub unsafe fn graph_kernel_node_set_priority(
    node: sys::cudaGraphNode_t,
    priority: i32,
) -> Result<()> {
    // SAFETY of the union write: `priority` is a plain `int` member.
    let mut v: sys::cudaLaunchAttributeValue = unsafe { std::mem::zeroed() };
    v.priority = priority;
    rt!(cudaGraphKernelNodeSetAttribute(
        node,
        sys::cudaLaunchAttributeID::cudaLaunchAttributePriority,
        &v
    ))
}

/// `cudaGraphKernelNodeGetAttribute` with `cudaLaunchAttributePriority`.
///
/// # Safety
/// `node` is a live kernel node.
pub unsafe fn graph_kernel_node_priority(node: sys::cudaGraphNode_t) -> Result<i32> {
    // SAFETY: an all-zero union is a valid value of every member.
    let mut v: sys::cudaLaunchAttributeValue = unsafe { std::mem::zeroed() };
    rt!(cudaGraphKernelNodeGetAttribute(
        node,
        sys::cudaLaunchAttributeID::cudaLaunchAttributePriority,
        &mut v
    ))?;
    // SAFETY: CUDA wrote the `priority` member for this attribute.
    Ok(unsafe { v.priority })
}

/// `cudaGraphInstantiateWithParams` with `cudaGraphInstantiateFlagUpload` and `flags`, uploading
/// on `upload_stream`.
///
/// # Safety
/// `graph` and `upload_stream` are live; the result must be destroyed with
/// [`graph_exec_destroy`].
pub unsafe fn graph_instantiate_upload(
    graph: sys::cudaGraph_t,
    flags: u64,
    upload_stream: sys::cudaStream_t,
) -> Result<sys::cudaGraphExec_t> {
    // `cudaGraphInstantiateParams` with the result CUDA writes back read as an integer: a value
    // a newer CUDA adds must not become an invalid Rust enum.
    #[repr(C)]
    struct Params {
        flags: u64,
        upload_stream: sys::cudaStream_t,
        err_node: sys::cudaGraphNode_t,
        result: u32,
    }
    const _: () = assert!(
        std::mem::size_of::<Params>() == std::mem::size_of::<sys::cudaGraphInstantiateParams>()
    );
    let mut params = Params {
        flags: flags | sys::cudaGraphInstantiateFlagUpload as u64,
        upload_stream,
        err_node: ptr::null_mut(),
        result: 0,
    };
    let mut e = ptr::null_mut();
    rt!(cudaGraphInstantiateWithParams(
        &mut e,
        graph,
        (&mut params as *mut Params).cast::<sys::cudaGraphInstantiateParams>()
    ))?;
    Ok(e)
}

/// `cudaGraphExecDestroy`.
///
/// # Safety
/// `exec` is live and not used afterwards.
pub unsafe fn graph_exec_destroy(exec: sys::cudaGraphExec_t) -> Result<()> {
    rt!(cudaGraphExecDestroy(exec))
}

/// `cudaGraphLaunch`.
///
/// # Safety
/// `exec` and `stream` are live, and everything the graph refers to stays valid until it ran.
pub unsafe fn graph_launch(exec: sys::cudaGraphExec_t, stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaGraphLaunch(exec, stream))
}

/// `cudaGraphUpload`.
///
/// # Safety
/// `exec` and `stream` are live.
pub unsafe fn graph_upload(exec: sys::cudaGraphExec_t, stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaGraphUpload(exec, stream))
}

/// `cudaGraphExecKernelNodeSetParams`: a kernel node's update through the kernel-specific
/// call (see `Exec::push_kernel_params` for why not the generic one).
///
/// # Safety
/// `node` is a kernel node of the graph `exec` was instantiated from, made with the kernel
/// `params.func`; `params.kernelParams` points to one pointer per kernel parameter, each to a
/// value of that parameter's size, all readable during the call (CUDA copies them); the device
/// addresses among the values stay valid while the graph may run.
pub unsafe fn graph_exec_kernel_node_set_params(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    params: &sys::cudaKernelNodeParams,
) -> Result<()> {
    rt!(cudaGraphExecKernelNodeSetParams(exec, node, params))
}

/// `cudaGraphExecNodeSetParams`: the generic per-node update.
///
/// # Safety
/// `node` is a node of the graph `exec` was instantiated from, of the type `params` names;
/// `params` is valid as for [`graph_add_node`].
pub unsafe fn graph_exec_node_set_params(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    params: &mut sys::cudaGraphNodeParams,
) -> Result<()> {
    rt!(cudaGraphExecNodeSetParams(exec, node, params))
}

/// `cudaGraphExecMemcpyNodeSetParams1D`.
///
/// # Safety
/// As [`graph_add_memcpy_node_1d`]; `node` is a 1D memcpy node of `exec`'s graph.
pub unsafe fn graph_exec_memcpy_node_set_params_1d(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<()> {
    rt!(cudaGraphExecMemcpyNodeSetParams1D(
        exec, node, dst, src, bytes, kind
    ))
}

/// `cudaGraphNodeSetEnabled`.
///
/// # Safety
/// `node` is a kernel, memcpy or memset node of `exec`'s graph.
pub unsafe fn graph_node_set_enabled(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    enabled: bool,
) -> Result<()> {
    rt!(cudaGraphNodeSetEnabled(exec, node, enabled as u32))
}

/// What `cudaGraphExecUpdate` said when it refused: `cudaGraphExecUpdateResult`'s name (or its
/// number, for a value newer than these bindings) and the node it blamed (may be null).
#[derive(Debug, Clone, Copy)]
pub struct UpdateRefusal {
    /// The raw `cudaGraphExecUpdateResult` value.
    pub code: u32,
    /// The node CUDA blamed (in the graph passed to the update), or null.
    pub node: sys::cudaGraphNode_t,
}

impl UpdateRefusal {
    /// The result's name.
    pub fn name(&self) -> String {
        use sys::cudaGraphExecUpdateResult as R;
        let known = [
            R::cudaGraphExecUpdateSuccess,
            R::cudaGraphExecUpdateError,
            R::cudaGraphExecUpdateErrorTopologyChanged,
            R::cudaGraphExecUpdateErrorNodeTypeChanged,
            R::cudaGraphExecUpdateErrorFunctionChanged,
            R::cudaGraphExecUpdateErrorParametersChanged,
            R::cudaGraphExecUpdateErrorNotSupported,
            R::cudaGraphExecUpdateErrorUnsupportedFunctionChange,
            R::cudaGraphExecUpdateErrorAttributesChanged,
        ];
        known.iter().find(|r| **r as u32 == self.code).map_or_else(
            || format!("cudaGraphExecUpdateResult({})", self.code),
            |r| format!("{r:?}"),
        )
    }
}

/// The layout of `cudaGraphExecUpdateResultInfo` with the result read as a plain integer: a
/// value newer than the bindings' Rust enum must not be read as that enum.
#[repr(C)]
struct RawUpdateInfo {
    result: u32,
    error_node: sys::cudaGraphNode_t,
    error_from_node: sys::cudaGraphNode_t,
}

const _: () = assert!(
    std::mem::size_of::<RawUpdateInfo>()
        == std::mem::size_of::<sys::cudaGraphExecUpdateResultInfo>()
);

/// `cudaGraphExecUpdate`. A refusal (`cudaErrorGraphExecUpdateFailure`) is `Ok(Err(..))`; other
/// failures are `Err`.
///
/// # Safety
/// `exec` and `graph` are live.
pub unsafe fn graph_exec_update(
    exec: sys::cudaGraphExec_t,
    graph: sys::cudaGraph_t,
) -> Result<std::result::Result<(), UpdateRefusal>> {
    let lib = load::cudart()?;
    let mut info = RawUpdateInfo {
        result: 0,
        error_node: ptr::null_mut(),
        error_from_node: ptr::null_mut(),
    };
    let status = ffi!(
        lib,
        LIB,
        cudaGraphExecUpdate(exec, graph, (&mut info as *mut RawUpdateInfo).cast())
    );
    if status == sys::cudaError::cudaSuccess {
        return Ok(Ok(()));
    }
    if status == sys::cudaError::cudaErrorGraphExecUpdateFailure {
        return Ok(Err(UpdateRefusal {
            code: info.result,
            node: info.error_node,
        }));
    }
    Err(error("cudaGraphExecUpdate", status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_refusals_are_named_even_when_unknown() {
        let r = |code| UpdateRefusal {
            code,
            node: ptr::null_mut(),
        };
        assert_eq!(r(2).name(), "cudaGraphExecUpdateErrorTopologyChanged");
        assert_eq!(r(99).name(), "cudaGraphExecUpdateResult(99)");
    }
}
