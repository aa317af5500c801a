//! Updating an instantiated graph, one feature at a time.
//!
//! Each step changes something in the executable graph, launches it, reads every buffer back
//! and checks the result:
//!
//! 1. `set_kernel_arg`: one argument of a kernel node (a fill value);
//! 2. `set_kernel_args`: all arguments, switching the kernel to another buffer;
//! 3. `set_copy`: the source of a copy node;
//! 4. `set_launch_config`: a kernel node's grid and block;
//! 5. `set_memset_value`: the value a memset node writes;
//! 6. `set_host_fn`: a host node's closure;
//! 7. `set_enabled`: switching a kernel node off and on again;
//! 8. `Exec::update`: a whole-graph update from an edited `Dag`;
//! 9. refused updates: a new node (refused by the crate) and a new dependency (refused by CUDA);
//! 10. `update_or_reinstantiate`: falls back to a fresh instantiation, or updates in place.
//!
//! It needs a GPU; without one it says so and exits successfully.
//!
//! Run with `cargo run --example update_params`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use cudagraph::{
    args, dst, src, Dag, Device, DeviceBuffer, Error, Exec, HostBuffer, Kernel, LaunchConfig,
    Module, NodeId, Stream, UpdateOutcome,
};

const N: usize = 1024;

const KERNELS: &str = r#"
extern "C" __global__ void fill(float* out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
// Every thread adds one: the counter grows by the number of threads launched.
extern "C" __global__ void count_threads(unsigned int* counter) { atomicAdd(counter, 1u); }
"#;

/// What the graph refers to.
struct Resources {
    device: Device,
    stream: Stream,
    fill: Kernel,
    count: Kernel,
    /// Two buffers the `fill` kernel can write.
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    /// Where `download` copies to.
    h_out: HostBuffer<f32>,
    /// Thread counter of `count`.
    counter: DeviceBuffer<u32>,
    /// What `pad` fills.
    pad: DeviceBuffer<u32>,
    /// What the host node writes.
    tag: Arc<AtomicU32>,
}

/// The graph's nodes (the same ids in every DAG `build` makes).
struct Nodes {
    fill: NodeId,
    count: NodeId,
    pad: NodeId,
    download: NodeId,
    host: NodeId,
}

/// `fill` -> `download` -> `host`, with `count` and `pad` also before `host`. With
/// `extra_edge`, `pad` also comes before `fill`: the same nodes, one more dependency.
fn build(r: &Resources, extra_edge: bool) -> Result<(Dag, Nodes)> {
    let mut dag = Dag::new();
    let fill = dag.add_kernel(
        &r.fill,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&r.a, 1.0f32, N as i32],
    )?;
    let count = dag.add_kernel(&r.count, LaunchConfig::new(1, 32), &args![&r.counter])?;
    let pad = dag.add_memset(&r.pad, 5u32)?;
    let download = dag.add_copy(dst(&r.h_out), src(&r.a))?;
    let tag = r.tag.clone();
    let host = dag.add_host(move || tag.store(1, Ordering::SeqCst));
    dag.set_name(fill, "fill");
    dag.set_name(count, "count threads");
    dag.set_name(pad, "pad");
    dag.set_name(download, "download");
    dag.set_name(host, "tag");
    dag.add_dependency(fill, download)?;
    dag.fan_in(&[download, count, pad], host)?;
    if extra_edge {
        dag.add_dependency(pad, fill)?;
    }
    Ok((
        dag,
        Nodes {
            fill,
            count,
            pad,
            download,
            host,
        },
    ))
}

/// What every buffer should hold after a launch.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Expect {
    a: f32,
    b: f32,
    h_out: f32,
    counter: u32,
    pad: u32,
    tag: u32,
}

impl Expect {
    fn show(&self) -> String {
        format!(
            "a = {}, b = {}, downloaded = {}, threads counted = {}, pad = {}, tag = {}",
            self.a, self.b, self.h_out, self.counter, self.pad, self.tag
        )
    }
}

fn uniform<T: Copy + PartialEq + std::fmt::Debug>(what: &str, v: &[T]) -> Result<T> {
    let first = *v.first().with_context(|| format!("{what} is empty"))?;
    if let Some(i) = v.iter().position(|x| *x != first) {
        bail!(
            "{what} is not uniform: element 0 is {first:?}, element {i} is {:?}",
            v[i]
        );
    }
    Ok(first)
}

/// Launches once, waits, reads everything back and compares with `want`.
fn launch_and_check(exec: &mut Exec, r: &Resources, want: Expect) -> Result<()> {
    exec.launch(&r.stream)?;
    exec.synchronize()?;
    let got = Expect {
        a: uniform("a", &r.a.to_vec()?)?,
        b: uniform("b", &r.b.to_vec()?)?,
        h_out: uniform("the downloaded buffer", &r.h_out.to_vec()?)?,
        counter: r.counter.to_vec()?[0],
        pad: uniform("pad", &r.pad.to_vec()?)?,
        tag: r.tag.load(Ordering::SeqCst),
    };
    ensure!(
        got == want,
        "after the launch: {}\n           expected: {}",
        got.show(),
        want.show()
    );
    println!("   ok: {}", got.show());
    Ok(())
}

fn main() -> Result<()> {
    let device = match Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU found: {e}; this example needs one");
            return Ok(());
        }
    };
    println!("GPU 0: {}", device.properties().name);
    let module = Module::from_source(&device, KERNELS).context("compiling the kernels")?;
    let r = Resources {
        stream: Stream::new(&device)?,
        fill: module.kernel("fill")?,
        count: module.kernel("count_threads")?,
        a: DeviceBuffer::zeros(&device, N)?,
        b: DeviceBuffer::zeros(&device, N)?,
        h_out: HostBuffer::zeros(&device, N)?,
        counter: DeviceBuffer::zeros(&device, 1)?,
        pad: DeviceBuffer::zeros(&device, 16)?,
        tag: Arc::new(AtomicU32::new(0)),
        device,
    };
    let (mut dag, nodes) = build(&r, false)?;
    let mut exec = dag.instantiate(&r.device)?;
    let n = N as i32;

    println!("0. the graph as built: fill a with 1.0, download a, 32 threads, pad = 5, tag = 1");
    let mut want = Expect {
        a: 1.0,
        b: 0.0,
        h_out: 1.0,
        counter: 32,
        pad: 5,
        tag: 1,
    };
    launch_and_check(&mut exec, &r, want)?;

    println!("1. set_kernel_arg(fill, 1, 2.5): only the fill value changes");
    exec.set_kernel_arg(nodes.fill, 1, 2.5f32)?;
    want.a = 2.5;
    want.h_out = 2.5;
    want.counter += 32;
    launch_and_check(&mut exec, &r, want)?;
    // A wrong argument is refused, naming the node and the argument.
    let e = exec
        .set_kernel_arg(nodes.fill, 1, 2.5f64)
        .expect_err("an f64 for a float parameter");
    println!("   refused as expected: {e}");

    println!("2. set_kernel_args(fill, [&b, 7.0, n]): fill now writes b; a keeps 2.5");
    exec.set_kernel_args(nodes.fill, &args![&r.b, 7.0f32, n])?;
    want.b = 7.0;
    want.counter += 32;
    launch_and_check(&mut exec, &r, want)?;

    println!("3. set_copy(download, dst(h_out), src(b)): the download now reads b");
    exec.set_copy(nodes.download, dst(&r.h_out), src(&r.b))?;
    want.h_out = 7.0;
    want.counter += 32;
    launch_and_check(&mut exec, &r, want)?;

    println!("4. set_launch_config(count, 4 blocks x 64 threads): 256 threads per launch");
    exec.set_launch_config(nodes.count, LaunchConfig::new(4, 64))?;
    want.counter += 256;
    launch_and_check(&mut exec, &r, want)?;

    println!("5. set_memset_value(pad, 9)");
    exec.set_memset_value(nodes.pad, 9u32)?;
    want.pad = 9;
    want.counter += 256;
    launch_and_check(&mut exec, &r, want)?;

    println!("6. set_host_fn(tag, store 2)");
    let tag = r.tag.clone();
    exec.set_host_fn(nodes.host, move || tag.store(2, Ordering::SeqCst))?;
    want.tag = 2;
    want.counter += 256;
    launch_and_check(&mut exec, &r, want)?;

    println!("7. set_enabled(fill, false), with b zeroed beforehand: b stays 0");
    exec.set_enabled(nodes.fill, false)?;
    r.b.memset_bytes(0)?;
    r.device.synchronize()?;
    want.b = 0.0;
    want.h_out = 0.0;
    want.counter += 256;
    launch_and_check(&mut exec, &r, want)?;
    let dot = exec.to_dot();
    let line = dot
        .lines()
        .find(|l| l.contains("label=\"fill"))
        .context("the fill node in the DOT")?;
    ensure!(line.contains("dashed"), "a disabled node is dashed: {line}");
    println!("   in DOT the disabled node is dashed: {}", line.trim());
    println!("   set_enabled(fill, true): b is filled with 7.0 again");
    exec.set_enabled(nodes.fill, true)?;
    want.b = 7.0;
    want.h_out = 7.0;
    want.counter += 256;
    launch_and_check(&mut exec, &r, want)?;

    println!(
        "8. dag.set_kernel_args(fill, [&a, 3.0, n]) + dag.set_memset_value(pad, 11), then \
         exec.update(&dag):"
    );
    println!(
        "   every node takes the DAG's parameters, so the per-node changes above are undone \
         too (32 threads, download from a, tag = 1)"
    );
    dag.set_kernel_args(nodes.fill, &args![&r.a, 3.0f32, n])?;
    dag.set_memset_value(nodes.pad, 11u32)?;
    exec.update(&dag)?;
    want = Expect {
        a: 3.0,
        b: 7.0,
        h_out: 3.0,
        counter: want.counter + 32,
        pad: 11,
        tag: 1,
    };
    r.tag.store(0, Ordering::SeqCst);
    launch_and_check(&mut exec, &r, want)?;

    println!("9. refused updates leave the graph as it was:");
    let mut grown = dag.clone();
    let extra = grown.add_empty();
    grown.set_name(extra, "extra");
    grown.add_dependency(nodes.host, extra)?;
    match exec.update(&grown) {
        Err(e @ Error::UpdateRefused { .. }) => println!("   a new node: {e}"),
        Err(e) => return Err(e.into()),
        Ok(()) => bail!("an update adding a node was accepted"),
    }
    let (mut rewired, _) = build(&r, true)?;
    rewired.set_kernel_args(nodes.fill, &args![&r.a, 4.0f32, n])?;
    match exec.update(&rewired) {
        Err(e @ Error::UpdateRefused { .. }) => println!("   a new dependency: {e}"),
        Err(e) => return Err(e.into()),
        Ok(()) => bail!("an update adding a dependency was accepted"),
    }
    want.counter += 32;
    launch_and_check(&mut exec, &r, want)?;

    println!("10. update_or_reinstantiate(&rewired): CUDA refuses, so it instantiates again");
    let outcome = exec.update_or_reinstantiate(&rewired)?;
    ensure!(
        outcome == UpdateOutcome::Reinstantiated,
        "expected a reinstantiation, got {outcome:?}"
    );
    println!("   outcome: {outcome:?}");
    want.a = 4.0;
    want.h_out = 4.0;
    want.pad = 5;
    want.counter += 32;
    launch_and_check(&mut exec, &r, want)?;
    println!("    rewired.set_memset_value(pad, 6), update_or_reinstantiate: same topology");
    rewired.set_memset_value(nodes.pad, 6u32)?;
    let outcome = exec.update_or_reinstantiate(&rewired)?;
    ensure!(
        outcome == UpdateOutcome::Updated,
        "expected an in-place update, got {outcome:?}"
    );
    println!("   outcome: {outcome:?}");
    want.pad = 6;
    want.counter += 32;
    launch_and_check(&mut exec, &r, want)?;

    println!("\nOK: every update took effect in the launches after it, as checked above");
    Ok(())
}
