//! Graphs launched from the device as kernel arguments: [`DeviceGraph`].
//!
//! An executable graph instantiated for device launch
//! ([`InstantiateFlags::device_launch`](crate::InstantiateFlags::device_launch)) and handed over
//! with [`Exec::into_device_graph`](crate::Exec::into_device_graph) becomes a [`DeviceGraph`]:
//! shared, immutable (no update, no host launch: CUDA forbids updating or host-launching a
//! device graph while the device may launch it), and kept alive by every kernel node that passes
//! it (a `cudaGraphExec_t` argument, `KernelArg::from(&graph)`), so it outlives the launches of
//! the graphs whose kernels launch it (`cudaGraphLaunch(graph, cudaStreamGraphFireAndForget)`,
//! `cudaStreamGraphTailLaunch`, `cudaStreamGraphFireAndForgetAsSibling`; such a kernel is
//! compiled with [`CodeKind::DeviceRuntime`](crate::CodeKind::DeviceRuntime)).

use std::any::Any;
use std::sync::Arc;

use crate::device::DeviceKey;
use crate::memory::Allocation;

/// An executable graph launched from the device by kernels of other graphs
/// ([`Exec::into_device_graph`](crate::Exec::into_device_graph)). Cloning shares it; the last
/// clone (and the last DAG or executable graph whose kernels pass it) destroys it, after the
/// launches of the graphs holding it have completed.
///
/// A kernel node passing it gets its `cudaGraphExec_t` (8 bytes) as the argument. The CUDA C++
/// that launches it calls `cudaGraphLaunch` from device code, which needs relocatable device
/// code linked with the device runtime: compile it with
/// [`CodeKind::DeviceRuntime`](crate::CodeKind::DeviceRuntime) (or load a cubin linked
/// elsewhere with [`Module::load`](crate::Module::load)).
#[derive(Clone)]
pub struct DeviceGraph {
    pub(crate) inner: Arc<DeviceGraphInner>,
}

/// What a [`DeviceGraph`] shares.
pub(crate) struct DeviceGraphInner {
    /// The `cudaGraphExec_t`, as an argument's bytes.
    pub(crate) raw: u64,
    /// The device the graph runs on.
    pub(crate) device: DeviceKey,
    /// Every allocation the graph refers to (a graph launching it counts as using them).
    pub(crate) allocations: Vec<Arc<Allocation>>,
    /// The executable graph (an `Exec`, kept, never used again: destroyed with the last
    /// clone).
    pub(crate) _exec: Box<dyn Any + Send + Sync>,
}

impl DeviceGraph {
    /// The `cudaGraphExec_t` kernels are given. Crate-only: passed as a plain `u64` it would
    /// keep nothing alive (a [`KernelArg`](crate::KernelArg) made from the `DeviceGraph`
    /// does).
    pub(crate) fn raw(&self) -> u64 {
        self.inner.raw
    }

    /// The device it runs on.
    pub fn device_key(&self) -> DeviceKey {
        self.inner.device
    }

    /// A stand-in of a device graph of `device` with handle `raw` referring to `allocations`
    /// (host tests: no CUDA graph behind it).
    #[cfg(test)]
    pub(crate) fn stand_in(device: DeviceKey, raw: u64, allocations: Vec<Arc<Allocation>>) -> Self {
        DeviceGraph {
            inner: Arc::new(DeviceGraphInner {
                raw,
                device,
                allocations,
                _exec: Box::new(()),
            }),
        }
    }

    /// How many clones (and nodes keeping it) share it (host tests).
    #[cfg(test)]
    pub(crate) fn holders(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Whether `a` and `b` are the same graph.
    pub fn ptr_eq(a: &DeviceGraph, b: &DeviceGraph) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }
}

impl std::fmt::Debug for DeviceGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceGraph({:#x} on {})",
            self.inner.raw, self.inner.device
        )
    }
}
