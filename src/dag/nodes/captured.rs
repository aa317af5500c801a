//! Captured nodes: work that only a library call on a stream can make (cuBLAS, NCCL, a
//! library of the user's), recorded from a stream into the graph at lowering.
//!
//! The capture step ([`capture_into`]) is shared by every captured kind: user-captured nodes
//! ([`Dag::add_captured`]), FFT nodes (cuFFT has no node API) and any later kind whose work is
//! a stream call. It begins a capture into the graph after the node's dependencies, runs the
//! node's enqueue step, ends the capture (also when the step failed or panicked) and returns
//! the CUDA nodes the capture added, so that an [`Exec`](crate::Exec) can enable or disable
//! them together.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::{check_owner, Label, NodeOp, RunsOn};
use crate::dag::nodes::backend::{CaptureWork, NodeParams};
use crate::dag::{Dag, NodeId, NodeName, Op};
use crate::error::{DagError, Result};
use crate::memory::{Allocation, Region};
use crate::result::runtime as rt;
use crate::sys;

/// The stream a captured node's work is enqueued on, while CUDA records that work into the
/// graph instead of running it. Valid only during the call it is given to.
pub struct CaptureStream<'a> {
    raw: sys::cudaStream_t,
    _call: PhantomData<&'a ()>,
}

impl CaptureStream<'_> {
    /// The raw stream handle, in capture mode, to pass to library calls (`cufftSetStream`,
    /// `cublasSetStream`, `ncclAllReduce(.., stream)`, `cudaMemsetAsync`, …).
    pub fn raw(&self) -> sys::cudaStream_t {
        self.raw
    }
}

/// The work of a captured node: called with a capturing stream at every lowering.
pub type CaptureFn = dyn Fn(&CaptureStream<'_>) -> Result<()> + Send + Sync;

/// A node whose work is recorded from a stream: see [`Dag::add_captured`].
#[derive(Clone)]
pub struct CapturedNode {
    work: Arc<CaptureFn>,
    pub(crate) uses: Vec<Region>,
    what: String,
}

impl std::fmt::Debug for CapturedNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedNode")
            .field("what", &self.what)
            .field("uses", &self.uses.len())
            .finish()
    }
}

impl CapturedNode {
    /// The buffers the captured work uses, as declared.
    pub fn uses(&self) -> &[Region] {
        &self.uses
    }
    /// What the work is, as declared.
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl CaptureWork for CapturedNode {
    unsafe fn enqueue(&self, stream: sys::cudaStream_t) -> Result<()> {
        (self.work)(&CaptureStream {
            raw: stream,
            _call: PhantomData,
        })
    }
    fn describe(&self) -> String {
        let uses: Vec<String> = self
            .uses
            .iter()
            .map(|r| format!("{:#x}+{}", r.raw_addr(), r.len_bytes()))
            .collect();
        format!("work=`{}` uses=[{}]", self.what, uses.join(","))
    }
}

impl NodeOp for CapturedNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        for r in &self.uses {
            check_owner(name, r, "captured work's", on.key)?;
        }
        Ok(())
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        for r in &self.uses {
            f(&r.alloc);
        }
    }
    fn label(&self) -> Label {
        // Saturating: the regions declared may be of any length (they are not bounds-checked).
        let bytes = (self.uses.iter()).fold(0usize, |n, r| n.saturating_add(r.len_bytes()));
        Label::new(
            "box3d",
            "#e2d9f3",
            vec![
                format!("captured: {}", self.what),
                format!(
                    "uses {} buffers, {}",
                    self.uses.len(),
                    super::byte_count(bytes)
                ),
            ],
        )
    }
    fn params(&self) -> NodeParams<'_> {
        NodeParams::Captured(self)
    }
}

impl Dag {
    /// Adds a node whose work is recorded from a stream: at every lowering (instantiation,
    /// whole-graph update, as a child), `work` is called with a [`CaptureStream`] that is
    /// capturing into the graph after the node's dependencies, and whatever it enqueues there
    /// becomes the node. This is how work that has no node API (a cuBLAS or NCCL call, a
    /// library's launch) goes into a DAG; the crate's FFT nodes are made the same way.
    ///
    /// `what` describes the work (DOT, recordings). `uses` are the buffers the work reads or
    /// writes: the node keeps them alive, validation checks they are on the graph's device,
    /// and host access to them waits for the graph's launches, as for any other node.
    /// An error returned by `work` fails the lowering with that error; a panic in `work` ends
    /// the capture cleanly, then continues to unwind.
    ///
    /// [`Exec::set_enabled`](crate::Exec::set_enabled) disables all the nodes the capture made
    /// (when they are all kernel, memcpy or memset nodes).
    ///
    /// # Safety
    /// Every time it is called, `work`:
    /// - enqueues work only on the given stream (or on streams it forks from it with events
    ///   and joins back before returning), and does not synchronise with the host (it would
    ///   invalidate the capture: reported as an error);
    /// - enqueues work that accesses only the memory of `uses`, or memory that the caller
    ///   keeps alive, and does not access from the host, for as long as any [`Exec`](crate::Exec)
    ///   made from this DAG may launch it;
    /// - leaves any host-side state the captured work refers to (a library handle, its
    ///   parameters) alive and unchanged for as long as such an `Exec` may launch it.
    pub unsafe fn add_captured<F>(
        &mut self,
        what: impl Into<String>,
        uses: impl IntoIterator<Item = Region>,
        work: F,
    ) -> NodeId
    where
        F: Fn(&CaptureStream<'_>) -> Result<()> + Send + Sync + 'static,
    {
        self.push(Op::Captured(CapturedNode {
            work: Arc::new(work),
            uses: uses.into_iter().collect(),
            what: what.into(),
        }))
    }
}

/// What [`capture_into`] added to the graph.
pub(crate) struct Captured {
    /// The node later nodes depend on: the capture's last node, or an empty node joining its
    /// last nodes (or after `deps`, when the capture recorded nothing).
    pub(crate) out: sys::cudaGraphNode_t,
    /// Every node the capture recorded (not the joining node), in no particular order.
    pub(crate) nodes: Vec<sys::cudaGraphNode_t>,
}

/// Records what `enqueue` puts on `stream` into `graph` after `deps`, and returns the nodes it
/// made. The capture is ended whatever `enqueue` does (an error is returned after the capture
/// ended; a panic resumes after it ended).
///
/// # Safety
/// `graph` and `stream` are live and of the same device, which is current; `deps` are nodes of
/// `graph`; `enqueue` enqueues only stream-ordered work on the stream it is given.
pub(crate) unsafe fn capture_into(
    graph: sys::cudaGraph_t,
    stream: sys::cudaStream_t,
    deps: &[sys::cudaGraphNode_t],
    enqueue: impl FnOnce(sys::cudaStream_t) -> Result<()>,
) -> Result<Captured> {
    // SAFETY: caller's contract (live graph and stream, `deps` in the graph).
    unsafe {
        rt::stream_begin_capture_to_graph(
            stream,
            graph,
            deps,
            sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
        )?
    };
    let ran = catch_unwind(AssertUnwindSafe(|| enqueue(stream)));
    // SAFETY: the stream is capturing (or its capture was invalidated by `enqueue`).
    let info = unsafe { rt::stream_capture_dependencies(stream) };
    // SAFETY: always end the capture begun above.
    let ended = unsafe { rt::stream_end_capture(stream) };
    let ran = match ran {
        Ok(r) => r,
        Err(panic) => resume_unwind(panic),
    };
    ran?;
    let (_, terminals) = info?;
    ended?;
    // Walk back from the capture's last nodes to `deps`: what lies between is what the capture
    // recorded (every captured node precedes a last node, in stream order or through a join).
    let stop: HashSet<sys::cudaGraphNode_t> = deps.iter().copied().collect();
    let mut seen = HashSet::new();
    let mut stack: Vec<_> = terminals.clone();
    let mut nodes = Vec::new();
    while let Some(n) = stack.pop() {
        if stop.contains(&n) || !seen.insert(n) {
            continue;
        }
        nodes.push(n);
        // SAFETY: `n` is a node of the live graph.
        stack.extend(unsafe { rt::graph_node_dependencies(n)? });
    }
    let out = if terminals.len() == 1 && !nodes.is_empty() {
        terminals[0]
    } else {
        let after = if nodes.is_empty() { deps } else { &terminals };
        let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeEmpty);
        // SAFETY: the nodes are of the graph; an empty node has no parameters to keep alive.
        unsafe { rt::graph_add_node(graph, after, &[], &mut raw)? }
    };
    Ok(Captured { out, nodes })
}

/// Disables or enables every node a capture made.
///
/// # Safety
/// `exec` was instantiated from the graph the nodes belong to.
pub(crate) unsafe fn set_captured_enabled(
    exec: sys::cudaGraphExec_t,
    node: &(impl std::fmt::Display + ?Sized),
    nodes: &[sys::cudaGraphNode_t],
    enabled: bool,
) -> Result<()> {
    use sys::cudaGraphNodeType as T;
    let allowed = [
        T::cudaGraphNodeTypeKernel as u32,
        T::cudaGraphNodeTypeMemcpy as u32,
        T::cudaGraphNodeTypeMemset as u32,
    ];
    for &n in nodes {
        // SAFETY: `n` is a node of the graph `exec` was made from (caller's contract).
        let t = unsafe { rt::graph_node_type(n)? };
        if !allowed.contains(&t) {
            return Err(DagError::WrongKind {
                node: node.to_string(),
                problem: format!(
                    "its captured work contains a node of CUDA type {t}, and CUDA can enable \
                     or disable only kernel, memcpy and memset nodes"
                ),
            }
            .into());
        }
    }
    for (i, &n) in nodes.iter().enumerate() {
        // SAFETY: as above; every node is of a kind CUDA can disable (checked above).
        if let Err(e) = unsafe { rt::graph_node_set_enabled(exec, n, enabled) } {
            // All or nothing: put back the nodes already switched.
            for &m in &nodes[..i] {
                // SAFETY: as above.
                let _ = unsafe { rt::graph_node_set_enabled(exec, m, !enabled) };
            }
            return Err(e);
        }
    }
    Ok(())
}
