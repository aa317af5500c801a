//! Kernels: [`Kernel`] with its parameter layout, the checks of arguments and launch shapes,
//! plain stream launches, and the launch shapes themselves ([`Dim3`], [`LaunchConfig`]).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::args::KernelArg;
use super::library::ModuleInner;
use crate::device::Owner;
use crate::device::{Device, DeviceKey, DeviceLimits};
use crate::error::{Error, Result};
use crate::memory::Allocation;
use crate::result::runtime as rt;
use crate::stream::queue::Queued;
use crate::stream::track;
use crate::stream::Stream;
use crate::sys;

/// Where one kernel parameter lies in the parameter buffer, as `cudaFuncGetParamInfo` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// Byte offset.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// How a kernel's parameter layout was learned ([`Kernel::param_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParamSource {
    /// From the cubin's `.nv.info` section (the parameter count and layout), each parameter
    /// confirmed by `cudaFuncGetParamInfo`: no CUDA call failed.
    Cubin,
    /// From the PTX's `.entry` declaration (the parameter count, sizes and alignments), each
    /// parameter confirmed by `cudaFuncGetParamInfo`: no CUDA call failed.
    Ptx,
    /// From every image of a fatbin (its cubins' `.nv.info` sections and its PTX's `.entry`
    /// declarations, decompressed where they are compressed), which all describe the same
    /// layout, each parameter confirmed by `cudaFuncGetParamInfo`: no CUDA call failed.
    Fatbin,
    /// From `cudaFuncGetParamInfo` alone, asked for parameter 0, 1, … until CUDA refused the
    /// index past the last (`cudaErrorInvalidValue`, cleared from the thread's last error, but
    /// listed by `compute-sanitizer` as an API error): cubins whose description of the
    /// parameters the crate does not read, fatbins with an image it cannot read (LZ4, an
    /// unknown kind) or whose images disagree, and cudarc functions taken without their image
    /// (`Kernel::from_cudarc`, feature `cudarc`).
    Probed,
    /// Given by the caller: a [`RecordingBackend`](crate::dag::RecordingBackend)'s kernel.
    Given,
}

/// The 8-byte words that hold the argument values of a kernel with parameters `params` (the
/// end of the last one, rounded up; at least one word, so that packed arguments always have
/// room for their values' start).
pub(super) fn value_words(params: &[ParamInfo]) -> usize {
    let end = params.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
    end.div_ceil(8).max(1)
}

pub(super) enum KernelOrigin {
    Module {
        module: Arc<ModuleInner>,
    },
    /// A recording backend's kernel: a layout without code.
    Recording(u64),
}

/// A kernel's code as CUDA takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelCode {
    /// A kernel of a library (`cudaLibraryGetKernel`): the runtime's `cudaKernel_t`, the
    /// driver's `CUkernel`, valid in every context of its device.
    Library(sys::cudaKernel_t),
    /// A function of one context (`cuModuleGetFunction`: a cudarc `CudaFunction`), the
    /// driver's `CUfunction`. The runtime's graph calls refuse it (on the H100 with CUDA 13.0,
    /// `cudaGraphAddNode`, `cudaFuncGetParamInfo` and `cudaFuncGetAttributes` answer
    /// `cudaErrorInvalidResourceHandle`), so its nodes, launches and queries go to the driver
    /// (`src/cudarc_interop/function.rs`).
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    Function(sys::CUfunction),
}

impl KernelCode {
    /// The handle as the `func` of a `cudaKernelNodeParams` (and the driver's `func` or
    /// `kern`, see [`KernelCode::is_function`]).
    pub(crate) fn as_ptr(self) -> *mut c_void {
        match self {
            KernelCode::Library(k) => k.cast(),
            KernelCode::Function(f) => f.cast(),
        }
    }

    /// Whether the handle is a context's function rather than a library's kernel.
    pub(crate) fn is_function(self) -> bool {
        matches!(self, KernelCode::Function(_))
    }
}

pub(crate) struct KernelInner {
    pub(super) name: String,
    pub(super) raw: Option<KernelCode>,
    pub(super) params: Vec<ParamInfo>,
    pub(super) param_source: ParamSource,
    /// 8-byte words the argument values take (at least one): see [`value_words`].
    pub(super) value_words: usize,
    pub(super) max_threads_per_block: u32,
    pub(super) static_shared_mem: usize,
    pub(super) max_dynamic_shared_mem: AtomicUsize,
    pub(super) origin: KernelOrigin,
}

// SAFETY: kernel handles may be used from any thread.
unsafe impl Send for KernelInner {}
// SAFETY: as above.
unsafe impl Sync for KernelInner {}

/// A kernel of a [`Module`](super::Module), with its parameter layout. Cheap to clone; keeps its
/// module loaded.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelInner>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.inner.name)
            .field("params", &self.inner.params)
            .finish()
    }
}

impl Kernel {
    /// A kernel that has a name and a parameter layout but no code, made by a
    /// [`RecordingBackend`](crate::dag::RecordingBackend).
    pub(crate) fn recording(name: &str, param_sizes: &[usize], backend_id: u64) -> Kernel {
        let mut offset = 0usize;
        let params = param_sizes
            .iter()
            .map(|&size| {
                let align = size.clamp(1, 8).next_power_of_two();
                offset = offset.div_ceil(align) * align;
                let p = ParamInfo { offset, size };
                offset += size;
                p
            })
            .collect::<Vec<_>>();
        Kernel {
            inner: Arc::new(KernelInner {
                name: name.to_string(),
                raw: None,
                value_words: value_words(&params),
                params,
                param_source: ParamSource::Given,
                max_threads_per_block: 1024,
                static_shared_mem: 0,
                max_dynamic_shared_mem: AtomicUsize::new(48 * 1024),
                origin: KernelOrigin::Recording(backend_id),
            }),
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The parameter layout.
    pub fn params(&self) -> &[ParamInfo] {
        &self.inner.params
    }

    /// How the parameter layout was learned: from the cubin (confirmed by CUDA), or by asking
    /// CUDA past the last parameter.
    pub fn param_source(&self) -> ParamSource {
        self.inner.param_source
    }

    /// The most threads per block this kernel can be launched with (registers permitting).
    pub fn max_threads_per_block(&self) -> u32 {
        self.inner.max_threads_per_block
    }

    /// The most dynamic shared memory a launch may ask for (bytes).
    pub fn max_dynamic_shared_mem(&self) -> usize {
        self.inner.max_dynamic_shared_mem.load(Ordering::Relaxed)
    }

    /// Lets launches of this kernel use up to `bytes` of dynamic shared memory (above the
    /// 48 KiB default, up to the device's opt-in limit).
    pub fn set_max_dynamic_shared_mem(&self, bytes: usize) -> Result<()> {
        let value = i32::try_from(bytes).unwrap_or(i32::MAX);
        match self.inner.raw {
            // SAFETY: the kernel is live.
            Some(KernelCode::Library(raw)) => unsafe {
                rt::func_set_attribute(
                    raw as *const c_void,
                    sys::cudaFuncAttribute::cudaFuncAttributeMaxDynamicSharedMemorySize,
                    value,
                )?
            },
            #[cfg(feature = "cudarc")]
            // SAFETY: the function is live (its module is held by `self`).
            Some(KernelCode::Function(f)) => unsafe {
                crate::result::cudarc::set_max_dynamic_shared_mem(f, value)?
            },
            _ => {}
        }
        self.inner
            .max_dynamic_shared_mem
            .store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// How many blocks of `block_threads` threads with `dynamic_smem` bytes of dynamic shared
    /// memory fit on one multiprocessor at once (`cudaOccupancyMaxActiveBlocksPerMultiprocessor`),
    /// or `None` for a recording backend's kernel (which has no code to measure).
    pub fn max_active_blocks_per_multiprocessor(
        &self,
        block_threads: u32,
        dynamic_smem: usize,
    ) -> Result<Option<u32>> {
        let (Some(raw), Ok(device)) = (self.inner.raw, self.home()) else {
            return Ok(None);
        };
        device.bind()?;
        let threads = i32::try_from(block_threads).unwrap_or(i32::MAX);
        let n = match raw {
            // SAFETY: the kernel is live (its module is held by `self`), of the current device.
            KernelCode::Library(k) => unsafe {
                rt::occupancy_max_active_blocks(k as *const c_void, threads, dynamic_smem)?
            },
            #[cfg(feature = "cudarc")]
            // SAFETY: the function is live (its module is held by `self`) and of the current
            // context: `bind` made the device's primary context current, the context
            // `Kernel::from_cudarc` requires the function's module to be loaded in.
            KernelCode::Function(f) => unsafe {
                crate::result::cudarc::occupancy(f, threads, dynamic_smem)?
            },
            #[cfg(not(feature = "cudarc"))]
            KernelCode::Function(_) => unreachable!("made only with the cudarc feature"),
        };
        Ok(Some(n.max(0) as u32))
    }

    /// The code, or `None` for a recording backend's kernel.
    pub(crate) fn raw(&self) -> Option<KernelCode> {
        self.inner.raw
    }

    /// The device of the kernel's module, or the recording backend's id.
    /// The device (or recording backend) the kernel belongs to.
    pub(crate) fn key(&self) -> DeviceKey {
        match self.home() {
            Ok(d) => d.key(),
            Err(id) => DeviceKey::Recording(id),
        }
    }

    pub(crate) fn home(&self) -> std::result::Result<&Device, u64> {
        match &self.inner.origin {
            KernelOrigin::Module { module } => Ok(&module.device),
            KernelOrigin::Recording(id) => Err(*id),
        }
    }

    /// Checks `args` against the parameter layout: count, each size, and buffers on the
    /// kernel's device. The error says which argument is wrong.
    pub fn check_args(&self, args: &[KernelArg]) -> Result<()> {
        self.args_problem(args).map_or(Ok(()), |problem| {
            Err(Error::KernelArgs {
                node: None,
                kernel: self.name().to_string(),
                problem,
            })
        })
    }

    pub(crate) fn args_problem(&self, args: &[KernelArg]) -> Option<String> {
        self.args_layout_problem(args).or_else(|| {
            args.iter().enumerate().find_map(|(i, a)| {
                if a.conditional.is_some() {
                    // Its bytes are a placeholder: only lowering a graph gives the handle.
                    return Some(format!(
                        "argument {i} is a conditional handle, which only a kernel node of the \
                         graph that declared it can take (not a stream launch)"
                    ));
                }
                if a.device_node.is_some() {
                    // Its bytes are a placeholder: CUDA gives the handle in a built graph.
                    return Some(format!(
                        "argument {i} is a device-updatable kernel node's handle, which only a \
                         kernel node of the DAG that declared it can take (not a stream launch)"
                    ));
                }
                if a.device_graph.is_some() {
                    // CUDA launches a device graph only from a kernel of another graph, and
                    // only a node keeps the graph alive for its launches.
                    return Some(format!(
                        "argument {i} is a device graph, which only a kernel node of a DAG can \
                         take (CUDA launches a graph from the device only from a graph's kernel)"
                    ));
                }
                if a.graph_buffer.is_some() {
                    // No address outside a built graph: the allocation lives in its span.
                    return Some(format!(
                        "argument {i} is a graph-allocated buffer, which only a kernel node of \
                         the DAG that allocates it can take (not a stream launch)"
                    ));
                }
                if a.buffer.is_some_and(|b| b.is_lent()) {
                    // Its owner is cudarc's slice, which only a graph launch binds.
                    return Some(format!(
                        "argument {i} is memory lent by cudarc (a Lent), which only graph \
                         launches that bind its slice take (Exec::launch_lent); launch on a \
                         stream with cudarc's own launch builder"
                    ));
                }
                self.arg_device_problem(i, a)
            })
        })
    }

    /// [`Kernel::args_problem`] without the device check: buffers may be of any device of
    /// the kernel's backend (CUDA, or the kernel's recording backend). For DAG nodes, whose
    /// validation checks each buffer against the node's device and peer access.
    pub(crate) fn args_layout_problem(&self, args: &[KernelArg]) -> Option<String> {
        let params = &self.inner.params;
        if args.len() != params.len() {
            return Some(format!(
                "takes {} argument{} but {} were given",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                args.len()
            ));
        }
        args.iter()
            .enumerate()
            .find_map(|(i, a)| self.arg_layout_problem(i, a))
    }

    /// Whether `args` match the layout: no [`Kernel::args_layout_problem`], found without
    /// describing one (adding a kernel node checks this; the description is made only for
    /// an error).
    #[inline]
    pub(crate) fn args_fit_layout(&self, args: &[KernelArg]) -> bool {
        let params = &self.inner.params;
        args.len() == params.len()
            && args.iter().zip(params.iter()).all(|(a, p)| {
                a.size() == p.size
                    && a.buffer.is_none_or(|b| {
                        b.space == crate::memory::MemorySpace::Device
                            && self.key().same_backend(b.owner.key())
                    })
            })
    }

    /// Whether `alloc` is memory of the kernel's device (or recording backend).
    pub(crate) fn owns(&self, alloc: &Allocation) -> bool {
        match (self.home(), &alloc.owner) {
            (Ok(d), Owner::Cuda(bd)) => d == bd,
            (Err(k), Owner::Recording(b)) => k == *b,
            _ => false,
        }
    }

    /// A buffer argument `i` of another device than the kernel's.
    fn arg_device_problem(&self, i: usize, a: &KernelArg) -> Option<String> {
        match &a.buffer {
            Some(alloc) if !self.owns(alloc) => Some(format!(
                "argument {i} is a buffer of another device or backend than the kernel's"
            )),
            _ => None,
        }
    }

    /// What is wrong with `a` as argument `i`, device aside (see
    /// [`Kernel::args_layout_problem`]); a buffer of another backend than the kernel's is
    /// still a problem.
    pub(crate) fn arg_layout_problem(&self, i: usize, a: &KernelArg) -> Option<String> {
        let params = &self.inner.params;
        let Some(p) = params.get(i) else {
            return Some(format!(
                "has {} parameters; there is no argument {i}",
                params.len()
            ));
        };
        if a.size() != p.size {
            return Some(format!(
                "argument {i} is {} bytes ({}) but parameter {i} is {} bytes",
                a.size(),
                a.describe(),
                p.size
            ));
        }
        if let Some(alloc) = &a.buffer {
            if !self.key().same_backend(alloc.owner.key()) {
                return Some(format!(
                    "argument {i} is a buffer of another device or backend than the kernel's"
                ));
            }
            if alloc.space != crate::memory::MemorySpace::Device {
                return Some(format!(
                    "argument {i} is a pinned host buffer; kernels take device buffers"
                ));
            }
        }
        None
    }

    /// Checks a launch shape against the device's and this kernel's limits.
    pub fn check_launch(&self, limits: &DeviceLimits, cfg: &LaunchConfig) -> Result<()> {
        self.launch_problem(limits, cfg).map_or(Ok(()), |problem| {
            Err(Error::LaunchShape {
                node: None,
                kernel: self.name().to_string(),
                problem,
            })
        })
    }

    pub(crate) fn launch_problem(
        &self,
        limits: &DeviceLimits,
        cfg: &LaunchConfig,
    ) -> Option<String> {
        // Formats only when something is wrong: this runs for every kernel node.
        let (g, b) = (cfg.grid, cfg.block);
        let shape = || format!("grid {g} block {b}");
        let gd = [g.x, g.y, g.z];
        let bd = [b.x, b.y, b.z];
        if gd.contains(&0) || bd.contains(&0) {
            return Some(format!("{} has a zero dimension", shape()));
        }
        for (i, axis) in ["x", "y", "z"].iter().enumerate() {
            if bd[i] > limits.max_block_dim[i] {
                return Some(format!(
                    "{}: block.{axis} = {} exceeds the device's {}",
                    shape(),
                    bd[i],
                    limits.max_block_dim[i]
                ));
            }
            if gd[i] > limits.max_grid_dim[i] {
                return Some(format!(
                    "{}: grid.{axis} = {} exceeds the device's {}",
                    shape(),
                    gd[i],
                    limits.max_grid_dim[i]
                ));
            }
        }
        let threads = cfg.block.count();
        let max = limits
            .max_threads_per_block
            .min(self.inner.max_threads_per_block.max(1)) as u64;
        if threads > max {
            return Some(format!(
                "{}: {threads} threads per block exceed the limit of {max} (device {}, kernel {})",
                shape(),
                limits.max_threads_per_block,
                self.inner.max_threads_per_block
            ));
        }
        let dynamic = cfg.shared_mem_bytes as usize;
        let allowed = self
            .max_dynamic_shared_mem()
            .min(limits.max_shared_mem_per_block_optin);
        if dynamic > allowed {
            return Some(format!(
                "{}: {dynamic} bytes of dynamic shared memory exceed the {allowed} allowed \
                 (raise it with Kernel::set_max_dynamic_shared_mem, up to the device's {})",
                shape(),
                limits.max_shared_mem_per_block_optin
            ));
        }
        if dynamic + self.inner.static_shared_mem > limits.max_shared_mem_per_block_optin {
            return Some(format!(
                "{}: {dynamic} dynamic + {} static bytes of shared memory exceed the device's {}",
                shape(),
                self.inner.static_shared_mem,
                limits.max_shared_mem_per_block_optin
            ));
        }
        None
    }

    /// Launches the kernel on `stream` (a plain stream launch, outside any graph), after
    /// checking the arguments and the launch shape. The buffers passed and the kernel's module
    /// may be dropped at once: their memory is released only after the launch has run (and
    /// host access to them waits for it). The launch is ordered with the work on `stream` only.
    ///
    /// Kernel code is trusted as FFI code is: the crate checks each argument's size against
    /// the parameter's, keeps tracked buffers alive, and cannot check what the kernel does
    /// with them.
    pub fn launch(&self, stream: &Stream, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let device = stream.device();
        let module = match &self.inner.origin {
            KernelOrigin::Module { module } if &module.device == device => module,
            _ => {
                return Err(Error::WrongDevice {
                    node: None,
                    problem: format!("kernel `{}` is not on the stream's device", self.name()),
                })
            }
        };
        self.check_args(args)?;
        self.check_launch(device.limits(), &cfg)?;
        // Locked before queuing, marked before unlocking: ordered with the synchronous helpers.
        let buffers = args
            .iter()
            .filter_map(|a| a.buffer.as_ref().map(|b| &b.uses));
        let mut uses = track::lock_all(
            "Kernel::launch",
            std::iter::once(&module.uses).chain(buffers),
        )?;
        let tail = stream.queue()?;
        // SAFETY: arguments and shape were just checked against the kernel's layout and the
        // device; the kernel is live (its module is held); the buffers and the module are kept
        // from being freed until the launch has run by the marker noted below.
        unsafe { self.launch_raw(tail.raw(), cfg, args)? };
        match tail.mark_queued() {
            Queued::Marked(m) => {
                uses.add_marker(&m);
                Ok(())
            }
            // The launch has run: nothing to note.
            Queued::Ran(e) => Err(e),
            Queued::Unknown(e) => {
                // The launch may still run: its module and buffers may never be freed, nor
                // accessed by the host.
                uses.add_lost();
                std::mem::forget(Arc::clone(module));
                for a in args {
                    if let Some(b) = &a.buffer {
                        std::mem::forget(Arc::clone(b));
                    }
                }
                Err(e)
            }
        }
    }

    /// Launches without checking anything.
    ///
    /// # Safety
    /// `args` match the parameter layout ([`Kernel::check_args`]), the shape is valid
    /// ([`Kernel::check_launch`]), the kernel and the stream are on one device, and the
    /// buffers and the kernel's module stay alive, and pinned memory the kernel uses is not
    /// accessed by the host, until the launch has run (nothing here tracks them).
    pub unsafe fn launch_unchecked(
        &self,
        stream: &Stream,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        let tail = stream.queue()?;
        // SAFETY: the caller's contract.
        unsafe { self.launch_raw(tail.raw(), cfg, args) }
    }

    /// [`Kernel::launch_unchecked`] on a raw stream (whose tail the caller holds).
    ///
    /// # Safety
    /// As [`Kernel::launch_unchecked`]; `stream` is a live stream of the kernel's device.
    unsafe fn launch_raw(
        &self,
        stream: sys::cudaStream_t,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        let Some(raw) = self.inner.raw else {
            return Err(Error::WrongDevice {
                node: None,
                problem: format!(
                    "kernel `{}` was made by a RecordingBackend and has no code",
                    self.name()
                ),
            });
        };
        const MAX: usize = 64;
        let mut heap: Vec<*mut c_void>;
        let mut stack = [std::ptr::null_mut::<c_void>(); MAX];
        let ptrs: &mut [*mut c_void] = if args.len() > MAX {
            heap = args.iter().map(|a| a.as_ptr()).collect();
            &mut heap
        } else {
            for (p, a) in stack.iter_mut().zip(args) {
                *p = a.as_ptr();
            }
            &mut stack
        };
        match raw {
            // SAFETY: the caller's contract; `ptrs` holds one pointer per argument.
            KernelCode::Library(k) => unsafe {
                rt::launch_kernel(
                    k as *const c_void,
                    cfg.grid.into(),
                    cfg.block.into(),
                    ptrs.as_mut_ptr(),
                    cfg.shared_mem_bytes as usize,
                    stream,
                )
            },
            #[cfg(feature = "cudarc")]
            // SAFETY: as above.
            KernelCode::Function(f) => unsafe {
                crate::result::cudarc::launch(
                    f,
                    cfg.grid.into(),
                    cfg.block.into(),
                    cfg.shared_mem_bytes,
                    ptrs.as_mut_ptr(),
                    stream,
                )
            },
            #[cfg(not(feature = "cudarc"))]
            KernelCode::Function(_) => unreachable!("made only with the cudarc feature"),
        }
    }
}

// ---- launch shapes -------------------------------------------------------------------------

/// Three dimensions of a grid or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// x
    pub x: u32,
    /// y
    pub y: u32,
    /// z
    pub z: u32,
}

impl Dim3 {
    /// `x · y · z`, saturating at `u64::MAX` (three `u32`s can need 96 bits).
    pub(crate) fn count(self) -> u64 {
        (self.x as u64 * self.y as u64).saturating_mul(self.z as u64)
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}
impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}
impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}
impl From<Dim3> for sys::dim3 {
    fn from(d: Dim3) -> sys::dim3 {
        sys::dim3 {
            x: d.x,
            y: d.y,
            z: d.z,
        }
    }
}
impl std::fmt::Display for Dim3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({},{},{})", self.x, self.y, self.z)
    }
}

/// A launch shape: grid and block dimensions and dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A shape with no dynamic shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> Self {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_mem_bytes: 0,
        }
    }

    /// Enough blocks of `block` threads (1D) to cover `n` elements.
    pub fn for_elements(n: u32, block: u32) -> Self {
        LaunchConfig::new(n.div_ceil(block.max(1)).max(1), block)
    }

    /// The same shape with `bytes` of dynamic shared memory.
    pub fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_count_and_size_are_named() {
        let k = Kernel::recording("saxpy", &[4, 8], 1);
        let e = k.check_args(&crate::args![1.0f32]).unwrap_err().to_string();
        assert!(
            e.contains("saxpy") && e.contains("takes 2 arguments but 1"),
            "{e}"
        );
        let e = k
            .check_args(&crate::args![1.0f32, 2u32])
            .unwrap_err()
            .to_string();
        assert!(e.contains("argument 1 is 4 bytes (u32"), "{e}");
    }

    #[test]
    fn launch_shapes_are_checked() {
        let k = Kernel::recording("k", &[], 1);
        let l = DeviceLimits::hopper();
        assert!(k.check_launch(&l, &LaunchConfig::new(10, 256)).is_ok());
        let e = k
            .check_launch(&l, &LaunchConfig::new(1, 2048))
            .unwrap_err()
            .to_string();
        assert!(e.contains("block.x = 2048"), "{e}");
        let e = k
            .check_launch(&l, &LaunchConfig::new(1, (32, 32, 2)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2048 threads per block"), "{e}");
        let e = k
            .check_launch(&l, &LaunchConfig::new(0, 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("zero"), "{e}");
        let e = k
            .check_launch(&l, &LaunchConfig::new(1, 1).with_shared_mem(100_000))
            .unwrap_err()
            .to_string();
        assert!(e.contains("dynamic shared memory"), "{e}");
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid.x, 4);
    }
}
