//! GPU tests of programmatic dependent launch edges (issue 31): a chain of kernels joined by
//! programmatic edges (either port) computes what the same chain with plain edges computes
//! (each kernel reads its predecessor's output after `cudaGridDependencySynchronize()`), also
//! inside a child graph; a whole-graph update keeps the edges' data, and one that would change
//! it is refused (then instantiated again by `update_or_reinstantiate`).

use anyhow::ensure;
use cudagraph::{
    args, Dag, DeviceBuffer, Error, Kernel, LaunchConfig, NodeId, ProgrammaticPort, UpdateOutcome,
    CONDITIONAL_INCLUDE,
};

use crate::common::{assert_close, Gpu};

/// The chain's kernel. `cudaTriggerProgrammaticLaunchCompletion()` lets the next kernel start
/// (with the programmatic port) before this one ends; `cudaGridDependencySynchronize()` waits
/// for the kernel before to complete, after which its writes are visible. Both come from
/// `<cuda_device_runtime_api.h>` ([`CONDITIONAL_INCLUDE`]; `compile` adds the toolkit's include
/// directory) and return at once in a kernel launched without a programmatic edge.
pub const SOURCE: &str = r#"
extern "C" __global__ void pdl_add(const float* in, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // Nothing before the wait touches memory the kernel before writes.
    float add = a;
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
    if (i < n) out[i] = in[i] + add;
}
"#;

/// Elements per buffer: 256 blocks of 256 threads, so a kernel's blocks are spread over the
/// SMs and the next kernel's blocks start while some of them still run.
const N: usize = 1 << 16;
/// Kernels in the chain.
const LEN: usize = 48;

fn kernel(gpu: &Gpu) -> anyhow::Result<Kernel> {
    Ok(gpu
        .module(&format!("{CONDITIONAL_INCLUDE}{SOURCE}"))?
        .kernel("pdl_add")?)
}

fn start() -> Vec<f32> {
    (0..N).map(|i| (i % 1000) as f32).collect()
}

/// What `LEN` kernels adding `step(j)` compute (exact in f32: small integers).
fn expected(x: &[f32], step: impl Fn(usize) -> f32) -> Vec<f32> {
    let add: f32 = (0..LEN).map(step).sum();
    x.iter().map(|v| v + add).collect()
}

/// A chain of `LEN` kernels ping-ponging between `x` and `y` (kernel `j` adds `step(j)`; an
/// even `LEN` ends in `x`), without edges yet.
fn chain_nodes(
    k: &Kernel,
    x: &DeviceBuffer<f32>,
    y: &DeviceBuffer<f32>,
    step: impl Fn(usize) -> f32,
) -> anyhow::Result<(Dag, Vec<NodeId>)> {
    let mut dag = Dag::new();
    let cfg = LaunchConfig::for_elements(N as u32, 256);
    let mut ids = Vec::with_capacity(LEN);
    for j in 0..LEN {
        let (from, to) = if j % 2 == 0 { (x, y) } else { (y, x) };
        ids.push(dag.add_kernel(k, cfg, &args![from, to, step(j), N as i32])?);
    }
    Ok((dag, ids))
}

/// Joins `ids` in order: plain edges (`None`) or programmatic edges of `port`.
fn join(dag: &mut Dag, ids: &[NodeId], port: Option<ProgrammaticPort>) -> anyhow::Result<()> {
    for w in ids.windows(2) {
        match port {
            None => dag.add_dependency(w[0], w[1])?,
            Some(p) => dag.add_programmatic_dependency(w[0], w[1], p)?,
        }
    }
    Ok(())
}

const KINDS: [Option<ProgrammaticPort>; 3] = [
    None,
    Some(ProgrammaticPort::Programmatic),
    Some(ProgrammaticPort::LaunchCompletion),
];

register!(gpu "programmatic::chain_computes_as_with_plain_edges" => chain_computes_as_with_plain_edges);
/// The same chain with plain edges, programmatic edges and launch-completion edges, each
/// launched three times from the same start (results compared with the CPU after every
/// launch: the programmatic chains' kernels read what the kernel before wrote).
fn chain_computes_as_with_plain_edges(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let k = kernel(gpu)?;
    let step = |j: usize| (j % 7 + 1) as f32;
    for port in KINDS {
        let x = DeviceBuffer::from_slice(d, &start())?;
        let y = DeviceBuffer::<f32>::zeros(d, N)?;
        let (mut dag, ids) = chain_nodes(&k, &x, &y, step)?;
        join(&mut dag, &ids, port)?;
        let mut exec = dag.instantiate(d)?;
        let mut want = start();
        for launch in 0..3 {
            gpu.launch_and_wait(&mut exec)?;
            want = expected(&want, step);
            assert_close(&x.to_vec()?, &want, 0.0)
                .map_err(|e| anyhow::anyhow!("{port:?}, launch {launch}: {e}"))?;
        }
    }
    Ok(())
}

register!(gpu "programmatic::child_graph_keeps_its_programmatic_edges" => child_graph_keeps_its_programmatic_edges);
/// A programmatic chain inside a child graph, after a memset of its input in the parent (a
/// plain edge into the child node): the child's kernels compute as a plain chain would.
fn child_graph_keeps_its_programmatic_edges(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let k = kernel(gpu)?;
    let step = |j: usize| (j % 5) as f32;
    let x = DeviceBuffer::<f32>::zeros(d, N)?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let (mut child, ids) = chain_nodes(&k, &x, &y, step)?;
    join(&mut child, &ids, Some(ProgrammaticPort::Programmatic))?;
    let mut dag = Dag::new();
    // 3.0f32's bits: the memset writes 3.0 to every element.
    let fill = dag.add_memset(&x, 3.0f32.to_bits())?;
    let c = dag.add_child(&child);
    dag.add_dependency(fill, c)?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    assert_close(&x.to_vec()?, &expected(&vec![3.0; N], step), 0.0)
}

register!(gpu "programmatic::whole_graph_update_keeps_edge_data" => whole_graph_update_keeps_edge_data);
/// A programmatic chain updated as a whole with new kernel arguments: the update goes through
/// (`cudaGraphExecUpdate` with the same edge data) and the new values are used. The same nodes
/// joined by plain edges are refused by `update` (typed error naming the edge) and instantiated
/// again by `update_or_reinstantiate`, which then computes as well.
fn whole_graph_update_keeps_edge_data(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let k = kernel(gpu)?;
    let x = DeviceBuffer::from_slice(d, &start())?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let (nodes, ids) = chain_nodes(&k, &x, &y, |_| 1.0)?;
    let mut dag = nodes.clone();
    join(&mut dag, &ids, Some(ProgrammaticPort::Programmatic))?;
    let mut exec = dag.instantiate(d)?;
    let mut want = start();
    gpu.launch_and_wait(&mut exec)?;
    want = expected(&want, |_| 1.0);
    assert_close(&x.to_vec()?, &want, 0.0)?;

    // New values, same edges.
    let mut updated = dag.clone();
    for (j, &id) in ids.iter().enumerate() {
        let (from, to) = if j % 2 == 0 { (&x, &y) } else { (&y, &x) };
        updated.set_kernel_args(id, &args![from, to, 2.0f32, N as i32])?;
    }
    exec.update(&updated)?;
    gpu.launch_and_wait(&mut exec)?;
    want = expected(&want, |_| 2.0);
    assert_close(&x.to_vec()?, &want, 0.0)?;

    // The same nodes with plain edges: an edge of another kind.
    let mut plain = nodes;
    join(&mut plain, &ids, None)?;
    match exec.update(&plain) {
        Err(Error::UpdateRefused { reason, .. }) => ensure!(
            reason.contains("programmatic"),
            "the refusal does not name the edge's kind: {reason}"
        ),
        other => anyhow::bail!("an update changing edge data was not refused: {other:?}"),
    }
    // The refused update changed nothing.
    gpu.launch_and_wait(&mut exec)?;
    want = expected(&want, |_| 2.0);
    assert_close(&x.to_vec()?, &want, 0.0)?;
    ensure!(
        exec.update_or_reinstantiate(&plain)? == UpdateOutcome::Reinstantiated,
        "update_or_reinstantiate did not instantiate again"
    );
    gpu.launch_and_wait(&mut exec)?;
    want = expected(&want, |_| 1.0);
    assert_close(&x.to_vec()?, &want, 0.0)
}

register!(gpu "programmatic::conditional_body_with_programmatic_edges" => conditional_body_with_programmatic_edges);
/// A programmatic chain as the body of an IF whose condition defaults to 1: whether CUDA
/// takes edge data inside a conditional body, and computes as a plain chain there.
fn conditional_body_with_programmatic_edges(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let k = kernel(gpu)?;
    let step = |j: usize| (j % 3) as f32;
    let x = DeviceBuffer::from_slice(d, &start())?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let (mut body, ids) = chain_nodes(&k, &x, &y, step)?;
    join(&mut body, &ids, Some(ProgrammaticPort::Programmatic))?;
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    dag.add_if(&h, &body)?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    assert_close(&x.to_vec()?, &expected(&start(), step), 0.0)
}
