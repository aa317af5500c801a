//! Child-graph nodes: a whole [`Dag`] as one node (`cudaGraphNodeTypeGraph`, cloned).

use std::sync::Arc;

use super::host::HostFn;
use super::{error_inside, Label, NodeOp, RunsOn, ValidationTarget};
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, NodeId, NodeName, Op};
use crate::error::Result;
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
