//! FFT nodes: a cuFFT transform as a node. cuFFT has no node API, so lowering captures the
//! transform from a stream into the graph ([`NodeParams::Fft`]), after a parameter-setting
//! kernel node added through the generic path; the per-node cuFFT state lives in
//! [`context`].

pub(crate) mod context;
pub(crate) mod reuse;

use std::sync::Arc;

pub(crate) use context::{work_shares, FftCaptureState};

use super::{Label, NodeOp};
use crate::dag::exec::Exec;
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, NodeId, NodeKind, NodeName, Op};
use crate::error::{DagError, Error, Result};
use crate::fft::{
    cb_name_load, cb_name_store, check_owners, check_transform, params_problem, Direction,
    FftParams, FftPlan, Fusion, FusionDecision,
};
use crate::memory::{Allocation, Region};

/// Everything [`Dag::add_fft`] needs.
#[derive(Clone, Debug)]
pub struct FftSpec {
    /// The plan (shared).
    pub plan: FftPlan,
    /// Direction (C2C/Z2Z; R2C is forward, C2R inverse).
    pub direction: Direction,
    /// Input (device memory).
    pub input: Region,
    /// Output (device memory; may be the input for in-place transforms).
    pub output: Region,
    /// This node's callback parameters.
    pub params: FftParams,
}

/// A cuFFT transform in a DAG.
#[derive(Clone)]
pub struct FftNode {
    /// The serial number of the node in its DAG (see [`NodeId::serial`]): what the lowering
    /// state of the node is found by, in this DAG, its clones, and a DAG built the same way
    /// for a whole-graph update.
    pub(crate) uid: u64,
    pub(crate) plan: FftPlan,
    pub(crate) direction: Direction,
    pub(crate) input: Region,
    pub(crate) output: Region,
    pub(crate) params: FftParams,
}

impl FftNode {
    /// The plan.
    pub fn plan(&self) -> &FftPlan {
        &self.plan
    }
    /// The direction.
    pub fn direction(&self) -> Direction {
        self.direction
    }
    /// The node's current callback parameters.
    pub fn params(&self) -> &FftParams {
        &self.params
    }

    /// Calls `f` for the input, the output and every override region's allocation.
    pub(crate) fn for_each_allocation(
        &self,
        f: &mut dyn FnMut(&std::sync::Arc<crate::memory::Allocation>),
    ) {
        f(&self.input.alloc);
        f(&self.output.alloc);
        self.params.for_each_allocation(f);
    }

    /// The DOT label's lines. For a plan with an unfused form, the last line is the form:
    /// `decided` (what lowering chose, for an [`Exec`]'s DOT), else what the plan asks for
    /// (`Fusion::Auto` is decided when the node is lowered).
    pub(crate) fn dot_lines(&self, decided: Option<FusionDecision>) -> Vec<String> {
        let d = &self.plan.inner.desc;
        let mut l = vec![format!(
            "fft {:?} {:?} {:?} x{}",
            d.kind, self.direction, d.sizes, d.batch
        )];
        if let Some(c) = &d.load {
            l.push(format!("load {}", cb_name_load(c)));
        }
        if let Some(c) = &d.store {
            l.push(format!("store {}", cb_name_store(c)));
        }
        if self.plan.has_unfused_form() {
            l.push(match (decided, self.plan.fusion()) {
                (Some(decision), _) => decision.describe(),
                (None, Fusion::Auto) => "fusion auto (decided when lowered)".into(),
                (None, Fusion::Fused) => "fused (requested)".into(),
                (None, Fusion::Unfused) => "unfused: convert + FFT (requested)".into(),
            });
        }
        l
    }

    /// The DOT label, with the form lowering chose when known.
    pub(crate) fn label_with(&self, decided: Option<FusionDecision>) -> Label {
        Label::new("component", "#ffe5d0", self.dot_lines(decided))
    }

    /// Checks `params` for this node's plan.
    pub(crate) fn check_params(
        &self,
        name: &(impl std::fmt::Display + ?Sized),
        params: &FftParams,
    ) -> Result<()> {
        match params_problem(&self.plan, params) {
            None => Ok(()),
            Some(problem) => Err(Error::Dag(DagError::Fft {
                node: name.to_string(),
                problem,
            })),
        }
    }

    /// Replaces the parameters (checked). Returns the old ones.
    pub(crate) fn apply_params(
        &mut self,
        name: &(impl std::fmt::Display + ?Sized),
        params: FftParams,
    ) -> Result<FftParams> {
        self.check_params(name, &params)?;
        Ok(std::mem::replace(&mut self.params, params))
    }
}

impl NodeOp for FftNode {
    fn validate(&self, name: &NodeName<'_>, on: &super::RunsOn<'_>) -> Result<()> {
        check_owners(name, &self.input, &self.output, &self.params, on.key)
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        FftNode::for_each_allocation(self, f)
    }
    fn label(&self) -> Label {
        self.label_with(None)
    }
    fn params(&self) -> NodeParams<'_> {
        // The work area it may share was given to the backend before any node
        // (`prepare_ffts`): it is FFT state, not the node's.
        NodeParams::Fft { node: self }
    }
}

impl Dag {
    /// Adds an FFT node. The plan, direction, buffer sizes and callback parameters are checked
    /// now; the node gets its own cuFFT handle and parameter buffer when lowered.
    pub fn add_fft(&mut self, spec: FftSpec) -> Result<NodeId> {
        let name = self.next_default_name(NodeKind::Fft);
        check_transform(
            &name,
            &spec.plan,
            spec.direction,
            &spec.input,
            &spec.output,
            &spec.params,
        )?;
        Ok(self.push(Op::Fft(Box::new(FftNode {
            uid: self.next_serial,
            plan: spec.plan,
            direction: spec.direction,
            input: spec.input,
            output: spec.output,
            params: spec.params,
        }))))
    }

    /// Replaces an FFT node's callback parameters in the DAG (for a whole-graph update).
    pub fn set_fft_params(&mut self, id: NodeId, params: FftParams) -> Result<()> {
        let node = self.node_mut(id)?;
        let name = node.name().to_string();
        match &mut node.op {
            Op::Fft(f) => f.apply_params(&name, params).map(|_| ()),
            _ => Err(Error::Dag(DagError::WrongKind {
                node: name,
                problem: "is not an FFT node".into(),
            })),
        }
    }
}

impl Exec {
    /// The form FFT node `id` was lowered in ([`FusionDecision`]: fused, or unfused as a
    /// conversion kernel node before the transform, and why). [`Exec::to_dot`] shows it too.
    /// An error for a node that is not an FFT node of this graph (FFT nodes inside child
    /// graphs are not reported).
    pub fn fft_fusion(&self, id: NodeId) -> Result<FusionDecision> {
        let node = self.dag.node(id)?;
        let Op::Fft(f) = &node.op else {
            return Err(node.wrong_kind("an FFT node"));
        };
        self.fft_capture.decision(f.uid).ok_or_else(|| {
            Error::Dag(DagError::Fft {
                node: node.name().to_string(),
                problem: "was not lowered by this graph's FFT context".into(),
            })
        })
    }

    /// Replaces the callback parameters of FFT node `id` for launches issued after this call
    /// (launches already queued keep theirs). When CUDA refuses, nothing changes. In the
    /// unfused form built-in load parameters are the conversion kernel node's argument (custom
    /// ones stay in the parameter buffer, which the conversion reads) and the store parameters
    /// go through the parameter-setting node, as in the fused form. Regions the
    /// old parameters pointed to stay alive until the launches that may use them have
    /// completed.
    pub fn set_fft_params(&mut self, id: NodeId, params: FftParams) -> Result<()> {
        let key = self.device.key();
        let node = self.dag.node(id)?;
        let Op::Fft(f) = &node.op else {
            return Err(node.wrong_kind("an FFT node"));
        };
        f.check_params(&node.name(), &params)?;
        check_owners(&node.name(), &f.input, &f.output, &params, key)?;
        self.fft_capture
            .set_params(self.raw, f.uid, &node.name(), &f.plan, &params)?;
        params.for_each_allocation(&mut |a| self.hold(a));
        let Op::Fft(f) = &mut self.dag.node_mut(id)?.op else {
            unreachable!("checked above")
        };
        let old = std::mem::replace(&mut f.params, params);
        let mut released = Vec::new();
        old.for_each_allocation(&mut |a| released.push(a.clone()));
        for a in released {
            self.release(a);
        }
        Ok(())
    }
}
