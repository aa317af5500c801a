//! GPU tests of the cudarc interoperation (feature `cudarc`): a DAG over cudarc buffers, launched
//! on a cudarc stream, computes what the same kernels launched by cudarc compute; a cudarc
//! buffer the user let go of lives until the queued launch using it has run; contexts and
//! streams cudagraph cannot share are refused.

use std::sync::Arc;

use anyhow::{ensure, Context};
use cudagraph::cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{
    args, dst, src, Dag, Device, DeviceBuffer, Error, Event, InOut, Kernel, LaunchConfig, Lend,
    Lent, ParamSource, Stream,
};

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

/// cudarc's own `axpy`, `scale`, `spin` and `write_slot` functions (from
/// `compile_ptx(KERNELS)`), as kernels whose layout is read from that PTX
/// (`Kernel::from_cudarc_image`: no driver call refused), and the functions themselves.
fn cudarc_kernels(ctx: &Arc<CudaContext>) -> anyhow::Result<([Kernel; 4], [CudaFunction; 4])> {
    let ptx = compile_ptx(KERNELS)?;
    let image = ptx
        .as_bytes()
        .context("compile_ptx gives an image")?
        .to_vec();
    let module = ctx.load_module(ptx)?;
    let functions = ["axpy", "scale", "spin", "write_slot"].map(|n| module.load_function(n));
    let [a, b, c, d] = functions;
    let functions = [a?, b?, c?, d?];
    let [a, b, c, d] = functions
        .each_ref()
        // SAFETY: `image` is the PTX the functions' module was loaded from.
        .map(|f| unsafe { Kernel::from_cudarc_image(ctx, f, &image) });
    Ok(([a?, b?, c?, d?], functions))
}

register!(gpu "cudarc::a_probed_layout_equals_the_one_its_ptx_declares" => probed_equals_declared);
/// `Kernel::from_cudarc` asks the driver for parameters until it refuses one (the refused call
/// is made on purpose here: `probe` in the name keeps the test out of the sanitizer runs);
/// `Kernel::from_cudarc_image` reads the PTX's declarations: the same layouts, for kernels
/// with pointers, scalars of every size and structs by value. The same PTX loaded as a
/// cudagraph `Module` gives the layout the cubin of the same source gives. An image that does
/// not declare the function is refused.
fn probed_equals_declared(gpu: &Gpu) -> anyhow::Result<()> {
    let ctx = CudaContext::new(0)?;
    let source = format!("{KERNELS}\n{}", crate::foundation::LAYOUTS);
    let ptx = compile_ptx(&source)?;
    let image = ptx
        .as_bytes()
        .context("compile_ptx gives an image")?
        .to_vec();
    let module = ctx.load_module(ptx)?;
    let from_cubin = gpu.module(&source)?;
    let from_ptx = cudagraph::Module::load(&gpu.device, &image, Default::default())?;
    for name in [
        "axpy",
        "scale",
        "spin",
        "write_slot",
        "mixed",
        "grid",
        "none",
        "big",
    ] {
        let f = module.load_function(name)?;
        let probed = Kernel::from_cudarc(&ctx, &f)?;
        // SAFETY: `image` is the PTX `module` was loaded from.
        let declared = unsafe { Kernel::from_cudarc_image(&ctx, &f, &image)? };
        let (cubin, ptx_kernel) = (from_cubin.kernel(name)?, from_ptx.kernel(name)?);
        ensure!(probed.param_source() == ParamSource::Probed);
        ensure!(declared.param_source() == ParamSource::Ptx);
        ensure!(ptx_kernel.param_source() == ParamSource::Ptx);
        ensure!(
            declared.params() == probed.params()
                && ptx_kernel.params() == cubin.params()
                && cubin.params() == probed.params(),
            "{name}: PTX {:?}, probed {:?}, cubin {:?}",
            declared.params(),
            probed.params(),
            cubin.params()
        );
    }
    let other = compile_ptx("extern \"C\" __global__ void other(int* p) { p[0] = 1; }")?;
    let other = other.as_bytes().context("an image")?.to_vec();
    // SAFETY: not `axpy`'s image, but it does not declare `axpy` at all: refused before any
    // layout is read from it.
    match unsafe { Kernel::from_cudarc_image(&ctx, &module.load_function("axpy")?, &other) } {
        Err(Error::Cudarc { problem, .. }) if problem.contains("axpy") => Ok(()),
        r => anyhow::bail!(
            "an image without the function: {:?}",
            r.map(|k| k.name().to_string())
        ),
    }
}

register!(gpu "cudarc::cudarc_functions_as_kernel_nodes_equal_the_cudarc_stream_version" => functions_as_nodes);
/// cudarc's compiled functions as kernel nodes (over the crate's buffers): the layout comes
/// from the PTX and is checked like the crate's kernels'; `STEPS` launches equal cudarc's
/// own launches; a per-node update of a value (the driver's update path for a function) and
/// a stream launch of the same kernel work; a wrong argument is refused naming the node.
fn functions_as_nodes(gpu: &Gpu) -> anyhow::Result<()> {
    let ctx = CudaContext::new(0)?;
    let cs = ctx.new_stream()?;
    let (a, b) = (0.5f32, 0.75f32);
    let want = cudarc_version(&ctx, &cs, a, b)?;
    let ([axpy, scale, ..], functions) = cudarc_kernels(&ctx)?;
    ensure!(axpy.name() == "axpy", "name {}", axpy.name());
    let sizes: Vec<usize> = axpy.params().iter().map(|p| p.size).collect();
    ensure!(
        sizes == [8, 4, 8, 4],
        "axpy's layout from the PTX: {sizes:?}"
    );
    drop(functions); // the kernels keep the functions (and their module) loaded
    let device = &gpu.device;
    let (x, y0) = inputs();
    let x = DeviceBuffer::from_slice(device, &x)?;
    let y = DeviceBuffer::from_slice(device, &y0)?;
    let cfg = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let k1 = dag.add_kernel(&axpy, cfg, &args![&y, a, &x, N as i32])?;
    let k2 = dag.add_kernel(&scale, cfg, &args![&y, b, N as i32])?;
    dag.add_dependency(k1, k2)?;
    match dag.add_kernel(&scale, cfg, &args![&y, b]) {
        Err(Error::KernelArgs { .. }) => {}
        other => anyhow::bail!("a missing argument: expected KernelArgs, got {other:?}"),
    }
    let mut exec = dag.instantiate(device)?;
    let stream = Stream::new(device)?;
    for _ in 0..STEPS {
        exec.launch(&stream)?;
    }
    ensure!(y.to_vec()? == want, "the DAG of cudarc functions");

    // A per-node update (the driver's kernel-node update, given the function), then the
    // same steps again from the start: scale by 1 instead of b.
    y.copy_from_slice(&y0)?;
    exec.set_kernel_arg(k2, 1, 1.0f32)?;
    for _ in 0..STEPS {
        exec.launch(&stream)?;
    }
    let want1 = cudarc_version(&ctx, &cs, a, 1.0)?;
    ensure!(y.to_vec()? == want1, "after the per-node update");

    // A stream launch of a cudarc function.
    y.copy_from_slice(&y0)?;
    scale.launch(&stream, cfg, &args![&y, 2.0f32, N as i32])?;
    let doubled: Vec<f32> = y0.iter().map(|v| v * 2.0).collect();
    ensure!(y.to_vec()? == doubled, "the stream launch");
    Ok(())
}

/// What the lent-slice tests share: a context that tracks events (two streams), the
/// launch stream `cs` and a `reader`, the kernels and cudarc's own result of `STEPS` steps
/// of `y = b * (y + a * x)`, and the slices `x` and `y` on `cs`.
struct Tracked {
    ctx: Arc<CudaContext>,
    cs: Arc<CudaStream>,
    reader: Arc<CudaStream>,
    want: Vec<f32>,
    kernels: [Kernel; 4],
    _functions: [CudaFunction; 4],
    xs: CudaSlice<f32>,
    ys: CudaSlice<f32>,
}

const A: f32 = 0.5;
const B: f32 = 0.75;

impl Tracked {
    fn new() -> anyhow::Result<Tracked> {
        let ctx = CudaContext::new(0)?;
        let (cs, reader) = (ctx.new_stream()?, ctx.new_stream()?);
        ensure!(
            ctx.is_managing_stream_synchronization(),
            "two streams: cudarc tracks events"
        );
        let want = cudarc_version(&ctx, &cs, A, B)?;
        let (kernels, _functions) = cudarc_kernels(&ctx)?;
        let (x0, y0) = inputs();
        let xs = cs.clone_htod(&x0)?;
        let ys = cs.clone_htod(&y0)?;
        Ok(Tracked {
            ctx,
            cs,
            reader,
            want,
            kernels,
            _functions,
            xs,
            ys,
        })
    }

    /// One step over lent `x` and `y` behind a long spin (so that an unordered read would see
    /// the old values): spin → axpy → scale; the axpy node too.
    fn step(&self, x: &Lent<f32>, y: &Lent<f32>) -> anyhow::Result<(Dag, cudagraph::NodeId)> {
        let [axpy, scale, spin, _] = &self.kernels;
        let cfg = LaunchConfig::for_elements(N as u32, 256);
        let mut dag = Dag::new();
        let s = dag.add_kernel(spin, LaunchConfig::new(1, 1), &args![SPIN])?;
        let k1 = dag.add_kernel(axpy, cfg, &args![InOut(y), A, x, N as i32])?;
        let k2 = dag.add_kernel(scale, cfg, &args![InOut(y), B, N as i32])?;
        dag.chain(&[s, k1, k2])?;
        Ok((dag, k1))
    }

    /// `ys` read through cudarc on `reader`, with no synchronise (cudarc's events order it),
    /// against cudarc's own result.
    fn check(&self, what: &str) -> anyhow::Result<()> {
        let got = self.reader.clone_dtoh(&self.ys)?;
        ensure!(
            got == self.want,
            "cudarc's read after {what}: {:?} vs {:?}",
            &got[..4],
            &self.want[..4]
        );
        Ok(())
    }
}

register!(gpu "cudarc::lent_cudarc_slices_in_a_graph_are_ordered_by_cudarc_events" => lent_slices);
/// Slices that stay cudarc's, lent to a DAG: `Exec::launch` refuses the graph; a launch
/// without the slice bound, or on a stream that is not cudarc's, is refused;
/// `launch_lent` on one cudarc stream, then a read through cudarc on another stream with no
/// synchronise, sees the graph's writes (queued behind a long spin, so an unordered read
/// would see the old values); the result equals cudarc's own launches.
fn lent_slices(gpu: &Gpu) -> anyhow::Result<()> {
    let mut t = Tracked::new()?;
    let (x, y) = (Lent::new(&t.xs)?, Lent::new(&t.ys)?);
    let (dag, _) = t.step(&x, &y)?;
    let device = Device::from_cudarc(&t.ctx)?;
    ensure!(device == gpu.device, "one device for ordinal 0");
    let mut exec = dag.instantiate(&device)?;
    let stream = Stream::from_cudarc(&t.cs)?;
    let refused = |r: cudagraph::Result<()>, what: &str| -> anyhow::Result<()> {
        match r {
            Err(Error::Cudarc { .. }) => Ok(()),
            other => anyhow::bail!("{what}: expected Error::Cudarc, got {other:?}"),
        }
    };
    refused(
        exec.launch(&stream),
        "Exec::launch of a graph with lent memory",
    )?;
    refused(
        exec.launch_lent(&stream, &mut [Lend::new(&mut t.ys)]),
        "x not bound",
    )?;
    refused(
        exec.launch_lent(
            &Stream::new(&device)?,
            &mut [Lend::new(&mut t.xs), Lend::new(&mut t.ys)],
        ),
        "a stream of the crate's own",
    )?;
    for _ in 0..STEPS {
        exec.launch_lent(&stream, &mut [Lend::new(&mut t.xs), Lend::new(&mut t.ys)])?;
    }
    // No synchronise: the read waits for the write event recorded after the last launch.
    t.check("launch_lent")
}

register!(gpu "cudarc::slices_bound_once_by_with_lent_serve_many_launches" => with_lent);
/// `Exec::with_lent`: the slices bound once, `STEPS` launches in the closure with a kernel
/// argument set before each (through `LentLaunches::exec`); after an update to a DAG over a
/// slice that is not bound, a launch is refused and launches nothing (the result would show
/// one step too many); back on the first DAG, the closure returns a value. A read through
/// cudarc on another stream with no synchronise sees the result of exactly `STEPS` steps,
/// equal to cudarc's own launches.
fn with_lent(gpu: &Gpu) -> anyhow::Result<()> {
    let mut t = Tracked::new()?;
    let zs: CudaSlice<f32> = t.cs.clone_htod(&inputs().0)?;
    let (x, y, z) = (Lent::new(&t.xs)?, Lent::new(&t.ys)?, Lent::new(&zs)?);
    let ((dag, k1), (over_z, _)) = (t.step(&x, &y)?, t.step(&z, &y)?);
    let mut exec = dag.instantiate(&gpu.device)?;
    let stream = Stream::from_cudarc(&t.cs)?;
    let mut unbound = None;
    let launched = exec.with_lent(
        &stream,
        &mut [Lend::new(&mut t.xs), Lend::new(&mut t.ys)],
        |l| {
            for _ in 0..STEPS {
                l.exec().set_kernel_arg(k1, 1, A)?;
                l.launch()?;
            }
            l.exec().update(&over_z)?;
            unbound = Some(l.launch());
            l.exec().update(&dag)?;
            Ok(STEPS)
        },
    )?;
    ensure!(launched == STEPS, "the closure's value comes back");
    match unbound {
        Some(Err(Error::Cudarc { problem, .. })) if problem.contains("no Lend contains") => {}
        other => {
            anyhow::bail!("a launch over an unbound slice: expected Error::Cudarc, got {other:?}")
        }
    }
    // No synchronise: the read waits for the write event recorded once, after the closure.
    t.check("with_lent")
}

register!(gpu "cudarc::a_lent_slice_dropped_while_a_launch_is_queued_is_freed_after_it" => lent_dropped);
/// A graph writes a lent slice behind a long spin and copies it to a buffer of the crate's;
/// the slice is dropped right after `launch_lent` (cudarc frees it on its stream after the
/// recorded write), and new cudarc slices filled with poison are allocated on another stream:
/// the copy still holds the graph's values and the poison is intact.
fn lent_dropped(gpu: &Gpu) -> anyhow::Result<()> {
    let ctx = CudaContext::new(0)?;
    let (cs, other) = (ctx.new_stream()?, ctx.new_stream()?);
    let ([_, _, spin, write], _functions) = cudarc_kernels(&ctx)?;
    let slots = 256u32;
    let mut slice = cs.alloc_zeros::<u32>(slots as usize)?;
    let lent = Lent::new(&slice)?;
    let out = DeviceBuffer::<u32>::zeros(&gpu.device, slots as usize)?;
    let mut dag = Dag::new();
    let mut prev = dag.add_kernel(&spin, LaunchConfig::new(1, 1), &args![SPIN])?;
    for i in 0..slots {
        let w = dag.add_kernel(&write, LaunchConfig::new(1, 1), &args![&lent, i, 9000 + i])?;
        dag.add_dependency(prev, w)?;
        prev = w;
    }
    let copy = dag.add_copy(dst(&out), src(&lent))?;
    dag.add_dependency(prev, copy)?;
    let mut exec = dag.instantiate(&gpu.device)?;
    let stream = Stream::from_cudarc(&cs)?;
    exec.launch_lent(&stream, &mut [Lend::new(&mut slice)])?;
    let after = Event::new(&gpu.device)?;
    after.record(&stream)?;
    drop(slice);
    let poison: Vec<CudaSlice<u32>> = (0..8)
        .map(|_| other.clone_htod(&vec![0xdead_beefu32; slots as usize]))
        .collect::<Result<_, _>>()?;
    ensure!(
        !after.query()?,
        "the launch should still be queued after the drop"
    );
    exec.synchronize()?;
    let want: Vec<u32> = (0..slots).map(|i| 9000 + i).collect();
    ensure!(out.to_vec()? == want, "the launch's writes were lost");
    for p in &poison {
        ensure!(
            other.clone_dtoh(p)?.iter().all(|&v| v == 0xdead_beef),
            "poison overwritten: the freed slice's memory was reused under the launch"
        );
    }
    Ok(())
}
