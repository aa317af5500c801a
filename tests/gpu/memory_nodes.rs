//! GPU tests of graph memory nodes (issue 28): per-launch scratch memory allocated and freed by
//! the graph, reused over 10,000 launches with the device's free memory flat (printed before
//! and after); an allocation the graph does not free, with and without
//! `auto_free_on_launch`; one graph buffer filled by a memset node and read by a kernel, the
//! fill's value updated on the `Exec`; a whole-graph update refused and instantiated again.
//! Each result is checked against the same computation on the CPU.

use anyhow::ensure;
use cudagraph::{
    args, Dag, DagError, DeviceBuffer, Error, InstantiateFlags, Kernel, LaunchConfig, NodeId,
    UpdateOutcome,
};

use crate::common::{assert_close, Gpu};

pub const SOURCE: &str = r#"
// s[i] = a * x[i]
extern "C" __global__ void to_scratch(float* s, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) s[i] = a * x[i];
}
// y[i] = s[i] + s[n - 1 - i]
extern "C" __global__ void from_scratch(float* y, const float* s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s[i] + s[n - 1 - i];
}
// y[i] += s[i]
extern "C" __global__ void add_into(float* y, const float* s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += s[i];
}
"#;

/// 4 MiB of scratch per launch.
const N: usize = 1 << 20;

fn kernels<const K: usize>(gpu: &Gpu, names: [&str; K]) -> anyhow::Result<[Kernel; K]> {
    let m = gpu.module(SOURCE)?;
    let mut out = Vec::with_capacity(K);
    for n in names {
        out.push(m.kernel(n)?);
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("one kernel per name")))
}

fn input() -> Vec<f32> {
    (0..N).map(|i| (i % 1000) as f32 * 0.5).collect()
}

/// What `to_scratch` then `from_scratch` compute.
fn reference(x: &[f32], a: f32) -> Vec<f32> {
    (0..x.len())
        .map(|i| a * x[i] + a * x[x.len() - 1 - i])
        .collect()
}

/// alloc -> to_scratch -> from_scratch (-> free, when `free`): the DAG and the node whose
/// argument 2 is `a`.
fn scratch_dag(
    gpu: &Gpu,
    x: &DeviceBuffer<f32>,
    y: &DeviceBuffer<f32>,
    a: f32,
    free: bool,
) -> anyhow::Result<(Dag, NodeId)> {
    let [to, from] = kernels(gpu, ["to_scratch", "from_scratch"])?;
    let cfg = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let (alloc, s) = dag.add_alloc::<f32>(N)?;
    dag.set_name(alloc, "scratch");
    let fill = dag.add_kernel(&to, cfg, &args![&s, x, a, N as i32])?;
    let read = dag.add_kernel(&from, cfg, &args![y, &s, N as i32])?;
    dag.chain(&[alloc, fill, read])?;
    if free {
        let f = dag.add_free(&s)?;
        dag.add_dependency(read, f)?;
    }
    Ok((dag, fill))
}

register!(gpu "memory_nodes::scratch_over_10000_launches_keeps_free_memory_flat" => scratch_over_many_launches);
/// Scratch allocated and freed by the graph on every launch: after a first launch (which makes
/// CUDA's graph memory pool take the physical memory), 10,000 more launches, with the scale
/// changed every 1,000, leave the device's free memory where it was (printed), and the result
/// of the last is the CPU's.
fn scratch_over_many_launches(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let xs = input();
    let x = DeviceBuffer::from_slice(d, &xs)?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let (dag, fill) = scratch_dag(gpu, &x, &y, 1.0, true)?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let (free_before, total) = d.memory_info()?;
    let mut a = 1.0f32;
    for i in 0..10_000 {
        if i % 1000 == 0 {
            a = 1.0 + (i / 1000) as f32 * 0.25;
            exec.set_kernel_arg(fill, 2, a)?;
        }
        exec.launch(&gpu.stream)?;
    }
    exec.synchronize()?;
    let (free_after, _) = d.memory_info()?;
    println!(
        "memory_nodes: device free memory {free_before} bytes before 10,000 launches of a graph \
         allocating and freeing {} bytes each, {free_after} after (total {total}; difference {} \
         bytes)",
        N * 4,
        free_before as i64 - free_after as i64
    );
    ensure!(
        free_before.saturating_sub(free_after) < N * 4,
        "free memory fell by {} bytes over 10,000 launches (scratch is {} bytes)",
        free_before - free_after,
        N * 4
    );
    assert_close(&y.to_vec()?, &reference(&xs, a), 1e-4)
}

register!(gpu "memory_nodes::auto_free_on_launch_frees_what_the_graph_does_not" => auto_free_on_launch);
/// An allocation without a free node: instantiation refuses it (naming the allocation node)
/// unless `auto_free_on_launch` is set; with it, three launches in a row work (CUDA frees the
/// last launch's memory before the next), the result is the CPU's, and dropping the `Exec`
/// frees the last launch's memory (no deferred error, memory back within the scratch size).
fn auto_free_on_launch(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let xs = input();
    let x = DeviceBuffer::from_slice(d, &xs)?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let (dag, _) = scratch_dag(gpu, &x, &y, 2.0, false)?;
    match dag.instantiate(d) {
        Err(Error::Dag(DagError::GraphMemory { node, problem })) => {
            ensure!(node == "scratch", "{node}: {problem}");
            ensure!(problem.contains("auto_free_on_launch"), "{problem}");
        }
        Err(e) => anyhow::bail!("expected a graph-memory error, got {e}"),
        Ok(_) => anyhow::bail!("an allocation never freed was instantiated without the flag"),
    }
    let (free_start, _) = d.memory_info()?;
    let flags = InstantiateFlags {
        auto_free_on_launch: true,
        ..InstantiateFlags::default()
    };
    let mut exec = dag.instantiate_with(d, flags, None)?;
    for _ in 0..3 {
        exec.launch(&gpu.stream)?;
    }
    exec.synchronize()?;
    assert_close(&y.to_vec()?, &reference(&xs, 2.0), 1e-4)?;
    drop(exec);
    gpu.stream.synchronize()?;
    let (free_end, _) = d.memory_info()?;
    println!("memory_nodes: free memory {free_start} bytes before the auto-free Exec, {free_end} after its drop");
    ensure!(
        free_start.saturating_sub(free_end) < N * 4,
        "the Exec's drop left {} bytes allocated",
        free_start - free_end
    );
    // The device is fine: an ordinary allocation and copy work.
    let z = DeviceBuffer::from_slice(d, &[1.0f32, 2.0])?;
    ensure!(z.to_vec()? == [1.0, 2.0]);
    Ok(())
}

register!(gpu "memory_nodes::a_graph_buffer_filled_by_memset_and_read_by_a_kernel" => memset_and_kernel);
/// One graph buffer filled by a memset node (1.5) and added into `y` by a kernel: two launches
/// add 3.0; the fill's value updated on the Exec to 2.5 (the node keeps the allocation's
/// address) adds 2.5 on the next launch.
fn memset_and_kernel(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [add] = kernels(gpu, ["add_into"])?;
    let xs = input();
    let y = DeviceBuffer::from_slice(d, &xs)?;
    let mut dag = Dag::new();
    let (alloc, s) = dag.add_alloc::<f32>(N)?;
    let fill = dag.add_graph_memset(&s, 1.5f32)?;
    let k = dag.add_kernel(
        &add,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&y, &s, N as i32],
    )?;
    let free = dag.add_free(&s)?;
    dag.chain(&[alloc, fill, k, free])?;
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?;
    exec.launch(&gpu.stream)?;
    exec.synchronize()?;
    let want: Vec<f32> = xs.iter().map(|v| v + 3.0).collect();
    assert_close(&y.to_vec()?, &want, 1e-5)?;
    exec.set_memset_value(fill, 2.5f32)?;
    gpu.launch_and_wait(&mut exec)?;
    let want: Vec<f32> = xs.iter().map(|v| v + 5.5).collect();
    assert_close(&y.to_vec()?, &want, 1e-5)
}

register!(gpu "memory_nodes::a_whole_graph_update_instantiates_again" => update_instantiates_again);
/// `Exec::update` of a graph with memory nodes is refused naming the allocation node;
/// `update_or_reinstantiate` instantiates the new DAG, whose launch gives the CPU's result.
fn update_instantiates_again(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let xs = input();
    let x = DeviceBuffer::from_slice(d, &xs)?;
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let (dag, _) = scratch_dag(gpu, &x, &y, 1.0, true)?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    assert_close(&y.to_vec()?, &reference(&xs, 1.0), 1e-4)?;
    // The same nodes (ids, kinds, edges) with another scale: a DAG of its own allocations.
    let (dag, _) = scratch_dag(gpu, &x, &y, 3.0, true)?;
    match exec.update(&dag) {
        Err(Error::UpdateRefused { node, .. }) => {
            ensure!(node.as_deref() == Some("scratch"), "{node:?}")
        }
        other => anyhow::bail!("expected a refused update, got {other:?}"),
    }
    ensure!(exec.update_or_reinstantiate(&dag)? == UpdateOutcome::Reinstantiated);
    gpu.launch_and_wait(&mut exec)?;
    assert_close(&y.to_vec()?, &reference(&xs, 3.0), 1e-4)
}
