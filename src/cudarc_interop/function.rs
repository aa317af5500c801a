//! cudarc's compiled code as kernels ([`Kernel::from_cudarc`]).
//!
//! A cudarc [`CudaFunction`] is a function of a module loaded with `cuModuleLoadData` (PTX
//! from `cudarc::nvrtc`, a cubin): the driver's `CUfunction`, not the library kernel
//! (`cudaKernel_t`) the crate's own [`Module`](crate::Module)s give. The runtime's graph and
//! query calls refuse a `CUfunction` (checked on an H100 with CUDA 13.0: `cudaGraphAddNode`,
//! `cudaFuncGetParamInfo` and `cudaFuncGetAttributes` answer
//! `cudaErrorInvalidResourceHandle`), so for such a kernel the few calls that name the code go
//! to the driver through cudarc's bindings (`result::cudarc`): adding its graph node, launching
//! it on a stream, reading its parameters and attributes. Everything else (validation,
//! argument packing, per-node updates through `cuGraphExecKernelNodeSetParams`, DOT) is the
//! crate's one kernel path.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaFunction};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, ParamInfo};
use crate::result::cudarc::{self as dr, FunctionAttribute as A};

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
        let f: crate::sys::CUfunction = function.cu_function().cast();
        // SAFETY: `f` is live: `function` holds its module, and the kernel made below keeps
        // a clone of `function`.
        let (name, params, max_threads, static_smem, max_dynamic) = unsafe {
            let mut params = Vec::new();
            while let Some((offset, size)) = dr::param_info(f, params.len())? {
                params.push(ParamInfo { offset, size });
            }
            (
                dr::name(f)?,
                params,
                dr::attribute(f, A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                dr::attribute(f, A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                dr::attribute(f, A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            )
        };
        Ok(Kernel::foreign(
            name,
            device,
            f,
            params,
            max_threads.max(0) as u32,
            static_smem.max(0) as usize,
            AtomicUsize::new(max_dynamic.max(0) as usize),
            Box::new(function.clone()),
        ))
    }
}
