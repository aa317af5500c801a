//! GPU tests of whole-graph updates of FFT nodes, at the top level and inside child graphs
//! (issue 26, defect 6), against rustfft with the tolerance of `fft.rs`.

use anyhow::ensure;
use cudagraph::{
    CallbackParams, Dag, DeviceBuffer, Direction, FftParams, FftPlan, FftPlanDesc, FftType,
    StoreCallback, UpdateOutcome,
};

use crate::common::Gpu;
use crate::fft::{check, ld_st, reference, signal, spec, to64, C32, C64};

register!(gpu "fft_update::child_graph_update_keeps_the_plans_also_after_a_refused_one" => child_graph_update);
/// FFT nodes in a child graph and in a child of a child: a whole-graph update with new store
/// scales makes no cuFFT plan and the results follow the new scales; an update that changes
/// the nested node's plan (CUDA refuses it: the child's topology changes; `refused` in the
/// name keeps the test out of the sanitizer runs) and falls back to a fresh instantiation
/// makes each plan once (the refused update's plan is taken over).
fn child_graph_update(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 512usize;
    let scaled = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_store(StoreCallback::Scale),
    )?;
    let plain = FftPlan::new(FftPlanDesc::new(FftType::C2C, &[n as i64], 1))?;
    let (x1, x2) = (signal(n, 21), signal(n, 22));
    let (a, b) = (
        DeviceBuffer::from_slice(d, &x1)?,
        DeviceBuffer::from_slice(d, &x2)?,
    );
    let (ya, yb) = (
        DeviceBuffer::<C32>::zeros(d, n)?,
        DeviceBuffer::<C32>::zeros(d, n)?,
    );
    let scale = |k: f32| ld_st(None, Some(CallbackParams::store(k)));
    // `k`: both store scales; `nested`: the plan of the child's child (scaled by `k` when it
    // has a store callback).
    let build = |k: f32, nested: &FftPlan| -> anyhow::Result<Dag> {
        let mut child = Dag::new();
        child.add_fft(spec(&scaled, Direction::Forward, &a, &ya, scale(k)))?;
        let mut inner = Dag::new();
        let p = if nested.desc().store.is_some() {
            scale(k)
        } else {
            FftParams::none()
        };
        inner.add_fft(spec(nested, Direction::Forward, &b, &yb, p))?;
        let mut middle = Dag::new();
        middle.add_child(&inner);
        let mut dag = Dag::new();
        dag.add_child(&child);
        dag.add_child(&middle);
        Ok(dag)
    };
    let times = |x: &[C32], k: f64| -> Vec<C64> {
        reference(&to64(x), n, false)
            .into_iter()
            .map(|c| c * k)
            .collect()
    };
    let mut exec = build(1.0, &scaled)?.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    check(&ya.to_vec()?, &times(&x1, 1.0), "child, before")?;
    check(&yb.to_vec()?, &times(&x2, 1.0), "nested child, before")?;

    let made = cudagraph::fft::plans_made();
    exec.update(&build(2.0, &scaled)?)?;
    ensure!(
        cudagraph::fft::plans_made() == made,
        "the update made {} cuFFT plans for unchanged FFT nodes in child graphs",
        cudagraph::fft::plans_made() - made
    );
    gpu.launch_and_wait(&mut exec)?;
    check(&ya.to_vec()?, &times(&x1, 2.0), "child, after the update")?;
    check(
        &yb.to_vec()?,
        &times(&x2, 2.0),
        "nested child, after the update",
    )?;
    // Twice: the second update reuses what the first kept.
    exec.update(&build(3.0, &scaled)?)?;
    ensure!(
        cudagraph::fft::plans_made() == made,
        "the second update made plans"
    );
    gpu.launch_and_wait(&mut exec)?;
    check(&ya.to_vec()?, &times(&x1, 3.0), "child, after two updates")?;

    let made = cudagraph::fft::plans_made();
    let outcome = exec.update_or_reinstantiate(&build(4.0, &plain)?)?;
    let want = match outcome {
        // The refused update made the nested plan; the fresh graph took it over and made the
        // child's (the old graph keeps its own until it is dropped).
        UpdateOutcome::Reinstantiated => 2,
        UpdateOutcome::Updated => 1,
    };
    ensure!(
        cudagraph::fft::plans_made() - made == want,
        "{outcome:?} made {} cuFFT plans, expected {want}",
        cudagraph::fft::plans_made() - made
    );
    ya.memset_bytes(0)?;
    yb.memset_bytes(0)?;
    gpu.launch_and_wait(&mut exec)?;
    check(&ya.to_vec()?, &times(&x1, 4.0), "child, after the fallback")?;
    check(
        &yb.to_vec()?,
        &times(&x2, 1.0),
        "nested child (no callback), after the fallback",
    )
}

register!(gpu "fft::whole_graph_update_keeps_unchanged_plans_and_survives_a_refused_one" => whole_graph_update);
/// A whole-graph update of a DAG of FFT nodes: unchanged plans are kept (no cuFFT plan is
/// made), new buffers and parameters take effect, a refused update leaves the graph working,
/// and per-node parameter updates still reach their nodes afterwards. (CUDA refuses an update
/// on purpose here: `refused` in the name keeps the test out of the sanitizer runs.)
fn whole_graph_update(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (256usize, 4usize);
    let m = n * batch;
    let scaled = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64).with_store(StoreCallback::Scale),
    )?;
    let plain = FftPlan::new(FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64))?;
    let (x1, x2) = (signal(m, 11), signal(m, 12));
    let (a, b) = (
        DeviceBuffer::from_slice(d, &x1)?,
        DeviceBuffer::from_slice(d, &x2)?,
    );
    let (ya, yb, z) = (
        DeviceBuffer::<C32>::zeros(d, m)?,
        DeviceBuffer::<C32>::zeros(d, m)?,
        DeviceBuffer::<C32>::zeros(d, m)?,
    );
    let build = |input: &DeviceBuffer<C32>, out: &DeviceBuffer<C32>, k: f32, second: &FftPlan| {
        let mut dag = Dag::new();
        let f = dag.add_fft(spec(
            &scaled,
            Direction::Forward,
            input,
            out,
            ld_st(None, Some(CallbackParams::store(k))),
        ))?;
        let p = if second.desc().store.is_some() {
            ld_st(None, Some(CallbackParams::store(1.0)))
        } else {
            FftParams::none()
        };
        let g = dag.add_fft(spec(second, Direction::Forward, input, &z, p))?;
        anyhow::Ok((dag, f, g))
    };
    let (first, f, _) = build(&a, &ya, 1.0, &scaled)?;
    let mut exec = first.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    check(&ya.to_vec()?, &reference(&to64(&x1), n, false), "before")?;

    let made = cudagraph::fft::plans_made();
    let (second, _, _) = build(&b, &yb, 2.0, &scaled)?;
    exec.update(&second)?;
    ensure!(
        cudagraph::fft::plans_made() == made,
        "the update made {} cuFFT plans for unchanged FFT nodes",
        cudagraph::fft::plans_made() - made
    );
    gpu.launch_and_wait(&mut exec)?;
    let want2: Vec<C64> = reference(&to64(&x2), n, false)
        .into_iter()
        .map(|c| c * 2.0)
        .collect();
    check(&yb.to_vec()?, &want2, "after the update")?;

    // A changed plan (no callback: no parameter node) changes the topology: CUDA refuses, and
    // the graph keeps working as it was.
    let (third, _, _) = build(&a, &ya, 3.0, &plain)?;
    let e = exec.update(&third).unwrap_err();
    ensure!(matches!(e, cudagraph::Error::UpdateRefused { .. }), "{e}");
    exec.set_fft_params(f, ld_st(None, Some(CallbackParams::store(4.0))))?;
    gpu.launch_and_wait(&mut exec)?;
    let want4: Vec<C64> = reference(&to64(&x2), n, false)
        .into_iter()
        .map(|c| c * 4.0)
        .collect();
    check(
        &yb.to_vec()?,
        &want4,
        "per-node update after a refused update",
    )?;
    // And a valid update after the refused one still keeps the plans.
    let made = cudagraph::fft::plans_made();
    exec.update(&first)?;
    ensure!(cudagraph::fft::plans_made() == made, "plans remade");
    gpu.launch_and_wait(&mut exec)?;
    check(
        &ya.to_vec()?,
        &reference(&to64(&x1), n, false),
        "back to the first",
    )
}
