//! No heap allocation per update or per launch, shown with a counting global allocator.
//!
//! The allocator (`tests/support/counting_alloc.rs`, also the GPU benchmark's) counts the allocations (`alloc`, `alloc_zeroed`, `realloc`) of the current
//! thread only, and only inside a measured section, so other test threads cannot disturb a
//! count. With `CUDAGRAPH_ALLOC_BACKTRACE=1` it prints a backtrace for every allocation it
//! counts, to find where one comes from.
//!
//! Host tests (run anywhere): building kernel arguments of up to 64 bytes and buffers, and
//! `Dag::set_kernel_args` with them, allocate nothing.
//!
//! GPU tests: after a first launch and `WARM_UP` warm-up iterations, every iteration of a loop
//! of `Exec::set_kernel_arg`, `Exec::set_kernel_args` or `Exec::launch` allocates nothing. (The
//! warm-up iterations are reported but not asserted on: the first updates that replace a
//! buffer argument grow, once, the lists that track buffers and what updates retired.) As in
//! `tests/gpu`, without a usable GPU they are reported as *ignored* with the reason, and fail
//! instead when `CUDAGRAPH_REQUIRE_GPU=1`.
//!
//! Custom harness (libtest-mimic), so that GPU tests can be ignored at run time.

use std::hint::black_box;

use anyhow::ensure;
use cudagraph::{
    args, Dag, DeviceBuffer, DeviceLimits, KernelArg, LaunchConfig, Module, NodeId,
    RecordingBackend,
};
use libtest_mimic::{Arguments, Trial};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::count;

/// Runs `iterations` measured iterations of `body`; fails naming those that allocated.
fn assert_no_alloc_per_iteration(
    what: &str,
    iterations: u32,
    mut body: impl FnMut(u32) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut offenders: Vec<(u32, u64)> = Vec::new();
    for i in 0..iterations {
        let (n, r) = count(|| body(i));
        r?;
        if n > 0 {
            offenders.push((i, n));
        }
    }
    ensure!(
        offenders.is_empty(),
        "{what}: {} of {iterations} iterations allocated (iteration, allocations): {:?}{}; \
         run with CUDAGRAPH_ALLOC_BACKTRACE=1 to see where",
        offenders.len(),
        &offenders[..offenders.len().min(8)],
        if offenders.len() > 8 { " ..." } else { "" }
    );
    Ok(())
}

// ---- host tests ----------------------------------------------------------------------------

/// The counter works: a box is one allocation, and so is a kernel argument over 64 bytes
/// (the documented heap case), while nothing outside a measured section is counted.
fn counter_counts() -> anyhow::Result<()> {
    let (n, b) = count(|| black_box(Box::new(black_box(7u64))));
    ensure!(n == 1, "a Box::new counted {n} allocations");
    drop(b);
    let (n, a) = count(|| KernelArg::from(black_box([7u8; 100])));
    ensure!(n >= 1, "a 100-byte kernel argument counted {n} allocations");
    drop(a);
    let _outside = black_box(vec![1u8; 10]);
    let (n, ()) = count(|| ());
    ensure!(n == 0, "an empty section counted {n}");
    Ok(())
}

/// A kernel with buffer and value parameters, made by a recording backend.
struct HostSetup {
    dag: Dag,
    id: NodeId,
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
}

fn host_setup() -> anyhow::Result<HostSetup> {
    let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    let a = rec.device_buffer::<f32>(256);
    let b = rec.device_buffer::<f32>(256);
    // (float* x, unsigned n, double scale, float* y, unsigned table[16])
    let k = rec.kernel("mixed", &[8, 4, 8, 8, 64]);
    let mut dag = Dag::new();
    let id = dag.add_kernel(
        &k,
        LaunchConfig::new(1, 32),
        &args![&a, 1u32, 1.0f64, &b, [0u32; 16]],
    )?;
    Ok(HostSetup { dag, id, a, b })
}

/// Values of up to 64 bytes and buffers make kernel arguments without allocating.
fn kernel_args_allocate_nothing() -> anyhow::Result<()> {
    let s = host_setup()?;
    assert_no_alloc_per_iteration("args![...]", 1000, |i| {
        let a = args![
            &s.a,
            i,
            i as f64,
            &s.b,
            [i; 16],
            i as u8,
            i as u16,
            i as u64,
            [i as u64; 8]
        ];
        black_box(&a);
        Ok(())
    })
}

/// `Dag::set_kernel_args`, arguments array included, allocates nothing.
fn dag_set_kernel_args_allocates_nothing() -> anyhow::Result<()> {
    let mut s = host_setup()?;
    let (id, a, b) = (s.id, &s.a, &s.b);
    assert_no_alloc_per_iteration("Dag::set_kernel_args", 1000, |i| {
        let (x, y) = if i % 2 == 0 { (b, a) } else { (a, b) };
        s.dag
            .set_kernel_args(id, &args![x, i, i as f64 * 0.5, y, [i; 16]])?;
        Ok(())
    })?;
    // The last update (i = 999, odd) is what the node holds.
    let node = s.dag.node(id)?;
    let cudagraph::dag::Op::Kernel(k) = node.op() else {
        anyhow::bail!("not a kernel node");
    };
    ensure!(k.arg_bytes(1) == 999u32.to_ne_bytes());
    ensure!(k.arg_bytes(2) == (999.0f64 * 0.5).to_ne_bytes());
    // SAFETY: the addresses are only compared, never used.
    let (pa, pb) = unsafe { (a.as_raw_ptr(), b.as_raw_ptr()) };
    ensure!(k.arg_bytes(0) == pa.to_ne_bytes());
    ensure!(k.arg_bytes(3) == pb.to_ne_bytes());
    Ok(())
}

// ---- GPU tests -----------------------------------------------------------------------------

// The one helper that decides whether a GPU test runs (shared with the GPU suite). Parts of it
// (shared kernels, float comparison) serve only the GPU suite.
#[allow(dead_code)]
#[path = "gpu/common.rs"]
mod common;
use common::{gpu_test, Gpu};

const TINY: &str = r#"
extern "C" __global__ void tiny(unsigned* c, unsigned v) { if (threadIdx.x == 0) c[0] += v; }
"#;

const NODES: usize = 4;
const ITERATIONS: u32 = 200;

/// A chain of `NODES` tiny kernels adding 1 to `c1`, instantiated and launched once.
struct GpuSetup {
    exec: cudagraph::Exec,
    ids: Vec<NodeId>,
    c1: DeviceBuffer<u32>,
    c2: DeviceBuffer<u32>,
}

fn gpu_setup(gpu: &Gpu) -> anyhow::Result<GpuSetup> {
    let d = &gpu.device;
    let m = Module::from_source(d, TINY)?;
    let tiny = m.kernel("tiny")?;
    let c1 = DeviceBuffer::<u32>::zeros(d, 1)?;
    let c2 = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let ids = (0..NODES)
        .map(|_| dag.add_kernel(&tiny, LaunchConfig::new(1, 32), &args![&c1, 1u32]))
        .collect::<cudagraph::Result<Vec<_>>>()?;
    dag.chain(&ids)?;
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?; // the first launch
    exec.synchronize()?;
    ensure!(
        c1.to_vec()? == [NODES as u32],
        "first launch: {:?}",
        c1.to_vec()?
    );
    c1.memset_bytes(0)?;
    d.synchronize()?;
    Ok(GpuSetup { exec, ids, c1, c2 })
}

/// Warm-up iterations before the measured ones: the first updates that swap buffers grow,
/// once each, the lists that track them (each buffer's use list, the `Exec`'s retired queue
/// and its allocation counts), and retirements while launches run take markers of the
/// launches so far from the launch stream's marker pool, which grows until it has as many
/// markers as can be held at once; that depends on how far the GPU runs behind the host (on
/// the H200, 4 warm-up iterations were once not enough). A launch itself records nothing.
const WARM_UP: u32 = 32;

/// Runs the warm-up iterations (reported, not asserted on), then the measured ones.
fn warm_then_measure(
    what: &str,
    mut body: impl FnMut(u32) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut warm = Vec::new();
    for i in 0..WARM_UP {
        let (n, r) = count(|| body(i));
        r?;
        warm.push(n);
    }
    eprintln!("{what}: the warm-up iterations made {warm:?} allocation(s)");
    assert_no_alloc_per_iteration(what, ITERATIONS, |i| body(i + WARM_UP))
}

fn exec_launch_allocates_nothing(gpu: &Gpu) -> anyhow::Result<()> {
    let mut s = gpu_setup(gpu)?;
    warm_then_measure("Exec::launch", |_| Ok(s.exec.launch(&gpu.stream)?))?;
    s.exec.synchronize()?;
    let want = (ITERATIONS + WARM_UP) * NODES as u32;
    ensure!(
        s.c1.to_vec()? == [want],
        "{:?}, want {want}",
        s.c1.to_vec()?
    );
    Ok(())
}

fn exec_set_kernel_arg_allocates_nothing(gpu: &Gpu) -> anyhow::Result<()> {
    let mut s = gpu_setup(gpu)?;
    let (exec, ids) = (&mut s.exec, &s.ids);
    warm_then_measure("Exec::set_kernel_arg + Exec::launch", |i| {
        for &id in ids {
            exec.set_kernel_arg(id, 1, i + 1)?;
        }
        Ok(exec.launch(&gpu.stream)?)
    })?;
    s.exec.synchronize()?;
    // Iteration i adds NODES * (i + 1), for i = 0..ITERATIONS + WARM_UP.
    let want = NODES as u32 * (1..=ITERATIONS + WARM_UP).sum::<u32>();
    ensure!(
        s.c1.to_vec()? == [want],
        "{:?}, want {want}",
        s.c1.to_vec()?
    );
    Ok(())
}

fn exec_set_kernel_args_allocates_nothing(gpu: &Gpu) -> anyhow::Result<()> {
    let mut s = gpu_setup(gpu)?;
    let (exec, ids, c1, c2) = (&mut s.exec, &s.ids, &s.c1, &s.c2);
    // Alternate the buffer too: even iterations add 1 to c2, odd ones 2 to c1.
    warm_then_measure("Exec::set_kernel_args + Exec::launch", |i| {
        for &id in ids {
            if i % 2 == 0 {
                exec.set_kernel_args(id, &args![c2, 1u32])?;
            } else {
                exec.set_kernel_args(id, &args![c1, 2u32])?;
            }
        }
        Ok(exec.launch(&gpu.stream)?)
    })?;
    s.exec.synchronize()?;
    let total = ITERATIONS + WARM_UP;
    let (even, odd) = (total.div_ceil(2), total / 2);
    let (w1, w2) = (2 * odd * NODES as u32, even * NODES as u32);
    ensure!(
        s.c1.to_vec()? == [w1] && s.c2.to_vec()? == [w2],
        "c1 {:?} (want {w1}), c2 {:?} (want {w2})",
        s.c1.to_vec()?,
        s.c2.to_vec()?
    );
    Ok(())
}

// ---- main ----------------------------------------------------------------------------------

fn host_test(name: &str, f: fn() -> anyhow::Result<()>) -> Trial {
    Trial::test(name, move || f().map_err(|e| format!("{e:#}").into()))
}

fn main() {
    counting_alloc::set_backtraces(
        std::env::var("CUDAGRAPH_ALLOC_BACKTRACE").is_ok_and(|v| v == "1"),
    );
    let args = Arguments::from_args();
    let trials = vec![
        host_test("host::counter_counts", counter_counts),
        host_test(
            "host::kernel_args_allocate_nothing",
            kernel_args_allocate_nothing,
        ),
        host_test(
            "host::dag_set_kernel_args_allocates_nothing",
            dag_set_kernel_args_allocates_nothing,
        ),
        gpu_test(
            "gpu::exec_launch_allocates_nothing",
            exec_launch_allocates_nothing,
        ),
        gpu_test(
            "gpu::exec_set_kernel_arg_allocates_nothing",
            exec_set_kernel_arg_allocates_nothing,
        ),
        gpu_test(
            "gpu::exec_set_kernel_args_allocates_nothing",
            exec_set_kernel_args_allocates_nothing,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
