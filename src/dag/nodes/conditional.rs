//! Conditional nodes (`cudaGraphNodeTypeConditional`): IF, IF/ELSE, WHILE and SWITCH, whose
//! bodies are [`Dag`]s built with the same API, run or skipped on the GPU according to a
//! condition value that device code sets (`cudaGraphSetConditional`), with no host round trip.
//!
//! A DAG declares a handle ([`Dag::conditional_handle`], with the value it is reset to at the
//! start of every launch: `cudaGraphCondAssignDefault`), kernel nodes take it as an argument
//! ([`Conditional`] as a [`KernelArg`]), and one conditional node of that DAG reads it
//! ([`Dag::add_if`], [`Dag::add_if_else`], [`Dag::add_while`], [`Dag::add_switch`]).
//!
//! Lowering creates each handle on the graph being built (`cudaGraphConditionalHandleCreate`,
//! before the first node; only the handles a conditional node uses), writes it into the
//! arguments of the kernel nodes that pass it (a copy of the node's arguments: the DAG keeps its
//! placeholder; an [`Exec`](crate::Exec)'s copy of the DAG holds its graph's handles), adds the
//! node through `cudaGraphAddNode`, and lowers each body into the body graph CUDA returns in
//! `phGraph_out`, with the enclosing graphs' handles in scope.
//!
//! CUDA's rules, checked by validation (the offending node named by its path,
//! `while#3/body/host#1`):
//! - a body holds only kernel, memcpy, memset, empty, child-graph and conditional nodes, in
//!   child graphs inside it too ("Allowed node types are kernel nodes, empty nodes, child
//!   graphs, memsets, memcopies, and conditionals. This applies recursively to child graphs
//!   and conditional bodies": `cudaConditionalNodeParams::phGraph_out`,
//!   <https://docs.nvidia.com/cuda/cuda-runtime-api/structcudaConditionalNodeParams.html>);
//!   its nodes run on the graph's device (no placement, no disabled node);
//! - "the conditional handle must be associated with a conditional node in this graph or one of
//!   its children", and an unused one may make instantiation fail
//!   (`cudaGraphConditionalHandleCreate`,
//!   <https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html>): a kernel passes
//!   only a handle of its own graph or of an enclosing one, which a conditional node uses; a
//!   handle unused by any node is not created; one handle serves one conditional node (the CUDA
//!   programming guide's rule for conditional handles);
//! - `size` is 1 for IF and WHILE, 2 for IF/ELSE, at least 1 for SWITCH (the builder refuses a
//!   SWITCH without cases).
//!
//! On an [`Exec`](crate::Exec): a conditional node's parameters cannot be changed per node
//! (CUDA has no per-node update for them); a whole-graph update ([`Exec::update`](crate::Exec::update))
//! updates the nodes inside its bodies. A kernel node passing a handle keeps it: an update
//! giving a kernel node a handle, or replacing the argument that passes one, is refused.

use std::sync::Arc;

use super::host::HostFn;
use super::{error_inside, Label, NodeOp, RunsOn, ValidationTarget};
use crate::dag::nodes::backend::{Backend, NodeParams};
use crate::dag::nodes::late::{self, LateKey, LateValues, UpdateProblem};
use crate::dag::{Dag, NodeId, NodeName, Op};
use crate::error::{DagError, Error, Result};
use crate::kernel::{Conditional, KernelArg};
use crate::memory::Allocation;
use crate::sys;

/// What a conditional node does with its bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConditionalKind {
    /// Runs its body when the condition is non-zero.
    If,
    /// Runs its first body when the condition is non-zero, its second otherwise.
    IfElse,
    /// Runs its body as long as the condition is non-zero (checked before each iteration).
    While,
    /// Runs body `n` when the condition is `n`; none when it is past the last.
    Switch,
}

impl ConditionalKind {
    /// CUDA's type (IF/ELSE is an IF with two bodies).
    fn raw(self) -> sys::cudaGraphConditionalNodeType {
        use sys::cudaGraphConditionalNodeType as T;
        match self {
            ConditionalKind::If | ConditionalKind::IfElse => T::cudaGraphCondTypeIf,
            ConditionalKind::While => T::cudaGraphCondTypeWhile,
            ConditionalKind::Switch => T::cudaGraphCondTypeSwitch,
        }
    }

    /// The kind in words (DOT, recordings).
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionalKind::If => "IF",
            ConditionalKind::IfElse => "IF/ELSE",
            ConditionalKind::While => "WHILE",
            ConditionalKind::Switch => "SWITCH",
        }
    }

    /// The name of body `i` in paths and DOT: `then`, `else`, `body`, `case i`.
    fn body_name(self, i: usize) -> String {
        match (self, i) {
            (ConditionalKind::If | ConditionalKind::IfElse, 0) => "then".into(),
            (ConditionalKind::IfElse, _) => "else".into(),
            (ConditionalKind::While, _) => "body".into(),
            _ => format!("case {i}"),
        }
    }

    /// When body `i` runs, in words (the DOT cluster's label).
    fn runs_when(self, i: usize) -> String {
        match (self, i) {
            (ConditionalKind::If | ConditionalKind::IfElse, 0) => "if condition != 0".into(),
            (ConditionalKind::IfElse, _) => "if condition == 0".into(),
            (ConditionalKind::While, _) => "while condition != 0".into(),
            _ => format!("case condition == {i}"),
        }
    }
}

/// A conditional node ([`Dag::add_if`], [`Dag::add_if_else`], [`Dag::add_while`],
/// [`Dag::add_switch`]): its handle, its kind and its bodies.
#[derive(Clone)]
pub struct ConditionalNode {
    handle: Conditional,
    kind: ConditionalKind,
    bodies: Vec<Dag>,
}

impl ConditionalNode {
    /// What the node does with its bodies.
    pub fn kind(&self) -> ConditionalKind {
        self.kind
    }
    /// The handle whose value the node reads.
    pub fn handle(&self) -> &Conditional {
        &self.handle
    }
    /// The bodies: IF and WHILE one, IF/ELSE two (then, else), SWITCH one per case.
    pub fn bodies(&self) -> &[Dag] {
        &self.bodies
    }
    /// The words a DOT cluster of body `i` is labelled with.
    pub(crate) fn cluster_label(&self, i: usize) -> String {
        format!(
            "{}: {} (handle #{})",
            self.kind.body_name(i),
            self.kind.runs_when(i),
            self.handle.index
        )
    }

    /// Adds the node after `deps` with the handle `scopes` gives it; its bodies are lowered
    /// into the graphs CUDA makes for them, with the same scopes.
    pub(crate) fn lower<B: Backend>(
        &self,
        name: &NodeName<'_>,
        deps: &[B::Node],
        backend: &mut B,
        scopes: &Scopes,
    ) -> Result<B::Node> {
        let handle = scopes.value(&self.handle).ok_or_else(|| {
            Error::Invalid(format!(
                "conditional node `{name}` was lowered without its handle #{} (validation \
                 should have refused the DAG)",
                self.handle.index
            ))
        })?;
        backend.add_node(
            name,
            deps,
            &[],
            NodeParams::Conditional {
                kind: self.kind.raw(),
                kind_words: self.kind.as_str(),
                handle,
                bodies: &self.bodies,
                scopes,
            },
        )
    }
}

/// A handle scope as validation sees it: the DAG's scope and the handles a conditional node
/// of it uses (by index).
#[derive(Clone, Debug)]
pub(crate) struct ScopeInfo {
    scope: u64,
    used: Vec<u32>,
}

/// The conditional handles of the graphs enclosing (and including) the one being lowered, as
/// a backend passes them on to the bodies it lowers (opaque): for each DAG scope,
/// `(index, handle)` of the handles created.
#[derive(Clone, Debug, Default)]
pub struct Scopes(Vec<(u64, Vec<(u32, u64)>)>);

impl Scopes {
    /// The handle lowering created for `c`, if it did.
    fn value(&self, c: &Conditional) -> Option<u64> {
        self.0
            .iter()
            .rev()
            .find(|(s, _)| *s == c.scope)
            .and_then(|(_, v)| v.iter().find(|(i, _)| *i == c.index))
            .map(|&(_, h)| h)
    }
}

/// A DAG's conditional handles: the ones it declared, and the kernel arguments that pass a
/// handle (of this DAG or an enclosing one).
#[derive(Clone, Default)]
pub(crate) struct Handles {
    /// The default value of each handle declared, by index.
    defaults: Vec<u32>,
    /// The scope of the handles declared, and the kernel parameters passing a handle (late
    /// values: `nodes/late.rs`).
    late: LateValues<Conditional>,
}

impl LateKey for Conditional {
    fn scope(&self) -> u64 {
        self.scope
    }
    fn index(&self) -> u32 {
        self.index
    }
}

impl Handles {
    /// Whether the DAG has nothing to do with conditional handles (most DAGs: one test).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.defaults.is_empty() && self.late.is_empty()
    }

    /// Whether some kernel node passes a handle.
    #[inline]
    pub(crate) fn has_uses(&self) -> bool {
        !self.late.is_empty()
    }

    /// Notes which arguments of kernel node `id` pass a handle (`args` are all its
    /// arguments, after they were accepted).
    pub(crate) fn note_args(&mut self, id: NodeId, args: &[KernelArg<'_>]) {
        self.late.note_args(id, args, |a| a.conditional);
    }

    /// Why an [`Exec`](crate::Exec) update of kernel node `id` with `args` (by parameter) is
    /// refused, if it is: a new argument is a handle, or replaces one.
    pub(crate) fn exec_update_problem<'a>(
        &self,
        id: NodeId,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)>,
    ) -> Option<String> {
        let problem = self
            .late
            .update_problem(id, args, |a| a.conditional.is_some())?;
        Some(match problem {
            UpdateProblem::Passes(i) => format!(
                "argument {i} is a conditional handle: an instantiated graph's kernel nodes \
                 keep the handles they were lowered with (update the DAG and use \
                 Exec::update)"
            ),
            UpdateProblem::Replaces(i) => format!(
                "argument {i} passes a conditional handle, which an update cannot replace \
                 (update the node's other arguments with Exec::set_kernel_arg)"
            ),
        })
    }

    /// The scope of this DAG's handles as its nodes are validated: which of them a
    /// conditional node uses. Refuses a handle used by two conditional nodes.
    fn scope_info(&self, dag: &Dag) -> Result<ScopeInfo> {
        let mut users: Vec<Option<petgraph::graph::NodeIndex>> = vec![None; self.defaults.len()];
        for idx in dag.graph.node_indices() {
            let Op::Conditional(c) = &dag.graph[idx].op else {
                continue;
            };
            // The builder took only this DAG's handles.
            let Some(slot) = users.get_mut(c.handle.index as usize) else {
                continue;
            };
            if let Some(first) = *slot {
                return Err(Error::Dag(DagError::WrongKind {
                    node: dag.graph[idx].name().to_string(),
                    problem: format!(
                        "reads conditional handle #{}, which conditional node `{}` reads too: \
                         CUDA ties a handle to one conditional node (declare one handle per \
                         conditional node)",
                        c.handle.index,
                        dag.graph[first].name()
                    ),
                }));
            }
            *slot = Some(idx);
        }
        Ok(ScopeInfo {
            scope: self.late.scope(),
            used: (0..self.defaults.len() as u32)
                .filter(|&i| users[i as usize].is_some())
                .collect(),
        })
    }
}

impl Dag {
    /// Declares a conditional handle of this DAG, reset to `default` at the start of every
    /// launch (`cudaGraphConditionalHandleCreate` with `cudaGraphCondAssignDefault`, made when
    /// the DAG is lowered). Give it to one conditional node of this DAG ([`Dag::add_if`], …)
    /// and, as a kernel argument, to the kernels that set it (in this DAG or in the bodies of
    /// its conditional nodes).
    pub fn conditional_handle(&mut self, default: u32) -> Conditional {
        let h = &mut self.conditionals;
        let scope = h.late.declare();
        h.defaults.push(default);
        Conditional {
            scope,
            index: h.defaults.len() as u32 - 1,
            default,
        }
    }

    /// Adds an IF node: `then` (copied) runs when `handle`'s value is non-zero.
    pub fn add_if(&mut self, handle: &Conditional, then: &Dag) -> Result<NodeId> {
        self.add_conditional(handle, ConditionalKind::If, std::slice::from_ref(then))
    }

    /// Adds an IF/ELSE node: `then` runs when `handle`'s value is non-zero, `otherwise` when
    /// it is zero (both copied).
    pub fn add_if_else(
        &mut self,
        handle: &Conditional,
        then: &Dag,
        otherwise: &Dag,
    ) -> Result<NodeId> {
        let bodies = [then.clone(), otherwise.clone()];
        self.add_conditional_owned(handle, ConditionalKind::IfElse, bodies.into())
    }

    /// Adds a WHILE node: `body` (copied) runs again and again as long as `handle`'s value is
    /// non-zero when an iteration would start (not at all if it is zero at first). A kernel of
    /// the body sets it to zero to stop.
    pub fn add_while(&mut self, handle: &Conditional, body: &Dag) -> Result<NodeId> {
        self.add_conditional(handle, ConditionalKind::While, std::slice::from_ref(body))
    }

    /// Adds a SWITCH node: `cases[n]` (copied) runs when `handle`'s value is `n`; none runs
    /// when it is `cases.len()` or more. At least one case.
    pub fn add_switch(&mut self, handle: &Conditional, cases: &[Dag]) -> Result<NodeId> {
        self.add_conditional(handle, ConditionalKind::Switch, cases)
    }

    fn add_conditional(
        &mut self,
        handle: &Conditional,
        kind: ConditionalKind,
        bodies: &[Dag],
    ) -> Result<NodeId> {
        self.check_conditional(handle, kind, bodies.len())?;
        self.add_conditional_owned(handle, kind, bodies.to_vec())
    }

    fn add_conditional_owned(
        &mut self,
        handle: &Conditional,
        kind: ConditionalKind,
        bodies: Vec<Dag>,
    ) -> Result<NodeId> {
        self.check_conditional(handle, kind, bodies.len())?;
        Ok(self.push(Op::Conditional(Box::new(ConditionalNode {
            handle: *handle,
            kind,
            bodies,
        }))))
    }

    /// The builder's checks: the handle is this DAG's, and a SWITCH has a case.
    fn check_conditional(
        &self,
        handle: &Conditional,
        kind: ConditionalKind,
        bodies: usize,
    ) -> Result<()> {
        let problem = if handle.scope != self.conditionals.late.scope()
            || handle.index as usize >= self.conditionals.defaults.len()
        {
            format!(
                "handle #{} was declared by another DAG: a conditional node reads a handle of \
                 its own DAG (Dag::conditional_handle on the DAG the node is added to)",
                handle.index
            )
        } else if bodies == 0 {
            format!(
                "a {} node needs at least one case (CUDA's size > 0)",
                kind.as_str()
            )
        } else if u32::try_from(bodies).is_err() {
            format!("{bodies} cases are more than CUDA's size (a 32-bit count) can hold")
        } else {
            return Ok(());
        };
        Err(Error::Dag(DagError::WrongKind {
            node: self.next_default_name(super::NodeKind::Conditional),
            problem,
        }))
    }
}

/// The node kinds a conditional body may hold (CUDA's rule, recursively through child graphs).
fn check_body_kinds(dag: &Dag, path: &str) -> Result<()> {
    for n in dag.graph.node_weights() {
        match &n.op {
            Op::Kernel(_) | Op::Memcpy(_) | Op::Memset(_) | Op::Empty(_) | Op::Conditional(_) => {}
            Op::Child(c) => check_body_kinds(c.dag(), &format!("{path}/{}", n.name()))?,
            _ => {
                return Err(Error::Dag(DagError::WrongKind {
                    node: format!("{path}/{}", n.name()),
                    problem: format!(
                        "is a {} node, but a conditional body may hold only kernel, memcpy, \
                         memset, empty, child-graph and conditional nodes (CUDA's rule, \
                         through child graphs too)",
                        n.kind().as_str()
                    ),
                }))
            }
        }
    }
    Ok(())
}

impl NodeOp for ConditionalNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        let t = on.target;
        for (i, body) in self.bodies.iter().enumerate() {
            let body_name = self.kind.body_name(i);
            let s = body.conditionals.late.scope();
            if s != 0 && t.enclosing.iter().any(|e| e.scope == s) {
                return Err(Error::Dag(DagError::WrongKind {
                    node: name.to_string(),
                    problem: format!(
                        "its {body_name} is a copy of a DAG it is inside (it declares that \
                         DAG's conditional handles): build bodies as new DAGs"
                    ),
                }));
            }
            check_body_kinds(body, &format!("{name}/{body_name}"))?;
            // Like a child graph's, a body's nodes run on the graph's device; the handles of
            // the enclosing graphs are in scope.
            let mut inner = ValidationTarget::new(t.home, t.limits, t.devices, false);
            inner.enclosing = t.enclosing.clone();
            body.validate_on(&inner)
                .map_err(|e| error_inside(name, &body_name, &format!("{name}/{body_name}/"), e))?;
        }
        Ok(())
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        for b in &self.bodies {
            b.for_each_allocation(f)
        }
    }
    fn host_fns(&self, prefix: &str, name: &NodeName<'_>, out: &mut Vec<(String, Arc<HostFn>)>) {
        for (i, b) in self.bodies.iter().enumerate() {
            b.host_fns(&format!("{prefix}{name}/{}/", self.kind.body_name(i)), out)
        }
    }
    fn label(&self) -> Label {
        Label::new(
            "diamond",
            "#fff3bf",
            vec![format!(
                "{} handle #{} (default {})",
                self.kind.as_str(),
                self.handle.index,
                self.handle.default
            )],
        )
    }
    fn params(&self) -> NodeParams<'_> {
        // Lowering adds conditional nodes through `ConditionalNode::lower`, which has the
        // handle values; without them, the node can only be described.
        unreachable!("conditional nodes are lowered by ConditionalNode::lower")
    }
}

/// Validation of a DAG that declares or passes handles: its scope joins `target`'s (for its
/// nodes and the bodies inside them); every kernel argument passing a handle passes one of
/// this DAG or an enclosing one that a conditional node uses. Returns the target to validate
/// the nodes with (`None`: `target` itself).
pub(crate) fn validate_handles<'t>(
    dag: &Dag,
    target: &ValidationTarget<'t>,
) -> Result<Option<ValidationTarget<'t>>> {
    let h = &dag.conditionals;
    let mut own = None;
    if !h.defaults.is_empty() {
        let mut t =
            ValidationTarget::new(target.home, target.limits, target.devices, target.placeable);
        t.enclosing = target.enclosing.clone();
        t.enclosing.push(h.scope_info(dag)?);
        own = Some(t);
    }
    let scopes = own.as_ref().unwrap_or(target).enclosing.as_slice();
    for (id, param, c) in h.late.args() {
        let Ok(node) = dag.node(id) else { continue };
        let Op::Kernel(k) = &node.op else { continue };
        let problem = match scopes.iter().rev().find(|s| s.scope == c.scope) {
            None => format!(
                "argument {param} is conditional handle #{} of another DAG: a kernel node passes \
                 only handles of its own DAG or of a DAG whose conditional body it is in (not \
                 through a child graph)",
                c.index
            ),
            Some(s) if !s.used.contains(&c.index) => format!(
                "argument {param} is conditional handle #{}, which no conditional node reads \
                 (CUDA makes a handle for a conditional node)",
                c.index
            ),
            Some(_) => continue,
        };
        return Err(Error::KernelArgs {
            node: Some(node.name().to_string()),
            kernel: k.kernel().name().to_string(),
            problem,
        });
    }
    Ok(own)
}

/// Creates the handles of `dag` a conditional node uses on the graph `backend` builds (in
/// index order, before any node); returns `outer` with them.
pub(crate) fn create_handles<B: Backend>(
    dag: &Dag,
    backend: &mut B,
    outer: &Scopes,
) -> Result<Scopes> {
    let h = &dag.conditionals;
    let mut used = vec![false; h.defaults.len()];
    for n in dag.graph.node_weights() {
        if let Op::Conditional(c) = &n.op {
            if let Some(u) = used.get_mut(c.handle.index as usize) {
                *u = true;
            }
        }
    }
    let mut values = Vec::new();
    for (i, &default) in h.defaults.iter().enumerate() {
        if used[i] {
            values.push((i as u32, backend.conditional_handle(i as u32, default)?));
        }
    }
    let mut scopes = outer.clone();
    scopes.0.push((h.late.scope(), values));
    Ok(scopes)
}

/// Whether kernel node `id` of `dag` passes a handle.
pub(crate) fn kernel_uses(dag: &Dag, id: NodeId) -> bool {
    dag.conditionals.late.kernel_uses(id)
}

/// Writes the handles of the graph being built into `k`, a copy of kernel node `id` of `dag`
/// (whose arguments pass handles) being lowered.
pub(crate) fn patch_kernel(
    dag: &Dag,
    id: NodeId,
    k: &mut super::KernelNode,
    name: &NodeName<'_>,
    scopes: &Scopes,
) -> Result<()> {
    dag.conditionals.late.patch_kernel(id, k, |c| {
        scopes.value(&c).ok_or_else(|| {
            Error::Invalid(format!(
                "kernel node `{name}` was lowered without conditional handle #{} (validation \
                 should have refused the DAG)",
                c.index
            ))
        })
    })
}

/// Writes the handles lowering created for `dag`'s own scope (`(index, handle)`) into the
/// arguments of its kernel nodes that pass them: an [`Exec`](crate::Exec)'s copy of the DAG
/// then holds what its graph has, and per-node updates of the other arguments pass them on.
pub(crate) fn set_handle_values(dag: &mut Dag, values: &[(u32, u64)]) {
    late::write_values(dag, |d| &mut d.conditionals.late, values);
}
