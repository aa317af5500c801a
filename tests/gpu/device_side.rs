//! GPU tests of device-side work (issue 28): device-updatable kernel nodes (an earlier kernel
//! sets a later node's grid from data; a kernel disables a node and changes its argument),
//! graphs instantiated for device launch (run from the host; refused node kinds), a kernel
//! launching device graphs fire-and-forget and as a tail launch, and a device-launch
//! instantiation CUDA refuses, naming the node (a kernel using dynamic parallelism, which
//! validation cannot see). Each result is checked against the CPU.
//!
//! The last two need kernels linked with the device runtime (`CodeKind::DeviceRuntime`: NVRTC's
//! relocatable PTX and the toolkit's `libcudadevrt.a`, linked by the driver's JIT linker), and
//! fail as unsupported without the library.

use anyhow::ensure;
use cudagraph::{
    args, CodeKind, CompileOptions, Dag, DagError, DeviceBuffer, Error, InstantiateFlags, Kernel,
    LaunchConfig, Module, DEVICE_UPDATE_INCLUDE,
};

use crate::common::{assert_close, Gpu, Unsupported};

/// Kernels updating other nodes from the device (`<cuda_device_runtime_api.h>`).
pub const UPDATERS: &str = r#"
// Sets the grid of `next` to cover `n[0]` elements in blocks of 256.
extern "C" __global__ void size_next(cudaGraphDeviceNode_t next, const int* n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int blocks = (unsigned int)((n[0] + 255) / 256);
        cudaGraphKernelNodeSetGridDim(next, dim3(blocks, 1, 1));
    }
}
// Every thread of the grid marks its element: the grid's size is visible in the output.
extern "C" __global__ void mark(int* out, int value) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}
// Enables or disables `node` (flag[0]) and sets its float argument at byte offset 8 to a[0].
extern "C" __global__ void steer(cudaGraphDeviceNode_t node, const int* flag, const float* a) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cudaGraphKernelNodeSetEnabled(node, flag[0] != 0);
        float v = a[0];
        cudaGraphKernelNodeSetParam(node, 8, &v, sizeof(float));
    }
}
extern "C" __global__ void add_const(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
"#;

const N: usize = 4096;
/// The most blocks `mark` may be given (its output holds this many blocks of 256).
const MAX_BLOCKS: usize = 64;

/// `UPDATERS` as plain NVRTC output; should that not build, linked with the device runtime
/// instead (`CodeKind::DeviceRuntime`). Whether the device-side update calls need the device
/// runtime linked was not settled without a GPU (`cudaGraphSetConditional`, declared like
/// them, does not); the line printed says which build the test used.
fn updaters<const K: usize>(gpu: &Gpu, names: [&str; K]) -> anyhow::Result<[Kernel; K]> {
    let source = format!("{DEVICE_UPDATE_INCLUDE}{UPDATERS}");
    let m = match gpu.module(&source) {
        Ok(m) => {
            println!("device-side updates: plain NVRTC output (no device runtime linked)");
            m
        }
        Err(e) => {
            println!("plain NVRTC output refused ({e:#}); linking with the device runtime");
            let options = CompileOptions {
                name: "updaters.cu".into(),
                kind: CodeKind::DeviceRuntime,
                ..Default::default()
            };
            Module::from_source_with(&gpu.device, &source, &options)?
        }
    };
    let mut out = Vec::with_capacity(K);
    for n in names {
        out.push(m.kernel(n)?);
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("one kernel per name")))
}

register!(gpu "device_side::an_earlier_kernel_sets_a_later_nodes_grid_from_data" => sets_a_later_grid);
/// `size_next` reads `n` and sets the grid of `mark` (instantiated with 1 block) to
/// `ceil(n / 256)` blocks; `mark` writes 7 into one element per thread. After each launch
/// exactly `ceil(n / 256) * 256` elements are 7, the rest 0; `n` changes between launches
/// with no host update of the graph. Prints the grid each launch got.
fn sets_a_later_grid(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [size, mark] = updaters(gpu, ["size_next", "mark"])?;
    let out = DeviceBuffer::<i32>::zeros(d, MAX_BLOCKS * 256)?;
    let n = DeviceBuffer::<i32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let marker = dag.add_kernel(&mark, LaunchConfig::new(1, 256), &args![&out, 7i32])?;
    dag.set_name(marker, "mark");
    let handle = dag.device_node(marker)?;
    let sizer = dag.add_kernel(&size, LaunchConfig::new(1, 1), &args![&handle, &n])?;
    dag.set_name(sizer, "size_next");
    dag.add_dependency(sizer, marker)?;
    let mut exec = dag.instantiate(d)?;
    println!("   n      blocks  elements marked");
    for count in [1000i32, 5000, 256, 16_000, 1] {
        out.copy_from_slice(&vec![0; MAX_BLOCKS * 256])?;
        n.copy_from_slice(&[count])?;
        gpu.launch_and_wait(&mut exec)?;
        let got = out.to_vec()?;
        let blocks = (count as usize).div_ceil(256);
        let marked = got.iter().filter(|&&v| v == 7).count();
        println!("{count:>6}  {blocks:>6}  {marked:>8}");
        ensure!(
            marked == blocks * 256 && got[..blocks * 256].iter().all(|&v| v == 7),
            "n = {count}: {marked} elements marked, want the first {}",
            blocks * 256
        );
    }
    Ok(())
}

register!(gpu "device_side::a_kernel_disables_a_node_and_changes_its_argument" => disables_and_changes);
/// `steer` enables or disables `add_const` (on `x`) and sets its `a` argument from device
/// memory. Over the flags 1, 0, 1, 0, 1 with a = 1, 2, 3, 4, 5, x grows by 1 + 3 + 5 exactly
/// (a disabled launch adds nothing). Then a host update of the node's launch shape (which makes
/// the next launch upload the graph again) is followed by a launch that still obeys `steer`.
fn disables_and_changes(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [steer, add] = updaters(gpu, ["steer", "add_const"])?;
    let start: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let x = DeviceBuffer::from_slice(d, &start)?;
    let (flag, a) = (
        DeviceBuffer::<i32>::zeros(d, 1)?,
        DeviceBuffer::<f32>::zeros(d, 1)?,
    );
    let mut dag = Dag::new();
    let adder = dag.add_kernel(
        &add,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&x, 100.0f32, N as i32],
    )?;
    let handle = dag.device_node(adder)?;
    let steering = dag.add_kernel(&steer, LaunchConfig::new(1, 1), &args![&handle, &flag, &a])?;
    dag.add_dependency(steering, adder)?;
    let mut exec = dag.instantiate(d)?;
    let mut want = start.clone();
    for (f, v) in [(1, 1.0f32), (0, 2.0), (1, 3.0), (0, 4.0), (1, 5.0)] {
        flag.copy_from_slice(&[f])?;
        a.copy_from_slice(&[v])?;
        gpu.launch_and_wait(&mut exec)?;
        if f != 0 {
            want.iter_mut().for_each(|w| *w += v);
        }
        assert_close(&x.to_vec()?, &want, 0.0)?;
    }
    // A host-side update of the device-updatable node: the next launch uploads first.
    exec.set_launch_config(adder, LaunchConfig::for_elements(N as u32, 128))?;
    flag.copy_from_slice(&[1])?;
    a.copy_from_slice(&[0.5])?;
    gpu.launch_and_wait(&mut exec)?;
    want.iter_mut().for_each(|w| *w += 0.5);
    assert_close(&x.to_vec()?, &want, 0.0)?;
    // A whole-graph update is CUDA's to refuse for such a graph: refused, naming the node.
    match exec.update(&dag) {
        Err(Error::UpdateRefused { node, .. }) => {
            ensure!(node.is_some(), "the refusal names the node")
        }
        other => anyhow::bail!("a whole-graph update was not refused: {other:?}"),
    }
    Ok(())
}

register!(gpu "device_side::a_device_launch_graph_runs_from_the_host_and_refuses_other_kinds" => device_launch_from_the_host);
/// A DAG instantiated for device launch runs from the host too (CUDA uploads it at the
/// launch); a host node in such a DAG is refused before CUDA sees it, naming the node.
fn device_launch_from_the_host(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [add] = updaters(gpu, ["add_const"])?;
    let start: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let x = DeviceBuffer::from_slice(d, &start)?;
    let mut dag = Dag::new();
    dag.add_kernel(
        &add,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&x, 1.5f32, N as i32],
    )?;
    let flags = InstantiateFlags {
        device_launch: true,
        ..Default::default()
    };
    let mut exec = dag.instantiate_with(d, flags, None)?;
    gpu.launch_and_wait(&mut exec)?;
    let want: Vec<f32> = start.iter().map(|v| v + 1.5).collect();
    assert_close(&x.to_vec()?, &want, 0.0)?;
    let h = dag.add_host(|| {});
    dag.set_name(h, "callback");
    match dag.instantiate_with(d, flags, None) {
        Err(Error::Dag(DagError::WrongKind { node, .. })) => ensure!(node == "callback", "{node}"),
        Err(e) => anyhow::bail!("refused for another reason: {e}"),
        Ok(_) => anyhow::bail!("a host node was accepted in a device-launch graph"),
    }
    Ok(())
}

/// Kernels that need the device runtime linked in (`CodeKind::DeviceRuntime`).
pub const LAUNCHERS: &str = r#"
// Launches `fire` fire-and-forget and `tail` after this graph's environment completes.
extern "C" __global__ void launch_both(cudaGraphExec_t fire, cudaGraphExec_t tail) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cudaGraphLaunch(fire, cudaStreamGraphFireAndForget);
        cudaGraphLaunch(tail, cudaStreamGraphTailLaunch);
    }
}
__global__ void child(float* x) { x[threadIdx.x] += 1.0f; }
// Dynamic parallelism: CUDA refuses it in a graph instantiated for device launch.
extern "C" __global__ void spawn(float* x) {
    if (blockIdx.x == 0 && threadIdx.x == 0) child<<<1, 32>>>(x);
}
"#;

/// `LAUNCHERS` compiled by NVRTC as relocatable code and linked with the toolkit's
/// `libcudadevrt.a` by the driver's JIT linker (`CodeKind::DeviceRuntime`), loaded. Unsupported
/// (failing with the reason) without the library.
fn linked_launchers(gpu: &Gpu) -> anyhow::Result<Module> {
    let Some(devrt) = cudagraph::cudadevrt_path() else {
        return Err(Unsupported(
            "device-side graph launch needs the CUDA toolkit's libcudadevrt.a (set CUDA_PATH)"
                .into(),
        )
        .into());
    };
    println!("linking with {}", devrt.display());
    let options = CompileOptions {
        name: "launchers.cu".into(),
        kind: CodeKind::DeviceRuntime,
        ..Default::default()
    };
    Ok(Module::from_source_with(
        &gpu.device,
        &format!("{DEVICE_UPDATE_INCLUDE}{LAUNCHERS}"),
        &options,
    )?)
}

register!(gpu "device_side::a_kernel_launches_device_graphs_fire_and_forget_and_as_tail" => launches_device_graphs);
/// Two DAGs instantiated for device launch and handed over as device graphs: one adds 1 to x,
/// the other 2 to y. A host-launched graph's kernel launches the first fire-and-forget and the
/// second as a tail launch. After 3 launches of it, x grew by 3 and y by 6; reading x and y
/// waits for the launching graph (it counts the device graphs' buffers as its own).
fn launches_device_graphs(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let module = linked_launchers(gpu)?;
    let launch_both = module.kernel("launch_both")?;
    let [add] = updaters(gpu, ["add_const"])?;
    let start: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let (x, y) = (
        DeviceBuffer::from_slice(d, &start)?,
        DeviceBuffer::from_slice(d, &start)?,
    );
    let flags = InstantiateFlags {
        device_launch: true,
        ..Default::default()
    };
    let device_graph = |buf: &DeviceBuffer<f32>, a: f32| -> anyhow::Result<_> {
        let mut g = Dag::new();
        g.add_kernel(
            &add,
            LaunchConfig::for_elements(N as u32, 256),
            &args![buf, a, N as i32],
        )?;
        Ok(g.instantiate_with(d, flags, None)?
            .into_device_graph(&gpu.stream)?)
    };
    let fire = device_graph(&x, 1.0)?;
    let tail = device_graph(&y, 2.0)?;
    let mut parent = Dag::new();
    let l = parent.add_kernel(&launch_both, LaunchConfig::new(1, 1), &args![&fire, &tail])?;
    parent.set_name(l, "launch_both");
    // The parent's DAG keeps both graphs: the handles here may go.
    drop((fire, tail));
    let mut exec = parent.instantiate(d)?;
    for _ in 0..3 {
        exec.launch(&gpu.stream)?;
    }
    // No explicit wait: the reads wait for the parent's launches.
    let want_x: Vec<f32> = start.iter().map(|v| v + 3.0).collect();
    let want_y: Vec<f32> = start.iter().map(|v| v + 6.0).collect();
    assert_close(&x.to_vec()?, &want_x, 0.0)?;
    assert_close(&y.to_vec()?, &want_y, 0.0)?;
    exec.synchronize()?;
    Ok(())
}

register!(gpu "device_side::a_refused_device_launch_instantiation_names_the_node" => refused_instantiation_names_the_node);
/// A kernel using dynamic parallelism (`spawn` launches `child`) passes validation (the crate
/// cannot see what a kernel does), but CUDA refuses it in a graph instantiated for device launch
/// (`cudaGraphInstantiateNodeOperationNotSupported`); the error names that node, not its
/// neighbour. Prints the error.
fn refused_instantiation_names_the_node(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let module = linked_launchers(gpu)?;
    let spawn = module.kernel("spawn")?;
    let [add] = updaters(gpu, ["add_const"])?;
    let x = DeviceBuffer::<f32>::zeros(d, N)?;
    let mut dag = Dag::new();
    let first = dag.add_kernel(
        &add,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&x, 1.0f32, N as i32],
    )?;
    dag.set_name(first, "add");
    let s = dag.add_kernel(&spawn, LaunchConfig::new(1, 1), &args![&x])?;
    dag.set_name(s, "spawn");
    dag.add_dependency(first, s)?;
    // Validation accepts it: the crate cannot see what a kernel does.
    dag.validate(d)?;
    let flags = InstantiateFlags {
        device_launch: true,
        ..Default::default()
    };
    match dag.instantiate_with(d, flags, None) {
        Err(Error::Dag(DagError::Instantiate { node, problem })) => {
            println!("refused: node `{node}`: {problem}");
            ensure!(node == "spawn", "CUDA blamed `{node}`: {problem}");
        }
        Err(e) => anyhow::bail!("refused without naming the node: {e}"),
        Ok(_) => anyhow::bail!("CUDA instantiated a device-launch graph using dynamic parallelism"),
    }
    Ok(())
}
