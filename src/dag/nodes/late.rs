//! Late values: node parameters whose value exists only once the CUDA graph is being built,
//! the mechanism conditional handles (`conditional.rs`: the handle
//! `cudaGraphConditionalHandleCreate` makes) and graph buffers (`graph_memory.rs`: the
//! address CUDA gives an allocation node) share.
//!
//! A DAG keeps a placeholder where such a value goes and, per feature, its [`LateValues`]: the
//! scope of the values it declares, and the nodes that use one, each with where in the node the
//! value goes ([`Slot`]) and which value (the feature's [`LateKey`]: the scope of the DAG that
//! declared it and its number there). Lowering writes the values of the graph being built into
//! a copy of each using node's parameters ([`LateValues::patch_kernel`]; the DAG keeps its
//! placeholders); after instantiation, [`write_values`] writes them into the
//! [`Exec`](crate::Exec)'s copy of the DAG, so per-node updates of the node's other parameters
//! pass them on. An update cannot give a kernel node such a value, nor replace the argument
//! that passes one ([`LateValues::update_problem`]).

use std::sync::atomic::{AtomicU64, Ordering};

use super::memset::FillTarget;
use super::KernelNode;
use crate::dag::{Dag, NodeId, Op};
use crate::error::Result;
use crate::kernel::KernelArg;

/// Scopes of late values: one per DAG and feature, taken when the DAG declares its first value
/// (0: none declared yet).
static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Which late value: the scope of the DAG that declared it, and its number there.
pub(crate) trait LateKey: Copy {
    /// The scope of the DAG that declared it ([`LateValues::declare`]).
    fn scope(&self) -> u64;
    /// Its number among that DAG's values of its kind.
    fn index(&self) -> u32;
}

/// Where in a node a late value goes (8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A kernel node's argument, by parameter.
    Arg(u32),
    /// The address a memset node fills (a graph buffer).
    Fill,
}

impl Slot {
    /// Writes `value` into `op`'s slot (nothing when `op` has no such slot).
    fn write(self, op: &mut Op, value: u64) {
        match (self, op) {
            (Slot::Arg(p), Op::Kernel(k)) => k.args.set_bytes(p as usize, &value.to_ne_bytes()),
            (Slot::Fill, Op::Memset(m)) => {
                if let FillTarget::Graph { addr, .. } = &mut m.dst {
                    *addr = value;
                }
            }
            _ => {}
        }
    }
}

/// Why an [`Exec`](crate::Exec) update of a kernel node's arguments is refused
/// ([`LateValues::update_problem`]), by parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateProblem {
    /// The new argument passes a late value.
    Passes(usize),
    /// The argument replaced passes one.
    Replaces(usize),
}

/// A DAG's late values of one kind: the scope of those it declares, and the nodes that use one
/// (of this DAG or, where the feature allows it, of an enclosing one).
#[derive(Clone, Debug)]
pub(crate) struct LateValues<K> {
    /// The scope of the values this DAG declares (0 until it declares one; a copy keeps it).
    scope: u64,
    /// The nodes using a value: node, slot, value.
    uses: Vec<(NodeId, Slot, K)>,
}

impl<K> Default for LateValues<K> {
    fn default() -> Self {
        LateValues {
            scope: 0,
            uses: Vec::new(),
        }
    }
}

impl<K: LateKey> LateValues<K> {
    /// The scope of the values this DAG declares (0: none declared yet).
    #[inline]
    pub(crate) fn scope(&self) -> u64 {
        self.scope
    }

    /// The scope of a value this DAG declares: taken at its first, unique in the process.
    pub(crate) fn declare(&mut self) -> u64 {
        if self.scope == 0 {
            self.scope = NEXT_SCOPE.fetch_add(1, Ordering::Relaxed);
        }
        self.scope
    }

    /// Whether no node uses a value of this kind.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }

    /// Every use, in the order noted.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(NodeId, Slot, K)> + '_ {
        self.uses.iter()
    }

    /// Notes that node `id` uses `key` at `slot`.
    pub(crate) fn push(&mut self, id: NodeId, slot: Slot, key: K) {
        self.uses.push((id, slot, key));
    }

    /// Notes which arguments of kernel node `id` pass a value (`key` of each argument; `args`
    /// are all its arguments, after they were accepted), replacing what was noted of its
    /// arguments before.
    pub(crate) fn note_args(
        &mut self,
        id: NodeId,
        args: &[KernelArg<'_>],
        key: impl Fn(&KernelArg<'_>) -> Option<K>,
    ) {
        if self.uses.is_empty() && args.iter().all(|a| key(a).is_none()) {
            return;
        }
        self.uses
            .retain(|(n, s, _)| *n != id || !matches!(s, Slot::Arg(_)));
        for (i, a) in args.iter().enumerate() {
            if let Some(k) = key(a) {
                self.uses.push((id, Slot::Arg(i as u32), k));
            }
        }
    }

    /// The kernel arguments passing a value: node, parameter, value.
    pub(crate) fn args(&self) -> impl Iterator<Item = (NodeId, u32, K)> + '_ {
        self.uses.iter().filter_map(|&(n, s, k)| match s {
            Slot::Arg(p) => Some((n, p, k)),
            Slot::Fill => None,
        })
    }

    /// The parameters of kernel node `id` that pass a value, with it.
    fn args_of(&self, id: NodeId) -> impl Iterator<Item = (usize, K)> + '_ {
        self.args()
            .filter(move |&(n, _, _)| n == id)
            .map(|(_, p, k)| (p as usize, k))
    }

    /// Whether kernel node `id` passes a value.
    pub(crate) fn kernel_uses(&self, id: NodeId) -> bool {
        self.args_of(id).next().is_some()
    }

    /// Why an [`Exec`](crate::Exec) update of kernel node `id` with `args` (by parameter) is
    /// refused, if it is: a new argument passes a value (`passes`), or replaces one.
    pub(crate) fn update_problem<'a>(
        &self,
        id: NodeId,
        mut args: impl Iterator<Item = (usize, &'a KernelArg<'a>)>,
        passes: impl Fn(&KernelArg<'_>) -> bool,
    ) -> Option<UpdateProblem> {
        args.find_map(|(i, a)| {
            if passes(a) {
                Some(UpdateProblem::Passes(i))
            } else if self.args_of(id).any(|(p, _)| p == i) {
                Some(UpdateProblem::Replaces(i))
            } else {
                None
            }
        })
    }

    /// Writes the values of the graph being built (`value` of each key) into `k`, a copy of
    /// kernel node `id` being lowered (the DAG keeps its placeholders).
    pub(crate) fn patch_kernel(
        &self,
        id: NodeId,
        k: &mut KernelNode,
        mut value: impl FnMut(K) -> Result<u64>,
    ) -> Result<()> {
        for (param, key) in self.args_of(id) {
            k.args.set_bytes(param, &value(key)?.to_ne_bytes());
        }
        Ok(())
    }
}

/// Writes the values lowering got for the scope `dag` declares (`(index, value)`) into the
/// nodes that use them (`late`: the feature's [`LateValues`] of `dag`): an
/// [`Exec`](crate::Exec)'s copy of the DAG then holds what its graph has, and per-node updates
/// of the nodes' other parameters pass them on.
pub(crate) fn write_values<K: LateKey>(
    dag: &mut Dag,
    late: impl Fn(&mut Dag) -> &mut LateValues<K>,
    values: &[(u32, u64)],
) {
    if values.is_empty() || late(dag).is_empty() {
        return;
    }
    // Taken out while the nodes are written, and put back.
    let own = std::mem::take(late(dag));
    for &(id, slot, key) in &own.uses {
        if key.scope() != own.scope {
            continue;
        }
        let Some(&(_, v)) = values.iter().find(|(i, _)| *i == key.index()) else {
            continue;
        };
        if let Ok(node) = dag.node_mut(id) {
            slot.write(&mut node.op, v);
        }
    }
    *late(dag) = own;
}
