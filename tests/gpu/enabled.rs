//! GPU tests of the enabled flag (issue 26, defect 3): what `Exec::dag` and `Exec::to_dot` say
//! is what CUDA runs. A DAG with nodes disabled (taken from an `Exec`) instantiates with them
//! disabled; a whole-graph update keeps each node's state (as `cudaGraphExecUpdate` does),
//! whatever the flags of the new DAG; a fallback re-instantiation keeps them too.

use anyhow::ensure;
use cudagraph::{args, Dag, DeviceBuffer, Exec, LaunchConfig, NodeId, Region, UpdateOutcome};

use crate::common::Gpu;

/// `[a, b, c]` of the three counters after a launch and wait.
fn run(gpu: &Gpu, exec: &mut Exec, bufs: &[&DeviceBuffer<u32>; 3]) -> anyhow::Result<[u32; 3]> {
    gpu.launch_and_wait(exec)?;
    Ok([
        bufs[0].to_vec()?[0],
        bufs[1].to_vec()?[0],
        bufs[2].to_vec()?[0],
    ])
}

fn is_enabled(exec: &Exec, id: NodeId) -> anyhow::Result<bool> {
    Ok(exec.dag().node(id)?.is_enabled())
}

register!(gpu "enabled::flags_survive_instantiation_update_and_reinstantiation" => flags_survive);
/// Kernel `a` (+1 on its counter), kernel `b` (+1 on its counter), captured memset `m` (its
/// counter's bytes to 0x01). `b` and `m` are disabled by an `Exec`, whose DAG is instantiated
/// again; then updates, a re-instantiation, and an update of an all-enabled `Exec` with that DAG.
fn flags_survive(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let (ca, cb, cm) = (
        DeviceBuffer::<u32>::zeros(d, 1)?,
        DeviceBuffer::<u32>::zeros(d, 1)?,
        DeviceBuffer::<u32>::zeros(d, 1)?,
    );
    let bufs = [&ca, &cb, &cm];
    let region = Region::from(&cm);
    let fill = move |s: &cudagraph::CaptureStream<'_>| {
        // SAFETY: the region is of a live buffer the node keeps; the memset is stream-ordered.
        unsafe {
            cudagraph::result::runtime::memset_async(
                region.addr() as *mut std::ffi::c_void,
                0x01,
                region.len_bytes(),
                s.raw(),
            )
        }
    };
    let mut dag = Dag::new();
    let a = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&ca])?;
    let b = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&cb])?;
    // SAFETY: the work only enqueues a memset of `cm`, which is declared in `uses`.
    let m = unsafe { dag.add_captured("memset cm to 0x01 bytes", [Region::from(&cm)], fill) };
    dag.chain(&[a, b, m])?;

    // Disabled by an Exec (never launched); its DAG carries the flags.
    let mut first = dag.instantiate(d)?;
    first.set_enabled(b, false)?;
    first.set_enabled(m, false)?;
    let disabled = first.dag().clone();
    drop(first);
    ensure!(!disabled.node(b)?.is_enabled() && !disabled.node(m)?.is_enabled());

    // Instantiated with the flags: `b` and `m` do not run.
    let mut exec = disabled.instantiate(d)?;
    let got = run(gpu, &mut exec, &bufs)?;
    ensure!(
        got == [1, 0, 0],
        "instantiated with b and m disabled: {got:?}"
    );

    // An update with the all-enabled DAG: CUDA keeps the nodes disabled, and so does the Exec.
    exec.update(&dag)?;
    ensure!(
        !is_enabled(&exec, b)? && !is_enabled(&exec, m)? && is_enabled(&exec, a)?,
        "after an update, the Exec reports the flags of the DAG it was given"
    );
    ensure!(exec.to_dot().contains("dashed"), "{}", exec.to_dot());
    let got = run(gpu, &mut exec, &bufs)?;
    ensure!(got == [2, 0, 0], "after the update: {got:?}");

    // Refused (one more node): instantiated again, with the Exec's flags.
    let mut more = dag.clone();
    more.add_empty();
    ensure!(exec.update_or_reinstantiate(&more)? == UpdateOutcome::Reinstantiated);
    ensure!(
        !is_enabled(&exec, b)? && !is_enabled(&exec, m)?,
        "re-instantiation reports b or m enabled"
    );
    let got = run(gpu, &mut exec, &bufs)?;
    ensure!(
        got == [3, 0, 0],
        "after re-instantiation (b and m must stay disabled): {got:?}"
    );

    // The other way round: an all-enabled Exec updated with the DAG whose flags say disabled
    // keeps running every node, and says so.
    let mut all = dag.instantiate(d)?;
    all.update(&disabled)?;
    ensure!(
        is_enabled(&all, b)? && is_enabled(&all, m)?,
        "after an update with disabled flags, the Exec reports them while CUDA runs the nodes"
    );
    ensure!(!all.to_dot().contains("dashed"), "{}", all.to_dot());
    let got = run(gpu, &mut all, &bufs)?;
    ensure!(got == [4, 1, 0x0101_0101], "all enabled: {got:?}");
    Ok(())
}
