//! GPU tests of conditional nodes (issue 28): an IF that skips work, IF/ELSE and SWITCH picking
//! their branch, a WHILE iterating a data-dependent number of times, and a conditional nested
//! in a WHILE's body; each launched more than once (the handle is reset to its default at
//! every launch) and checked against the same computation on the CPU.

use anyhow::ensure;
use cudagraph::{args, Dag, DeviceBuffer, Kernel, LaunchConfig, CONDITIONAL_INCLUDE};

use crate::common::{assert_close, Gpu};

/// The kernels: `cudaGraphSetConditional` needs `<cuda_device_runtime_api.h>`
/// ([`CONDITIONAL_INCLUDE`]); `compile` adds the toolkit's include directory.
const SOURCE: &str = r#"
extern "C" __global__ void set_cond(cudaGraphConditionalHandle h, const unsigned int* v) {
    cudaGraphSetConditional(h, *v);
}
extern "C" __global__ void add_const(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
// One WHILE iteration: halves x[0], counts it, goes on while x[0] is above the threshold.
extern "C" __global__ void halve(float* x, unsigned int* iters, float threshold,
                                 cudaGraphConditionalHandle h) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        x[0] *= 0.5f;
        iters[0] += 1;
        cudaGraphSetConditional(h, x[0] > threshold ? 1u : 0u);
    }
}
// Counts an iteration of the outer WHILE (on while below `limit`); the inner IF runs on odd
// counts.
extern "C" __global__ void count_step(unsigned int* counter, unsigned int limit,
                                      cudaGraphConditionalHandle outer,
                                      cudaGraphConditionalHandle inner) {
    unsigned int c = ++counter[0];
    cudaGraphSetConditional(outer, c < limit ? 1u : 0u);
    cudaGraphSetConditional(inner, c & 1u);
}
"#;

const N: usize = 1024;

fn kernels<const K: usize>(gpu: &Gpu, names: [&str; K]) -> anyhow::Result<[Kernel; K]> {
    let m = gpu.module(&format!("{CONDITIONAL_INCLUDE}{SOURCE}"))?;
    let mut out = Vec::with_capacity(K);
    for n in names {
        out.push(m.kernel(n)?);
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("one kernel per name")))
}

/// A DAG of one node adding `a` to every element of `x`.
fn adding(add: &Kernel, x: &DeviceBuffer<f32>, a: f32) -> anyhow::Result<Dag> {
    let mut d = Dag::new();
    d.add_kernel(
        add,
        LaunchConfig::for_elements(N as u32, 256),
        &args![x, a, N as i32],
    )?;
    Ok(d)
}

fn start() -> Vec<f32> {
    (0..N).map(|i| i as f32 * 0.25).collect()
}

register!(gpu "conditional::if_skips_its_body_when_the_kernel_says_so" => if_skips_its_body);
/// A kernel sets the IF's condition from a flag in device memory; the body adds 1. Flag 0: the
/// data is unchanged; flag 1: every element grew by 1; flag 0 again: unchanged again (the
/// condition's default, 0, does not leak from the launch before).
fn if_skips_its_body(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [set, add] = kernels(gpu, ["set_cond", "add_const"])?;
    let x = DeviceBuffer::from_slice(d, &start())?;
    let flag = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    let decide = dag.add_kernel(&set, LaunchConfig::new(1, 1), &args![&h, &flag])?;
    let i = dag.add_if(&h, &adding(&add, &x, 1.0)?)?;
    dag.add_dependency(decide, i)?;
    let mut exec = dag.instantiate(d)?;
    let mut want = start();
    for f in [0u32, 1, 0, 1, 1] {
        flag.copy_from_slice(&[f])?;
        gpu.launch_and_wait(&mut exec)?;
        if f != 0 {
            want.iter_mut().for_each(|v| *v += 1.0);
        }
        assert_close(&x.to_vec()?, &want, 0.0)?;
    }
    Ok(())
}

register!(gpu "conditional::if_else_and_switch_pick_their_branch" => if_else_and_switch_pick_their_branch);
/// IF/ELSE: then adds 10, else adds 20. SWITCH over 3 cases adding 100, 200, 300; a value
/// past the last case runs none. Every branch is taken at least once; compared with the CPU.
fn if_else_and_switch_pick_their_branch(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [set, add] = kernels(gpu, ["set_cond", "add_const"])?;
    let x = DeviceBuffer::from_slice(d, &start())?;
    let y = DeviceBuffer::from_slice(d, &start())?;
    let (flag, pick) = (
        DeviceBuffer::<u32>::zeros(d, 1)?,
        DeviceBuffer::<u32>::zeros(d, 1)?,
    );
    let mut dag = Dag::new();
    let c = dag.conditional_handle(0);
    let s = dag.conditional_handle(0);
    let set_c = dag.add_kernel(&set, LaunchConfig::new(1, 1), &args![&c, &flag])?;
    let ie = dag.add_if_else(&c, &adding(&add, &x, 10.0)?, &adding(&add, &x, 20.0)?)?;
    dag.add_dependency(set_c, ie)?;
    let set_s = dag.add_kernel(&set, LaunchConfig::new(1, 1), &args![&s, &pick])?;
    let cases = [
        adding(&add, &y, 100.0)?,
        adding(&add, &y, 200.0)?,
        adding(&add, &y, 300.0)?,
    ];
    let sw = dag.add_switch(&s, &cases)?;
    dag.add_dependency(set_s, sw)?;
    let mut exec = dag.instantiate(d)?;
    let (mut want_x, mut want_y) = (start(), start());
    for (f, p) in [(1u32, 0u32), (0, 1), (7, 2), (0, 3), (1, 1000)] {
        flag.copy_from_slice(&[f])?;
        pick.copy_from_slice(&[p])?;
        gpu.launch_and_wait(&mut exec)?;
        let dx = if f != 0 { 10.0 } else { 20.0 };
        want_x.iter_mut().for_each(|v| *v += dx);
        if p < 3 {
            let dy = 100.0 * (p + 1) as f32;
            want_y.iter_mut().for_each(|v| *v += dy);
        }
        assert_close(&x.to_vec()?, &want_x, 0.0)?;
        assert_close(&y.to_vec()?, &want_y, 0.0)?;
    }
    Ok(())
}

register!(gpu "conditional::while_iterates_a_data_dependent_number_of_times" => while_iterates);
/// A WHILE whose body halves a value until it is at most 1: the number of iterations depends
/// on the value, which the host changes between launches; counted on the GPU and compared
/// with the same loop on the CPU (halving is exact in binary floating point).
fn while_iterates(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [halve] = kernels(gpu, ["halve"])?;
    let x = DeviceBuffer::<f32>::zeros(d, 1)?;
    let iters = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1); // the first iteration always runs
    let mut body = Dag::new();
    body.add_kernel(
        &halve,
        LaunchConfig::new(1, 32),
        &args![&x, &iters, 1.0f32, &h],
    )?;
    dag.add_while(&h, &body)?;
    let mut exec = dag.instantiate(d)?;
    for v in [12345.0f32, 3.0, 0.5, 1.0e6, 2.0] {
        x.copy_from_slice(&[v])?;
        iters.copy_from_slice(&[0])?;
        gpu.launch_and_wait(&mut exec)?;
        let (mut cpu, mut n) = (v, 0u32);
        loop {
            cpu *= 0.5;
            n += 1;
            if cpu <= 1.0 {
                break;
            }
        }
        let (got_x, got_n) = (x.to_vec()?[0], iters.to_vec()?[0]);
        ensure!(
            got_n == n && got_x == cpu,
            "from {v}: {got_n} iterations ending at {got_x}, the CPU {n} ending at {cpu}"
        );
    }
    Ok(())
}

register!(gpu "conditional::an_if_nested_in_a_while" => an_if_nested_in_a_while);
/// A WHILE running `limit` iterations, whose body counts and sets two handles: its own (the
/// WHILE's, declared by the outer DAG) and an IF's declared by the body, which adds 1 on odd
/// counts. After a launch the data grew by the number of odd counts in 1..=limit.
fn an_if_nested_in_a_while(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [step, add] = kernels(gpu, ["count_step", "add_const"])?;
    let x = DeviceBuffer::from_slice(d, &start())?;
    let counter = DeviceBuffer::<u32>::zeros(d, 1)?;
    let limit = 7u32;
    let mut dag = Dag::new();
    let outer = dag.conditional_handle(1);
    let mut body = Dag::new();
    let inner = body.conditional_handle(0);
    let s = body.add_kernel(
        &step,
        LaunchConfig::new(1, 1),
        &args![&counter, limit, &outer, &inner],
    )?;
    let i = body.add_if(&inner, &adding(&add, &x, 1.0)?)?;
    body.add_dependency(s, i)?;
    dag.add_while(&outer, &body)?;
    let mut exec = dag.instantiate(d)?;
    let mut want = start();
    for _ in 0..2 {
        counter.copy_from_slice(&[0])?;
        gpu.launch_and_wait(&mut exec)?;
        let odd = (1..=limit).filter(|c| c % 2 == 1).count() as f32;
        want.iter_mut().for_each(|v| *v += odd);
        ensure!(
            counter.to_vec()?[0] == limit,
            "the loop ran {:?} times",
            counter.to_vec()?
        );
        assert_close(&x.to_vec()?, &want, 0.0)?;
    }
    Ok(())
}

register!(gpu "conditional::whole_graph_update_reaches_into_a_body" => whole_graph_update_reaches_into_a_body);
/// `Exec::update` with a DAG whose IF body adds another amount: the next launch adds that
/// (the body's kernel node is updated by `cudaGraphExecUpdate`; the handle stays the graph's).
fn whole_graph_update_reaches_into_a_body(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [set, add] = kernels(gpu, ["set_cond", "add_const"])?;
    let x = DeviceBuffer::from_slice(d, &start())?;
    let flag = DeviceBuffer::from_slice(d, &[1u32])?;
    let build = |a: f32| -> anyhow::Result<Dag> {
        let mut dag = Dag::new();
        let h = dag.conditional_handle(0);
        let decide = dag.add_kernel(&set, LaunchConfig::new(1, 1), &args![&h, &flag])?;
        let i = dag.add_if(&h, &adding(&add, &x, a)?)?;
        dag.add_dependency(decide, i)?;
        Ok(dag)
    };
    let mut exec = build(1.0)?.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    exec.update(&build(5.0)?)?;
    gpu.launch_and_wait(&mut exec)?;
    let want: Vec<f32> = start().iter().map(|v| v + 6.0).collect();
    assert_close(&x.to_vec()?, &want, 0.0)?;
    Ok(())
}
