//! The node kinds, one module each. A module owns its node type and builder call
//! (`impl Dag { add_… }`), its checks, how it becomes CUDA parameters ([`NodeParams`]), what it
//! keeps alive, its per-node updates on [`Exec`](super::Exec) and its DOT label. The
//! `node_kinds!` list below is the one place a kind is registered: it makes [`NodeKind`], [`Op`]
//! and the dispatch from [`Op`] to the kind's [`NodeOp`] implementation.
//!
//! Adding a kind: write `nodes/<kind>.rs` with the node type, `impl NodeOp for` it and its
//! `impl Dag { add_<kind> }`, then add one line to `node_kinds!`.

pub(crate) mod backend;
pub(crate) mod captured;
pub(crate) mod child;
pub(crate) mod conditional;
pub(crate) mod device_launch;
pub(crate) mod device_update;
pub(crate) mod empty;
pub(crate) mod event;
pub(crate) mod fft;
pub(crate) mod gemm;
pub(crate) mod graph_memory;
pub(crate) mod host;
pub(crate) mod kernel;
pub(crate) mod late;
pub(crate) mod memcpy;
pub(crate) mod memset;
pub(crate) mod nccl;

use std::sync::Arc;

pub(crate) use backend::sealed::Devices;
pub use backend::{Backend, CaptureWork, EdgeData, NodeParams};
pub use captured::{CaptureFn, CaptureStream, CapturedNode};
pub use child::ChildNode;
pub use conditional::{ConditionalKind, ConditionalNode};
pub use empty::EmptyNode;
pub use event::{EventRecordNode, EventWaitNode};
pub use fft::{FftNode, FftSpec};
pub use graph_memory::{MemAllocNode, MemFreeNode};
pub use host::HostNode;
pub use kernel::KernelNode;
pub use memcpy::{dst, src, Copy2d, CopyKind, Dst, MemcpyNode, Src};
pub use memset::{Memset2d, MemsetNode, MemsetValue};
pub use nccl::CollectiveNode;

use crate::dag::NodeName;
use crate::device::{DeviceKey, DeviceLimits};
use crate::error::{DagError, Error, Result};
use crate::memory::{Allocation, MemorySpace, Region};

/// What a DAG is validated for: the device unplaced nodes run on (home), its launch limits,
/// and the backend's devices (which exist, which reach which by peer access).
pub(crate) struct ValidationTarget<'a> {
    /// The device the DAG is lowered for; unplaced nodes run there.
    pub(crate) home: DeviceKey,
    /// The home device's launch limits (a recording backend's devices all have these; a
    /// kernel of a CUDA device is checked against its own device's limits).
    pub(crate) limits: &'a DeviceLimits,
    /// The backend's devices.
    pub(crate) devices: &'a dyn Devices,
    /// Whether nodes may run on other devices than `home` (not inside a child graph).
    pub(crate) placeable: bool,
    /// The last kernel (by the address of its shared state, alive for the whole pass: the DAG
    /// holds it) and launch shape this pass accepted: a node with the same pair has the same
    /// limits (its kernel's device's, or the target's for a recording kernel) and passes the
    /// same check, so it is not checked again (a chain of one kernel is checked once).
    /// The kernel's dynamic shared memory limit (which another thread may raise) is part of
    /// the key.
    pub(crate) accepted_launch:
        std::cell::Cell<Option<(usize, usize, crate::kernel::LaunchConfig)>>,
    /// The conditional-handle scopes of the DAGs the validated one is a conditional body of,
    /// and its own once it declares handles (empty for most DAGs: nothing allocated).
    pub(crate) enclosing: Vec<conditional::ScopeInfo>,
}

impl<'a> ValidationTarget<'a> {
    /// A target for a validation pass (nothing accepted yet).
    pub(crate) fn new(
        home: DeviceKey,
        limits: &'a DeviceLimits,
        devices: &'a dyn Devices,
        placeable: bool,
    ) -> Self {
        ValidationTarget {
            home,
            limits,
            devices,
            placeable,
            accepted_launch: std::cell::Cell::new(None),
            enclosing: Vec::new(),
        }
    }
}

/// One node's validation: the device it runs on, in its [`ValidationTarget`].
pub(crate) struct RunsOn<'a> {
    /// The device the node runs on: where it is placed, or the target's home device.
    pub(crate) key: DeviceKey,
    /// What the DAG is validated for.
    pub(crate) target: &'a ValidationTarget<'a>,
}

impl RunsOn<'_> {
    /// The end of an error message: where the node runs.
    pub(crate) fn runs_on(&self) -> String {
        if self.key == self.target.home {
            format!("the graph is for {}", self.key)
        } else {
            format!("the node runs on {}", self.key)
        }
    }

    /// Checks that a node running here may use `alloc` (its `what` buffer): memory of the
    /// node's device, pinned host memory of any device of the backend (allocated portable,
    /// so every device's context may use it), or device memory of a device that the node's
    /// device can access by peer (lowering enables that peer access).
    /// `what` is formatted only for an error (this runs for every buffer of every node).
    #[inline]
    pub(crate) fn check_reach(
        &self,
        name: &NodeName<'_>,
        what: &dyn std::fmt::Display,
        alloc: &Allocation,
    ) -> Result<()> {
        if alloc.owner.key() == self.key {
            return Ok(());
        }
        self.check_reach_other(name, what, alloc)
    }

    /// [`RunsOn::check_reach`] for memory of another device than the node's.
    #[cold]
    fn check_reach_other(
        &self,
        name: &(impl std::fmt::Display + ?Sized),
        what: &dyn std::fmt::Display,
        alloc: &Allocation,
    ) -> Result<()> {
        let owner = alloc.owner.key();
        let devices = self.target.devices;
        if !devices.has_device(owner) {
            return Err(wrong_device(
                name,
                format!(
                    "the {what} buffer belongs to {owner}, but {}",
                    self.runs_on()
                ),
            ));
        }
        if alloc.space == MemorySpace::PinnedHost || devices.can_access_peer(self.key, owner)? {
            return Ok(());
        }
        Err(wrong_device(
            name,
            format!(
                "the {what} buffer belongs to {owner}, which {} cannot access by peer ({})",
                self.key,
                self.runs_on()
            ),
        ))
    }
}

/// A node's DOT appearance: detail lines under its name, a Graphviz shape and a fill colour.
pub(crate) struct Label {
    pub(crate) lines: Vec<String>,
    pub(crate) shape: &'static str,
    pub(crate) color: &'static str,
}

/// What every node kind provides to the DAG. Validation, lowering, DOT and the `Exec`'s
/// bookkeeping reach a node only through this trait (object-safe: [`Op`] hands out a
/// `&dyn NodeOp`).
pub(crate) trait NodeOp {
    /// Checks that need the target device (run by [`Dag::validate`](super::Dag::validate)):
    /// the node runs on `on.key`; the builder already checked the rest.
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        let _ = (name, on);
        Ok(())
    }
    /// Calls `f` for every allocation the node refers to, once per reference.
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        let _ = f;
    }
    /// Host closures the node (or a DAG inside it) runs, with their paths of names
    /// (`prefix` is the path of the DAG the node `name` is in).
    fn host_fns(
        &self,
        prefix: &str,
        name: &NodeName<'_>,
        out: &mut Vec<(String, Arc<host::HostFn>)>,
    ) {
        let _ = (prefix, name, out);
    }
    /// The node's DOT label.
    fn label(&self) -> Label;
    /// The node as lowering hands it to a backend.
    fn params(&self) -> NodeParams<'_>;
}

/// Registers the node kinds: `Variant(NodeType) = "name"`, documented.
macro_rules! node_kinds {
    ($($(#[$doc:meta])* $kind:ident($ty:ty) = $name:literal,)*) => {
        /// What kind of work a node does.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum NodeKind {
            $($(#[$doc])* $kind,)*
        }

        // A default name (`kind#serial`) is written into a fixed buffer.
        const _: () = {
            $(assert!(
                $name.len() + 1 + 20 <= crate::dag::name::DEFAULT_NAME,
                "a kind's name fits in a default node name"
            );)*
        };

        impl NodeKind {
            /// Lower-case name, used in default node names and DOT.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(NodeKind::$kind => $name,)*
                }
            }
        }

        /// What a node does.
        #[derive(Clone)]
        #[non_exhaustive]
        pub enum Op {
            $($(#[$doc])* $kind($ty),)*
        }

        impl Op {
            /// The node's kind.
            pub fn kind(&self) -> NodeKind {
                match self {
                    $(Op::$kind(_) => NodeKind::$kind,)*
                }
            }

            /// The kind's implementation.
            fn as_node_op(&self) -> &dyn NodeOp {
                match self {
                    $(Op::$kind(n) => n,)*
                }
            }
        }

        $(impl From<$ty> for Op {
            fn from(n: $ty) -> Op {
                Op::$kind(n)
            }
        })*
    };
}

node_kinds! {
    /// A kernel launch.
    Kernel(KernelNode) = "kernel",
    /// A memory copy (boxed: the largest kind, it would make every node as large).
    Memcpy(Box<MemcpyNode>) = "memcpy",
    /// A memory fill.
    Memset(MemsetNode) = "memset",
    /// A Rust closure run on the host in stream order.
    Host(HostNode) = "host",
    /// Nothing: a join or fork point.
    Empty(EmptyNode) = "empty",
    /// A whole [`Dag`](super::Dag) embedded as one node.
    Child(ChildNode) = "child",
    /// A cuFFT transform.
    Fft(Box<FftNode>) = "fft",
    /// Work recorded from a stream (a library call with no node API).
    Captured(CapturedNode) = "captured",
    /// One rank's part of an NCCL collective or send/receive.
    Collective(Box<CollectiveNode>) = "collective",
    /// Records an event.
    EventRecord(EventRecordNode) = "record",
    /// Waits for an event.
    EventWait(EventWaitNode) = "wait",
    /// IF, IF/ELSE, WHILE or SWITCH over bodies of their own (boxed, like copies).
    Conditional(Box<ConditionalNode>) = "conditional",
    /// Allocates a graph buffer ([`GraphBuffer`](crate::GraphBuffer)) when a launch reaches it.
    MemAlloc(MemAllocNode) = "alloc",
    /// Frees a graph buffer.
    MemFree(MemFreeNode) = "free",
}

impl Op {
    pub(crate) fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        self.as_node_op().validate(name, on)
    }
    /// Whether nodes of this kind may be placed on another device than the one the DAG is
    /// lowered for.
    pub(crate) fn placeable(&self) -> bool {
        matches!(
            self,
            Op::Kernel(_) | Op::Memcpy(_) | Op::Memset(_) | Op::Host(_) | Op::Empty(_)
        )
    }
    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        self.as_node_op().for_each_allocation(f)
    }
    pub(crate) fn host_fns(
        &self,
        prefix: &str,
        name: &NodeName<'_>,
        out: &mut Vec<(String, Arc<host::HostFn>)>,
    ) {
        self.as_node_op().host_fns(prefix, name, out)
    }
    pub(crate) fn label(&self) -> Label {
        self.as_node_op().label()
    }
    /// Adds the node to `backend` after `deps` (in canonical order); returns the handle later
    /// nodes depend on. `scopes`: the conditional handles of the graph being built and of the
    /// graphs it is a body of. (Memory nodes and fills of graph buffers are lowered by
    /// `graph_memory::lower_node`, which has the allocations' addresses.)
    pub(crate) fn lower<B: Backend>(
        &self,
        name: &NodeName<'_>,
        deps: &[B::Node],
        backend: &mut B,
        scopes: &conditional::Scopes,
    ) -> Result<B::Node> {
        match self {
            Op::Conditional(c) => c.lower(name, deps, backend, scopes),
            _ => backend.add_node(name, deps, &[], self.as_node_op().params()),
        }
    }
}

impl Label {
    pub(crate) fn new(shape: &'static str, color: &'static str, lines: Vec<String>) -> Label {
        Label {
            lines,
            shape,
            color,
        }
    }
}

/// An [`Error::Dag`] for a copy or memset out of bounds.
pub(crate) fn out_of_bounds(
    node: &(impl std::fmt::Display + ?Sized),
    problem: impl Into<String>,
) -> Error {
    Error::OutOfBounds {
        node: Some(node.to_string()),
        problem: problem.into(),
    }
}

/// An [`Error::Dag`] for an object of another device.
/// An error of validating a nested DAG (the child graph of node `name`, or its conditional
/// body `what`): a node it names is named by its path (`name/node`, or `name/what/node` for a
/// body), and an error of the nested DAG as a whole (a cycle, an unknown node) becomes one of
/// node `name`, "in its `what`: …".
pub(crate) fn error_inside(name: &NodeName<'_>, what: &str, prefix: &str, e: Error) -> Error {
    let path = |n: String| format!("{prefix}{n}");
    match e {
        Error::Dag(
            DagError::Cycle { .. } | DagError::UnknownNode(_) | DagError::Instantiate { .. },
        ) => Error::Dag(DagError::WrongKind {
            node: name.to_string(),
            problem: format!("in its {what}: {e}"),
        }),
        Error::Dag(d) => Error::Dag(match d {
            DagError::Placement { node, problem } => DagError::Placement {
                node: path(node),
                problem,
            },
            DagError::WrongKind { node, problem } => DagError::WrongKind {
                node: path(node),
                problem,
            },
            DagError::Collective { node, problem } => DagError::Collective {
                node: path(node),
                problem,
            },
            DagError::Fft { node, problem } => DagError::Fft {
                node: path(node),
                problem,
            },
            DagError::GraphMemory { node, problem } => DagError::GraphMemory {
                node: path(node),
                problem,
            },
            other => other,
        }),
        Error::WrongDevice { node, problem } => Error::WrongDevice {
            node: node.map(path),
            problem,
        },
        Error::OutOfBounds { node, problem } => Error::OutOfBounds {
            node: node.map(path),
            problem,
        },
        Error::KernelArgs {
            node,
            kernel,
            problem,
        } => Error::KernelArgs {
            node: node.map(path),
            kernel,
            problem,
        },
        Error::LaunchShape {
            node,
            kernel,
            problem,
        } => Error::LaunchShape {
            node: node.map(path),
            kernel,
            problem,
        },
        other => other,
    }
}

pub(crate) fn wrong_device(node: &(impl std::fmt::Display + ?Sized), problem: String) -> Error {
    Error::WrongDevice {
        node: Some(node.to_string()),
        problem,
    }
}

/// An error unless region `r` (the node's `what` buffer) belongs to device `key`.
pub(crate) fn check_owner(
    name: &(impl std::fmt::Display + ?Sized),
    r: &Region,
    what: &str,
    key: DeviceKey,
) -> Result<()> {
    if r.alloc.owner.key() != key {
        return Err(wrong_device(
            name,
            format!(
                "the {what} buffer belongs to {}, but the graph is for {key}",
                r.alloc.owner.key()
            ),
        ));
    }
    Ok(())
}

/// Bytes from the first row's start to the last row's end.
pub(crate) fn pitched_extent(pitch: usize, width: usize, height: usize) -> usize {
    if height == 0 {
        0
    } else {
        pitch.saturating_mul(height - 1).saturating_add(width)
    }
}

/// Human-readable byte counts for DOT labels.
pub(crate) fn byte_count(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// Large node kinds are boxed in [`Op`] (so every node of the DAG is not as large as the
/// largest kind); the box is the kind.
impl<T: NodeOp> NodeOp for Box<T> {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        (**self).validate(name, on)
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        (**self).for_each_allocation(f)
    }
    fn host_fns(
        &self,
        prefix: &str,
        name: &NodeName<'_>,
        out: &mut Vec<(String, Arc<host::HostFn>)>,
    ) {
        (**self).host_fns(prefix, name, out)
    }
    fn label(&self) -> Label {
        (**self).label()
    }
    fn params(&self) -> NodeParams<'_> {
        (**self).params()
    }
}
