//! GPU tests of the cudarc interoperation (feature `cudarc`): a DAG over cudarc buffers, launched
//! on a cudarc stream, computes what the same kernels launched by cudarc compute; a cudarc
//! buffer the user let go of lives until the queued launch using it has run; contexts and
//! streams cudagraph cannot share are refused.

use std::sync::Arc;

use anyhow::{ensure, Context};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, PushKernelArg};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{args, dst, src, Dag, Device, DeviceBuffer, Error, Event, LaunchConfig, Stream};

use crate::common::{Gpu, KERNELS};

/// About 50–100 ms of GPU time on one thread.
const SPIN: i64 = 100_000_000;
const N: usize = 1 << 14;
const STEPS: usize = 3;

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let x = (0..N).map(|i| (i % 97) as f32 * 0.25).collect();
    let y = (0..N).map(|i| 1.0 + (i % 13) as f32).collect();
    (x, y)
}

/// `STEPS` times `y = b * (y + a * x)` with cudarc's own launches on `stream`.
fn cudarc_version(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    a: f32,
    b: f32,
) -> anyhow::Result<Vec<f32>> {
    let module = ctx.load_module(compile_ptx(KERNELS)?)?;
    let (axpy, scale) = (
        module.load_function("axpy")?,
        module.load_function("scale")?,
    );
    let (x, y) = inputs();
    let x: CudaSlice<f32> = stream.clone_htod(&x)?;
    let mut y: CudaSlice<f32> = stream.clone_htod(&y)?;
    let n = N as i32;
    let cfg = cudagraph::cudarc::driver::LaunchConfig::for_num_elems(N as u32);
    for _ in 0..STEPS {
        // SAFETY: `axpy(float*, float, const float*, int)` and `scale(float*, float, int)` of
        // KERNELS, given buffers of `n` floats.
        unsafe {
            stream
                .launch_builder(&axpy)
                .arg(&mut y)
                .arg(&a)
                .arg(&x)
                .arg(&n)
                .launch(cfg)?;
            stream
                .launch_builder(&scale)
                .arg(&mut y)
                .arg(&b)
                .arg(&n)
                .launch(cfg)?;
        }
    }
    Ok(stream.clone_dtoh(&y)?)
}

register!(gpu "cudarc::a_dag_over_cudarc_buffers_equals_the_cudarc_stream_version" => equals_the_stream_version);
/// The same kernels as a DAG over buffers cudarc allocated and filled, launched `STEPS` times on
/// a cudarc stream; the result read through cudagraph (waits for the launches) and, handed back,
/// through cudarc, equals cudarc's own launches'.
fn equals_the_stream_version(gpu: &Gpu) -> anyhow::Result<()> {
    let ctx = CudaContext::new(0)?;
    let cs = ctx.new_stream()?;
    let (a, b) = (0.5f32, 0.75f32);
    let want = cudarc_version(&ctx, &cs, a, b)?;

    let device = Device::from_cudarc(&ctx)?;
    ensure!(device == gpu.device, "one device for ordinal 0");
    let [axpy, scale] = gpu.kernels(["axpy", "scale"])?;
    let (x, y) = inputs();
    let x = DeviceBuffer::from_cudarc(cs.clone_htod(&x)?)?;
    let y = DeviceBuffer::from_cudarc(cs.clone_htod(&y)?)?;
    let cfg = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let k1 = dag.add_kernel(&axpy, cfg, &args![&y, a, &x, N as i32])?;
    let k2 = dag.add_kernel(&scale, cfg, &args![&y, b, N as i32])?;
    dag.add_dependency(k1, k2)?;
    let mut exec = dag.instantiate(&device)?;
    let stream = Stream::from_cudarc(&cs)?;
    for _ in 0..STEPS {
        exec.launch(&stream)?;
    }
    let got = y.to_vec()?; // waits for the launches
    ensure!(
        got == want,
        "cudagraph read: {:?} vs {:?}",
        &got[..4],
        &want[..4]
    );

    // Handed back to cudarc once nothing refers to it, and read through cudarc.
    let (y, e) = y
        .into_cudarc()
        .map(|_| ())
        .err()
        .context("refused while the DAG holds it")?;
    ensure!(matches!(e, Error::Cudarc { .. }), "{e}");
    drop((exec, dag));
    let y = y.into_cudarc().map_err(|(_, e)| e)?;
    ensure!(
        cs.clone_dtoh(&y)? == want,
        "cudarc read after the hand-back"
    );
    // A buffer of the crate's own cannot become a cudarc slice.
    let own = DeviceBuffer::<f32>::zeros(&device, 4)?;
    ensure!(
        own.into_cudarc().is_err(),
        "the crate's own buffer handed to cudarc"
    );
    drop(x);
    Ok(())
}

register!(gpu "cudarc::a_cudarc_buffer_dropped_while_a_launch_is_queued_is_kept_alive" => kept_alive);
/// A graph writes a cudarc buffer behind a long spin, then copies it out; the buffer (and the
/// DAG) are dropped while the launch is queued, and fresh cudarc buffers filled with poison are
/// allocated on another stream: the launch still writes and copies the right values, and
/// dropping the `Exec` (the last reference) returns only after the launch has run.
fn kept_alive(gpu: &Gpu) -> anyhow::Result<()> {
    let ctx = CudaContext::new(0)?;
    let cs = ctx.new_stream()?;
    let other = ctx.new_stream()?;
    let device = Device::from_cudarc(&ctx)?;
    let [spin, write] = gpu.kernels(["spin", "write_slot"])?;
    let slots = 256u32;
    let buf = DeviceBuffer::from_cudarc(cs.alloc_zeros::<u32>(slots as usize)?)?;
    let out = DeviceBuffer::<u32>::zeros(&device, slots as usize)?;
    let mut dag = Dag::new();
    let s = dag.add_kernel(&spin, LaunchConfig::new(1, 1), &args![SPIN])?;
    let mut prev = s;
    for i in 0..slots {
        let w = dag.add_kernel(&write, LaunchConfig::new(1, 1), &args![&buf, i, 7000 + i])?;
        dag.add_dependency(prev, w)?;
        prev = w;
    }
    let copy = dag.add_copy(dst(&out), src(&buf))?;
    dag.add_dependency(prev, copy)?;
    let mut exec = dag.instantiate(&device)?;
    let stream = Stream::from_cudarc(&cs)?;
    exec.launch(&stream)?;
    let after = Event::new(&device)?;
    after.record(&stream)?;
    ensure!(!after.query()?, "the spin should still be running");
    drop((buf, dag));
    let poison: Vec<CudaSlice<u32>> = (0..8)
        .map(|_| other.clone_htod(&vec![0xdead_beefu32; slots as usize]))
        .collect::<Result<_, _>>()?;
    ensure!(
        !after.query()?,
        "the launch should still be queued after the drops"
    );
    drop(exec); // the last reference: waits for the launch, then cudarc frees the buffer
    ensure!(
        after.query()?,
        "dropping the Exec returned before the launch using the buffer ran"
    );
    let want: Vec<u32> = (0..slots).map(|i| 7000 + i).collect();
    ensure!(out.to_vec()? == want, "the launch's writes were lost");
    for p in &poison {
        ensure!(
            other.clone_dtoh(p)?.iter().all(|&v| v == 0xdead_beef),
            "poison overwritten"
        );
    }
    Ok(())
}

register!(gpu "cudarc::contexts_and_streams_cudagraph_cannot_share_are_refused" => refused);
/// A non-primary context, its streams and its buffers, and the per-thread stream name are
/// refused with `Error::Cudarc`; the primary context's device is the crate's device.
fn refused(gpu: &Gpu) -> anyhow::Result<()> {
    let primary = CudaContext::new(0)?;
    ensure!(Device::from_cudarc(&primary)? == gpu.device);
    let cudarc_err = |r: cudagraph::Result<()>, what: &str| -> anyhow::Result<()> {
        match r {
            Err(Error::Cudarc { .. }) => Ok(()),
            other => anyhow::bail!("{what}: expected Error::Cudarc, got {other:?}"),
        }
    };
    cudarc_err(
        Stream::from_cudarc(&primary.per_thread_stream()).map(drop),
        "the per-thread stream",
    )?;
    Stream::from_cudarc(&primary.default_stream())?; // one stream: accepted
    let other = CudaContext::new_non_primary(0, 0)?;
    cudarc_err(
        Device::from_cudarc(&other).map(drop),
        "a non-primary context",
    )?;
    let s = other.new_stream()?;
    cudarc_err(
        Stream::from_cudarc(&s).map(drop),
        "a non-primary context's stream",
    )?;
    let slice = s.alloc_zeros::<f32>(16)?;
    cudarc_err(
        DeviceBuffer::from_cudarc(slice).map(drop),
        "a non-primary context's buffer",
    )?;
    Ok(())
}
