//! The DAG side of [`Communicators`]: placeholders for recording backends, checking that the
//! ranks' DAGs fit together and instantiating them, one thread per rank (the collective nodes
//! themselves are `dag/nodes/nccl.rs`'s).

use super::{recording_error, Communicators};
use crate::dag::nodes::backend::sealed;
use crate::dag::nodes::nccl::{check_ranks, lowering_rank};
use crate::dag::Dag;
use crate::error::Result;
use crate::RecordingBackend;

impl Communicators {
    /// Placeholder communicators for recording backends (no NCCL, no GPU): rank `i` belongs to
    /// `backends[i]`, so DAGs with collective nodes can be built, validated and lowered to
    /// [`RecordingBackend`]s, and checked with
    /// [`Communicators::check_ranks`].
    pub fn recording(backends: &[&RecordingBackend]) -> Communicators {
        Communicators::placeholders(backends.iter().map(|b| sealed::Lower::key(*b)).collect())
    }

    /// Checks that the DAGs, one per rank (`dags[r]` holds rank `r`'s collective nodes), fit
    /// together, so that their graphs, launched once each, complete. No GPU needed.
    ///
    /// - every collective node of `dags[r]` is of rank `r` of these communicators (a DAG uses
    ///   one [`Communicators`]);
    /// - in each DAG the collective nodes are ordered by its dependencies (a chain: NCCL runs
    ///   one communicator's operations one after the other, in the same order on every rank);
    /// - the ranks' collectives (all-reduce, all-gather, reduce-scatter, broadcast) match in
    ///   order: same call, operator, type, count and root;
    /// - every send from rank `a` to `b` is matched, in order, by a receive of `b` from `a`
    ///   with the same type and count;
    /// - no rank waits for another in a cycle (matched operations taken as one step, each
    ///   rank's operations in order; the send and receive of one
    ///   [`Dag::add_send_recv`] node are one step). The check is conservative: it may refuse
    ///   an order NCCL would get through.
    ///
    /// Errors name the node ([`DagError::Collective`](crate::DagError::Collective)).
    pub fn check_ranks(&self, dags: &[&Dag]) -> Result<()> {
        check_ranks(self, dags)
    }

    /// Instantiates one DAG per rank (`dags[r]` on rank `r`'s device) after
    /// [`Communicators::check_ranks`]: each rank's DAG is validated, lowered and instantiated
    /// on its own thread, all at once, so that NCCL can capture every rank's collectives into
    /// its graph (a rank's capture may wait for the others'). The only way to instantiate a
    /// DAG with collective nodes; see the [module docs](crate::nccl) for the launch rules.
    pub fn instantiate(&self, dags: &[&Dag]) -> Result<Vec<crate::Exec>> {
        let c = &self.clique;
        if c.is_recording() {
            return Err(recording_error());
        }
        self.check_ranks(dags)?;
        for (dag, d) in dags.iter().zip(&c.devices) {
            dag.validate(d)?;
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = dags
                .iter()
                .zip(&c.devices)
                .enumerate()
                .map(|(rank, (dag, device))| {
                    let id = c.id;
                    s.spawn(move || lowering_rank(id, rank, || dag.instantiate(device)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(p) => std::panic::resume_unwind(p),
                })
                .collect()
        })
    }
}
