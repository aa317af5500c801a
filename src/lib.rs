//! # cudagraph
//!
//! Build CUDA graphs **explicitly**, as DAGs: kernels, copies, memsets, host closures, child
//! graphs and cuFFT transforms are named nodes of a [`petgraph`] graph. The DAG is validated
//! (cycles, argument sizes, launch shapes, copy bounds, devices) before CUDA sees it, exported to
//! DOT for inspection, lowered to `cudaGraphAdd*Node` calls (no stream capture in the user's
//! model), instantiated, launched any number of times, and updated between launches without
//! re-instantiating.
//!
//! Nothing is linked at build time: the CUDA runtime, cuFFT, NVRTC and NCCL are loaded when first
//! needed ([`load`]), and their absence is a typed [`Error`], so the crate builds and its
//! host-side tests run on machines without a GPU or a CUDA toolkit.
//!
//! ## Lifecycle
//!
//! 1. **Build**: [`Dag::add_kernel`], [`Dag::add_copy`], [`Dag::add_memset`], [`Dag::add_host`],
//!    [`Dag::add_empty`], [`Dag::add_child`], [`Dag::add_fft`], [`Dag::add_event_record`],
//!    [`Dag::add_event_wait`], [`Dag::add_if`], [`Dag::add_if_else`], [`Dag::add_while`],
//!    [`Dag::add_switch`] (over a [`Dag::conditional_handle`]), [`Dag::add_alloc`],
//!    [`Dag::add_free`], [`Dag::add_graph_memset`] (a [`GraphBuffer`]); [`Dag::add_dependency`],
//!    [`Dag::chain`], [`Dag::fan_out`], [`Dag::fan_in`], [`Dag::add_programmatic_dependency`]
//!    (kernel to kernel), or [`Dag::infer_dependencies`] from the data the nodes touch.
//!    Arguments, bounds and cycles are checked here, and errors name the node.
//! 2. **Validate** for a device: [`Dag::validate`] (launch shapes, devices). [`Dag::to_dot`]
//!    shows the DAG.
//! 3. **Lower**: [`Dag::lower`] through a [`Backend`]: [`CudaBackend`] makes the CUDA calls,
//!    [`RecordingBackend`] records them (no GPU needed).
//! 4. **Instantiate**: [`Dag::instantiate`] gives an [`Exec`], which keeps alive every buffer,
//!    kernel, closure and cuFFT state the graph uses.
//! 5. **Launch and update**: [`Exec::launch`]; [`Exec::set_kernel_arg`],
//!    [`Exec::set_kernel_args`], [`Exec::set_launch_config`], [`Exec::set_copy`],
//!    [`Exec::set_memset_value`], [`Exec::set_host_fn`], [`Exec::set_enabled`],
//!    [`Exec::set_fft_params`], [`Exec::set_event`] per node; [`Exec::update`] / [`Exec::update_or_reinstantiate`]
//!    for the whole graph. An update applies to launches issued after it; queued launches keep
//!    their parameters.
//!
//! ## Node kinds and the CUDA calls they become
//!
//! Every node is lowered through one backend method with CUDA's generic node parameters
//! (`cudaGraphNodeParams`, added with `cudaGraphAddNode`); the exceptions are named. Kernels
//! keep the kernel-specific calls, which do the same job at 3–17% less CPU time per call
//! (measured, `docs/performance/`); a kernel with edge data goes through `cudaGraphAddNode`.
//! A kernel node's per-node update on an [`Exec`] (an FFT node's parameter update included)
//! is the one operation made through the driver (`cuGraphExecKernelNodeSetParams`, with the
//! kernel and its device's primary context): it takes about 0.6 of the runtime's call (0.18
//! against 0.29 µs on the H200), and it is what a streaming pipeline does between launches.
//!
//! | DAG node | builder | CUDA runtime call | per-node update on [`Exec`] |
//! |---|---|---|---|
//! | kernel | [`Dag::add_kernel`] | `cudaGraphAddKernelNode`; [`LaunchAttributes`] ([`Dag::set_launch_attributes`]: priority, cluster dimensions, cooperative, carve-out, L2 access-policy window, memory-sync domain) with `cudaGraphKernelNodeSetAttribute` | `cuGraphExecKernelNodeSetParams` (driver API) |
//! | copy 1D | [`Dag::add_copy`] | `cudaGraphAddMemcpyNode1D` (no pitch limit) | `cudaGraphExecMemcpyNodeSetParams1D` |
//! | copy 2D | [`Dag::add_memcpy_2d`] | `cudaGraphAddNode` (memcpy, `cudaMemcpy3DParms`) | whole-graph update |
//! | memset 1D / 2D | [`Dag::add_memset`], [`Dag::add_memset_2d`] | `cudaGraphAddNode` (memset) | `cudaGraphExecNodeSetParams` |
//! | host closure | [`Dag::add_host`] | `cudaGraphAddNode` (host) | `cudaGraphExecNodeSetParams` |
//! | empty | [`Dag::add_empty`] | `cudaGraphAddNode` (empty) | — |
//! | event record / wait | [`Dag::add_event_record`], [`Dag::add_event_wait`] | `cudaGraphAddNode` (event record, wait event); the node keeps its [`Event`] alive | [`Exec::set_event`]: `cudaGraphExecNodeSetParams` |
//! | child DAG | [`Dag::add_child`] | `cudaGraphAddNode` (graph, cloned) | whole-graph update |
//! | conditional (IF, IF/ELSE, WHILE, SWITCH) | [`Dag::add_if`], [`Dag::add_if_else`], [`Dag::add_while`], [`Dag::add_switch`]; bodies are [`Dag`]s; the handle from [`Dag::conditional_handle`] is a kernel argument ([`Conditional`]; source includes [`CONDITIONAL_INCLUDE`]) | `cudaGraphConditionalHandleCreate` (reset to its default at each launch), then `cudaGraphAddNode` (conditional); each body lowered into its graph from `phGraph_out` | whole-graph update (reaches the bodies' nodes) |
//! | graph memory: allocation / free | [`Dag::add_alloc`] (returns a [`GraphBuffer`], used as a kernel argument and by [`Dag::add_graph_memset`] between its allocation and free, validated), [`Dag::add_free`]; [`InstantiateFlags::auto_free_on_launch`] for allocations never freed | `cudaGraphAddNode` (mem alloc: the address CUDA returns in `dptr` is written into the nodes using the buffer; mem free) | — (a whole-graph update is refused: [`Exec::update_or_reinstantiate`] instantiates again) |
//! | device-updatable kernel | [`Dag::device_node`] on a kernel node; the [`DeviceNode`] is an argument of the kernels that update it (source includes [`DEVICE_UPDATE_INCLUDE`]) | the kernel node, then `cudaGraphKernelNodeSetAttribute` (`cudaLaunchAttributeDeviceUpdatableKernelNode`, the handle read back); kernels added before it get the handle with `cudaGraphKernelNodeSetParams` | on the device: `cudaGraphKernelNodeSetGridDim`, `SetEnabled`, `SetParam`; on the host as a kernel (then uploaded again); no whole-graph update |
//! | kernel launching a device graph | [`InstantiateFlags::device_launch`] and [`Exec::into_device_graph`] make a [`DeviceGraph`], an argument of the launching kernel (compiled with [`CodeKind::DeviceRuntime`]: NVRTC's relocatable PTX linked with `libcudadevrt.a` by `cuLinkCreate` … `cuLinkComplete`) | `cudaGraphInstantiateWithParams` (`cudaGraphInstantiateFlagDeviceLaunch`), `cudaGraphUpload`; the kernel node as any | — (the argument cannot be replaced; no whole-graph update) |
//! | FFT | [`Dag::add_fft`] | a parameter kernel node (`cudaGraphAddNode`) + `cufftExec*` captured with `cudaStreamBeginCaptureToGraph` ([`fft`]); unfused ([`Fusion`]): also a conversion kernel node | `cudaGraphExecKernelNodeSetParams` on the parameter (and conversion) node |
//! | GEMM (cuBLAS) | [`Dag::add_gemm`] with a [`Blas`] handle and a [`Gemm`] (column-major; checked against the buffers) | `cublasGemmEx` captured with `cudaStreamBeginCaptureToGraph`, after setting the node's own workspace ([`blas`]) | whole-graph update (captures again) |
//! | collective (NCCL) | [`Dag::add_all_reduce`] and the others of [`nccl`] | `ncclAllReduce` & co. captured with `cudaStreamBeginCaptureToGraph`, inside [`Communicators::instantiate`] | whole-graph rebuild |
//! | enable/disable | — | — | `cudaGraphNodeSetEnabled` |
//! | programmatic edge (kernel to kernel) | [`Dag::add_programmatic_dependency`] ([`ProgrammaticPort`]; the later kernel calls `cudaGridDependencySynchronize()`) | `cudaGraphAddNode` of the later kernel with `cudaGraphEdgeData` (type programmatic, the port as `from_port`) | whole-graph update keeps it; a change of edge kind is refused |
//! | whole graph | — | `cudaGraphInstantiate` | `cudaGraphExecUpdate` |
//!
//! ## Layers
//!
//! | layer | module | what it is |
//! |---|---|---|
//! | raw | [`sys`] | bindgen output for `wrapper.h` (runtime, cuFFT, NVRTC, NCCL, cuBLAS's GEMM calls), never edited |
//! | loading | [`load`] | run-time loading of the libraries, typed errors |
//! | thin | [`result`] | one `unsafe fn` per library call, returning [`Result`] |
//! | safe | crate root, [`dag`], [`fft`], [`nccl`], [`blas`] | owning types with `Drop`, the DAG builder, executable graphs |
//!
//! ## Example
//!
//! Without a GPU, a [`RecordingBackend`] stands in for the device: the DAG is built, validated
//! and lowered, and the calls that would be made are recorded.
//!
//! ```
//! use cudagraph::{args, dst, src, Dag, DeviceLimits, LaunchConfig, RecordingBackend};
//!
//! # fn main() -> cudagraph::Result<()> {
//! let mut rec = RecordingBackend::new(DeviceLimits::hopper());
//! let x = rec.device_buffer::<f32>(1 << 20);
//! let host = rec.host_buffer::<f32>(1 << 20);
//! let scale = rec.kernel("scale", &[8, 4, 4]); // (float* x, float a, int n)
//!
//! let mut dag = Dag::new();
//! let up = dag.add_copy(dst(&x), src(&host))?;
//! let k = dag.add_kernel(&scale, LaunchConfig::for_elements(1 << 20, 256),
//!                        &args![&x, 2.0f32, 1i32 << 20])?;
//! let down = dag.add_copy(dst(&host), src(&x))?;
//! dag.set_name(k, "scale x");
//! dag.chain(&[up, k, down])?;
//!
//! dag.lower(&mut rec)?;
//! assert_eq!(rec.calls()[1].function, "cudaGraphAddKernelNode");
//! assert_eq!(rec.calls()[1].kind, "kernel");
//! assert!(dag.to_dot().contains("scale x"));
//! # Ok(()) }
//! ```
//!
//! The same on a GPU (this code runs as the GPU tests do, see `tests/gpu/`):
//!
//! ```no_run
//! use cudagraph::{args, dst, src, Dag, Device, DeviceBuffer, HostBuffer, LaunchConfig, Module, Stream};
//!
//! # fn main() -> cudagraph::Result<()> {
//! let device = Device::get(0)?;
//! let stream = Stream::new(&device)?;
//! let module = Module::from_source(&device, r#"
//!     extern "C" __global__ void scale(float* x, float a, int n) {
//!         int i = blockIdx.x * blockDim.x + threadIdx.x;
//!         if (i < n) x[i] *= a;
//!     }"#)?;
//! let scale = module.kernel("scale")?;
//! let n = 1 << 20;
//! let host = HostBuffer::from_slice(&device, &vec![1.0f32; n])?;
//! let x = DeviceBuffer::<f32>::zeros(&device, n)?;
//!
//! let mut dag = Dag::new();
//! let up = dag.add_copy(dst(&x), src(&host))?;
//! let k = dag.add_kernel(&scale, LaunchConfig::for_elements(n as u32, 256),
//!                        &args![&x, 2.0f32, n as i32])?;
//! let down = dag.add_copy(dst(&host), src(&x))?;
//! dag.chain(&[up, k, down])?;
//!
//! let mut exec = dag.instantiate(&device)?;
//! for i in 0..100 {
//!     exec.set_kernel_arg(k, 1, i as f32)?; // applies to the next launch only
//!     exec.launch(&stream)?;
//! }
//! exec.synchronize()?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod blas;
mod cache;
#[cfg(feature = "cudarc")]
mod cudarc_interop;
pub mod dag;
mod device;
pub mod error;
pub mod fft;
mod foreign;
mod graph_buffer;
mod kernel;
pub mod load;
mod memory;
pub mod nccl;
pub mod result;
mod stream;
pub mod sys;

pub use blas::{Blas, Gemm, GemmScalar, Transpose};
/// The crate [`DeviceRepr`] builds on: derive `bytemuck::Pod` for your own plain-data types.
pub use bytemuck;
/// The cudarc this crate's `cudarc` feature is built against (its types are the ones
/// [`DeviceBuffer::from_cudarc`], [`Stream::from_cudarc`] and [`Device::from_cudarc`] take).
#[cfg(feature = "cudarc")]
pub use cudarc;
#[cfg(feature = "cudarc")]
pub use cudarc_interop::{Lend, Lent, LentLaunches};
pub use dag::{
    dst, src, Backend, CaptureStream, Copy2d, CudaBackend, Dag, Dst, Exec, FftNode, FftSpec,
    Hazard, HazardKind, InferredEdge, InstantiateFlags, Memset2d, MemsetValue, NodeId, NodeKind,
    NodeName, ProgrammaticPort, Race, RecordingBackend, Src, UpdateOutcome,
};
pub use dag::{NodeTime, Profile};
pub use device::{versions, Device, DeviceLimits, DeviceProperties};
pub use error::{DagError, Error, Library, Result, Version};
pub use fft::{
    nvjitlink_available, CallbackParams, CustomCallback, Direction, FftForm, FftParams, FftPlan,
    FftPlanDesc, FftType, Fusion, FusionDecision, Layout, LoadCallback, StoreCallback, StreamFft,
};
pub use foreign::ForeignOwner;
pub use graph_buffer::GraphBuffer;
pub use kernel::{
    compile, cudadevrt_path, nvrtc_version, toolkit_include_dir, Access, AccessPolicy,
    AccessProperty, CodeKind, CompileOptions, Compiled, Conditional, DeviceGraph, DeviceNode, Dim3,
    In, InOut, Kernel, KernelArg, LaunchAttributes, LaunchConfig, MemSyncDomain, Module, Out,
    ParamInfo, ParamSource, CONDITIONAL_INCLUDE, DEVICE_UPDATE_INCLUDE, MAX_PORTABLE_CLUSTER,
};
pub use memory::{DeviceBuffer, DeviceRepr, HostBuffer, MemorySpace, Region};
pub use nccl::{Comm, Communicators, NcclType, ReduceOp};
pub use stream::{Event, Stream};

/// The README's code blocks, compiled as doctests so they stay correct.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
