//! GPU tests of per-node profiling (`Exec::profile`): a deliberately slow node is reported as
//! the slowest, the shares add up to 100% and the nodes' times to the sequential graph's whole
//! launch, the nodes run `launches + 1` times and the profiled `Exec` is left as it was.

use std::time::Duration;

use anyhow::ensure;
use cudagraph::{
    args, dst, src, Dag, DeviceBuffer, Event, LaunchConfig, NodeKind, CONDITIONAL_INCLUDE,
};

use crate::common::Gpu;

/// About 5 ms of one thread's spinning at the H100's and H200's 1.98 GHz boost clock (more
/// at lower clocks): far above a node step (about a microsecond) and the events' resolution
/// (about half a microsecond).
const SPIN: i64 = 10_000_000;

/// How many launches each profile times.
const LAUNCHES: u32 = 20;

/// A DAG of small nodes around one slow one: memset `x`, two scales of `x` side by side, the
/// spin (after both), `y += x`, a copy of `y`, and a child graph of two scales of `y`.
fn dag_with_a_slow_node(
    gpu: &Gpu,
    x: &DeviceBuffer<f32>,
    y: &DeviceBuffer<f32>,
    z: &DeviceBuffer<f32>,
) -> anyhow::Result<Dag> {
    let [scale, spin, add] = gpu.kernels(["scale", "spin", "add"])?;
    let n = x.len() as i32;
    let cfg = LaunchConfig::for_elements(x.len() as u32, 256);
    let mut dag = Dag::new();
    let fill = dag.add_memset(x, 1.0f32.to_bits())?;
    let s1 = dag.add_kernel(&scale, cfg, &args![x, 2.0f32, n])?;
    let s2 = dag.add_kernel(&scale, cfg, &args![y, 3.0f32, n])?;
    let slow = dag.add_kernel(&spin, LaunchConfig::new(1, 1), &args![SPIN])?;
    let sum = dag.add_kernel(&add, cfg, &args![y, x, n])?;
    let copy = dag.add_copy(dst(z), src(y))?;
    let mut body = Dag::new();
    let b1 = body.add_kernel(&scale, cfg, &args![z, 0.5f32, n])?;
    let b2 = body.add_kernel(&scale, cfg, &args![z, 2.0f32, n])?;
    body.add_dependency(b1, b2)?;
    let child = dag.add_child(&body);
    for (id, name) in [
        (fill, "fill x"),
        (s1, "scale x"),
        (s2, "scale y"),
        (slow, "spin (slow)"),
        (sum, "y += x"),
        (copy, "copy y to z"),
        (child, "child: scale z twice"),
    ] {
        dag.set_name(id, name);
    }
    dag.fan_out(fill, &[s1, s2])?;
    dag.fan_in(&[s1, s2], slow)?;
    dag.chain(&[slow, sum, copy, child])?;
    Ok(dag)
}

register!(gpu "profile::a_slow_node_is_reported_as_the_slowest" => a_slow_node_is_reported_as_the_slowest);
/// The spin (about 5 ms) heads the table with nearly all the time; every top-level node has
/// one entry (the child graph one); the table and the DOT say so.
fn a_slow_node_is_reported_as_the_slowest(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 1 << 16;
    let (x, y, z) = (
        DeviceBuffer::<f32>::zeros(d, n)?,
        DeviceBuffer::<f32>::zeros(d, n)?,
        DeviceBuffer::<f32>::zeros(d, n)?,
    );
    let dag = dag_with_a_slow_node(gpu, &x, &y, &z)?;
    let exec = dag.instantiate(d)?;
    let p = exec.profile(&gpu.stream, LAUNCHES)?;
    println!("{p}");
    ensure!(p.launches() == LAUNCHES, "{} launches", p.launches());
    ensure!(
        p.nodes().len() == dag.node_count(),
        "{} entries for {} nodes",
        p.nodes().len(),
        dag.node_count()
    );
    let slowest = &p.nodes()[0];
    ensure!(
        slowest.name == "spin (slow)" && slowest.kind == NodeKind::Kernel,
        "the slowest is {} ({:?}), not the spin",
        slowest.name,
        slowest.kind
    );
    // 10^7 cycles: 5 ms at 2 GHz, at least 1 ms at any clock a data-centre GPU runs at.
    ensure!(
        slowest.min >= Duration::from_millis(1),
        "the spin took {:?} at least",
        slowest.min
    );
    // The other nodes are small (64 Ki floats each): the spin has more than 90% of the time.
    ensure!(
        slowest.share > 0.9,
        "the spin's share is {:.3}",
        slowest.share
    );
    let second = &p.nodes()[1];
    ensure!(
        second.mean * 10 < slowest.mean,
        "{} took {:?}, the spin {:?}: not ten times less",
        second.name,
        second.mean,
        slowest.mean
    );
    for t in p.nodes() {
        ensure!(t.min <= t.mean && t.mean <= t.max, "{t:?}");
    }
    let child = p
        .nodes()
        .iter()
        .find(|t| t.kind == NodeKind::Child)
        .ok_or_else(|| anyhow::anyhow!("no child graph entry"))?;
    ensure!(child.name == "child: scale z twice", "{}", child.name);
    let dot = p.to_dot();
    ensure!(
        dot.lines()
            .any(|l| l.contains("label=\"spin (slow)") && l.contains("fillcolor=\"#ff0000\"")),
        "the spin is not red in the DOT:\n{dot}"
    );
    Ok(())
}

register!(gpu "profile::shares_and_times_add_up_to_the_graphs_time" => shares_and_times_add_up_to_the_graphs_time);
/// The shares add up to 100%, and the nodes' mean times to the sequential graph's time per
/// launch as stream events around each launch measure it.
///
/// Tolerance: the stream events also take in the graph's launch latency on the GPU (from the
/// start event to the graph's first record node, and from its last record node to the end
/// event: a few microseconds on an H100) and each event time is resolved to about half a
/// microsecond. So the whole launch may exceed the sum by up to 50 µs + 1% (the percentage
/// covers clock changes between the events of a 5 ms launch), and may fall short of it by no
/// more than the events' resolution (2 µs for the two stream events).
fn shares_and_times_add_up_to_the_graphs_time(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 1 << 16;
    let (x, y, z) = (
        DeviceBuffer::<f32>::zeros(d, n)?,
        DeviceBuffer::<f32>::zeros(d, n)?,
        DeviceBuffer::<f32>::zeros(d, n)?,
    );
    let dag = dag_with_a_slow_node(gpu, &x, &y, &z)?;
    let mut exec = dag.instantiate(d)?;
    let p = exec.profile(&gpu.stream, LAUNCHES)?;
    println!("{p}");
    let shares: f64 = p.nodes().iter().map(|t| t.share).sum();
    ensure!((shares - 1.0).abs() < 1e-9, "the shares add up to {shares}");
    let sum: Duration = p.nodes().iter().map(|t| t.mean).sum();
    ensure!(sum == p.total(), "total {:?}, sum {sum:?}", p.total());
    let whole = p
        .launch_time()
        .ok_or_else(|| anyhow::anyhow!("no whole-launch time"))?;
    let over = whole.saturating_sub(sum);
    let under = sum.saturating_sub(whole);
    let allowed = Duration::from_micros(50) + whole / 100;
    println!(
        "sum of the nodes {sum:?}, whole sequential launch {whole:?}: {over:?} over, {under:?} \
         under (allowed {allowed:?} over, 2 µs under)"
    );
    ensure!(
        over <= allowed,
        "the whole launch ({whole:?}) exceeds the nodes' sum ({sum:?}) by more than {allowed:?}"
    );
    ensure!(
        under <= Duration::from_micros(2),
        "the nodes' sum ({sum:?}) exceeds the whole launch ({whole:?})"
    );
    // For the record: the graph itself (branches side by side), timed the same way.
    let (start, end) = (Event::new(d)?, Event::new(d)?);
    start.record(&gpu.stream)?;
    exec.launch(&gpu.stream)?;
    end.record(&gpu.stream)?;
    end.synchronize()?;
    println!(
        "the graph itself, one launch: {:.3} ms",
        start.elapsed_ms(&end)?
    );
    exec.synchronize()?;
    Ok(())
}

register!(gpu "profile::nodes_run_launches_plus_one_times_and_the_exec_is_untouched" => nodes_run_launches_plus_one_times_and_the_exec_is_untouched);
/// A counter kernel runs `launches + 1` times during a profile (the warm-up launch); the
/// profiled `Exec` keeps its DAG and still launches (one more increment); `launches` 0 is
/// refused.
fn nodes_run_launches_plus_one_times_and_the_exec_is_untouched(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let k = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&c])?;
    dag.set_name(k, "count");
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let before = exec.to_dot();
    let p = exec.profile(&gpu.stream, 7)?;
    ensure!(p.nodes().len() == 1 && p.nodes()[0].name == "count");
    ensure!(
        (p.nodes()[0].share - 1.0).abs() < 1e-12,
        "one node has all the time: {}",
        p.nodes()[0].share
    );
    ensure!(c.to_vec()? == [1 + 7 + 1], "counter {:?}", c.to_vec()?);
    ensure!(exec.to_dot() == before, "the Exec's DAG changed");
    gpu.launch_and_wait(&mut exec)?;
    ensure!(c.to_vec()? == [10], "counter {:?}", c.to_vec()?);
    let err = exec.profile(&gpu.stream, 0).unwrap_err();
    ensure!(
        matches!(
            &err,
            cudagraph::Error::BadOptions {
                what: "Exec::profile",
                ..
            }
        ),
        "{err}"
    );
    Ok(())
}

/// A WHILE body's kernel (halves `x[0]`, counts, goes on above the threshold) and `y += s`
/// (`cudaGraphSetConditional` needs [`CONDITIONAL_INCLUDE`]).
const WHILE_SOURCE: &str = r#"
extern "C" __global__ void halve(float* x, unsigned int* iters, float threshold,
                                 cudaGraphConditionalHandle h) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        x[0] *= 0.5f;
        iters[0] += 1;
        cudaGraphSetConditional(h, x[0] > threshold ? 1u : 0u);
    }
}
extern "C" __global__ void add_into(float* y, const float* s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += s[i];
}
"#;

register!(gpu "profile::a_while_node_and_graph_memory_run_in_the_profiled_copy" => a_while_node_and_graph_memory_run_in_the_profiled_copy);
/// The sequential copy makes its own conditional handle and graph allocation (late values of
/// the graph being built, not the `Exec`'s): a WHILE halving `x[0]` from 1024 while it is above
/// 1 (10 iterations, then 1 per launch) and `y += s` for a graph buffer `s` filled with 1.5
/// run in every profiled launch; the WHILE and each memory node are one entry.
fn a_while_node_and_graph_memory_run_in_the_profiled_copy(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let m = gpu.module(&format!("{CONDITIONAL_INCLUDE}{WHILE_SOURCE}"))?;
    let (halve, add) = (m.kernel("halve")?, m.kernel("add_into")?);
    const N: usize = 256;
    let x = DeviceBuffer::from_slice(d, &[1024.0f32])?;
    let iters = DeviceBuffer::<u32>::zeros(d, 1)?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    let mut body = Dag::new();
    body.add_kernel(
        &halve,
        LaunchConfig::new(1, 1),
        &args![&x, &iters, 1.0f32, &h],
    )?;
    let w = dag.add_while(&h, &body)?;
    dag.set_name(w, "halve while above 1");
    let (alloc, s) = dag.add_alloc::<f32>(N)?;
    let fill = dag.add_graph_memset(&s, 1.5f32)?;
    let k = dag.add_kernel(
        &add,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&y, &s, N as i32],
    )?;
    let free = dag.add_free(&s)?;
    dag.chain(&[w, alloc, fill, k, free])?;
    let exec = dag.instantiate(d)?;
    let p = exec.profile(&gpu.stream, 3)?;
    println!("{p}");
    ensure!(p.nodes().len() == 5, "{} entries", p.nodes().len());
    ensure!(
        p.node(w).map(|t| t.kind) == Some(NodeKind::Conditional),
        "the WHILE is one conditional entry"
    );
    // Four runs (a warm-up and 3): 10 + 1 + 1 + 1 iterations, y grew by 1.5 four times.
    ensure!(iters.to_vec()? == [13], "iterations {:?}", iters.to_vec()?);
    crate::common::assert_close(&y.to_vec()?, &[6.0; N], 1e-6)?;
    Ok(())
}
