//! Empty nodes: join and fork points (`cudaGraphNodeTypeEmpty`).

use super::{Label, NodeOp};
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, NodeId, Op};
use crate::sys;

/// Nothing: a join or fork point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmptyNode;

impl EmptyNode {
    /// The node as lowering hands it to a backend.
    pub(crate) fn node_params() -> NodeParams<'static> {
        NodeParams::Generic(NodeParams::zeroed(
            sys::cudaGraphNodeType::cudaGraphNodeTypeEmpty,
        ))
    }
}

impl NodeOp for EmptyNode {
    fn label(&self) -> Label {
        Label::new("circle", "#e9ecef", vec!["empty".into()])
    }
    fn params(&self) -> NodeParams<'_> {
        Self::node_params()
    }
}

impl Dag {
    /// Adds an empty node (a join or fork point).
    pub fn add_empty(&mut self) -> NodeId {
        self.push(Op::Empty(EmptyNode))
    }
}
