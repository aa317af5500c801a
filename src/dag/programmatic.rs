//! Programmatic dependent launch edges (issue 31): [`Dag::add_programmatic_dependency`] and
//! their validation.
//!
//! A programmatic edge joins two kernel nodes. CUDA may start the kernel after it before the
//! kernel before it has finished (Hopper and later): once every block of that kernel has called
//! `cudaTriggerProgrammaticLaunchCompletion()` or exited ([`ProgrammaticPort::Programmatic`]),
//! or once every block has started ([`ProgrammaticPort::LaunchCompletion`]). The kernel after
//! it calls `cudaGridDependencySynchronize()`, which returns once the kernel before has
//! completed and its writes are visible; what it does before that call overlaps the end of the
//! kernel before. Lowering passes the edge as `cudaGraphEdgeData` (type
//! `cudaGraphDependencyTypeProgrammatic`, the port as `from_port`) to `cudaGraphAddNode`.
//!
//! Where CUDA allows such an edge, checked when it is added (what cannot change later) and
//! by validation (what can: placement, the device the DAG is lowered for):
//! - between two kernel nodes (only kernel nodes have these ports);
//! - on one device (the two kernels run on the same device: placed on the same one, or both
//!   on the home device), of compute capability 9.0 or more;
//! - not where the two nodes are already joined by an edge of another kind (CUDA keeps one
//!   edge per pair).
//!
//! A child graph and a conditional body keep their programmatic edges (lowered through the
//! same path; CUDA 13.0 takes both, checked on an H100 by the GPU tests `programmatic::`).

use super::nodes::ValidationTarget;
use super::{Dag, DagError, NodeId, Op, ProgrammaticPort};
use crate::error::{Error, Result};

impl Dag {
    /// Makes kernel `after` depend on kernel `before` through a programmatic edge: `after` may
    /// start once `before` reaches `port` (every block triggered or exited, or every block
    /// started), and waits for `before` to complete in `cudaGridDependencySynchronize()`.
    ///
    /// `after`'s kernel must call `cudaGridDependencySynchronize()` before it touches memory
    /// `before` writes (or reads, if `after` writes it): until then nothing of `before` is
    /// ordered before it. `before`'s kernel may call `cudaTriggerProgrammaticLaunchCompletion()`
    /// to let `after` start before its own end (with [`ProgrammaticPort::Programmatic`]; without
    /// the call each block triggers when it exits). Both are device functions of CUDA's runtime
    /// (`cuda_device_runtime_api.h`, which NVRTC finds with the toolkit's include directory:
    /// see [`CONDITIONAL_INCLUDE`](crate::CONDITIONAL_INCLUDE)), compiled for `sm_90` or later;
    /// on a kernel launched without a programmatic edge they return at once.
    ///
    /// Refused ([`DagError::Programmatic`], naming both nodes): unless both nodes are kernel
    /// nodes; when they are placed on two devices (checked again by validation, which also
    /// refuses a device older than compute capability 9.0); when they are already joined by a
    /// plain edge or a programmatic edge of the other port; a self-loop or a cycle, as
    /// [`Dag::add_dependency`]. Adding the same edge again does nothing.
    ///
    /// The race check and dependency inference ([`Dag::races`], [`Dag::infer_dependencies`])
    /// count a programmatic edge as ordering its two kernels, which holds for a kernel after it
    /// that calls `cudaGridDependencySynchronize()` (in every block) before its accesses.
    ///
    /// ```
    /// use cudagraph::{Dag, DeviceLimits, LaunchConfig, ProgrammaticPort, RecordingBackend};
    /// # fn main() -> cudagraph::Result<()> {
    /// let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    /// let x = rec.device_buffer::<f32>(256);
    /// let step = rec.kernel("step", &[8]);
    /// let mut dag = Dag::new();
    /// let a = dag.add_kernel(&step, LaunchConfig::new(1, 256), &cudagraph::args![&x])?;
    /// let b = dag.add_kernel(&step, LaunchConfig::new(1, 256), &cudagraph::args![&x])?;
    /// dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)?;
    /// let memset = dag.add_memset(&x, 0u32)?;
    /// assert!(dag.add_programmatic_dependency(b, memset, ProgrammaticPort::Programmatic).is_err());
    /// dag.lower(&mut rec)?;
    /// assert!(rec.calls()[1].params.ends_with(" edge(from_port=1 to_port=0 type=1)"));
    /// # Ok(()) }
    /// ```
    pub fn add_programmatic_dependency(
        &mut self,
        before: NodeId,
        after: NodeId,
        port: ProgrammaticPort,
    ) -> Result<()> {
        let (b, a) = (self.node(before)?, self.node(after)?);
        let refuse = |problem: String| {
            Err(Error::Dag(DagError::Programmatic {
                before: b.name().to_string(),
                after: a.name().to_string(),
                problem,
            }))
        };
        for n in [b, a] {
            if !matches!(n.op, Op::Kernel(_)) {
                return refuse(format!(
                    "`{}` is {} node; a programmatic edge joins two kernel nodes (only kernels \
                     have CUDA's programmatic ports)",
                    n.name(),
                    with_article(n.kind().as_str())
                ));
            }
        }
        if let (Some(kb), Some(ka)) = (b.device, a.device) {
            if kb != ka {
                return refuse(format!(
                    "the kernels are placed on two devices ({kb} and {ka}); a programmatic edge \
                     joins kernels of one device"
                ));
            }
        }
        if let Some(e) = self.graph.find_edge(before.idx, after.idx) {
            return match self.graph[e].programmatic {
                Some(p) if p == port => Ok(()),
                Some(p) => refuse(format!(
                    "the nodes are already joined by a programmatic edge of the {} port; CUDA \
                     keeps one edge per pair",
                    p.words()
                )),
                None => refuse(
                    "the nodes are already joined by a plain edge; CUDA keeps one edge per pair"
                        .into(),
                ),
            };
        }
        self.add_dependency(before, after)?;
        let e = self
            .graph
            .find_edge(before.idx, after.idx)
            .expect("add_dependency added the edge");
        self.graph[e].programmatic = Some(port);
        self.programmatic_edges += 1;
        Ok(())
    }
}

/// "an empty", "a kernel".
fn with_article(kind: &str) -> String {
    let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {kind}")
}

/// Checks every programmatic edge of `dag` for `target`: its two kernels on one device (placed
/// on the same one, or both unplaced), of compute capability 9.0 or more.
pub(super) fn validate(dag: &Dag, target: &ValidationTarget<'_>) -> Result<()> {
    use petgraph::visit::{EdgeRef, IntoEdgeReferences};
    for e in dag.graph.edge_references() {
        if e.weight().programmatic.is_none() {
            continue;
        }
        let (b, a) = (&dag.graph[e.source()], &dag.graph[e.target()]);
        let refuse = |problem: String| {
            Err(Error::Dag(DagError::Programmatic {
                before: b.name().to_string(),
                after: a.name().to_string(),
                problem,
            }))
        };
        let (kb, ka) = (
            b.device.unwrap_or(target.home),
            a.device.unwrap_or(target.home),
        );
        if kb != ka {
            return refuse(format!(
                "the kernels run on two devices ({kb} and {ka}); a programmatic edge joins \
                 kernels of one device"
            ));
        }
        let Op::Kernel(k) = &a.op else {
            unreachable!("the builder joins only kernel nodes, and a node keeps its kind")
        };
        let limits = k.kernel().home().map_or(target.limits, |d| d.limits());
        if limits.compute_capability < (9, 0) {
            let (major, minor) = limits.compute_capability;
            return refuse(format!(
                "{ka} has compute capability {major}.{minor}; programmatic dependent launch \
                 needs 9.0 or more"
            ));
        }
    }
    Ok(())
}
