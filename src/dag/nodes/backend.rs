//! What a node kind lowers to and through: [`NodeParams`] (one node as a backend receives it),
//! [`EdgeData`], and the sealed [`Backend`] trait with its one `add_node` method. Nothing here
//! names a backend: [`Dag::lower`](crate::dag::Dag::lower) lives in `dag/lower.rs` and the
//! backends in `dag/lower/`, which import this; the node kinds import this and never
//! `dag::lower`.

use super::conditional::Scopes;
use super::{FftNode, KernelNode};
use crate::dag::{Dag, NodeName};
use crate::device::{DeviceKey, DeviceLimits};
use crate::error::Result;
use crate::fft::WorkShare;
use crate::sys;

/// An edge's data (`cudaGraphEdgeData`: ports and type), given to `cudaGraphAddNode` with
/// the dependencies. Lowering passes none yet (every edge is a full dependency); programmatic
/// launch ports will.
pub type EdgeData = sys::cudaGraphEdgeData;

/// One node as lowering hands it to a backend: for every kind CUDA's generic node API can
/// add, the `cudaGraphNodeParams` `cudaGraphAddNode` takes, so both backends see (and the
/// recording backend records) the same description.
#[allow(clippy::large_enum_variant)] // reason: made on the stack per node and passed by reference; boxing would allocate per node
pub enum NodeParams<'a> {
    /// `cudaGraphAddNode` with these parameters, with `type_` naming the union member that is
    /// set.
    Generic(sys::cudaGraphNodeParams),
    /// A kernel launch (the DAG's kernel node, whose `cuda_params` CUDA gets). Kept on the
    /// kernel-specific `cudaGraphAddKernelNode` when the node has no edge data: the generic
    /// `cudaGraphAddNode` does the same job but costs 7–17% more per node (H200, CUDA 13.0;
    /// the raw rows of the bench's construction tables), a cost a builder on top of CUDA cannot
    /// afford twice. With edge data, `cudaGraphAddNode` (the only call that takes it). The
    /// launch priority has no field in either (it is set with
    /// `cudaGraphKernelNodeSetAttribute` after adding); the recording backend names the
    /// kernel and its argument bytes from the node.
    Kernel(&'a KernelNode),
    /// A device-updatable kernel node (`Dag::device_node`): added as [`NodeParams::Kernel`],
    /// then given the launch attribute `cudaLaunchAttributeDeviceUpdatableKernelNode`; the
    /// backend writes the handle CUDA returns (`cudaGraphDeviceNode_t`) to `dev_node` (a
    /// variant of its own: lowering writes the handle into the kernels that update the node).
    DeviceUpdatableKernel {
        /// The node, as for [`NodeParams::Kernel`].
        node: &'a KernelNode,
        /// Which of the DAG's device nodes (`DeviceNode::index`).
        index: u32,
        /// Where the backend puts the handle.
        dev_node: &'a std::cell::Cell<u64>,
    },
    /// A 1D copy, kept on `cudaGraphAddMemcpyNode1D`: through the generic API it would be a
    /// `cudaMemcpy3DParms` copy whose pitch is the byte count, which CUDA limits
    /// (`cudaDevAttrMaxPitch`) where a 1D copy has no limit, and per-node updates of 1D copies
    /// use `cudaGraphExecMemcpyNodeSetParams1D`.
    Copy1d {
        /// Destination address.
        dst: u64,
        /// Source address.
        src: u64,
        /// Bytes.
        bytes: usize,
        /// Direction.
        kind: sys::cudaMemcpyKind,
    },
    /// A child graph: the DAG is lowered by a backend of the same kind, then added as a
    /// `cudaGraphNodeTypeGraph` node (cloned by CUDA).
    Child(&'a Dag),
    /// Work recorded from a stream into the graph (`cudaStreamBeginCaptureToGraph` after the
    /// node's dependencies, then [`CaptureWork::enqueue`], then `cudaStreamEndCapture`): for
    /// work that only a library call on a stream can make (no node API), such as a user's
    /// captured node or an NCCL collective.
    Captured(&'a dyn CaptureWork),
    /// An FFT: cuFFT has no node API, so the transform is captured from a stream into the
    /// graph (after a parameter-setting kernel node, added through the generic path), through
    /// the same capture step as [`NodeParams::Captured`].
    Fft {
        /// The node (its work-area share was given to the backend's `prepare_ffts`).
        node: &'a FftNode,
    },
    /// A conditional node: `cudaGraphAddNode` with `cudaConditionalNodeParams`, then each body
    /// lowered by a backend of the same kind into the body graph CUDA returns for it in
    /// `phGraph_out` (a variant of its own: the generic parameters cannot carry the bodies).
    Conditional {
        /// CUDA's type.
        kind: sys::cudaGraphConditionalNodeType,
        /// The kind in words (`IF`, `IF/ELSE`, `WHILE`, `SWITCH`).
        kind_words: &'static str,
        /// The handle, created on the graph being built.
        handle: sys::cudaGraphConditionalHandle,
        /// The bodies (`size` is their count).
        bodies: &'a [Dag],
        /// The handles in scope for the bodies.
        scopes: &'a Scopes,
    },
    /// A graph allocation (`cudaGraphAddNode` with `cudaMemAllocNodeParams`: pinned device
    /// memory of the graph's device, no peer access): CUDA returns the allocation's address
    /// in the parameters, which the backend writes to `dptr` (a variant of its own: the
    /// generic parameters have no way back to lowering, which writes the address into the
    /// nodes that use the buffer and into the free node).
    MemAlloc {
        /// Which of the DAG's graph allocations (`GraphBuffer::index`).
        index: u32,
        /// Bytes (at least 1).
        bytes: usize,
        /// Where the backend puts the address.
        dptr: &'a std::cell::Cell<u64>,
    },
}

/// Work that a captured node enqueues on a stream while CUDA records it into the graph.
pub trait CaptureWork {
    /// Enqueues the node's work on `stream`, which is capturing into the graph after the
    /// node's dependencies. Called once per lowering (instantiation, whole-graph update).
    ///
    /// # Safety
    /// `stream` is a live stream of the lowering device, in capture mode.
    unsafe fn enqueue(&self, stream: sys::cudaStream_t) -> Result<()>;
    /// What the work is, in words (the recording backend's transcript, DOT).
    fn describe(&self) -> String;
}

impl NodeParams<'_> {
    /// Zeroed generic parameters of `type_` (all-zero is what CUDA wants in the reserved
    /// fields, and a valid value of every union member).
    pub(crate) fn zeroed(type_: sys::cudaGraphNodeType) -> sys::cudaGraphNodeParams {
        // SAFETY: every field is an integer, a pointer, an optional function pointer or a
        // C enum whose value 0 exists (`type_` is overwritten below).
        let mut raw: sys::cudaGraphNodeParams = unsafe { std::mem::zeroed() };
        raw.type_ = type_;
        raw
    }
}

pub(crate) mod sealed {
    use super::*;

    /// The devices of a backend, as validation sees them.
    pub trait Devices {
        /// Whether `key` is a device of the backend (nodes may be placed there, and its
        /// buffers may be used where peer access allows).
        fn has_device(&self, key: DeviceKey) -> bool;
        /// Whether work running on `from` can use device memory of `to` once peer access is
        /// enabled (`cudaDeviceCanAccessPeer`); both are devices of the backend.
        fn can_access_peer(&self, from: DeviceKey, to: DeviceKey) -> Result<bool>;
    }

    /// The backend interface lowering uses; sealed, so adding a node kind or a method is not
    /// a breaking change.
    pub trait Lower: Devices {
        /// The backend's handle for a node it created.
        type Node: Copy;
        /// The home device: unplaced nodes run there (and objects of other devices must be
        /// reachable from their node's device).
        fn key(&self) -> DeviceKey;
        /// The limits launch shapes are validated against.
        fn limits(&self) -> &DeviceLimits;
        /// Adds one node after `deps` (with `edges`, one per dependency, or none for plain
        /// dependencies).
        #[allow(private_interfaces)] // reason: the trait is sealed: only this crate calls or implements it
        fn add_node(
            &mut self,
            name: &NodeName<'_>,
            deps: &[Self::Node],
            edges: &[EdgeData],
            params: NodeParams<'_>,
        ) -> Result<Self::Node>;
        /// Replaces the parameters of kernel node `node` (added by this backend, in the graph
        /// being built) with `kernel`'s (`cudaGraphKernelNodeSetParams`): for a kernel added
        /// before a value its arguments pass existed (a device-updatable node's handle,
        /// `nodes/device_update.rs`). Called after every node was added.
        fn set_kernel_params(
            &mut self,
            name: &NodeName<'_>,
            node: Self::Node,
            kernel: &KernelNode,
        ) -> Result<()>;
        /// Lets work running on `from` use device memory of `to` (`cudaDeviceEnablePeerAccess`).
        /// Called before any node is added, once per pair the DAG's nodes need (validation
        /// checked that `from` can access `to`).
        fn enable_peer_access(&mut self, from: DeviceKey, to: DeviceKey) -> Result<()>;
        /// Makes `key` (a device of the backend) the device the following nodes run on.
        /// Lowering calls it only when the device changes from one node to the next, starting
        /// from the home device ([`Lower::key`]), and returns to the home device at the end.
        fn use_device(&mut self, key: DeviceKey) -> Result<()>;
        /// Notes that `node` (added by this backend: a kernel, memcpy, memset, FFT or
        /// captured node of the top-level graph) is disabled in the DAG. CUDA disables nodes
        /// only in an executable graph (`cudaGraphNodeSetEnabled`), so the CUDA backend keeps
        /// the node for instantiation to disable; the recording backend records the call.
        /// Called after every node was added, in canonical order, with the home device current.
        fn disable(&mut self, name: &NodeName<'_>, node: Self::Node) -> Result<()>;
        /// Creates conditional handle `index` of the DAG being lowered on the graph being
        /// built (`cudaGraphConditionalHandleCreate`, reset to `default` at every launch);
        /// returns it. Called before the graph's first node, for the handles a conditional
        /// node of the DAG reads, in index order.
        fn conditional_handle(&mut self, index: u32, default: u32) -> Result<u64>;
        /// Called once before the nodes of `dag` are added, with the work-area share of each
        /// FFT node (by node index), when the DAG has FFT nodes. The CUDA backend makes the
        /// cuFFT plans here, so that shared work areas are sized for the plans actually made.
        fn prepare_ffts(&mut self, dag: &Dag, shares: &[Option<WorkShare>]) -> Result<()> {
            let _ = (dag, shares);
            Ok(())
        }
    }
}

/// Where lowering sends its nodes: [`CudaBackend`](crate::dag::CudaBackend) or
/// [`RecordingBackend`](crate::dag::RecordingBackend). The trait is
/// sealed: every node reaches a backend through one method taking the node's parameters and
/// incoming edges, so new node kinds need no new backend methods.
pub trait Backend: sealed::Lower {}

impl<T: sealed::Lower> Backend for T {}
