//! Child-graph nodes: a whole [`Dag`] as one node (`cudaGraphNodeTypeGraph`, cloned).

use std::sync::Arc;

use super::host::HostFn;
use super::{error_inside, Label, NodeOp, RunsOn, ValidationTarget};
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, Exec, NodeId, NodeName, Op};
use crate::error::{DagError, Error, Result};
use crate::memory::Allocation;

/// A child graph: a whole [`Dag`] as one node.
#[derive(Clone)]
pub struct ChildNode {
    pub(crate) dag: Box<Dag>,
}

impl ChildNode {
    /// The embedded DAG.
    pub fn dag(&self) -> &Dag {
        &self.dag
    }
}

impl NodeOp for ChildNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        // The child's nodes run where the child node runs (the graph's device): none of them
        // may be placed elsewhere.
        let t = on.target;
        let inner = ValidationTarget::new(t.home, t.limits, t.devices, false);
        // An error of a node inside names its path: `child/node`.
        self.dag
            .validate_on(&inner)
            .map_err(|e| error_inside(name, "child graph", &format!("{name}/"), e))
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        self.dag.for_each_allocation(f)
    }
    fn host_fns(&self, prefix: &str, name: &NodeName<'_>, out: &mut Vec<(String, Arc<HostFn>)>) {
        self.dag.host_fns(&format!("{prefix}{name}/"), out)
    }
    fn label(&self) -> Label {
        Label::new(
            "box3d",
            "#e2d9f3",
            vec![format!(
                "child graph: {} nodes, {} edges",
                self.dag.node_count(),
                self.dag.edge_count()
            )],
        )
    }
    fn params(&self) -> NodeParams<'_> {
        NodeParams::Child(&self.dag)
    }
}

impl Dag {
    /// Embeds a copy of `child` as one node.
    pub fn add_child(&mut self, child: &Dag) -> NodeId {
        self.push(Op::Child(ChildNode {
            dag: Box::new(child.clone()),
        }))
    }
}

impl Exec {
    /// Replaces the DAG of child-graph node `id` with `child` and updates the executable
    /// graph in place: a whole-graph update ([`Exec::update`], with its rules and its
    /// `cudaGraphExecUpdate`) of the instantiated DAG with that one child replaced. `child`
    /// must have the nodes (same ids, same kinds) and dependencies of the child it replaces:
    /// built the same way, or a clone of [`ChildNode::dag`] with other parameters; parameters
    /// may differ. When CUDA refuses ([`Error::UpdateRefused`], naming the node it blamed), the
    /// graph and [`Exec::dag`] are left as they were.
    ///
    /// Refused before CUDA is asked: `id` not a node of the DAG
    /// ([`DagError::UnknownNode`]), or not a child-graph node ([`DagError::WrongKind`]).
    pub fn update_child(&mut self, id: NodeId, child: &Dag) -> Result<()> {
        let mut dag = self.dag().clone();
        let node = dag.node_mut(id)?;
        let name = node.name().to_string();
        let kind = node.kind();
        match &mut node.op {
            Op::Child(c) => *c.dag = child.clone(),
            _ => {
                return Err(Error::Dag(DagError::WrongKind {
                    node: name,
                    problem: format!(
                        "is a {} node, not a child graph: Exec::update_child replaces a child \
                         graph's DAG",
                        kind.as_str()
                    ),
                }))
            }
        }
        self.update(&dag)
    }
}
