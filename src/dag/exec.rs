//! Executable graphs: instantiation, launches, per-node updates, whole-graph updates.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use super::lower::{CudaBackend, CudaNodeKey, LoweredGraph};
use super::nodes::captured::set_captured_enabled;
use super::nodes::fft::FftCaptureState;
use super::{Dag, DagError, HostFn, NodeId, NodeKind};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::ArgScratch;
use crate::memory::{Allocation, MemorySpace};
use crate::result::runtime as rt;
use crate::stream::marker::Marker;
use crate::stream::queue::ExecLaunches;
use crate::stream::Stream;
use crate::sys;

mod held;
mod instantiate;

pub(crate) use held::AddrHasher;
use held::{hold_in, release_in, with_locked};
pub(crate) use instantiate::check_same_topology;
pub(in crate::dag) use instantiate::keep_enabled_flags;
use instantiate::lower_to_cuda;

/// Flags for [`Dag::instantiate_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstantiateFlags {
    /// Upload the graph to the device on this stream as part of instantiation
    /// (`cudaGraphInstantiateFlagUpload` semantics, done with `cudaGraphUpload`), so the first
    /// launch does not pay for it.
    pub upload: bool,
    /// Honour per-node launch priorities (`cudaGraphInstantiateFlagUseNodePriority`).
    pub use_node_priority: bool,
    /// Free the graph allocations a launch left (allocation nodes without a free node,
    /// [`Dag::add_alloc`]) before the next launch (`cudaGraphInstantiateFlagAutoFreeOnLaunch`);
    /// the [`Exec`] frees those of its last launch when dropped. Without it, instantiation
    /// refuses a DAG with an allocation it does not free.
    pub auto_free_on_launch: bool,
    /// Instantiate for launch from the device (`cudaGraphInstantiateFlagDeviceLaunch`): the
    /// DAG may hold only kernel, memcpy, memset and child-graph nodes, all on its device
    /// (checked, naming the node), and [`Exec::into_device_graph`] hands the graph over to
    /// kernels of other graphs that launch it. Not with `auto_free_on_launch`.
    pub device_launch: bool,
}

/// What [`Exec::update_or_reinstantiate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// CUDA updated the executable graph in place.
    Updated,
    /// CUDA refused (topology or node kinds changed); the graph was instantiated again.
    Reinstantiated,
}

/// An instantiated graph (`cudaGraphExec_t`), ready to launch any number of times.
///
/// It holds the [`Dag`] it was made from, and with it every buffer, kernel, module, closure
/// and FFT state the graph refers to: nothing it uses can be freed while it lives.
/// Parameters can be updated between launches (`set_*`); an update applies to launches issued
/// after it, while launches already queued keep the parameters they were launched with. An
/// update that CUDA refuses changes nothing. What an update replaces (a buffer no node refers
/// to any more, a closure, a whole DAG and its cuFFT plans) is released as soon as the launches
/// that may use it have completed, noticed at the next launch or update (or at
/// [`Exec::synchronize`]); a long pipeline that synchronises through its stream or an event
/// holds only what its queued launches use.
///
/// A launch is one `cuGraphLaunch` (`cudaGraphLaunch` on the default stream) and records nothing; when something needs to know that
/// the launches so far have completed, a marker is recorded right after the latest launch in
/// its stream's order (before the crate queues other work on that stream, or when asked), so
/// [`Exec::synchronize`] and `Drop` wait for this graph's launches, not for other work on the
/// streams it used. Host access to a buffer the graph refers to
/// ([`HostBuffer::copy_to_slice`](crate::HostBuffer::copy_to_slice),
/// [`DeviceBuffer::to_vec`](crate::DeviceBuffer::to_vec), …) waits for its launches too.
/// Work queued through a stream's raw handle after a launch is not seen by the crate: such
/// waits then wait for it too.
pub struct Exec {
    pub(super) raw: sys::cudaGraphExec_t,
    /// The graph `raw` was instantiated from: per-node updates name its nodes.
    graph: sys::cudaGraph_t,
    /// The graph of the last whole-graph update, for [`Exec::cuda_dot`].
    latest: Option<sys::cudaGraph_t>,
    pub(super) device: Device,
    pub(super) dag: Dag,
    /// CUDA node handles of `graph`, by node index.
    pub(super) handles: Vec<Option<sys::cudaGraphNode_t>>,
    /// The nodes of `graph` each captured node (FFT or other) made, by its handle.
    captured: HashMap<CudaNodeKey, Vec<sys::cudaGraphNode_t>>,
    /// Host closures of the DAG and its children, with their names (for panic reports).
    pub(super) hosts: Vec<(String, Arc<HostFn>)>,
    /// How many entries of `retired` are host closures an update replaced (whose panics are
    /// still reported): the panic check looks at `retired` only when there are some.
    retired_hosts: usize,
    /// Panics of replaced host closures, found when they were released, not yet reported.
    unreported: VecDeque<(String, String)>,
    pub(super) fft_capture: FftCaptureState,
    /// The launches (and a marker of the latest); allocations the graph refers to point here.
    log: Arc<ExecLaunches>,
    /// How many references the DAG holds to each allocation (keyed by its address).
    held: HashMap<usize, u32, BuildHasherDefault<AddrHasher>>,
    /// Pinned allocations the DAG refers to, by address: locked during a launch. Memory lent
    /// by cudarc (`Lent`, feature `cudarc`) is listed here too: a launch needs it bound
    /// (`Exec::launch_lent`).
    pinned: Vec<Arc<Allocation>>,
    /// What updates replaced, each with a launch that may still use it.
    retired: VecDeque<(Arc<Marker>, Replaced)>,
    /// How many distinct markers `retired` holds (each a run of consecutive entries).
    retired_markers: usize,
    pub(super) scratch: ArgScratch,
    /// The flags it was instantiated with (a fresh instantiation by
    /// [`Exec::update_or_reinstantiate`] uses them too).
    pub(super) flags: InstantiateFlags,
    /// The addresses of the graph allocations the graph does not free (with
    /// `auto_free_on_launch`): the last launch's are freed on drop.
    unfreed: Vec<u64>,
    /// Whether the next launch uploads the graph first (`cudaGraphUpload`): CUDA's rule for a
    /// graph with device-updatable nodes, before its first launch and after a host-side update
    /// of such a node.
    pub(super) upload_before_launch: bool,
}

/// Something an update replaced, kept until the launches that may use it have completed.
#[derive(Clone)]
enum Replaced {
    Alloc(#[allow(dead_code)] Arc<Allocation>), // reason: held for its Drop only
    Event(#[allow(dead_code)] crate::stream::Event), // reason: held for its Drop only
    Other(#[allow(dead_code)] Arc<Mutex<dyn Any + Send>>), // reason: held for its Drop only
    /// Host closures an update replaced, with their names: a launch still queued may call
    /// them, and their panics are reported like the current closures' (`Exec::check_host_panics`).
    Hosts(Vec<(String, Arc<HostFn>)>),
}

impl Replaced {
    /// Moves the panics of replaced host closures, released now, to `out`.
    fn release_into(self, out: &mut VecDeque<(String, String)>) {
        if let Replaced::Hosts(hosts) = self {
            for (name, h) in hosts {
                if let Some(message) = h.take_panic() {
                    out.push_back((name, message));
                }
            }
        }
    }
}

/// At most this many retired entries are kept (the queue's capacity, allocated with the
/// `Exec`): an update that would retire one more first releases those whose launches have
/// completed and, if none has, waits for the oldest. So updates allocate nothing.
const MAX_RETIRED: usize = 256;

/// At most this many distinct markers are held by the retired entries: a newer one takes over
/// the entries of the newest held one (a later launch of the same graph completing implies the
/// earlier ones have, so they are released later, never earlier). So updates ahead of the GPU
/// do not grow the streams' marker pools.
const RETIRED_MARKERS: usize = 4;

/// `Exec` is `Send` but not `Sync` (updates and launches need `&mut`):
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<cudagraph::Exec>();
/// ```
#[allow(dead_code)] // reason: carries the doctest above
struct ExecIsNotSync;

// SAFETY: the raw handles (exec, graphs, nodes, the staging pointers) are used only through
// `&mut self` (launch, updates) or for reads CUDA allows from any thread; everything else is
// Send. `Exec` is not `Sync`.
unsafe impl Send for Exec {}

impl Exec {
    /// The DAG as instantiated, with its current parameters.
    pub fn dag(&self) -> &Dag {
        &self.dag
    }

    /// The raw executable graph handle.
    pub fn raw(&self) -> sys::cudaGraphExec_t {
        self.raw
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Reports one host-closure panic: one kept from a replaced closure already released,
    /// else one of the current closures, else one of the replaced closures still kept (a
    /// launch queued before the update may have called it).
    fn check_host_panics(&mut self) -> Result<()> {
        if let Some((node, message)) = self.unreported.pop_front() {
            return Err(Error::HostNodePanicked { node, message });
        }
        let replaced = self.retired.iter().filter_map(|(_, r)| match r {
            Replaced::Hosts(hosts) => Some(hosts),
            _ => None,
        });
        let replaced = replaced.take(self.retired_hosts).flatten();
        for (name, h) in self.hosts.iter().chain(replaced) {
            if let Some(message) = h.take_panic() {
                return Err(Error::HostNodePanicked {
                    node: name.clone(),
                    message,
                });
            }
        }
        Ok(())
    }

    /// Queues one run of the graph on `stream` (of the graph's device). Reports a host-node
    /// panic from an earlier run (instead of launching). Allocates nothing and makes one CUDA
    /// call, `cuGraphLaunch`: nothing is recorded per launch (see [`Exec`]).
    pub fn launch(&mut self, stream: &Stream) -> Result<()> {
        #[cfg(feature = "cudarc")]
        if let Some(a) = self.lent().next() {
            return Err(Error::Cudarc {
                what: "Exec::launch",
                problem: format!(
                    "the graph uses memory lent by cudarc (a Lent of {:#x}, {} bytes): launch \
                     it with Exec::launch_lent, which binds each lent slice for the launch",
                    a.ptr, a.bytes
                ),
            });
        }
        self.launch_bound(stream)
    }

    /// The memory lent by cudarc that the graph uses (none without the `cudarc` feature).
    #[cfg(feature = "cudarc")]
    pub(crate) fn lent(&self) -> impl Iterator<Item = &Arc<Allocation>> {
        self.pinned.iter().filter(|a| a.is_lent())
    }

    /// [`Exec::launch`] once the lent memory the graph uses, if any, is bound for the launch.
    pub(crate) fn launch_bound(&mut self, stream: &Stream) -> Result<()> {
        self.check_host_panics()?;
        stream.check_device(&self.device, "the graph")?;
        crate::stream::check_not_in_host_node()?;
        // A helper's closure on this thread holds gates and use lists the launch would take.
        crate::stream::track::check_not_in_helper("Exec::launch")?;
        if self.upload_before_launch {
            // A graph with device-updatable nodes (see `nodes/device_update.rs`).
            self.upload(stream)?;
            self.upload_before_launch = false;
        }
        let (raw, log) = (self.raw, &self.log);
        let launch = || -> Result<()> {
            // What the launch uses is held by `self.dag`, the FFT context or `self.retired`,
            // which outlive it (`Drop` waits for it); no host access of its pinned memory runs
            // now (their use lists are locked), nor a synchronous helper's access of its device
            // memory (the gate is held), and any later one waits for the launches `log` counts
            // (a marker right after the latest, `crate::stream::queue`).
            let _gate = log.hold_launches();
            // SAFETY: the exec is live and of the stream's device; see above.
            unsafe { stream.inner.lock().launch(log, raw) }
        };
        if self.pinned.is_empty() {
            launch()?;
        } else {
            with_locked(&self.pinned, &mut { launch })?;
        }
        if !self.retired.is_empty() {
            self.collect()?;
        }
        Ok(())
    }

    /// Uploads the graph to the device ahead of the first launch.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        stream.check_device(&self.device, "the graph")?;
        let tail = stream.queue()?;
        // SAFETY: both handles are live.
        unsafe { rt::graph_upload(self.raw, tail.raw()) }
    }

    /// Waits for every launch of this graph (not for other work on its streams), then
    /// reports a host-node panic or an error kept from a `Drop`, and releases what updates
    /// replaced.
    pub fn synchronize(&mut self) -> Result<()> {
        self.log.wait()?;
        for (_, r) in self.retired.drain(..) {
            r.release_into(&mut self.unreported);
        }
        self.retired_hosts = 0;
        self.retired_markers = 0;
        self.check_host_panics()?;
        self.device.take_deferred()
    }

    /// Waits for this graph's launches, and for nothing else ([`Exec::profile`] runs after
    /// them).
    pub(super) fn wait_for_launches(&self) -> Result<()> {
        self.log.wait()
    }

    /// Releases what updates replaced once the launches that may use it have completed.
    fn collect(&mut self) -> Result<()> {
        while let Some((m, _)) = self.retired.front() {
            if !m.done()? {
                break;
            }
            self.pop_retired();
        }
        Ok(())
    }

    /// Releases the oldest retired entry (its launches completed), keeping the panics of the
    /// host closures it held for the next report.
    fn pop_retired(&mut self) {
        if let Some((m, r)) = self.retired.pop_front() {
            if matches!(r, Replaced::Hosts(_)) {
                self.retired_hosts -= 1;
            }
            if !matches!(self.retired.front(), Some((next, _)) if Arc::ptr_eq(next, &m)) {
                self.retired_markers -= 1;
            }
            r.release_into(&mut self.unreported);
        }
    }

    /// Makes room for one more retired entry: releases those whose launches have completed
    /// and, if none has, waits for the oldest.
    fn make_room(&mut self) -> Result<()> {
        self.collect()?;
        if self.retired.len() >= MAX_RETIRED {
            if let Some((oldest, _)) = self.retired.front() {
                oldest.wait()?;
            }
            self.collect()?;
        }
        Ok(())
    }

    /// Appends a retired entry released when `m` completes, keeping the bounds
    /// [`MAX_RETIRED`] and [`RETIRED_MARKERS`] without allocating. Should waiting for room
    /// fail, the entry is kept all the same (the queue grows past its bound rather than
    /// release anything early) and the error is reported by a later call.
    fn push_retired(&mut self, m: Arc<Marker>, item: Replaced) {
        if self.retired.len() >= MAX_RETIRED {
            if let Err(e) = self.make_room() {
                self.device.defer(
                    "an executable graph (waiting for a launch to release what an update \
                     replaced)",
                    e,
                );
            }
        }
        let newest = self.retired.back().map(|(b, _)| b.clone());
        match newest {
            Some(b) if Arc::ptr_eq(&b, &m) => {}
            Some(b) if self.retired_markers >= RETIRED_MARKERS => {
                // `m` follows a later launch than `b` (launches of one graph run in order):
                // the entries of `b` now wait for `m`, and `b` goes back to its pool.
                for (mark, _) in self.retired.iter_mut().rev() {
                    if !Arc::ptr_eq(mark, &b) {
                        break;
                    }
                    *mark = m.clone();
                }
            }
            _ => self.retired_markers += 1,
        }
        if matches!(item, Replaced::Hosts(_)) {
            self.retired_hosts += 1;
        }
        self.retired.push_back((m, item));
    }

    /// A marker that completes when the launches issued so far have, and not later; `None`
    /// before the first launch. One marker serves every retirement until the next launch
    /// (see `crate::stream::queue`: it is recorded right after the latest launch, at most once).
    fn launches_so_far(&mut self) -> Result<Option<Arc<Marker>>> {
        self.log.so_far()
    }

    /// Keeps `item` until the launches issued so far have completed (dropped now if none
    /// may still run). Should CUDA fail to say, the item is leaked rather than freed early.
    fn retire(&mut self, item: Replaced) {
        match self.launches_so_far() {
            Ok(None) => drop(item),
            Ok(Some(m)) => self.push_retired(m, item),
            Err(e) => {
                self.device
                    .defer("an executable graph (keeping what an update replaced)", e);
                std::mem::forget(item);
            }
        }
    }

    /// Keeps an event an update replaced until the launches that may use it have completed
    /// (no allocation: the event is already shared).
    pub(super) fn retire_event(&mut self, event: crate::stream::Event) {
        self.retire(Replaced::Event(event));
    }

    pub(super) fn retire_other(&mut self, item: impl Any + Send) {
        self.retire(Replaced::Other(Arc::new(Mutex::new(item))));
    }

    /// Keeps host closures an update replaced, with their names, until the launches that may
    /// call them have completed; a panic of theirs is reported by the next launch or
    /// synchronize meanwhile, or once they are released.
    pub(super) fn retire_hosts(&mut self, hosts: Vec<(String, Arc<HostFn>)>) {
        if !hosts.is_empty() {
            self.retire(Replaced::Hosts(hosts));
        }
    }

    /// Notes a host-side update of node `id`: a device-updatable node's makes the next launch
    /// upload the graph first (CUDA's rule). Allocates nothing.
    #[inline]
    pub(super) fn note_host_update(&mut self, id: NodeId) {
        if !self.dag.device_nodes.is_empty() && self.dag.device_nodes.index_of(id).is_some() {
            self.upload_before_launch = true;
        }
    }

    /// Notes one more reference of the DAG to `a`.
    pub(super) fn hold(&mut self, a: &Arc<Allocation>) {
        hold_in(&mut self.held, &mut self.pinned, &self.log, a);
    }

    /// Notes one reference fewer; the last one hands `a` to the launches so far.
    pub(super) fn release(&mut self, a: Arc<Allocation>) {
        if release_in(&mut self.held, &mut self.pinned, &a) {
            // Should CUDA fail to give a marker, the graph entry stays in the use list: host
            // access then waits for all of this graph's launches (while it lives), never less.
            if let Ok(so_far) = self.launches_so_far() {
                a.uses.end_graph(&self.log, so_far.as_ref());
            }
            self.retire(Replaced::Alloc(a));
        }
    }

    pub(super) fn handle(&self, id: NodeId) -> Result<sys::cudaGraphNode_t> {
        self.dag.node(id)?;
        Self::handle_in(&self.handles, id)
    }

    /// The CUDA node of `id` (a node of the DAG, checked by the caller) in `handles`.
    #[inline]
    pub(super) fn handle_in(
        handles: &[Option<sys::cudaGraphNode_t>],
        id: NodeId,
    ) -> Result<sys::cudaGraphNode_t> {
        // A match, not `ok_or`: no error is made (and dropped) on the update path.
        match handles.get(id.index()) {
            Some(Some(h)) => Ok(*h),
            _ => Err(Error::Dag(DagError::UnknownNode(id.serial()))),
        }
    }

    /// Enables or disables node `id` for later launches: kernel, memcpy and memset nodes,
    /// and FFT and captured nodes (all the CUDA nodes their capture made, which must then be
    /// kernel, memcpy or memset nodes; an FFT's parameter-setting kernel too). A disabled node
    /// does nothing when the graph runs; its dependencies still order the nodes around it.
    pub fn set_enabled(&mut self, id: NodeId, enabled: bool) -> Result<()> {
        self.note_host_update(id);
        let h = self.handle(id)?;
        let raw = self.raw;
        let node = self.dag.node_mut(id)?;
        match node.kind() {
            NodeKind::Kernel | NodeKind::Memcpy | NodeKind::Memset => {
                // SAFETY: `h` is a node of `raw`'s graph, of a kind CUDA can disable.
                unsafe { rt::graph_node_set_enabled(raw, h, enabled)? };
            }
            NodeKind::Fft | NodeKind::Captured => {
                let nodes = self
                    .captured
                    .get(&(h as CudaNodeKey))
                    .map_or(&[][..], Vec::as_slice);
                // SAFETY: the nodes are of the graph `raw` was instantiated from.
                unsafe { set_captured_enabled(raw, &node.name(), nodes, enabled)? };
            }
            _ => {
                return Err(node.wrong_kind(
                    "a kernel, memcpy, memset, FFT or captured node (CUDA can disable only \
                     kernel, memcpy and memset nodes)",
                ))
            }
        }
        node.enabled = enabled;
        Ok(())
    }

    /// Updates the executable graph in place to match `dag` (same nodes, same dependencies;
    /// parameters may differ) with `cudaGraphExecUpdate`. When CUDA refuses, the error names
    /// the node it blamed and why, and the graph is left as it was.
    ///
    /// Nodes are paired by [`NodeId`]: the DAG must have the nodes of the one instantiated
    /// (same ids, same kinds) and the same dependencies, each of the same kind (plain, or
    /// programmatic with the same port: [`Dag::add_programmatic_dependency`]; the edge data is
    /// kept, and a change is refused naming the edge). Lowering creates CUDA nodes in a
    /// canonical order (see [`Dag::topological_order`]), which is how CUDA pairs nodes too, so
    /// per-node updates after a whole-graph update still reach the node with that id. FFT
    /// nodes whose plan did not change keep their cuFFT plans.
    ///
    /// Whether a node is enabled is not a parameter: as `cudaGraphExecUpdate` leaves each
    /// node of the executable graph enabled or disabled as it was, the flags of `dag` are
    /// ignored, and [`Exec::dag`] (with [`Node::is_enabled`](super::Node::is_enabled)) and
    /// [`Exec::to_dot`] keep the flags the executable graph has. [`Exec::set_enabled`]
    /// changes them.
    ///
    /// A graph with memory nodes ([`Dag::add_alloc`]) cannot be updated this way (its
    /// allocations are the executable graph's): [`Error::UpdateRefused`] names its first
    /// memory node, and [`Exec::update_or_reinstantiate`] instantiates again.
    pub fn update(&mut self, dag: &Dag) -> Result<()> {
        self.update_keeping(dag, &mut None)
    }

    /// [`Exec::update`]; when CUDA refuses, `made` gets the FFT states the update made (never
    /// launched), for a fresh instantiation to take over.
    fn update_keeping(&mut self, dag: &Dag, made: &mut Option<FftCaptureState>) -> Result<()> {
        check_same_topology(&self.dag, dag)?;
        if let Some(n) = dag
            .device_graph_user()
            .or_else(|| self.dag.device_graph_user())
        {
            return Err(Error::UpdateRefused {
                node: Some(n),
                reason: "the graph's kernels launch device graphs, whose buffers the executable \
                         graph counts as its own for its lifetime (Exec::update_or_reinstantiate \
                         instantiates again)"
                    .into(),
            });
        }
        if let Some(n) = dag
            .device_updatable_node()
            .or_else(|| self.dag.device_updatable_node())
        {
            return Err(Error::UpdateRefused {
                node: Some(n),
                reason: "the graph has device-updatable kernel nodes, and CUDA updates neither \
                         such a graph nor its executable graph as a whole \
                         (Exec::update_or_reinstantiate instantiates again)"
                    .into(),
            });
        }
        if let Some(a) = dag.graph_memory_node() {
            // The update's graph would allocate at other addresses than this one's, which its
            // kernels and fills would be given (CUDA keeps the executable graph's allocations).
            return Err(Error::UpdateRefused {
                node: Some(a),
                reason: "the graph has memory nodes, whose allocations a whole-graph update \
                         cannot carry over (Exec::update_or_reinstantiate instantiates again)"
                    .into(),
            });
        }
        dag.validate(&self.device)?;
        let mut reuse = Some(std::mem::take(&mut self.fft_capture));
        let device = &self.device;
        let lowered = catch_unwind(AssertUnwindSafe(|| lower_to_cuda(dag, device, &mut reuse)));
        let lowered = match lowered {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                self.fft_capture = reuse.unwrap_or_default();
                return Err(e);
            }
            Err(panic) => {
                // `lower_to_cuda` gave the context back before unwinding on.
                self.fft_capture = reuse.unwrap_or_default();
                resume_unwind(panic)
            }
        };
        // The captured-node map stays the original graph's: per-node calls name its nodes.
        let LoweredGraph {
            graph,
            handles,
            fft_capture: mut new_fft,
            leftover,
            conditionals,
            ..
        } = lowered;
        // SAFETY: both are live.
        let verdict = unsafe { rt::graph_exec_update(self.raw, graph) };
        let refused = match verdict {
            Ok(Ok(())) => None,
            Ok(Err(refusal)) => {
                let node = refusal.node;
                let name = handles
                    .iter()
                    .position(|h| *h == Some(node) && !node.is_null())
                    .and_then(|i| dag.graph.node_weight(petgraph::graph::NodeIndex::new(i)))
                    .map(|n| n.name().to_string());
                Some(Error::UpdateRefused {
                    node: name,
                    reason: refusal.name(),
                })
            }
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            // SAFETY: the new graph is ours and unused.
            let _ = unsafe { rt::graph_destroy(graph) };
            let mut old = leftover.unwrap_or_default();
            old.reclaim(&mut new_fft);
            self.fft_capture = old;
            *made = Some(new_fft);
            return Err(e);
        }
        if let Some(old) = self.latest.replace(graph) {
            // SAFETY: the graph of an earlier update, no longer referenced by the exec.
            let _ = unsafe { rt::graph_destroy(old) };
        }
        if let Some(old) = &leftover {
            new_fft.adopt_node_handles_from(old);
        }
        self.fft_capture = new_fft;
        if let Some(l) = leftover {
            self.retire_other(l);
        }
        {
            let Exec {
                held, pinned, log, ..
            } = self;
            dag.for_each_allocation(&mut |a| hold_in(held, pinned, log, a));
        }
        let old_dag = std::mem::replace(&mut self.dag, dag.clone());
        crate::dag::nodes::conditional::set_handle_values(&mut self.dag, &conditionals);
        // CUDA kept each node's enabled state: so does the DAG the Exec reports.
        keep_enabled_flags(&mut self.dag, &old_dag);
        let mut old_allocs = Vec::new();
        old_dag.for_each_allocation(&mut |a| old_allocs.push(a.clone()));
        for a in old_allocs {
            self.release(a);
        }
        self.retire_other(old_dag);
        let mut old_hosts = std::mem::take(&mut self.hosts);
        self.dag.host_fns("", &mut self.hosts);
        // The closures the new DAG no longer has: launches still queued may call them, and
        // their panics must still be reported.
        if !old_hosts.is_empty() {
            let kept: std::collections::HashSet<*const HostFn> =
                self.hosts.iter().map(|(_, h)| Arc::as_ptr(h)).collect();
            old_hosts.retain(|(_, h)| !kept.contains(&Arc::as_ptr(h)));
            self.retire_hosts(old_hosts);
        }
        Ok(())
    }

    /// Updates in place if CUDA can, otherwise instantiates `dag` again. Either way the nodes
    /// of the instantiated graph stay enabled or disabled as they were (see [`Exec::update`]):
    /// a fresh instantiation disables the nodes this `Exec` had disabled (same id, same kind),
    /// and gives the other nodes the flags of `dag`. The cuFFT plans a refused update made are
    /// not made again: the fresh instantiation takes them over. It is made with this `Exec`'s
    /// [`InstantiateFlags`] (without `upload`).
    pub fn update_or_reinstantiate(&mut self, dag: &Dag) -> Result<UpdateOutcome> {
        let mut refused = None;
        match self.update_keeping(dag, &mut refused) {
            Ok(()) => Ok(UpdateOutcome::Updated),
            Err(Error::UpdateRefused { .. }) => {
                let mut fresh = dag.clone();
                keep_enabled_flags(&mut fresh, &self.dag);
                fresh.validate(&self.device)?;
                let reuse = refused.map(FftCaptureState::into_states_only);
                // The same flags (an upload is the first launch's business: not repeated).
                let flags = InstantiateFlags {
                    upload: false,
                    ..self.flags
                };
                let fresh = fresh.instantiate_validated(&self.device, flags, None, reuse)?;
                let mut old = std::mem::replace(self, fresh);
                // The old graph's launches may still call its host closures: once they have
                // completed, their panics are reported by this Exec. (Should the wait fail,
                // dropping the old Exec keeps the error for the next synchronising call.)
                if old.log.wait().is_ok() {
                    let panics = old.take_all_panics();
                    self.unreported.extend(panics);
                }
                // Dropping the old Exec waits for its launches before releasing anything.
                drop(old);
                Ok(UpdateOutcome::Reinstantiated)
            }
            Err(e) => Err(e),
        }
    }

    /// Every host-closure panic not yet reported (the launches have completed).
    fn take_all_panics(&mut self) -> VecDeque<(String, String)> {
        for (_, r) in self.retired.drain(..) {
            r.release_into(&mut self.unreported);
        }
        self.retired_hosts = 0;
        self.retired_markers = 0;
        let mut all = std::mem::take(&mut self.unreported);
        for (name, h) in &self.hosts {
            if let Some(message) = h.take_panic() {
                all.push_back((name.clone(), message));
            }
        }
        all
    }

    /// The DOT text of the DAG as instantiated, with current parameters and disabled nodes,
    /// and the form each FFT node was lowered in (for a plan with an unfused form: `fused` or
    /// `unfused: convert + FFT`, with why, e.g. `(auto: 37.0 µs, fused 51.5 µs)`).
    pub fn to_dot(&self) -> String {
        self.dag.to_dot_with(&|uid| self.fft_capture.decision(uid))
    }

    /// CUDA's own view of the graph (`cudaGraphDebugDotPrint`, verbose), as DOT text.
    pub fn cuda_dot(&self) -> Result<String> {
        let graph = self.latest.unwrap_or(self.graph);
        let path = std::env::temp_dir().join(format!(
            "cudagraph-{}-{:p}.dot",
            std::process::id(),
            self.raw
        ));
        let c =
            std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|_| Error::Nul {
                what: "the temporary DOT path",
            })?;
        // SAFETY: the graph is live; CUDA writes the file.
        unsafe { rt::graph_debug_dot_print(graph, &c, sys::cudaGraphDebugDotFlagsVerbose)? };
        let text =
            std::fs::read_to_string(&path).map_err(|e| Error::io("reading CUDA's DOT file", &e));
        let _ = std::fs::remove_file(&path);
        text
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        // Wait for this graph's launches before releasing what they use.
        if let Err(e) = self.log.wait() {
            self.device
                .defer("an executable graph (waiting for its launches)", e);
            // Launches may still run: leak what they use (and the graphs) rather than free it
            // early.
            std::mem::forget(std::mem::take(&mut self.dag));
            std::mem::forget(std::mem::take(&mut self.fft_capture));
            std::mem::forget(std::mem::take(&mut self.retired));
            std::mem::forget(std::mem::take(&mut self.pinned));
            std::mem::forget(std::mem::take(&mut self.hosts));
            return;
        }
        // The graph allocations the last launch left (auto_free_on_launch): no launch is
        // pending, nothing outside the graph knows their addresses. None before a launch.
        if !self.unfreed.is_empty() && matches!(self.log.so_far(), Ok(Some(_))) {
            for &a in &self.unfreed {
                // SAFETY: `a` is an allocation of this graph that it does not free, made by
                // its last launch (completed: waited for above), freed once here.
                if let Err(e) = unsafe { rt::free(a as *mut std::ffi::c_void) } {
                    self.device.defer("a graph allocation", e);
                }
            }
        }
        // SAFETY: the exec and graphs are owned and no launch is pending.
        unsafe {
            if let Err(e) = rt::graph_exec_destroy(self.raw) {
                self.device.defer("an executable graph", e);
            }
            for g in std::iter::once(self.graph).chain(self.latest) {
                if let Err(e) = rt::graph_destroy(g) {
                    self.device.defer("a graph", e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::instantiate::blamed;
    use super::*;
    use crate::{DeviceLimits, RecordingBackend};

    #[test]
    fn released_allocations_leave_no_count_behind() {
        let mut r = RecordingBackend::new(DeviceLimits::hopper());
        let (x, h) = (r.device_buffer::<f32>(64), r.host_buffer::<f32>(64));
        let log = ExecLaunches::new();
        let mut held = HashMap::default();
        let mut pinned = Vec::new();
        for a in [&x.alloc, &x.alloc, &h.alloc] {
            hold_in(&mut held, &mut pinned, &log, a);
        }
        assert_eq!((held.len(), pinned.len()), (2, 1));
        assert!(
            !release_in(&mut held, &mut pinned, &x.alloc),
            "one reference left"
        );
        assert!(release_in(&mut held, &mut pinned, &x.alloc));
        assert!(release_in(&mut held, &mut pinned, &h.alloc));
        assert!(held.is_empty(), "{} counts left", held.len());
        assert!(pinned.is_empty());
        // Held again: counted from one.
        hold_in(&mut held, &mut pinned, &log, &x.alloc);
        assert!(release_in(&mut held, &mut pinned, &x.alloc));
        assert!(held.is_empty());
    }

    #[cfg(feature = "cudarc")]
    #[test]
    fn lent_allocations_leave_the_pinned_list_with_their_last_reference() {
        let mut r = RecordingBackend::new(DeviceLimits::hopper());
        let lent = r.foreign_device_buffer::<f32>(64, Box::new(crate::memory::LentMemory));
        assert!(lent.alloc.is_lent());
        let log = ExecLaunches::new();
        let (mut held, mut pinned) = (HashMap::default(), Vec::new());
        hold_in(&mut held, &mut pinned, &log, &lent.alloc);
        assert_eq!(pinned.len(), 1);
        assert!(release_in(&mut held, &mut pinned, &lent.alloc));
        assert!(
            pinned.is_empty(),
            "an Exec updated away from it no longer lists it"
        );
        // Held again (updated back): listed once, not twice (a second entry would be locked
        // twice around a launch).
        hold_in(&mut held, &mut pinned, &log, &lent.alloc);
        assert_eq!(pinned.len(), 1);
    }

    #[test]
    fn a_refused_instantiation_names_the_node_cuda_blames() {
        let mut dag = Dag::new();
        let a = dag.add_empty();
        let b = dag.add_empty();
        dag.set_name(b, "the culprit");
        let c = dag.add_empty();
        dag.set_name(c, "captured work");
        // Stand-ins for CUDA's node handles (never dereferenced).
        let h = |n: usize| n as sys::cudaGraphNode_t;
        let mut handles = vec![None; 3];
        handles[a.index()] = Some(h(0x10));
        handles[b.index()] = Some(h(0x20));
        handles[c.index()] = Some(h(0x30));
        // `c` was captured: CUDA made nodes 0x31 and 0x32, the last is the one it returned.
        let mut captured = HashMap::new();
        captured.insert(0x30 as CudaNodeKey, vec![h(0x31), h(0x32)]);
        let refusal = |node: usize| rt::InstantiateRefusal {
            error: Error::Invalid("cudaErrorInvalidValue".into()),
            result: 3,
            node: h(node),
        };
        let named = |node: usize| match blamed(&dag, &handles, &captured, refusal(node)) {
            Error::Dag(DagError::Instantiate { node, problem }) => (node, problem),
            other => panic!("{other}"),
        };
        let (node, problem) = named(0x20);
        assert_eq!(node, "the culprit");
        assert!(
            problem.contains("not supported") && problem.contains("cudaErrorInvalidValue"),
            "{problem}"
        );
        // A node a capture made is named by the captured node.
        assert_eq!(named(0x31).0, "captured work");
        // A node that is none of ours lies inside a child graph.
        assert!(named(0x99).0.contains("child graph"));
        // No node blamed: CUDA's error as it is.
        assert!(matches!(
            blamed(&dag, &handles, &captured, refusal(0)),
            Error::Invalid(_)
        ));
    }
}
