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
use crate::kernel::{confirmed, described_params, probed, Kernel, ParamSource};
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
    /// size, and buffers of the kernel's device. That last, refused call is not an error here,
    /// but `compute-sanitizer` lists it as a failed API call: [`Kernel::from_cudarc_image`]
    /// reads the layout from the module's image instead. The name is the driver's
    /// (`cuFuncGetName`, the `extern "C"` or mangled name). The kernel keeps `function` (and
    /// so its module) loaded while the DAGs, `Exec`s and stream launches that use it may run.
    ///
    /// `ctx` must be its device's primary context (what [`CudaContext::new`] retains), as for
    /// [`Device::from_cudarc`], and the module's context: cudarc does not say which context a
    /// function belongs to, so a function of another context is not detected here (CUDA then
    /// reports an invalid context or address where the kernel runs).
    ///
    /// Refused: a non-primary context ([`Error::Cudarc`]); a driver query that fails
    /// ([`Error::CudarcCall`]).
    pub fn from_cudarc(ctx: &Arc<CudaContext>, function: &CudaFunction) -> Result<Kernel> {
        from_function(ctx, function, None)
    }

    /// [`Kernel::from_cudarc`], with the parameter layout read from `image`, the PTX text,
    /// cubin or fatbin the function's module was loaded from (for `compile_ptx`'s result,
    /// `ptx.as_bytes()`; for PTX source, its bytes): the count, sizes and alignments the
    /// image declares, each parameter confirmed with `cuFuncGetParamInfo`
    /// ([`ParamSource::Ptx`](crate::kernel::ParamSource::Ptx),
    /// [`Cubin`](crate::kernel::ParamSource::Cubin) or
    /// [`Fatbin`](crate::kernel::ParamSource::Fatbin)). No driver call is refused on the way, so
    /// `compute-sanitizer` has nothing to report.
    ///
    /// Refused, besides [`Kernel::from_cudarc`]'s errors: an image that does not declare the
    /// function, or whose declaration the reader does not understand ([`Error::Cudarc`]); a
    /// layout the driver does not confirm ([`Error::ParamLayoutMismatch`]).
    ///
    /// # Safety
    /// `image` is the image `function`'s module was loaded from (or declares the function with
    /// exactly its parameters). Each parameter the image declares is confirmed, but the
    /// driver cannot be asked whether one follows the last without a refused call: an image
    /// declaring fewer parameters than the function has (a stale PTX of an older version)
    /// would make the crate launch the kernel with its last parameters unset, which it may
    /// read as pointers. [`Kernel::from_cudarc`] has no such condition.
    pub unsafe fn from_cudarc_image(
        ctx: &Arc<CudaContext>,
        function: &CudaFunction,
        image: &[u8],
    ) -> Result<Kernel> {
        from_function(ctx, function, Some(image))
    }
}

/// [`Kernel::from_cudarc`] and [`Kernel::from_cudarc_image`]: the layout from `image` where
/// given, else probed.
fn from_function(
    ctx: &Arc<CudaContext>,
    function: &CudaFunction,
    image: Option<&[u8]>,
) -> Result<Kernel> {
    let device = Device::from_cudarc(ctx)?;
    ctx.bind_to_thread().map_err(|e| Error::CudarcCall {
        call: "CudaContext::bind_to_thread",
        message: e.to_string(),
    })?;
    let f: crate::sys::CUfunction = function.cu_function().cast();
    // SAFETY: `f` is live: `function` holds its module, and the kernel made below keeps a
    // clone of `function`.
    let name = unsafe { dr::name(f)? };
    // SAFETY: as above; indexes past the last parameter answer `None`.
    let query = &mut |index| unsafe { dr::param_info(f, index) };
    let (params, source) = match image {
        None => (probed(query)?, ParamSource::Probed),
        Some(image) => {
            let Some((layout, source)) = described_params(image, &name) else {
                return Err(Error::Cudarc {
                    what: "Kernel::from_cudarc_image",
                    problem: format!(
                        "the image (PTX, a cubin or a fatbin) does not declare kernel `{name}`, or its \
                         parameters are not understood: pass the image its module was loaded \
                         from, or use Kernel::from_cudarc"
                    ),
                });
            };
            (confirmed(&name, &layout, query)?, source)
        }
    };
    // SAFETY: as above.
    let (max_threads, static_smem, max_dynamic) = unsafe {
        (
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
        source,
        max_threads.max(0) as u32,
        static_smem.max(0) as usize,
        AtomicUsize::new(max_dynamic.max(0) as usize),
        Box::new(function.clone()),
    ))
}
