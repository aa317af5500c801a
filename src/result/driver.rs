//! CUDA driver API calls (`libcuda.so.1`): the few the crate makes without the runtime.
//!
//! The runtime is the crate's API; a call goes to the driver only where the runtime's wrapper
//! costs what the crate's own targets cannot afford, or where the runtime has no such call. That
//! is two operations today: linking NVRTC's relocatable code with the device runtime
//! (`cuLinkCreate`, `cuLinkAddData`, `cuLinkAddFile`, `cuLinkComplete`, `cuLinkDestroy`: the
//! runtime has no JIT linker), and updating a kernel node of an executable graph
//! (`cuGraphExecKernelNodeSetParams`, with `cuInit`, `cuDeviceGet` and the primary-context
//! retain and release it needs). On the H200 (CUDA 13.0,
//! driver 580) the runtime's `cudaGraphExecKernelNodeSetParams` takes about 0.29 µs, the driver's
//! `cuGraphExecKernelNodeSetParams` about 0.18 µs for the same node given as kernel and context
//! (0.15 µs given as a context's function), measured side by side in one process. Per-node
//! updates are what a streaming pipeline does between launches, so they go to the driver.
//!
//! The two APIs share their handles: `cudaGraphExec_t`, `cudaGraphNode_t` and `cudaKernel_t` are
//! the driver's `CUgraphExec`, `CUgraphNode` and `CUkernel`: the same C types in the headers
//! (`driver_types.h` declares `cudaKernel_t` as `struct CUkern_st *`, `cuda.h` `CUkernel` so,
//! and the graph handles likewise), and checked on the H200, where a `cudaKernel_t` given as
//! the driver's `kern` updates the node. Errors are [`Error::Cuda`] with the driver's name for
//! the status (`CUDA_ERROR_INVALID_VALUE`).

use crate::error::{Error, Library, Result};
use crate::load::{self, ffi};
use crate::sys;

const LIB: Library = Library::Driver;

/// Turns a `CUresult` into a `Result`, with the driver's name and message for the error.
pub fn check(call: &'static str, status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(error(call, status))
    }
}

/// The [`Error::Cuda`] for a failed driver call.
pub fn error(call: &'static str, status: sys::CUresult) -> Error {
    load::driver_error(load::driver_if_loaded(), call, status)
}

macro_rules! drv {
    ($f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib = load::driver()?;
        check(stringify!($f), ffi!(lib, LIB, $f($($arg),*)))
    }};
}

/// `cuDeviceGet` then `cuDevicePrimaryCtxRetain`: device `ordinal`'s primary context (the one
/// the runtime uses for it), with one more reference held by the caller. `ordinal` is the
/// runtime's device number: the runtime and the driver enumerate the same devices in the same
/// order (both after `CUDA_VISIBLE_DEVICES`), and the runtime's device `i` is the driver's
/// `cuDeviceGet(i)`.
///
/// # Safety
/// `ordinal` names a device (checked against the device count). The caller releases the
/// reference with [`primary_ctx_release`] once, after its last use of the context.
pub unsafe fn primary_ctx_retain(ordinal: i32) -> Result<sys::CUcontext> {
    let mut dev: sys::CUdevice = 0;
    drv!(cuDeviceGet(&mut dev, ordinal))?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    drv!(cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
    Ok(ctx)
}

/// `cuDevicePrimaryCtxRelease`: gives back a reference [`primary_ctx_retain`] took.
///
/// # Safety
/// The caller holds a reference from [`primary_ctx_retain`] for `ordinal`, and uses the
/// context no more.
pub unsafe fn primary_ctx_release(ordinal: i32) -> Result<()> {
    let mut dev: sys::CUdevice = 0;
    drv!(cuDeviceGet(&mut dev, ordinal))?;
    drv!(cuDevicePrimaryCtxRelease_v2(dev))
}

/// `cuGraphLaunch`: the runtime's `cudaGraphLaunch` through the driver, which costs less per
/// launch (0.08 µs on an H100 with CUDA 13.0: the `runtime` and `driver` rows of
/// `benches/cudarc.rs`, the same executable graph launched by each).
///
/// # Safety
/// `exec` is live; `stream` is a live stream of the exec's device, not a stream name (the
/// legacy or per-thread default stream, which the driver would resolve in the thread's
/// current context rather than the exec's).
#[inline]
pub unsafe fn graph_launch(exec: sys::cudaGraphExec_t, stream: sys::cudaStream_t) -> Result<()> {
    drv!(cuGraphLaunch(exec, stream))
}

/// The option arrays of a JIT link state ([`link_create`]): the driver keeps pointers to them
/// for the life of the state and writes outputs into them (the error log's size), so they
/// must stay where they are until [`link_destroy`].
pub struct LinkSlots {
    options: [sys::CUjit_option; 2],
    values: [*mut std::ffi::c_void; 2],
}

impl LinkSlots {
    /// Slots for an error log written into `log` (NUL-terminated).
    pub fn new(log: &mut [u8]) -> LinkSlots {
        LinkSlots {
            options: [
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            ],
            // The driver's convention: each value is given in a pointer-sized slot, a size as
            // the integer itself.
            values: [log.as_mut_ptr().cast(), log.len() as *mut std::ffi::c_void],
        }
    }
}

/// `cuLinkCreate` with an error log: a JIT link state of the current context, whose errors
/// the linker writes into the log `slots` were made for.
///
/// # Safety
/// A context is current; `slots` and the log it was made for outlive the state, unmoved
/// ([`link_destroy`] is called before either is dropped or moved): the driver keeps pointers
/// to both and writes into them during the later link calls.
pub unsafe fn link_create(slots: &mut LinkSlots) -> Result<sys::CUlinkState> {
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    drv!(cuLinkCreate_v2(
        slots.options.len() as u32,
        slots.options.as_mut_ptr(),
        slots.values.as_mut_ptr(),
        &mut state
    ))?;
    Ok(state)
}

/// `cuLinkAddData`: adds `data` (of `kind`, named `name` in the linker's messages).
///
/// # Safety
/// `state` is a live link state; `data` is an image of `kind` (PTX: NUL-terminated).
pub unsafe fn link_add_data(
    state: sys::CUlinkState,
    kind: sys::CUjitInputType,
    data: &[u8],
    name: &std::ffi::CStr,
) -> Result<()> {
    drv!(cuLinkAddData_v2(
        state,
        kind,
        data.as_ptr().cast_mut().cast(),
        data.len(),
        name.as_ptr(),
        0,
        std::ptr::null_mut(),
        std::ptr::null_mut()
    ))
}

/// `cuLinkAddFile`: adds the file at `path` (of `kind`, e.g. a static library).
///
/// # Safety
/// `state` is a live link state.
pub unsafe fn link_add_file(
    state: sys::CUlinkState,
    kind: sys::CUjitInputType,
    path: &std::ffi::CStr,
) -> Result<()> {
    drv!(cuLinkAddFile_v2(
        state,
        kind,
        path.as_ptr(),
        0,
        std::ptr::null_mut(),
        std::ptr::null_mut()
    ))
}

/// `cuLinkComplete`: the linked cubin, copied (the state owns the linker's copy).
///
/// # Safety
/// `state` is a live link state.
pub unsafe fn link_complete(state: sys::CUlinkState) -> Result<Vec<u8>> {
    let mut image: *mut std::ffi::c_void = std::ptr::null_mut();
    let mut size = 0usize;
    drv!(cuLinkComplete(state, &mut image, &mut size))?;
    // SAFETY: the driver returned `size` bytes at `image`, valid until the state is destroyed.
    Ok(unsafe { std::slice::from_raw_parts(image.cast::<u8>(), size) }.to_vec())
}

/// `cuLinkDestroy`.
///
/// # Safety
/// `state` is a live link state, used no more.
pub unsafe fn link_destroy(state: sys::CUlinkState) -> Result<()> {
    drv!(cuLinkDestroy(state))
}

/// `cuGraphExecKernelNodeSetParams`: the runtime's `cudaGraphExecKernelNodeSetParams` with
/// `params`, whose `func` is a `cudaKernel_t`, run in context `ctx` (or, with `ctx` null, a
/// context's function: see [`kernel_node_params`]).
///
/// # Safety
/// As for [`crate::result::runtime::graph_exec_kernel_node_set_params`]: `node` is a kernel
/// node of the graph `exec` was instantiated from, and `params` describe a launch of the same
/// kernel with arguments matching its layout, live for the call (the driver copies them). In
/// addition, `params.func` is a `cudaKernel_t` (from `cudaLibraryGetKernel`), and `ctx` is
/// the context the node runs in (its device's primary context), held for the call; or `ctx`
/// is null and `params.func` is a live function (`CUfunction`) of the node's context.
#[inline]
pub unsafe fn graph_exec_kernel_node_set_params(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    params: &sys::cudaKernelNodeParams,
    ctx: sys::CUcontext,
) -> Result<()> {
    let p = kernel_node_params(params, ctx);
    drv!(cuGraphExecKernelNodeSetParams_v2(exec, node, &p))
}

/// The driver's parameters for the runtime's kernel launch `params` (whose `func` is a
/// `cudaKernel_t`), given as that kernel and context `ctx`; or, with `ctx` null, for a launch
/// whose `func` is a context's function (`CUfunction`, a cudarc kernel's), which runs in its
/// own context.
#[inline]
pub fn kernel_node_params(
    params: &sys::cudaKernelNodeParams,
    ctx: sys::CUcontext,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    // A library kernel is given as `kern` with its context (`func` would be the per-context
    // function handle, which the crate does not keep); a context's function as `func`.
    let (func, kern) = if ctx.is_null() {
        (params.func.cast(), std::ptr::null_mut())
    } else {
        (std::ptr::null_mut(), params.func.cast())
    };
    sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: params.gridDim.x,
        gridDimY: params.gridDim.y,
        gridDimZ: params.gridDim.z,
        blockDimX: params.blockDim.x,
        blockDimY: params.blockDim.y,
        blockDimZ: params.blockDim.z,
        sharedMemBytes: params.sharedMemBytes,
        kernelParams: params.kernelParams,
        extra: params.extra,
        kern,
        ctx,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_ok_and_a_failure_names_the_call_and_code() {
        assert!(check("cuInit", sys::CUresult::CUDA_SUCCESS).is_ok());
        let err = check("cuGraphExecKernelNodeSetParams_v2", sys::CUresult(400)).unwrap_err();
        match &err {
            Error::Cuda { call, code, .. } => {
                assert_eq!(*call, "cuGraphExecKernelNodeSetParams_v2");
                assert_eq!(*code, 400);
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(err
            .to_string()
            .contains("cuGraphExecKernelNodeSetParams_v2"));
    }

    #[test]
    fn the_driver_is_looked_for_by_its_bare_name_only() {
        assert_eq!(
            load::candidates(Library::Driver),
            vec![std::path::PathBuf::from("libcuda.so.1")]
        );
    }

    #[test]
    fn a_runtime_launch_becomes_the_kernel_and_its_context() {
        let mut slot = 0usize;
        let mut ptrs = [(&mut slot as *mut usize).cast::<std::ffi::c_void>()];
        let kernel = 0x1000 as *mut std::ffi::c_void;
        let ctx = 0x2000 as sys::CUcontext;
        let p = sys::cudaKernelNodeParams {
            func: kernel,
            gridDim: sys::dim3 { x: 1, y: 2, z: 3 },
            blockDim: sys::dim3 { x: 4, y: 5, z: 6 },
            sharedMemBytes: 7,
            kernelParams: ptrs.as_mut_ptr(),
            extra: std::ptr::null_mut(),
        };
        let d = kernel_node_params(&p, ctx);
        assert!(
            d.func.is_null(),
            "a function handle would override the kernel"
        );
        assert_eq!(d.kern.cast::<std::ffi::c_void>(), kernel);
        assert_eq!(d.ctx, ctx);
        assert_eq!(
            [
                d.gridDimX,
                d.gridDimY,
                d.gridDimZ,
                d.blockDimX,
                d.blockDimY,
                d.blockDimZ
            ],
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(d.sharedMemBytes, 7);
        assert_eq!(d.kernelParams, p.kernelParams);
        assert!(d.extra.is_null());
    }
}
