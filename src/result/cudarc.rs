//! Driver calls on a context's function (`CUfunction`, a cudarc `CudaFunction`'s), through
//! cudarc's bindings (feature `cudarc`, loaded at run time): the calls whose runtime
//! counterparts refuse such a function (see `src/cudarc_interop/function.rs`). Errors are
//! [`Error::CudarcCall`] with the driver's name and message for the status.

use std::ffi::{c_void, CStr};

use ::cudarc::driver::{sys as cu, DriverError};

use crate::error::{Error, Result};
use crate::sys;

/// The function attributes the crate reads.
pub use ::cudarc::driver::sys::CUfunction_attribute as FunctionAttribute;

/// A driver status as the crate's error.
fn check(call: &'static str, status: cu::CUresult) -> Result<()> {
    if status == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::CudarcCall {
            call,
            message: DriverError(status).to_string(),
        })
    }
}

/// `cuFuncGetParamInfo` for parameter `index`, or `None` past the last
/// (`CUDA_ERROR_INVALID_VALUE`, which the driver does not keep as a sticky error).
///
/// # Safety
/// `f` is a live function.
pub unsafe fn param_info(f: sys::CUfunction, index: usize) -> Result<Option<(usize, usize)>> {
    let (mut offset, mut size) = (0usize, 0usize);
    // SAFETY: `f` is live (this function's contract); the out-pointers are valid.
    let status = unsafe { cu::cuFuncGetParamInfo(f.cast(), index, &mut offset, &mut size) };
    if status == cu::CUresult::CUDA_ERROR_INVALID_VALUE {
        return Ok(None);
    }
    check("cuFuncGetParamInfo", status)?;
    Ok(Some((offset, size)))
}

/// `cuFuncGetAttribute`.
///
/// # Safety
/// `f` is a live function.
pub unsafe fn attribute(f: sys::CUfunction, attr: cu::CUfunction_attribute) -> Result<i32> {
    let mut v = 0i32;
    // SAFETY: `f` is live; the out-pointer is valid.
    check("cuFuncGetAttribute", unsafe {
        cu::cuFuncGetAttribute(&mut v, attr, f.cast())
    })?;
    Ok(v)
}

/// `cuFuncGetName`.
///
/// # Safety
/// `f` is a live function.
pub unsafe fn name(f: sys::CUfunction) -> Result<String> {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `f` is live; the driver returns a string it owns, valid while the module is
    // loaded (copied at once below).
    check("cuFuncGetName", unsafe {
        cu::cuFuncGetName(&mut p, f.cast())
    })?;
    if p.is_null() {
        return Ok(String::from("(unnamed)"));
    }
    // SAFETY: a NUL-terminated string of the driver's, live for this call.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`.
///
/// # Safety
/// `f` is a live function.
pub unsafe fn set_max_dynamic_shared_mem(f: sys::CUfunction, bytes: i32) -> Result<()> {
    // SAFETY: `f` is live (this function's contract).
    check("cuFuncSetAttribute", unsafe {
        cu::cuFuncSetAttribute(
            f.cast(),
            cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes,
        )
    })
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor`.
///
/// # Safety
/// `f` is a live function of the current context.
pub unsafe fn occupancy(f: sys::CUfunction, threads: i32, smem: usize) -> Result<i32> {
    let mut n = 0i32;
    // SAFETY: `f` is live; the out-pointer is valid.
    check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
        cu::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f.cast(), threads, smem)
    })?;
    Ok(n)
}

/// `cuLaunchKernel` on `stream`.
///
/// # Safety
/// As for the runtime's `cudaLaunchKernel`: `f` is a live function of the stream's context,
/// `args` points to one pointer per parameter, each to a value of that parameter's size, and
/// the shape is valid for the function and the device.
pub unsafe fn launch(
    f: sys::CUfunction,
    grid: sys::dim3,
    block: sys::dim3,
    shared_mem_bytes: u32,
    args: *mut *mut c_void,
    stream: sys::cudaStream_t,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuLaunchKernel", unsafe {
        cu::cuLaunchKernel(
            f.cast(),
            grid.x,
            grid.y,
            grid.z,
            block.x,
            block.y,
            block.z,
            shared_mem_bytes,
            stream.cast(),
            args,
            std::ptr::null_mut(),
        )
    })
}

/// The driver's parameters for a launch of function `f` described by the runtime's `p`.
fn driver_params(p: &sys::cudaKernelNodeParams) -> cu::CUDA_KERNEL_NODE_PARAMS {
    cu::CUDA_KERNEL_NODE_PARAMS {
        func: p.func.cast(),
        gridDimX: p.gridDim.x,
        gridDimY: p.gridDim.y,
        gridDimZ: p.gridDim.z,
        blockDimX: p.blockDim.x,
        blockDimY: p.blockDim.y,
        blockDimZ: p.blockDim.z,
        sharedMemBytes: p.sharedMemBytes,
        kernelParams: p.kernelParams,
        extra: p.extra,
        // Ignored when `func` is set: a function runs in its own context.
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

/// Adds a kernel node whose `params.func` is a function (`CUfunction`) to `graph`, after
/// `deps` (`cuGraphAddKernelNode`), or with `edges` (one per dependency) through
/// `cuGraphAddNode_v2`, the driver's call that takes edge data.
///
/// # Safety
/// As for the runtime's `cudaGraphAddKernelNode`: `graph` is live, `deps` are its nodes,
/// `params` describe a valid launch of a live function with arguments matching its layout
/// (copied during the call), and `edges` is empty or has one entry per dependency.
pub unsafe fn graph_add_node(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    edges: &[sys::cudaGraphEdgeData],
    params: &sys::cudaKernelNodeParams,
) -> Result<sys::cudaGraphNode_t> {
    let p = driver_params(params);
    let mut node: cu::CUgraphNode = std::ptr::null_mut();
    if edges.is_empty() {
        // SAFETY: the caller's contract; the handles are the driver's (`cudaGraph_t` and
        // `cudaGraphNode_t` are `CUgraph` and `CUgraphNode`).
        check("cuGraphAddKernelNode", unsafe {
            cu::cuGraphAddKernelNode_v2(
                &mut node,
                graph.cast(),
                deps.as_ptr().cast(),
                deps.len(),
                &p,
            )
        })?;
    } else {
        debug_assert_eq!(edges.len(), deps.len());
        // SAFETY: all-zero is valid for every member of the union (integers, pointers).
        let mut generic: cu::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        generic.type_ = cu::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL;
        generic.__bindgen_anon_1.kernel = cu::CUDA_KERNEL_NODE_PARAMS_v3 {
            func: p.func,
            gridDimX: p.gridDimX,
            gridDimY: p.gridDimY,
            gridDimZ: p.gridDimZ,
            blockDimX: p.blockDimX,
            blockDimY: p.blockDimY,
            blockDimZ: p.blockDimZ,
            sharedMemBytes: p.sharedMemBytes,
            kernelParams: p.kernelParams,
            extra: p.extra,
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: as above; `cudaGraphEdgeData` and `CUgraphEdgeData` are one C struct
        // (`from_port`, `to_port`, `type`, reserved bytes), one per dependency.
        check("cuGraphAddNode", unsafe {
            cu::cuGraphAddNode_v2(
                &mut node,
                graph.cast(),
                deps.as_ptr().cast(),
                edges.as_ptr().cast(),
                deps.len(),
                &mut generic,
            )
        })?;
    }
    Ok(node.cast())
}
