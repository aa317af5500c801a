//! Executable graphs: instantiation, launches, per-node updates, whole-graph updates.

use std::any::Any;
use std::sync::Arc;

use super::lower::{host_params, kernel_params, memcpy_kind, memset_params, CudaBackend};
use super::{Dag, DagError, HostFn, NodeId, NodeKind, Op};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{KernelArg, LaunchConfig};
use crate::memory::{Allocation, Region};
use crate::result::runtime as rt;
use crate::stream::Stream;
use crate::sys;

/// Flags for [`Dag::instantiate_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstantiateFlags {
    /// Upload the graph to the device on this stream as part of instantiation
    /// (`cudaGraphInstantiateFlagUpload` semantics, done with `cudaGraphUpload`), so the first
    /// launch does not pay for it.
    pub upload: bool,
    /// Honour per-node launch priorities (`cudaGraphInstantiateFlagUseNodePriority`).
    pub use_node_priority: bool,
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
/// It holds a copy of the [`Dag`] it was made from, and with it every buffer, kernel, module,
/// closure and FFT state the graph refers to: nothing it uses can be freed while it lives.
/// Parameters can be updated between launches (`set_*`); an update applies to launches issued
/// after it, while launches already queued keep the parameters they were launched with. Buffers
/// that an update replaces are kept alive until the next [`Exec::synchronize`] (or the drop).
pub struct Exec {
    raw: sys::cudaGraphExec_t,
    /// The graph `raw` was instantiated from: per-node updates name its nodes.
    graph: sys::cudaGraph_t,
    /// The graph of the last whole-graph update, for [`Exec::cuda_dot`].
    latest: Option<sys::cudaGraph_t>,
    device: Device,
    dag: Dag,
    /// CUDA node handles of `graph`, by node index.
    handles: Vec<Option<sys::cudaGraphNode_t>>,
    hosts: Vec<(NodeId, Arc<HostFn>)>,
    fft: crate::fft::LoweringContext,
    retired: Vec<Arc<dyn Any + Send + Sync>>,
    launched_on: Vec<Stream>,
}

// SAFETY: the raw handles are used only through `&mut self` (launch, updates) or for reads
// CUDA allows from any thread; the rest of the state is Send.
unsafe impl Send for Exec {}

impl Dag {
    /// Validates, lowers and instantiates the DAG on `device`.
    pub fn instantiate(&self, device: &Device) -> Result<Exec> {
        self.instantiate_with(device, InstantiateFlags::default(), None)
    }

    /// As [`Dag::instantiate`], with flags; `upload_stream` is used when `flags.upload`.
    pub fn instantiate_with(
        &self,
        device: &Device,
        flags: InstantiateFlags,
        upload_stream: Option<&Stream>,
    ) -> Result<Exec> {
        self.validate(device)?;
        self.clone()
            .instantiate_validated(device, flags, upload_stream)
    }

    /// As [`Dag::instantiate`], but consumes the DAG instead of copying it into the [`Exec`]
    /// (the copy costs a few hundred nanoseconds per node). [`Exec::dag`] still gives it back.
    pub fn into_exec(self, device: &Device) -> Result<Exec> {
        self.validate(device)?;
        self.instantiate_validated(device, InstantiateFlags::default(), None)
    }

    fn instantiate_validated(
        self,
        device: &Device,
        flags: InstantiateFlags,
        upload_stream: Option<&Stream>,
    ) -> Result<Exec> {
        let (graph, handles, fft) = lower_to_cuda(&self, device)?;
        let mut f = 0u64;
        if flags.use_node_priority {
            f |= sys::cudaGraphInstantiateFlagUseNodePriority as u64;
        }
        // SAFETY: `graph` is live and complete.
        let raw = match unsafe { rt::graph_instantiate(graph, f) } {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: the graph is ours and unused.
                let _ = unsafe { rt::graph_destroy(graph) };
                return Err(e);
            }
        };
        let hosts = collect_hosts(&self);
        let exec = Exec {
            raw,
            graph,
            latest: None,
            device: device.clone(),
            dag: self,
            handles,
            hosts,
            fft,
            retired: Vec::new(),
            launched_on: Vec::new(),
        };
        if flags.upload {
            let s = upload_stream.ok_or_else(|| {
                Error::Invalid("InstantiateFlags::upload needs an upload stream".into())
            })?;
            exec.upload(s)?;
        }
        Ok(exec)
    }
}

type Lowered = (
    sys::cudaGraph_t,
    Vec<Option<sys::cudaGraphNode_t>>,
    crate::fft::LoweringContext,
);

fn lower_to_cuda(dag: &Dag, device: &Device) -> Result<Lowered> {
    let mut backend = CudaBackend::new(device)?;
    let handles = dag.lower_validated(&mut backend)?;
    let (graph, fft) = backend.into_graph();
    Ok((graph, handles, fft))
}

fn collect_hosts(dag: &Dag) -> Vec<(NodeId, Arc<HostFn>)> {
    dag.graph
        .node_indices()
        .filter_map(|i| match &dag.graph[i].op {
            Op::Host(h) => Some((NodeId(i), h.f.clone())),
            _ => None,
        })
        .collect()
}

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

    fn check_host_panics(&self) -> Result<()> {
        for (id, h) in &self.hosts {
            if let Some(message) = h.take_panic() {
                return Err(Error::HostNodePanicked {
                    node: self.dag.graph[id.0].name.clone(),
                    message,
                });
            }
        }
        Ok(())
    }

    /// Queues one run of the graph on `stream`. Reports a host-node panic from an earlier run
    /// (instead of launching). Allocates nothing after the first launch on a stream.
    pub fn launch(&mut self, stream: &Stream) -> Result<()> {
        self.check_host_panics()?;
        if !self
            .launched_on
            .iter()
            .any(|s| Arc::ptr_eq(&s.inner, &stream.inner))
        {
            self.launched_on.push(stream.clone());
        }
        // SAFETY: the exec is live; everything it refers to is owned by `self.dag`, the FFT
        // context or `self.retired`, which outlive every launch (Drop waits for them).
        unsafe { rt::graph_launch(self.raw, stream.raw()) }
    }

    /// Uploads the graph to the device ahead of the first launch.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { rt::graph_upload(self.raw, stream.raw()) }
    }

    /// Waits for every launch of this graph (on every stream it was launched on), then
    /// reports a host-node panic or an error kept from a `Drop`, and releases buffers that
    /// updates replaced.
    pub fn synchronize(&mut self) -> Result<()> {
        for s in &self.launched_on {
            // SAFETY: the stream is live (held by `launched_on`).
            unsafe { rt::stream_synchronize(s.raw())? };
        }
        self.retired.clear();
        self.check_host_panics()?;
        self.device.take_deferred()
    }

    fn handle(&self, id: NodeId) -> Result<sys::cudaGraphNode_t> {
        self.handles
            .get(id.index())
            .copied()
            .flatten()
            .ok_or(Error::Dag(DagError::UnknownNode(id.index())))
    }

    fn retire(retired: &mut Vec<Arc<dyn Any + Send + Sync>>, a: Arc<dyn Any + Send + Sync>) {
        let p = Arc::as_ptr(&a) as *const ();
        if !retired.iter().any(|r| Arc::as_ptr(r) as *const () == p) {
            retired.push(a);
        }
    }

    fn push_kernel_params(&self, id: NodeId) -> Result<()> {
        let h = self.handle(id)?;
        let Op::Kernel(k) = &self.dag.graph[id.0].op else {
            unreachable!("checked by the caller")
        };
        // SAFETY: `h` is the kernel node of the instantiated graph for this DAG node; the
        // parameters were validated; CUDA copies the argument values during the call.
        unsafe { rt::graph_exec_kernel_node_set_params(self.raw, h, &kernel_params(k)) }
    }

    /// Replaces all arguments of kernel node `id` (checked against the kernel's layout).
    pub fn set_kernel_args(&mut self, id: NodeId, args: &[KernelArg]) -> Result<()> {
        let retired = &mut self.retired;
        self.dag
            .node_mut(id)?
            .apply_kernel_args(args, &mut |a: Arc<Allocation>| Self::retire(retired, a))?;
        self.push_kernel_params(id)
    }

    /// Replaces argument `index` of kernel node `id`.
    pub fn set_kernel_arg(
        &mut self,
        id: NodeId,
        index: usize,
        arg: impl Into<KernelArg>,
    ) -> Result<()> {
        let arg = arg.into();
        let (name, k) = self.dag.node_mut(id)?.kernel_parts()?;
        if let Some(problem) = k.kernel.arg_problem(index, &arg) {
            return Err(Error::Dag(DagError::KernelArgs {
                node: name.to_string(),
                kernel: k.kernel.name().to_string(),
                problem,
            }));
        }
        if let Some(old) = k.args.set(index, &arg) {
            Self::retire(&mut self.retired, old);
        }
        self.push_kernel_params(id)
    }

    /// Replaces the launch shape of kernel node `id` (checked against the device).
    pub fn set_launch_config(&mut self, id: NodeId, config: LaunchConfig) -> Result<()> {
        let limits = self.device.limits();
        let (name, k) = self
            .dag
            .graph
            .node_weight_mut(id.0)
            .ok_or(Error::Dag(DagError::UnknownNode(id.index())))?
            .kernel_parts()?;
        if let Some(problem) = k.kernel.launch_problem(limits, &config) {
            return Err(Error::Dag(DagError::LaunchShape {
                node: name.to_string(),
                kernel: k.kernel.name().to_string(),
                problem,
            }));
        }
        k.config = config;
        self.push_kernel_params(id)
    }

    /// Replaces the ends of 1D memcpy node `id` (same direction; checked like when added).
    pub fn set_memcpy(
        &mut self,
        id: NodeId,
        dst: impl Into<Region>,
        src: impl Into<Region>,
    ) -> Result<()> {
        let (dst, src) = (dst.into(), src.into());
        let key = super::DeviceKey::Cuda(self.device.ordinal() as i32);
        for r in [&dst, &src] {
            if super::DeviceKey::of_owner(&r.alloc.owner) != key {
                return Err(Error::Dag(DagError::WrongDevice {
                    node: self.dag.node(id)?.name.clone(),
                    problem: "the new buffer is not on the graph's device".into(),
                }));
            }
        }
        let h = self.handle(id)?;
        let retired = &mut self.retired;
        let node = self.dag.node_mut(id)?;
        node.apply_memcpy(dst, src, &mut |a: Arc<Allocation>| Self::retire(retired, a))?;
        let Op::Memcpy(m) = &node.op else {
            unreachable!()
        };
        // SAFETY: `h` is this memcpy node; the regions were bounds-checked and are kept alive
        // by the DAG copy.
        unsafe {
            rt::graph_exec_memcpy_node_set_params_1d(
                self.raw,
                h,
                m.dst.addr() as *mut _,
                m.src.addr() as *const _,
                m.width,
                memcpy_kind(m.kind()),
            )
        }
    }

    /// Replaces the value memset node `id` writes (same size).
    pub fn set_memset_value(
        &mut self,
        id: NodeId,
        value: impl Into<super::MemsetValue>,
    ) -> Result<()> {
        let h = self.handle(id)?;
        let node = self.dag.node_mut(id)?;
        node.apply_memset_value(value.into())?;
        let Op::Memset(m) = &node.op else {
            unreachable!()
        };
        // SAFETY: `h` is this memset node; only the value changed.
        unsafe { rt::graph_exec_memset_node_set_params(self.raw, h, &memset_params(m)) }
    }

    /// Replaces the closure of host node `id`. The old closure stays alive until the next
    /// [`Exec::synchronize`], since queued launches may still call it.
    pub fn set_host_fn(&mut self, id: NodeId, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let h = self.handle(id)?;
        let node = self.dag.node_mut(id)?;
        let Op::Host(host) = &mut node.op else {
            return Err(node.wrong_kind("a host node"));
        };
        let new = HostFn::new(f);
        let old = std::mem::replace(&mut host.f, new.clone());
        // SAFETY: `h` is this host node; the new HostFn is kept alive by the DAG copy, the
        // old one by `retired` until the queued launches are done.
        unsafe { rt::graph_exec_host_node_set_params(self.raw, h, &host_params(host))? };
        Self::retire(&mut self.retired, old);
        for entry in &mut self.hosts {
            if entry.0 == id {
                entry.1 = new.clone();
            }
        }
        Ok(())
    }

    /// Enables or disables node `id` for later launches (kernel, memcpy and memset nodes).
    pub fn set_enabled(&mut self, id: NodeId, enabled: bool) -> Result<()> {
        let h = self.handle(id)?;
        let node = self.dag.node_mut(id)?;
        if !matches!(
            node.kind(),
            NodeKind::Kernel | NodeKind::Memcpy | NodeKind::Memset
        ) {
            return Err(
                node.wrong_kind("a kernel, memcpy or memset node (CUDA can disable only those)")
            );
        }
        // SAFETY: `h` is a node of a kind CUDA can disable.
        unsafe { rt::graph_node_set_enabled(self.raw, h, enabled)? };
        node.enabled = enabled;
        Ok(())
    }

    /// Replaces the callback parameters of FFT node `id` for launches issued after this call
    /// (launches already queued keep theirs). Regions the old parameters pointed to stay alive
    /// until the next [`Exec::synchronize`].
    pub fn set_fft_params(&mut self, id: NodeId, params: crate::fft::FftParams) -> Result<()> {
        let key = super::DeviceKey::Cuda(self.device.ordinal() as i32);
        let node = self.dag.node_mut(id)?;
        if !matches!(node.op, Op::Fft(_)) {
            return Err(node.wrong_kind("an FFT node"));
        }
        let super::Node { name, op, .. } = node;
        let Op::Fft(f) = op else { unreachable!() };
        let old = f.apply_params(name, params)?;
        if let Err(e) = f.validate(name, key) {
            f.params = old;
            return Err(e);
        }
        let blob = f.param_blob(&f.params);
        let uid = f.uid;
        for p in [old.load, old.store].into_iter().flatten() {
            if let crate::fft::CallbackParams::Load { input: Some(r), .. }
            | crate::fft::CallbackParams::Store {
                output: Some(r), ..
            } = p
            {
                Self::retire(&mut self.retired, r.alloc);
            }
        }
        self.fft.set_params(self.raw, uid, &blob)
    }

    /// Updates the executable graph in place to match `dag` (same nodes, same dependencies;
    /// parameters may differ) with `cudaGraphExecUpdate`. When CUDA refuses, the error
    /// names the node it blamed and why, and the graph is left as it was.
    pub fn update(&mut self, dag: &Dag) -> Result<()> {
        // Our per-node handles are by node id: the ids and kinds must match.
        for i in dag.graph.node_indices() {
            let same = self
                .dag
                .graph
                .node_weight(i)
                .map(|n| n.kind() == dag.graph[i].kind())
                .unwrap_or(false);
            if !same {
                return Err(Error::UpdateRefused {
                    node: Some(dag.graph[i].name.clone()),
                    reason: "the node is new or changed kind".into(),
                });
            }
        }
        if dag.node_count() != self.dag.node_count() {
            return Err(Error::UpdateRefused {
                node: None,
                reason: format!(
                    "the graph has {} nodes; the instantiated one has {}",
                    dag.node_count(),
                    self.dag.node_count()
                ),
            });
        }
        dag.validate(&self.device)?;
        let (graph, handles, fft) = lower_to_cuda(dag, &self.device)?;
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
                    .map(|n| n.name.clone());
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
            return Err(e);
        }
        if let Some(old) = self.latest.replace(graph) {
            // SAFETY: the graph of an earlier update, no longer referenced by the exec.
            let _ = unsafe { rt::graph_destroy(old) };
        }
        let old_dag = std::mem::replace(&mut self.dag, dag.clone());
        Self::retire(&mut self.retired, Arc::new(old_dag));
        let old_fft = std::mem::replace(&mut self.fft, fft);
        self.fft.adopt_node_handles_from(&old_fft);
        Self::retire(&mut self.retired, Arc::new(old_fft));
        self.hosts = collect_hosts(&self.dag);
        Ok(())
    }

    /// Updates in place if CUDA can, otherwise instantiates `dag` again.
    pub fn update_or_reinstantiate(&mut self, dag: &Dag) -> Result<UpdateOutcome> {
        match self.update(dag) {
            Ok(()) => Ok(UpdateOutcome::Updated),
            Err(Error::UpdateRefused { .. }) => {
                let fresh = dag.instantiate(&self.device)?;
                // Dropping the old Exec waits for its launches before releasing anything.
                drop(std::mem::replace(self, fresh));
                Ok(UpdateOutcome::Reinstantiated)
            }
            Err(e) => Err(e),
        }
    }

    /// The DOT text of the DAG as instantiated, with current parameters and disabled nodes.
    pub fn to_dot(&self) -> String {
        self.dag.to_dot()
    }

    /// CUDA's own view of the graph (`cudaGraphDebugDotPrint`, verbose), as DOT text.
    pub fn cuda_dot(&self) -> Result<String> {
        let graph = self.latest.unwrap_or(self.graph);
        let path = std::env::temp_dir().join(format!(
            "cudagraph-{}-{:p}.dot",
            std::process::id(),
            self.raw
        ));
        let c = std::ffi::CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| Error::Invalid("temporary path has a NUL".into()))?;
        // SAFETY: the graph is live; CUDA writes the file.
        unsafe { rt::graph_debug_dot_print(graph, &c, sys::cudaGraphDebugDotFlagsVerbose)? };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Invalid(format!("reading CUDA's DOT file: {e}")));
        let _ = std::fs::remove_file(&path);
        text
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        // Wait for queued launches before releasing what they use.
        for s in &self.launched_on {
            // SAFETY: the stream is live.
            if let Err(e) = unsafe { rt::stream_synchronize(s.raw()) } {
                self.device
                    .defer("an executable graph (waiting for its launches)", e);
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
