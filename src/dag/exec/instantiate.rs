//! Instantiation: a validated DAG lowered through the CUDA backend and instantiated (with the
//! node CUDA blames named when it refuses), the topology check whole-graph updates rely on, and
//! the lowering step updates share.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use super::*;

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
            .instantiate_validated(device, flags, upload_stream, None)
    }

    /// As [`Dag::instantiate`], but consumes the DAG instead of copying it into the [`Exec`]
    /// (the copy costs a few hundred nanoseconds per node). [`Exec::dag`] still gives it back.
    pub fn into_exec(self, device: &Device) -> Result<Exec> {
        self.validate(device)?;
        self.instantiate_validated(device, InstantiateFlags::default(), None, None)
    }

    /// Instantiates the validated DAG; FFT nodes take over the unchanged states of `reuse`,
    /// which no launch may use (what a refused update made), the rest of it is dropped.
    pub(super) fn instantiate_validated(
        self,
        device: &Device,
        flags: InstantiateFlags,
        upload_stream: Option<&Stream>,
        mut reuse: Option<FftCaptureState>,
    ) -> Result<Exec> {
        let upload = match (flags.upload, upload_stream) {
            (false, _) => None,
            (true, Some(s)) => {
                s.check_device(device, "the graph")?;
                Some(s)
            }
            (true, None) => {
                return Err(Error::BadOptions {
                    what: "InstantiateFlags",
                    problem: "`upload` needs an upload stream".into(),
                })
            }
        };
        crate::dag::nodes::graph_memory::check_unfreed(&self, flags.auto_free_on_launch)?;
        if flags.device_launch {
            if flags.auto_free_on_launch {
                return Err(Error::BadOptions {
                    what: "InstantiateFlags",
                    problem: "`device_launch` and `auto_free_on_launch` cannot be used together \
                              (CUDA's rule)"
                        .into(),
                });
            }
            crate::dag::nodes::device_launch::check_device_launch(&self, device.key())?;
        }
        let log = ExecLaunches::new();
        let lowered = lower_to_cuda(&self, device, &mut reuse)?;
        let (graph, handles, fft, captured, disabled) = (
            lowered.graph,
            lowered.handles,
            lowered.fft_capture,
            lowered.captured,
            lowered.disabled,
        );
        let mut f = 0u64;
        if flags.use_node_priority {
            f |= sys::cudaGraphInstantiateFlagUseNodePriority as u64;
        }
        if flags.auto_free_on_launch {
            f |= sys::cudaGraphInstantiateFlagAutoFreeOnLaunch as u64;
        }
        if flags.device_launch {
            f |= sys::cudaGraphInstantiateFlagDeviceLaunch as u64;
        }
        let unfreed = if flags.auto_free_on_launch {
            let unfreed = crate::dag::nodes::graph_memory::unfreed(&self);
            let addr = |i: u32| lowered.graph_allocs.iter().find(|(j, _)| *j == i);
            unfreed
                .iter()
                .filter_map(|&(i, _)| addr(i))
                .map(|&(_, a)| a)
                .collect()
        } else {
            Vec::new()
        };
        let instantiated = match upload {
            // SAFETY: `graph` is live and complete.
            None => unsafe { rt::graph_instantiate_with_params(graph, f, None) }
                .map_err(|r| blamed(&self, &handles, &captured, r)),
            Some(s) => s.queue().and_then(|tail| {
                // SAFETY: `graph` is live and complete; the upload stream is live and of this
                // device, its tail held.
                unsafe { rt::graph_instantiate_with_params(graph, f, Some(tail.raw())) }
                    .map_err(|r| blamed(&self, &handles, &captured, r))
            }),
        };
        let raw = match instantiated {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: the graph is ours and unused.
                let _ = unsafe { rt::graph_destroy(graph) };
                return Err(e);
            }
        };
        let upload_before_launch = !self.device_nodes.is_empty() && upload.is_none();
        let mut exec = Exec {
            raw,
            graph,
            latest: None,
            device: device.clone(),
            dag: self,
            handles,
            captured,
            hosts: Vec::new(),
            retired_hosts: 0,
            unreported: VecDeque::new(),
            fft_capture: fft,
            log,
            held: HashMap::default(),
            pinned: Vec::new(),
            // Room for the retirements of a few updates without growing on the update path.
            retired: VecDeque::with_capacity(MAX_RETIRED),
            retired_markers: 0,
            scratch: ArgScratch::default(),
            flags,
            unfreed,
            upload_before_launch,
        };
        // Kernel arguments passing a conditional handle hold the graph's from here on (the
        // per-node updates of their other arguments pass them on); so do the nodes using a
        // graph buffer, its address.
        crate::dag::nodes::conditional::set_handle_values(&mut exec.dag, &lowered.conditionals);
        crate::dag::nodes::graph_memory::set_addresses(&mut exec.dag, &lowered.graph_allocs);
        crate::dag::nodes::device_update::set_values(&mut exec.dag, &lowered.device_nodes);
        let Exec {
            dag,
            held,
            pinned,
            log,
            hosts,
            ..
        } = &mut exec;
        // One pass over the nodes (building large graphs is bound by passes over memory): the
        // host closures to run and the allocations the Exec refers to.
        for n in dag.graph.node_weights() {
            n.op.host_fns("", &n.name(), hosts);
            n.for_each_allocation(&mut |a| hold_in(held, pinned, log, a));
        }
        // The buffers of the device graphs its kernels launch: host access to them waits for
        // this graph's launches too.
        dag.device_graphs
            .for_each_allocation(&mut |a| hold_in(held, pinned, log, a));
        // Nodes disabled in the DAG are disabled in the executable graph (CUDA instantiates
        // every node enabled). On error the Exec is dropped: nothing was launched.
        for (h, name) in &disabled {
            // SAFETY: `h` is a node of the graph `exec.raw` was instantiated from, of a kind
            // CUDA can disable (only `Exec::set_enabled` disables nodes, and it checks).
            unsafe { switch_node(exec.raw, &exec.captured, *h, name, false)? };
        }
        Ok(exec)
    }
}

/// The error for a refused instantiation: [`DagError::Instantiate`] naming the node CUDA blames
/// (the DAG node that made it, for a node a capture made), else CUDA's error as it is.
pub(super) fn blamed(
    dag: &Dag,
    handles: &[Option<sys::cudaGraphNode_t>],
    captured: &HashMap<CudaNodeKey, Vec<sys::cudaGraphNode_t>>,
    refusal: rt::InstantiateRefusal,
) -> Error {
    let problem = || format!("{} ({})", refusal.result_words(), refusal.error);
    if refusal.node.is_null() {
        return refusal.error;
    }
    // The CUDA node a DAG node returned, or the node whose capture made `refusal.node`.
    let made = |h: sys::cudaGraphNode_t| {
        h == refusal.node
            || captured
                .get(&(h as CudaNodeKey))
                .is_some_and(|nodes| nodes.contains(&refusal.node))
    };
    for id in dag.node_ids() {
        if let Some(Some(h)) = handles.get(id.index()) {
            if made(*h) {
                if let Ok(n) = dag.node(id) {
                    return Error::Dag(DagError::Instantiate {
                        node: n.name().to_string(),
                        problem: problem(),
                    });
                }
            }
        }
    }
    // A node inside a child graph (CUDA's clone: not one of ours) or one CUDA added.
    Error::Dag(DagError::Instantiate {
        node: "(a node inside a child graph)".to_string(),
        problem: problem(),
    })
}

/// Enables or disables node `h` of the graph `raw` was instantiated from: the nodes its capture
/// made when it is a captured (or FFT) node's, else the node itself.
///
/// # Safety
/// `h` is a node of the graph `raw` was instantiated from (one lowering returned), of a kind
/// CUDA can disable (kernel, memcpy, memset), or a captured node's (in `captured`).
unsafe fn switch_node(
    raw: sys::cudaGraphExec_t,
    captured: &HashMap<CudaNodeKey, Vec<sys::cudaGraphNode_t>>,
    h: sys::cudaGraphNode_t,
    name: &str,
    enabled: bool,
) -> Result<()> {
    match captured.get(&(h as CudaNodeKey)) {
        // SAFETY: the nodes are of the graph `raw` was instantiated from (caller's contract).
        Some(nodes) => unsafe { set_captured_enabled(raw, name, nodes, enabled) },
        // SAFETY: caller's contract.
        None => unsafe { rt::graph_node_set_enabled(raw, h, enabled) },
    }
}

/// Gives the nodes of `dag` the enabled flags of the same nodes (same id, same kind) of `from`;
/// other nodes keep their own.
pub(in crate::dag) fn keep_enabled_flags(dag: &mut Dag, from: &Dag) {
    for i in from.graph.node_indices() {
        let o = &from.graph[i];
        if let Some(n) = dag.graph.node_weight_mut(i) {
            if n.serial == o.serial && n.kind() == o.kind() {
                n.enabled = o.enabled;
            }
        }
    }
}

/// The host-side half of [`Exec::update`]: `new` has the nodes of `old` (same ids, same
/// kinds) and the same dependencies, else `Error::UpdateRefused`. Nodes are then paired by
/// id, and lowering both in canonical order pairs them the way CUDA does.
pub(crate) fn check_same_topology(old: &Dag, new: &Dag) -> Result<()> {
    for i in new.graph.node_indices() {
        let node = &new.graph[i];
        let same = old
            .graph
            .node_weight(i)
            .map(|n| n.serial == node.serial && n.kind() == node.kind())
            .unwrap_or(false);
        if !same {
            return Err(Error::UpdateRefused {
                node: Some(node.name().to_string()),
                reason: "the node is new or changed kind".into(),
            });
        }
    }
    if new.node_count() != old.node_count() {
        return Err(Error::UpdateRefused {
            node: None,
            reason: format!(
                "the graph has {} nodes; the instantiated one has {}",
                new.node_count(),
                old.node_count()
            ),
        });
    }
    if new.edge_serials() != old.edge_serials() {
        return Err(Error::UpdateRefused {
            node: None,
            reason: "the dependencies differ from the instantiated graph's".into(),
        });
    }
    // The edge data too: `cudaGraphExecUpdate` pairs edges with their data, and an edge that
    // changed kind (plain or programmatic, or its port) is a change of topology.
    let (new_p, old_p) = (new.programmatic_serials(), old.programmatic_serials());
    if new_p != old_p {
        let differs = new_p
            .iter()
            .find(|e| !old_p.contains(e))
            .map(|&(b, a, port)| (b, a, Some(port)))
            .or_else(|| {
                old_p
                    .iter()
                    .find(|e| !new_p.contains(e))
                    .map(|&(b, a, _)| (b, a, None))
            })
            .expect("the lists differ");
        let (b, a, port) = differs;
        let name = |serial| {
            new.graph
                .node_weights()
                .find(|n| n.serial == serial)
                .map_or_else(String::new, |n| n.name().to_string())
        };
        let now = match port {
            Some(p) => format!("programmatic ({})", p.words()),
            None => "not programmatic (or of another port)".into(),
        };
        return Err(Error::UpdateRefused {
            node: Some(name(a)),
            reason: format!(
                "the edge `{}` -> `{}` is {now} in the new DAG, unlike the instantiated \
                 graph's: an update keeps every edge's data",
                name(b),
                name(a)
            ),
        });
    }
    Ok(())
}

/// Lowers `dag` into a new CUDA graph; FFT nodes whose plan did not change take their cuFFT
/// state from `reuse` instead of making it again (it moves into the result). On failure,
/// `reuse` is left whole.
pub(super) fn lower_to_cuda(
    dag: &Dag,
    device: &Device,
    reuse: &mut Option<FftCaptureState>,
) -> Result<LoweredGraph> {
    let mut backend = CudaBackend::new(device)?;
    if let Some(r) = reuse.take() {
        backend.fft_capture.set_reuse(r);
    }
    // A panic while lowering (a captured node's work may panic) must not drop the reused
    // context: the live graph still uses its plans and buffers. It is given back first.
    let lowered = catch_unwind(AssertUnwindSafe(|| dag.lower_validated(&mut backend)));
    let lowered = match lowered {
        Ok(l) => l,
        Err(panic) => {
            if let Some(mut old) = backend.fft_capture.take_reuse() {
                old.reclaim(&mut backend.fft_capture);
                *reuse = Some(old);
            }
            resume_unwind(panic)
        }
    };
    match lowered {
        Ok(handles) => {
            let mut built = backend.into_graph();
            built.handles = handles;
            Ok(built)
        }
        Err(e) => {
            if let Some(mut old) = backend.fft_capture.take_reuse() {
                old.reclaim(&mut backend.fft_capture);
                *reuse = Some(old);
            }
            Err(e)
        }
    }
}
