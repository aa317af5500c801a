//! Experiment `while`: a loop run on the GPU by a WHILE conditional node, against the host
//! loop it replaces (launch the body graph, copy a flag to pinned memory, wait, read it, go
//! again), in µs per iteration, side by side in one run (issue 28).

use std::time::Instant;

use anyhow::{bail, Result};
use cudagraph::{args, Dag, DeviceBuffer, Exec, HostBuffer, Kernel, LaunchConfig, Module};

use crate::bench::{progress, Bench, BLOCK};
use crate::host::median;
use crate::report::{Report, Table};

/// The body's kernels. `work` is the bench's tiny kernel (one block adding 1 to a counter);
/// `decide` ends each iteration: it counts the iterations left down and sets the WHILE's
/// condition (`decide_cond`) or writes the flag the host reads (`decide_flag`).
const SOURCE: &str = r#"
extern "C" __global__ void work(unsigned* c) {
    if (threadIdx.x == 0) c[1] += 1u;
}
extern "C" __global__ void decide_cond(unsigned* c, cudaGraphConditionalHandle h) {
    if (threadIdx.x == 0) {
        unsigned left = --c[0];
        cudaGraphSetConditional(h, left > 0u ? 1u : 0u);
    }
}
extern "C" __global__ void decide_flag(unsigned* c, unsigned* flag) {
    if (threadIdx.x == 0) {
        unsigned left = --c[0];
        flag[0] = left > 0u ? 1u : 0u;
    }
}
extern "C" __global__ void start(unsigned* c, unsigned iterations) {
    if (threadIdx.x == 0) { c[0] = iterations; c[1] = 0u; }
}
"#;

/// Kernels per body (the last one decides).
const BODIES: [usize; 2] = [1, 10];
/// Iterations per loop.
const ITERATIONS: [u32; 2] = [100, 1_000];
/// Repetitions of each loop (after one warm-up), methods interleaved.
const REPS: usize = 7;

const WHILE: &str = "WHILE node (one graph launch)";
const HOST: &str = "host loop (body launch + flag read per iteration)";

struct Kernels {
    work: Kernel,
    cond: Kernel,
    flag: Kernel,
    start: Kernel,
}

/// `body - 1` work kernels then `decide`, chained, into `dag`.
fn body(
    dag: &mut Dag,
    k: &Kernels,
    kernels: usize,
    decide: cudagraph::NodeId,
    c: &DeviceBuffer<u32>,
) -> Result<()> {
    let one = LaunchConfig::new(1, BLOCK);
    let mut ids = Vec::with_capacity(kernels);
    for _ in 1..kernels {
        ids.push(dag.add_kernel(&k.work, one, &args![c])?);
    }
    ids.push(decide);
    dag.chain(&ids)?;
    Ok(())
}

/// The WHILE graph: `start` (counter = iterations), then the WHILE over the body.
fn while_graph(k: &Kernels, kernels: usize, iterations: u32, c: &DeviceBuffer<u32>) -> Result<Dag> {
    let one = LaunchConfig::new(1, BLOCK);
    let mut dag = Dag::new();
    let again = dag.conditional_handle(1);
    let mut b = Dag::new();
    let decide = b.add_kernel(&k.cond, one, &args![c, &again])?;
    body(&mut b, k, kernels, decide, c)?;
    let s = dag.add_kernel(&k.start, one, &args![c, iterations])?;
    let w = dag.add_while(&again, &b)?;
    dag.add_dependency(s, w)?;
    Ok(dag)
}

/// The host loop's body graph (the same kernels, `decide` writing a flag in device memory).
fn body_graph(
    k: &Kernels,
    kernels: usize,
    c: &DeviceBuffer<u32>,
    flag: &DeviceBuffer<u32>,
) -> Result<Dag> {
    let mut dag = Dag::new();
    let decide = dag.add_kernel(&k.flag, LaunchConfig::new(1, BLOCK), &args![c, flag])?;
    body(&mut dag, k, kernels, decide, c)?;
    Ok(dag)
}

/// Runs the WHILE graph once; returns the wall time and the counters.
fn run_while(b: &Bench, exec: &mut Exec, c: &DeviceBuffer<u32>) -> Result<(f64, [u32; 2])> {
    b.sync()?;
    let t = Instant::now();
    exec.launch(&b.stream)?;
    b.stream.synchronize()?;
    let us = t.elapsed().as_secs_f64() * 1e6;
    let v = c.to_vec()?;
    Ok((us, [v[0], v[1]]))
}

/// Runs the host loop until the flag says stop; returns the wall time, the counters and the
/// iterations it made.
fn run_host(
    b: &Bench,
    k: &Kernels,
    exec: &mut Exec,
    iterations: u32,
    c: &DeviceBuffer<u32>,
    flag: &DeviceBuffer<u32>,
    pinned: &mut HostBuffer<u32>,
) -> Result<(f64, [u32; 2], u32)> {
    b.sync()?;
    // The counter is set on the stream, as the WHILE graph's first node sets it.
    let mut init = Dag::new();
    init.add_kernel(&k.start, LaunchConfig::new(1, BLOCK), &args![c, iterations])?;
    let mut init = init.into_exec(&b.device)?;
    init.launch(&b.stream)?;
    b.stream.synchronize()?;
    let t = Instant::now();
    let mut made = 0u32;
    loop {
        exec.launch(&b.stream)?;
        flag.copy_to_host_async(pinned, &b.stream)?;
        b.stream.synchronize()?;
        made += 1;
        if pinned.read_with(|f| f[0])? == 0 || made > iterations {
            break;
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6;
    let v = c.to_vec()?;
    Ok((us, [v[0], v[1]], made))
}

/// µs per iteration of a WHILE node against the host loop, for bodies of 1 and 10 kernels
/// and 100 and 1,000 iterations.
pub fn while_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let module = Module::from_source(
        &b.device,
        &format!("{}{SOURCE}", cudagraph::CONDITIONAL_INCLUDE),
    )?;
    let k = Kernels {
        work: module.kernel("work")?,
        cond: module.kernel("decide_cond")?,
        flag: module.kernel("decide_flag")?,
        start: module.kernel("start")?,
    };
    let mut columns = Vec::new();
    for kernels in BODIES {
        for it in ITERATIONS {
            columns.push(format!(
                "{kernels} kernel{} x{it}",
                if kernels == 1 { "" } else { "s" }
            ));
        }
    }
    let mut t = Table::configs(
        "while-loop",
        "WHILE node against a host loop: wall time per iteration",
        &format!(
            "A loop of a body of 1 or 10 one-block kernels (the last counts the iterations \
             left down), 100 or 1,000 iterations. WHILE node: one `Exec` (a kernel setting \
             the count, then the WHILE whose last body kernel sets the condition with \
             `cudaGraphSetConditional`), launched once and waited for. Host loop: the body as \
             an `Exec` (its last kernel writes a flag), launched, the flag copied to pinned \
             memory on the stream, the stream synchronised and the flag read, until it says \
             stop. Wall time (`Instant`) from the launch to the end of the wait, divided by \
             the iterations; the median of {REPS} repetitions, methods interleaved. Both are \
             checked to run exactly the iterations asked, every body kernel each time."
        ),
        columns,
        "iteration",
    );
    let r_while = t.row(WHILE, Some(HOST));
    let r_host = t.row(HOST, None);
    let c = DeviceBuffer::<u32>::zeros(&b.device, 2)?;
    let flag = DeviceBuffer::<u32>::zeros(&b.device, 1)?;
    let mut pinned = HostBuffer::<u32>::zeros(&b.device, 1)?;
    let mut ci = 0;
    for kernels in BODIES {
        for iterations in ITERATIONS {
            let mut w = while_graph(&k, kernels, iterations, &c)?.into_exec(&b.device)?;
            let mut h = body_graph(&k, kernels, &c, &flag)?.into_exec(&b.device)?;
            let want = [0, iterations * (kernels as u32 - 1)];
            let (mut sw, mut sh) = (Vec::new(), Vec::new());
            for rep in 0..=REPS {
                let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
                for m in order {
                    if m == 0 {
                        let (us, got) = run_while(b, &mut w, &c)?;
                        if got != want {
                            bail!("WHILE, {kernels} kernels x{iterations}: counters {got:?}, expected {want:?}");
                        }
                        if rep > 0 {
                            sw.push(us / iterations as f64);
                        }
                    } else {
                        let (us, got, made) =
                            run_host(b, &k, &mut h, iterations, &c, &flag, &mut pinned)?;
                        if got != want || made != iterations {
                            bail!(
                                "host loop, {kernels} kernels x{iterations}: {made} iterations, \
                                 counters {got:?}, expected {want:?}"
                            );
                        }
                        if rep > 0 {
                            sh.push(us / iterations as f64);
                        }
                    }
                }
            }
            t.set(r_while, ci, median(&mut sw));
            t.set(r_host, ci, median(&mut sh));
            progress(&format!("while: body of {kernels} x{iterations}"), t_start);
            ci += 1;
        }
    }
    let ratios: Vec<String> = (0..t.ns.len())
        .filter_map(|i| Some(format!("{} {:.2}x", t.column(i), t.ratio(r_while, i)?)))
        .collect();
    report.info(
        "WHILE node vs host loop (time per iteration, lower is better)".into(),
        ratios.join(", "),
    );
    report.table(t);
    Ok(())
}
