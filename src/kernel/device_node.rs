//! Device-updatable kernel nodes as kernel arguments: [`DeviceNode`], and what CUDA C++ that
//! updates one needs ([`DEVICE_UPDATE_INCLUDE`]).
//!
//! A kernel node marked device-updatable (`Dag::device_node`, CUDA 12.4+:
//! `cudaLaunchAttributeDeviceUpdatableKernelNode`) gets a handle (`cudaGraphDeviceNode_t`) when
//! it is added to the graph being built; device code of another kernel of that graph passes it
//! to `cudaGraphKernelNodeSetParam`, `cudaGraphKernelNodeSetEnabled`,
//! `cudaGraphKernelNodeSetGridDim` or `cudaGraphKernelNodeUpdatesApply`. The handle exists only
//! once the graph is built, so the crate hands out a [`DeviceNode`] and kernel nodes take it as
//! an argument (`KernelArg::from(&node)`, or in [`args!`](crate::args)): lowering writes the
//! graph's handle in its place.

/// The include line CUDA C++ source needs to call the device-side update functions
/// (`cudaGraphKernelNodeSetParam`, `cudaGraphKernelNodeSetEnabled`,
/// `cudaGraphKernelNodeSetGridDim`, `cudaGraphKernelNodeUpdatesApply`) and to name the
/// `cudaGraphDeviceNode_t` parameter type: the device runtime's header, as for conditional
/// handles ([`CONDITIONAL_INCLUDE`](crate::CONDITIONAL_INCLUDE)), found in the CUDA toolkit's
/// include directory ([`toolkit_include_dir`](crate::toolkit_include_dir)).
///
/// ```
/// let source = format!(
///     "{}extern \"C\" __global__ void size_next(cudaGraphDeviceNode_t next, const int* n) {{ \
///      cudaGraphKernelNodeSetGridDim(next, dim3((*n + 255) / 256)); }}",
///     cudagraph::DEVICE_UPDATE_INCLUDE
/// );
/// assert!(source.starts_with("#include <cuda_device_runtime_api.h>"));
/// ```
pub const DEVICE_UPDATE_INCLUDE: &str = super::conditional::CONDITIONAL_INCLUDE;

/// A device-updatable kernel node of a [`Dag`](crate::Dag) (`Dag::device_node`), as the kernels
/// that update it on the GPU see it: an argument of type `cudaGraphDeviceNode_t`
/// (`KernelArg::from(&node)`). Such a kernel node must be in the DAG of the updated node (not
/// in a child graph or conditional body) and run on the same device (validation checks both,
/// naming the kernel node). The value the kernel receives is the handle CUDA gave the node in
/// the graph being built; a device node cannot be passed to a stream launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceNode {
    /// The DAG that declared it (its scope of device nodes, unique in the process).
    pub(crate) scope: u64,
    /// Its number among the DAG's device-updatable nodes (declaration order).
    pub(crate) index: u32,
}

impl DeviceNode {
    /// Its number among its DAG's device-updatable nodes, in declaration order (DOT and
    /// recordings show it as `device node #n`).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The bytes a kernel node keeps for the argument until lowering writes the graph's
    /// handle instead (a null handle).
    pub(crate) fn placeholder(&self) -> u64 {
        0
    }
}
