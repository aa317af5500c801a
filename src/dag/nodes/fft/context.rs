//! Per-node cuFFT state of FFT nodes: made in a prepare pass before lowering
//! ([`FftCaptureState::prepare`]), keyed by node serial, kept across whole-graph updates while
//! the plan is unchanged (child graphs' too), and given back when CUDA refuses an update (the
//! bookkeeping is `reuse.rs`'s, shared with the recording backend). The prepare pass is also
//! where each node's form (fused, or unfused: conversion kernel + plan without the load
//! callback) is decided, with `fft::decide_fusion` (which measures `Fusion::Auto` plans once
//! per shape, outside any capture); the state keeps the form, so a reused state keeps it too.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use petgraph::visit::NodeIndexable;

use super::reuse::{FftKit, FftMaker, FftStates};
use super::FftNode;
use crate::dag::nodes::captured::{capture_into, Captured};
use crate::dag::nodes::KernelNode;
use crate::dag::{Dag, Op};
use crate::device::Device;
use crate::error::{DagError, Error, Result};
use crate::fft::handle::{setter_launch, zeroed_device, Handle};
use crate::fft::{
    decide_fusion, planned_in_form, FftParams, FftPlan, FusionDecision, Unfused, WorkShare,
};
use crate::kernel::LaunchConfig;
use crate::memory::{Allocation, MemorySpace};
use crate::result::{cufft as cf, driver as dr, runtime as rt};
use crate::stream::Stream;
use crate::sys;

/// Assigns work-area slots to the FFT nodes of `dag` (greedily, in topological order): a node
/// joins a slot only if every node already in it is one of its ancestors.
/// The result is indexed by node index; it is empty when the DAG has no FFT node.
pub(crate) fn work_shares(dag: &Dag, order: &[crate::dag::NodeId]) -> Vec<Option<WorkShare>> {
    let ffts: Vec<_> = order
        .iter()
        .filter(|id| matches!(dag.graph[id.idx].op, Op::Fft(_)))
        .copied()
        .collect();
    if ffts.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Option<WorkShare>> = vec![None; dag.graph.node_bound()];
    let mut slots: Vec<Vec<crate::dag::NodeId>> = Vec::new();
    let mut space = petgraph::algo::DfsSpace::new(&dag.graph);
    let mut slot_of = HashMap::new();
    for &id in &ffts {
        let slot = slots.iter().position(|members| {
            members.iter().all(|&m| {
                petgraph::algo::has_path_connecting(&dag.graph, m.idx, id.idx, Some(&mut space))
            })
        });
        let slot = slot.unwrap_or_else(|| {
            slots.push(Vec::new());
            slots.len() - 1
        });
        slots[slot].push(id);
        slot_of.insert(id, slot);
    }
    for &id in &ffts {
        let slot = slot_of[&id];
        let plans = slots[slot]
            .iter()
            .map(|m| match &dag.graph[m.idx].op {
                Op::Fft(f) => f.plan.clone(),
                _ => unreachable!(),
            })
            .collect();
        out[id.index()] = Some(WorkShare { slot, plans });
    }
    out
}

/// One FFT node's cuFFT state: its handle (plan made, callbacks attached), its parameter
/// buffer and its form (unfused: the conversion kernel and scratch buffer). Kept across
/// whole-graph updates while the plan does not change.
pub(crate) struct FftState {
    handle: Handle,
    params: Option<Arc<Allocation>>,
    /// Whether the plan was executed once outside capture (see [`FftCaptureState::lower`]).
    warmed: bool,
    /// The form the node runs in, and why.
    decision: FusionDecision,
    /// The unfused form's plan, conversion kernel and scratch buffer (the handle is made for
    /// that plan then). Lives as long as the state, so as long as launches may use it.
    unfused: Option<Unfused>,
}

impl FftState {
    /// Decides the node's form (measuring once per shape for `Fusion::Auto`, see
    /// `decide_fusion`), then makes its handle and buffers; returns the work-area bytes too.
    fn new(device: &Device, f: &FftNode) -> Result<(FftState, usize)> {
        let decision = decide_fusion(device, &f.plan)?;
        let (unfused, handle, params, need) = planned_in_form(device, &f.plan, decision.form)?;
        let state = FftState {
            handle,
            params,
            warmed: false,
            decision,
            unfused,
        };
        Ok((state, need))
    }

    /// The address the captured transform reads: the node's input, or (unfused) the
    /// scratch buffer the conversion kernel writes.
    fn fft_input(&self, f: &FftNode) -> u64 {
        self.unfused
            .as_ref()
            .map_or(f.input.raw_addr(), |u| u.scratch.ptr)
    }
}

/// The CUDA backend's FFT state: cuFFT plans, device work areas, a stream.
pub(crate) enum CudaFft {}

impl FftKit for CudaFft {
    type State = FftState;
    type Area = Arc<Allocation>;
    type Stream = Stream;
    type Extra = LoweredNodes;
    fn area_bytes(area: &Arc<Allocation>) -> usize {
        area.bytes
    }
}

impl FftMaker<CudaFft> for &Device {
    fn state(&mut self, f: &FftNode) -> Result<(FftState, usize)> {
        FftState::new(self, f)
    }
    fn area(&mut self, bytes: usize) -> Result<Arc<Allocation>> {
        Allocation::new(self, bytes, MemorySpace::Device)
    }
    fn attach(&mut self, state: &FftState, area: &Arc<Allocation>) -> Result<()> {
        // SAFETY: the area is at least as large as every plan of its slot needs, and kept
        // alive by this context (and by an earlier one for launches captured with it).
        unsafe { cf::set_work_area(state.handle.raw(), area.ptr as *mut c_void) }
    }
    fn stream(&mut self) -> Result<Stream> {
        Stream::new(self)
    }
}

/// A raw graph node handle, used only by the `Exec` owning the graph.
#[derive(Clone, Copy, PartialEq, Eq)]
struct NodeHandle(sys::cudaGraphNode_t);

// SAFETY: a graph node handle names a node of a graph the owning `Exec` keeps alive; it is
// only passed to CUDA calls made through that `Exec`'s `&mut self`. Not `Sync`.
unsafe impl Send for NodeHandle {}

/// What lowering one FFT node made besides its state.
pub(crate) struct LoweredNodes {
    /// The parameter-setting kernel node (in the graph the Exec was instantiated from) and its
    /// launch, whose argument 1 is the parameter blob.
    setter: Option<(NodeHandle, KernelNode)>,
    /// Unfused: the conversion kernel node (same graph) and its launch, whose argument 2 is
    /// the built-in load callback's parameter struct (custom: the parameter buffer's address,
    /// never updated).
    convert: Option<(NodeHandle, KernelNode)>,
    /// The form the node was lowered in.
    decision: FusionDecision,
}

/// FFT state made while lowering one graph (its child graphs' included); an
/// [`Exec`](crate::Exec) keeps it alive.
///
/// It is `Send` (an `Exec` may move between threads) but not `Sync`.
#[derive(Default)]
pub(crate) struct FftCaptureState {
    /// The states, work areas and capture stream, and what is reused (`reuse.rs`).
    pub(crate) states: FftStates<CudaFft>,
    /// Staging for parameter updates (no allocation per update).
    scratch: crate::kernel::ArgScratch,
}

impl FftCaptureState {
    /// Lowers with the unchanged FFT states of `old` (an earlier lowering of the same nodes).
    pub(crate) fn set_reuse(&mut self, old: FftCaptureState) {
        self.states.set_reuse(old.states);
    }

    /// The reused context, with the states this lowering did not take.
    pub(crate) fn take_reuse(&mut self) -> Option<FftCaptureState> {
        self.states.take_reuse().map(|states| FftCaptureState {
            states,
            scratch: Default::default(),
        })
    }

    /// Gives back to this (older) context the states `newer` took from it (child graphs'
    /// included).
    pub(crate) fn reclaim(&mut self, newer: &mut FftCaptureState) {
        self.states.reclaim(&mut newer.states);
    }

    /// What a refused update's lowering leaves for a fresh instantiation: the states it made
    /// (and its capture stream), not its work areas (see `FftStates::into_states_only`).
    pub(crate) fn into_states_only(self) -> FftCaptureState {
        FftCaptureState {
            states: self.states.into_states_only(),
            scratch: self.scratch,
        }
    }

    /// Makes (or takes over from the reused context) the cuFFT state of every FFT node of
    /// `dag`, then sizes each shared work area for the plans actually made (the reused
    /// context's area when large enough) and attaches it.
    pub(crate) fn prepare(
        &mut self,
        device: &Device,
        dag: &Dag,
        shares: &[Option<WorkShare>],
    ) -> Result<()> {
        self.states.prepare(&mut { device }, dag, shares)
    }

    /// The stream captures are made on (FFT nodes bind their plans to it; other captured
    /// nodes use it too): the reused context's, else made on first use; kept with the state.
    pub(crate) fn capture_stream(&mut self, device: &Device) -> Result<Stream> {
        self.states.capture_stream(&mut { device })
    }

    /// Lowers one FFT node (prepared by [`FftCaptureState::prepare`]) into `graph` after
    /// `deps`; returns the node later nodes depend on and the nodes it made (the captured
    /// transform and the parameter-setting kernel node), which are enabled and disabled
    /// together.
    pub(crate) fn lower(
        &mut self,
        device: &Device,
        graph: sys::cudaGraph_t,
        deps: &[sys::cudaGraphNode_t],
        f: &FftNode,
    ) -> Result<Captured> {
        device.bind()?;
        let stream = self.capture_stream(device)?;
        let mut state = self.states.take_prepared(f.uid);
        match lower_state(device, &stream, graph, deps, f, &mut state.inner) {
            Ok((captured, setter, convert)) => {
                let decision = state.inner.decision;
                let extra = LoweredNodes {
                    setter,
                    convert,
                    decision,
                };
                self.states.push_lowered(state, extra);
                Ok(captured)
            }
            Err(e) => {
                // The state goes back where `reclaim` finds it: a reused state's plan and
                // buffers are still used by the graph being updated, and must not be dropped.
                self.states.put_back(state);
                Err(e)
            }
        }
    }

    /// The form FFT node `uid` was lowered in (`None`: not lowered by this context, e.g. in a
    /// child graph).
    pub(crate) fn decision(&self, uid: u64) -> Option<FusionDecision> {
        self.states.extra(uid).map(|n| n.decision)
    }

    /// After a whole-graph update, per-node updates must still name the nodes of the graph
    /// the Exec was instantiated from: take those handles from `old`.
    pub(crate) fn adopt_node_handles_from(&mut self, old: &FftCaptureState) {
        for (uid, n) in self.states.extras_mut() {
            let Some(o) = old.states.extra(uid) else {
                continue;
            };
            if let (Some((h, _)), Some((oh, _))) = (&mut n.setter, &o.setter) {
                *h = *oh;
            }
            if let (Some((h, _)), Some((oh, _))) = (&mut n.convert, &o.convert) {
                *h = *oh;
            }
        }
    }

    /// Writes new parameters `params` (checked for `plan`, the node's) into FFT node `uid`'s
    /// (named `name`)
    /// kernel nodes of `exec`: the parameter-setting node's blob and, unfused with a built-in
    /// load callback, the conversion node's load parameters (only when they changed; a custom
    /// one's conversion reads them from the parameter buffer). All or nothing: when CUDA
    /// refuses the second node, the first is set back.
    pub(crate) fn set_params(
        &mut self,
        exec: sys::cudaGraphExec_t,
        uid: u64,
        name: &(impl std::fmt::Display + ?Sized),
        plan: &FftPlan,
        params: &FftParams,
    ) -> Result<()> {
        let FftCaptureState { states, scratch } = self;
        let Some(n) = states
            .extra_mut(uid)
            .filter(|n| n.setter.is_some() || n.convert.is_some())
        else {
            return Err(Error::Dag(DagError::Fft {
                node: name.to_string(),
                problem: "has no callback parameters to update".into(),
            }));
        };
        let load = FftPlan::load_param_bytes(params);
        let convert = match &n.convert {
            Some((h, node)) if !plan.custom_load() && node.args.param_bytes(2) != load => {
                set_kernel_node_arg(exec, *h, node, 2, &load, scratch)?;
                true
            }
            _ => false,
        };
        if let Some((h, node)) = &mut n.setter {
            let blob = plan.setter_blob(n.decision.form, params);
            if let Err(e) = set_kernel_node_arg(exec, *h, node, 1, &blob, scratch) {
                if let (true, Some((ch, cnode))) = (convert, &n.convert) {
                    let params = cnode.cuda_params();
                    if let Ok(ctx) = cnode.context() {
                        // SAFETY: as in `set_kernel_node_arg`, with the node's committed
                        // arguments.
                        let _ = unsafe {
                            dr::graph_exec_kernel_node_set_params(exec, ch.0, &params, ctx)
                        };
                    }
                }
                return Err(e);
            }
            // Accepted: now the node's own copy changes.
            node.args.set_bytes(1, &blob);
        }
        if let (true, Some((_, node))) = (convert, &mut n.convert) {
            node.args.set_bytes(2, &load);
        }
        Ok(())
    }
}

/// Sets argument `i` of kernel node `h` of `exec` (made from `node`) to `bytes`, staged in
/// `scratch` (`node` itself is not changed: the caller commits when every call succeeded).
fn set_kernel_node_arg(
    exec: sys::cudaGraphExec_t,
    h: NodeHandle,
    node: &KernelNode,
    i: usize,
    bytes: &[u8],
    scratch: &mut crate::kernel::ArgScratch,
) -> Result<()> {
    let ctx = node.context()?;
    let mut params = node.cuda_params();
    params.kernelParams = node.args.staged(scratch, &|j| (j == i).then_some(bytes));
    // The driver's kernel-specific call, as for kernel nodes (see `Exec::push_kernel_params`):
    // the node's kernel is one the crate loaded (a `cudaKernel_t`).
    // SAFETY: `h` is a kernel node of `exec`'s graph, added from `node`; the staged arguments
    // keep its validated layout (only argument `i`'s bytes change, of its size); addresses in
    // them are kept alive by the node's state or DAG. `ctx` is the kernel's device's primary
    // context, held by the device.
    unsafe { dr::graph_exec_kernel_node_set_params(exec, h.0, &params, ctx) }
}

/// The node a kernel launch of an FFT node becomes, added to `graph` after `deps`.
fn add_kernel_node(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    node: &KernelNode,
) -> Result<sys::cudaGraphNode_t> {
    let mut raw = KernelNode::generic(node.cuda_params());
    // SAFETY: arguments checked against the live kernel of this device; the addresses among
    // them are the node's regions (held by the DAG) or buffers of its lowering state (held by
    // the Exec's context); CUDA copies the argument values during the call.
    unsafe { rt::graph_add_node(graph, deps, &[], &mut raw) }
}

/// Lowers one FFT node with its (prepared) state: binds the plan to the capture stream, warms
/// it up once outside capture, adds its kernel nodes and captures the transform. On error the
/// caller keeps `state` (it may be a reused state the live graph still uses).
#[allow(clippy::type_complexity)] // reason: the node's captured nodes and its two kernel nodes, used once
fn lower_state(
    device: &Device,
    stream: &Stream,
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    f: &FftNode,
    state: &mut FftState,
) -> Result<(
    Captured,
    Option<(NodeHandle, KernelNode)>,
    Option<(NodeHandle, KernelNode)>,
)> {
    let d = &f.plan.inner.desc;
    let handle = &state.handle;
    // SAFETY: the handle and the stream are live.
    unsafe { cf::set_stream(handle.raw(), stream.raw())? };

    if !state.warmed {
        // Execute once outside capture, on scratch buffers, so nothing lazy happens
        // inside it.
        let scratch_bytes = (f.plan.inner.in_elems.max(f.plan.inner.out_elems) as usize) * 16;
        let s_in = zeroed_device(device, scratch_bytes)?;
        let s_out = zeroed_device(device, scratch_bytes)?;
        // SAFETY: the scratch buffers are large enough for any element type of the plan;
        // the parameter buffer is zeroed (and complete: `zeroed_device` waits).
        unsafe {
            cf::exec(
                handle.raw(),
                d.kind.raw(),
                s_in.ptr as *mut c_void,
                s_out.ptr as *mut c_void,
                f.direction.raw(),
            )?;
            rt::stream_synchronize(stream.raw())?;
        }
        drop((s_in, s_out));
        state.warmed = true;
    }

    // The parameter-setting kernel node (and, unfused, the conversion kernel node).
    let (capture_deps, setter, convert) = add_kernel_nodes(device, graph, deps, f, state)?;
    let input = state.fft_input(f);

    // Capture the transform into the graph (recorded, not run). Unfused, the input is the
    // state's scratch buffer, sized for the callback-free plan and kept alive with the state.
    // SAFETY: stream and graph live, of the bound device; dependencies are graph nodes;
    // regions validated against the plan.
    let captured = unsafe {
        capture_into(graph, stream.raw(), &capture_deps, |s| {
            debug_assert_eq!(s, stream.raw());
            cf::exec(
                handle.raw(),
                d.kind.raw(),
                input as *mut c_void,
                f.output.raw_addr() as *mut c_void,
                f.direction.raw(),
            )
        })?
    };
    if captured.nodes.is_empty() {
        return Err(Error::FftPlan {
            problem: format!(
                "capturing the cuFFT call for a {:?} plan added no nodes to the graph",
                d.kind
            ),
        });
    }
    // Enabled and disabled together: the transform, the parameter setter and (unfused)
    // the conversion.
    let mut nodes = captured.nodes;
    nodes.extend(setter.iter().chain(&convert).map(|(h, _)| h.0));
    Ok((
        Captured {
            out: captured.out,
            nodes,
        },
        setter,
        convert,
    ))
}

/// Adds the kernel nodes an FFT node's captured transform depends on: with a parameter
/// buffer, the parameter-setting kernel node (after `deps`); unfused, the conversion kernel
/// node (input → scratch, with the built-in load parameters; after `deps`, or, with a custom
/// load callback, which reads the parameter buffer, after the setter). Returns what the
/// capture depends on (those nodes, the setter left out when the conversion follows it, or
/// `deps` when there are none) and the nodes.
#[allow(clippy::type_complexity)] // reason: a private helper's three results, named at the call
fn add_kernel_nodes(
    device: &Device,
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    f: &FftNode,
    state: &FftState,
) -> Result<(
    Vec<sys::cudaGraphNode_t>,
    Option<(NodeHandle, KernelNode)>,
    Option<(NodeHandle, KernelNode)>,
)> {
    let setter = match &state.params {
        Some(p) => {
            let form = state.decision.form;
            let (args, _) = setter_launch(
                device,
                p.ptr,
                f.plan.setter_blob(form, &f.params),
                f.plan.setter_bytes(form),
            )?;
            let node = KernelNode::new(LaunchConfig::new(1, 32), args);
            let h = add_kernel_node(graph, deps, &node)?;
            Some((NodeHandle(h), node))
        }
        None => None,
    };
    let mut capture_deps: Vec<_> = setter.iter().map(|(h, _)| h.0).collect();
    let convert = match &state.unfused {
        Some(u) => {
            let buffer = state.params.as_ref().map(|p| p.ptr);
            let node = KernelNode::new(
                u.config(),
                u.packed(f.input.raw_addr(), u.load_arg(buffer, &f.params))?,
            );
            // A custom conversion reads the parameter buffer: after the setter, which the
            // capture then depends on through it.
            let after: Vec<_> = match (&setter, u.custom) {
                (Some((sh, _)), true) => {
                    capture_deps.clear();
                    vec![sh.0]
                }
                _ => deps.to_vec(),
            };
            let h = add_kernel_node(graph, &after, &node)?;
            capture_deps.push(h);
            Some((NodeHandle(h), node))
        }
        None => None,
    };
    if capture_deps.is_empty() {
        capture_deps = deps.to_vec();
    }
    Ok((capture_deps, setter, convert))
}
