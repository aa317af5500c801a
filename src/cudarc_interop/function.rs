//! cudarc's compiled code as kernels ([`Kernel::from_cudarc`]), and the driver calls a
//! context's function (`CUfunction`) needs.
//!
//! A cudarc [`CudaFunction`] is a function of a module loaded with `cuModuleLoadData` (PTX
//! from `cudarc::nvrtc`, a cubin): the driver's `CUfunction`, not the library kernel
//! (`cudaKernel_t`) the crate's own [`Module`](crate::Module)s give. The runtime's graph and
//! query calls refuse a `CUfunction` (checked on an H100 with CUDA 13.0: `cudaGraphAddNode`,
//! `cudaFuncGetParamInfo` and `cudaFuncGetAttributes` answer
//! `cudaErrorInvalidResourceHandle`), so for such a kernel the few calls that name the code
//! go to the driver, through cudarc's bindings (loaded at run time, as the crate's own are):
//! adding its graph node, launching it on a stream, reading its parameters and attributes.
//! Everything else (validation, argument packing, updates through
//! `cuGraphExecKernelNodeSetParams`, DOT) is the crate's one kernel path.

use std::ffi::{c_void, CStr};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use ::cudarc::driver::{sys as cu, CudaContext, CudaFunction, DriverError};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, LaunchConfig, ParamInfo};
use crate::sys;

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
unsafe fn param_info(f: cu::CUfunction, index: usize) -> Result<Option<ParamInfo>> {
    let (mut offset, mut size) = (0usize, 0usize);
    // SAFETY: `f` is live (this function's contract); the out-pointers are valid.
    let status = unsafe { cu::cuFuncGetParamInfo(f, index, &mut offset, &mut size) };
    if status == cu::CUresult::CUDA_ERROR_INVALID_VALUE {
        return Ok(None);
    }
    check("cuFuncGetParamInfo", status)?;
    Ok(Some(ParamInfo { offset, size }))
}

/// `cuFuncGetAttribute`.
///
/// # Safety
/// `f` is a live function.
unsafe fn attribute(f: cu::CUfunction, attr: cu::CUfunction_attribute) -> Result<i32> {
    let mut v = 0i32;
    // SAFETY: `f` is live; the out-pointer is valid.
    check("cuFuncGetAttribute", unsafe {
        cu::cuFuncGetAttribute(&mut v, attr, f)
    })?;
    Ok(v)
}

/// `cuFuncGetName`.
///
/// # Safety
/// `f` is a live function.
unsafe fn name(f: cu::CUfunction) -> Result<String> {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `f` is live; the driver returns a string it owns, valid while the module is
    // loaded (copied at once below).
    check("cuFuncGetName", unsafe { cu::cuFuncGetName(&mut p, f) })?;
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
pub(crate) unsafe fn set_max_dynamic_shared_mem(f: sys::CUfunction, bytes: i32) -> Result<()> {
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
pub(crate) unsafe fn occupancy(f: sys::CUfunction, threads: i32, smem: usize) -> Result<i32> {
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
pub(crate) unsafe fn launch(
    f: sys::CUfunction,
    cfg: LaunchConfig,
    args: *mut *mut c_void,
    stream: sys::cudaStream_t,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuLaunchKernel", unsafe {
        cu::cuLaunchKernel(
            f.cast(),
            cfg.grid.x,
            cfg.grid.y,
            cfg.grid.z,
            cfg.block.x,
            cfg.block.y,
            cfg.block.z,
            cfg.shared_mem_bytes,
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
pub(crate) unsafe fn graph_add_node(
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

impl Kernel {
    /// A kernel node's code from cudarc: `function`, of a module `ctx` loaded
    /// ([`CudaContext::load_module`], from PTX such as `cudarc::nvrtc::compile_ptx` gives, or a
    /// cubin), usable wherever the crate's own kernels are: kernel nodes of a DAG (checked,
    /// updated and drawn as any kernel), and stream launches ([`Kernel::launch`]).
    ///
    /// The parameter layout is read from the driver (`cuFuncGetParamInfo`, asked for
    /// parameter 0, 1, … until it refuses the index past the last: [`ParamSource::Probed`](crate::kernel::ParamSource::Probed)),
    /// so arguments get the same checks as for the crate's kernels: their count, each one's
    /// size, and buffers of the kernel's device. The name is the driver's (`cuFuncGetName`,
    /// the `extern "C"` or mangled name). The kernel keeps `function` (and so its module)
    /// loaded while the DAGs, `Exec`s and stream launches that use it may run.
    ///
    /// `ctx` must be its device's primary context (what [`CudaContext::new`] retains), as for
    /// [`Device::from_cudarc`], and the module's context: cudarc does not say which context a
    /// function belongs to, so a function of another context is not detected here (CUDA then
    /// reports an invalid context or address where the kernel runs).
    ///
    /// Refused: a non-primary context ([`Error::Cudarc`]); a driver query that fails
    /// ([`Error::CudarcCall`]).
    pub fn from_cudarc(ctx: &Arc<CudaContext>, function: &CudaFunction) -> Result<Kernel> {
        let device = Device::from_cudarc(ctx)?;
        ctx.bind_to_thread().map_err(|e| Error::CudarcCall {
            call: "CudaContext::bind_to_thread",
            message: e.to_string(),
        })?;
        let f = function.cu_function();
        // SAFETY: `f` is live: `function` holds its module, and the kernel made below keeps
        // a clone of `function`.
        let (name, params, max_threads, static_smem, max_dynamic) = unsafe {
            let mut params = Vec::new();
            while let Some(p) = param_info(f, params.len())? {
                params.push(p);
            }
            use cu::CUfunction_attribute as A;
            (
                name(f)?,
                params,
                attribute(f, A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                attribute(f, A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                attribute(f, A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            )
        };
        Ok(Kernel::foreign(
            name,
            device,
            f.cast(),
            params,
            max_threads.max(0) as u32,
            static_smem.max(0) as usize,
            AtomicUsize::new(max_dynamic.max(0) as usize),
            Box::new(function.clone()),
        ))
    }
}
