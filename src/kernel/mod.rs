//! Kernels: compiling CUDA C++ with NVRTC, loading it as a module, reading each kernel's
//! parameter layout, typed arguments, launch shapes, and plain stream launches.
//!
//! - `compile`: NVRTC [`compile`](fn@compile), [`CompileOptions`], [`CodeKind`], [`Compiled`], the
//!   architecture picked, the toolkit's include directory, the on-disk cache (`crate::cache`).
//! - `module`: [`Module`] (`cudaLibrary_t`).
//! - `cubin`: a kernel's parameter layout read from a cubin's `.nv.info` section, so that
//!   [`Module::kernel`] counts parameters without a refused CUDA call.
//! - `fatbin`: the images (cubins, PTX; zstd-compressed ones decompressed) of a fatbin, read
//!   the same way.
//! - `launch`: [`Kernel`] and its [`ParamInfo`] layout, argument and launch-shape checks,
//!   stream launches, [`Dim3`], [`LaunchConfig`].
//! - `args`: [`KernelArg`], [`args!`](crate::args).
//! - `conditional`: [`Conditional`] (a conditional node's handle as a kernel argument) and
//!   [`CONDITIONAL_INCLUDE`], what source that sets one needs.
//! - `device_node`: [`DeviceNode`] (a device-updatable kernel node's handle as a kernel
//!   argument) and [`DEVICE_UPDATE_INCLUDE`].
//! - `device_graph`: [`DeviceGraph`] (an executable graph launched from the device, as a
//!   kernel argument that keeps it alive).
//! - `attributes`: [`LaunchAttributes`] of kernel nodes (priority, clusters, cooperative
//!   launch, carve-out, L2 access-policy window, memory-sync domain) and their checks.
//! - `packed`: `PackedArgs` (arguments at the parameter offsets, as nodes keep them),
//!   `ArgArena`, `ArgScratch`.
//! - `arena`: `Arena`, the shared chunks a DAG's kernel nodes carve their argument blocks from.
//! - `link`: linking relocatable NVRTC output with the device runtime (`libcudadevrt.a`) by the
//!   driver's JIT linker, for [`CodeKind::DeviceRuntime`].
//! - `library`: the loaded `cudaLibrary_t` a [`Module`] and its kernels share (below both
//!   `module` and `launch`, so neither imports the other's file back).

mod arena;
mod args;
mod attributes;
mod compile;
mod conditional;
mod cubin;
mod device_graph;
mod device_node;
mod fatbin;
mod launch;
mod library;
mod link;
mod module;
mod packed;
mod ptx;

pub use args::{Access, In, InOut, KernelArg, Out};
pub use attributes::{
    AccessPolicy, AccessProperty, LaunchAttributes, MemSyncDomain, MAX_PORTABLE_CLUSTER,
};
pub use compile::{compile, cudadevrt_path, nvrtc_version, CodeKind, CompileOptions, Compiled};
pub use conditional::{toolkit_include_dir, Conditional, CONDITIONAL_INCLUDE};
pub use device_graph::DeviceGraph;
pub(crate) use device_graph::DeviceGraphInner;
pub use device_node::{DeviceNode, DEVICE_UPDATE_INCLUDE};
pub use launch::{Dim3, Kernel, LaunchConfig, ParamInfo, ParamSource};
pub use module::Module;
#[cfg(feature = "cudarc")]
pub(crate) use module::{confirmed, described_params, probed};
pub(crate) use packed::{ArgArena, ArgScratch, PackedArgs};
