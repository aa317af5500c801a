//! Drop order (issue 26): the objects a queued GPU pipeline is made of can be dropped in any
//! order, on this thread or on others, while the pipeline's work is still queued, and nothing
//! breaks: no crash, no error deferred from a `Drop` and reported later, no sticky CUDA error,
//! and the queued work completes with the right result.
//!
//! The pipeline ([`pipeline`]), made on a device handle of its own (`Device::get(0)`, so that
//! the errors deferred to it are this test's only):
//!
//! - a module loaded from [`KERNELS`] and three kernels taken from it (`spin`, `axpy`, `scale`);
//! - a stream; device buffers `x` (zeros) and `y` (zeros); a pinned host buffer `h` holding `v`;
//! - a `Dag`: `spin` (or a blocking host node) → `axpy` (`y += a·x`) → copy `y` → `h` → copy
//!   `h` → `out`, where `out` is a device buffer the test keeps (the observable result);
//! - its `Exec`;
//! - queued on the stream, in this order: a stream launch of `spin` (~50–100 ms), `x` filled
//!   from `h` by a stream copy (markers in the use lists of both), [`LAUNCHES`] launches of the
//!   `Exec` with `a` = 1, 2, 3 set by `Exec::set_kernel_arg` between them (the driver path, which
//!   retains the device's primary context) and, in every other run ("sealed"), a stream launch
//!   of `scale(y, 1)` after them, which gives the latest launch its marker (otherwise the
//!   launch is the stream's tail, unmarked, when the drops begin: both paths of
//!   `ExecLaunches::so_far`).
//!
//! So `out` must end as `6·v` (1 + 2 + 3). The objects dropped are the seven [`Item`]s:
//! `Exec`, `Dag`, the device buffers, the pinned buffer, the stream, the module with its
//! kernels, and the `Device` handle. All 5,040 orders are too many; [`orders`] gives 14: the
//! construction order, its reverse, and each item dropped first and each dropped last (the
//! others in construction order). Each order runs on this thread, on one other thread, and with
//! each object dropped on a thread of its own.
//!
//! What each check would catch:
//!
//! - *the work is still queued when the drops begin* (an event recorded behind the stream spin
//!   has not completed): otherwise the test would test nothing; it fails rather than passing
//!   vacuously on a GPU fast enough to finish a 10⁸-cycle spin at once.
//! - *`out` is `6·v` right after the `Exec`'s drop returns* (read at once, with nothing else
//!   waited for: `out`'s use list names only the dropped `Exec`): an `Exec` whose `Drop` did
//!   not wait for its launches (the read, on the legacy stream, does not wait for the
//!   non-blocking stream) shows stale or partial data.
//!   Orders that drop the `Exec` before the `Dag` catch this even where CUDA's own calls
//!   would hide it (`cudaFree` synchronises on CUDA 13.0): the `Dag` still holds the buffers,
//!   so the `Exec`'s drop frees nothing.
//! - *`out` is `6·v` at the end*, with a device buffer of poison values allocated after each
//!   drop: memory freed while a launch still used it (an `Exec` that did not hold `x`, `y` or
//!   `h`, a buffer `Drop` that did not wait for its markers) may be handed to a poison buffer
//!   and read by the queued work, giving wrong values; without the reuse, compute-sanitizer
//!   reports the access to freed memory. A module unloaded under a queued launch of its kernel
//!   fails the launch (a sticky error, below).
//! - *no error from `Device::synchronize` on a handle of the pipeline's device kept to the
//!   end*: errors deferred from any `Drop` (a failed free, unload, destroy, or a wait that
//!   failed) are kept on that device and reported there, as are sticky CUDA errors (an illegal
//!   address in a launch that ran on freed memory, a launch of an unloaded kernel).
//! - *a drop on another thread panics or hangs*: the join fails (a panic), or the test never
//!   ends (a lock-order inversion between a drop and the queue's tail).
//!
//! [`while_a_host_node_is_blocked`] does the same with a host node at the head of the graph
//! that blocks until a gate is opened from another thread after the drops began: dropping
//! everything then cannot deadlock (the `Exec`'s drop waits for the host node; the gate's
//! opener needs nothing the dropping thread holds), and the drop returns only after the
//! closure finished. [`the_last_device_handle`] drops the pipeline device's last handle too
//! (with its retained primary context), with the observed buffer on the suite's device.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use cudagraph::{
    args, compile, dst, src, CompileOptions, Compiled, Dag, Device, DeviceBuffer, Event,
    HostBuffer, LaunchConfig, Module, Stream,
};

use crate::common::{Gpu, KERNELS};

/// About 50–100 ms of GPU time on one thread (the stream launch in front of the graphs).
const SPIN: i64 = 100_000_000;
/// The spin at the head of each graph launch.
const GRAPH_SPIN: i64 = SPIN / 2;
/// Elements of each buffer.
const N: usize = 1 << 16;
/// Graph launches queued per run (`a` = 1, 2, 3: `out` ends as 6·v).
const LAUNCHES: u32 = 3;
/// What the buffers allocated after each drop hold.
const POISON: f32 = -12_345.0;

/// One object (or group of objects dropped together) of the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    /// The pipeline's own `Device` handle (a clone of it is kept to check deferred errors,
    /// except in [`the_last_device_handle`]).
    Device,
    /// The `Module` and the three `Kernel`s taken from it.
    Module,
    /// The launch stream.
    Stream,
    /// `x` and `y`.
    DeviceBuffers,
    /// `h` (pinned).
    HostBuffer,
    /// The `Dag` the `Exec` was instantiated from.
    Dag,
    /// The `Exec`.
    Exec,
}

/// The construction order.
const BUILT: [Item; 7] = [
    Item::Device,
    Item::Module,
    Item::Stream,
    Item::DeviceBuffers,
    Item::HostBuffer,
    Item::Dag,
    Item::Exec,
];

/// The orders tried: construction order, its reverse, each item first and each item last (the
/// others in construction order); 14 distinct orders.
fn orders() -> Vec<Vec<Item>> {
    let mut all = vec![BUILT.to_vec(), BUILT.iter().rev().copied().collect()];
    for i in BUILT {
        let rest: Vec<Item> = BUILT.iter().copied().filter(|&j| j != i).collect();
        all.push(std::iter::once(i).chain(rest.iter().copied()).collect());
        all.push(rest.into_iter().chain(std::iter::once(i)).collect());
    }
    let mut unique: Vec<Vec<Item>> = Vec::new();
    for o in all {
        if !unique.contains(&o) {
            unique.push(o);
        }
    }
    unique
}

/// The kernels of [`KERNELS`], compiled once per test (each run loads its own module).
fn image(gpu: &Gpu) -> anyhow::Result<Compiled> {
    Ok(compile(
        Some(&gpu.device),
        KERNELS,
        &CompileOptions::default(),
    )?)
}

/// The head node of the pipeline's graph.
enum Head {
    /// A kernel spinning for [`GRAPH_SPIN`] cycles.
    Spin,
    /// A host node running this closure.
    Host(Box<dyn Fn() + Send + Sync>),
}

/// A pipeline with its work queued (see the module docs).
struct Pipeline {
    /// The objects to drop, in construction order.
    items: Vec<(Item, Box<dyn Any + Send>)>,
    /// Written by every launch; kept by the test.
    out: DeviceBuffer<f32>,
    /// Recorded behind the stream spin, before anything else: not complete means everything
    /// after it is still queued.
    before: Event,
    /// What `out` must end as.
    want: Vec<f32>,
}

/// Builds the pipeline on `dev` (moved into the [`Item::Device`] item), with `out` and `before`
/// on `observer`, and queues its work; `sealed` queues a stream kernel after the launches.
fn pipeline(
    dev: Device,
    observer: &Device,
    image: &Compiled,
    head: Head,
    sealed: bool,
) -> anyhow::Result<Pipeline> {
    let module = Module::load(&dev, &image.image, image.lowered_names.clone())?;
    let (spin, axpy, scale) = (
        module.kernel("spin")?,
        module.kernel("axpy")?,
        module.kernel("scale")?,
    );
    let s = Stream::new(&dev)?;
    let x = DeviceBuffer::<f32>::zeros(&dev, N)?;
    let y = DeviceBuffer::<f32>::zeros(&dev, N)?;
    let v: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 + 1.0).collect();
    let h = HostBuffer::from_slice(&dev, &v)?;
    let out = DeviceBuffer::<f32>::zeros(observer, N)?;
    let cfg = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let first = match head {
        Head::Spin => dag.add_kernel(&spin, LaunchConfig::new(1, 1), &args![GRAPH_SPIN])?,
        Head::Host(f) => dag.add_host(f),
    };
    let k = dag.add_kernel(&axpy, cfg, &args![&y, 0.0f32, &x, N as i32])?;
    let down = dag.add_copy(dst(&h), src(&y))?;
    let keep = dag.add_copy(dst(&out), src(&h))?;
    dag.chain(&[first, k, down, keep])?;
    let mut exec = dag.instantiate(&dev)?;

    spin.launch(&s, LaunchConfig::new(1, 1), &args![SPIN])?;
    let before = Event::new(observer)?;
    before.record(&s)?;
    x.copy_from_host_async(&h, &s)?;
    for a in 1..=LAUNCHES {
        exec.set_kernel_arg(k, 1, a as f32)?;
        exec.launch(&s)?;
    }
    if sealed {
        scale.launch(&s, cfg, &args![&y, 1.0f32, N as i32])?;
    }
    let factor = (LAUNCHES * (LAUNCHES + 1) / 2) as f32;
    let want = v.iter().map(|&e| factor * e).collect();
    let items: Vec<(Item, Box<dyn Any + Send>)> = vec![
        (Item::Device, Box::new(dev)),
        (Item::Module, Box::new((module, spin, axpy, scale))),
        (Item::Stream, Box::new(s)),
        (Item::DeviceBuffers, Box::new((x, y))),
        (Item::HostBuffer, Box::new(h)),
        (Item::Dag, Box::new(dag)),
        (Item::Exec, Box::new(exec)),
    ];
    Ok(Pipeline {
        items,
        out,
        before,
        want,
    })
}

/// `got == want`, or an error naming the first difference (and whether poison got in).
fn check(got: &[f32], want: &[f32]) -> anyhow::Result<()> {
    ensure!(
        got.len() == want.len(),
        "{} elements, not {}",
        got.len(),
        want.len()
    );
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        let wrong = (0..got.len()).filter(|&i| got[i] != want[i]).count();
        let poisoned = got.iter().any(|&g| g != 0.0 && g % POISON == 0.0);
        bail!(
            "element {i} is {}, not {} ({wrong} of {} wrong{})",
            got[i],
            want[i],
            got.len(),
            if poisoned {
                "; poison values among them: freed memory was reused under the queued work"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Where the drops happen.
#[derive(Clone, Copy, Debug)]
enum Where {
    /// On the test's thread.
    Here,
    /// All on one other thread (the objects moved there).
    OneThread,
    /// Each object on a thread of its own (spawned, then joined, one after the other).
    ThreadEach,
}

/// Drops `items` in `order`, calling `after` after each drop (on the dropping thread, except
/// with [`Where::ThreadEach`], where it runs here after the join).
fn drop_all(
    mut items: Vec<(Item, Box<dyn Any + Send>)>,
    order: &[Item],
    how: Where,
    mut after: impl FnMut(Item) -> anyhow::Result<()> + Send,
) -> anyhow::Result<()> {
    let mut go = move || -> anyhow::Result<()> {
        for &which in order {
            let i = items
                .iter()
                .position(|(it, _)| *it == which)
                .with_context(|| format!("{which:?} listed twice"))?;
            let (_, object) = items.swap_remove(i);
            match how {
                Where::ThreadEach => {
                    std::thread::spawn(move || drop(object))
                        .join()
                        .map_err(|_| {
                            anyhow::anyhow!("dropping {which:?} on its own thread panicked")
                        })?
                }
                Where::Here | Where::OneThread => drop(object),
            }
            after(which).with_context(|| format!("after dropping {which:?}"))?;
        }
        ensure!(items.is_empty(), "left undropped: {:?}", items.len());
        Ok(())
    };
    match how {
        Where::Here | Where::ThreadEach => go(),
        Where::OneThread => std::thread::scope(|scope| {
            scope
                .spawn(go)
                .join()
                .map_err(|_| anyhow::anyhow!("the dropping thread panicked"))?
        }),
    }
}

/// One pipeline dropped in `order` (see the module docs for what each check catches).
fn run(image: &Compiled, order: &[Item], how: Where, sealed: bool) -> anyhow::Result<()> {
    let dev = Device::get(0)?;
    let keep = dev.clone();
    let Pipeline {
        items,
        out,
        before,
        want,
    } = pipeline(dev, &keep, image, Head::Spin, sealed)?;
    ensure!(
        !before.query()?,
        "the work should still be queued when the drops begin (the stream spin of {SPIN} \
         cycles had already completed)"
    );
    let mut poison = Vec::new();
    let mut completed_after: Option<Item> = None;
    let result = drop_all(items, order, how, |which| {
        if which == Item::Exec {
            check(&out.to_vec()?, &want).context(
                "read right after the Exec's drop returned: its drop did not wait for its launches",
            )?;
        }
        // Freed memory, if any, may go to these while queued work still reads it.
        poison.push(DeviceBuffer::from_slice(&keep, &vec![POISON; N])?);
        if completed_after.is_none() && before.query()? {
            completed_after = Some(which);
        }
        Ok(())
    });
    // Where the queued work was seen complete, to read a failure by.
    let seen = match completed_after {
        Some(i) => format!("the stream spin was seen complete after dropping {i:?}"),
        None => "the stream spin was still running after the last drop".into(),
    };
    let ctx = || format!("order {order:?}, {how:?}, sealed {sealed}; {seen}");
    result.with_context(ctx)?;
    check(&out.to_vec()?, &want)
        .context("read after all drops")
        .with_context(ctx)?;
    keep.synchronize()
        .context("an error deferred from a Drop, or a sticky CUDA error")
        .with_context(ctx)?;
    drop(poison);
    keep.synchronize()
        .context("dropping the poison buffers")
        .with_context(ctx)?;
    Ok(())
}

/// Every order of [`orders`] on `how`, the stream kernel after the launches in every other run.
fn every_order(gpu: &Gpu, how: Where, offset: usize) -> anyhow::Result<()> {
    let image = image(gpu)?;
    for (n, order) in orders().iter().enumerate() {
        run(&image, order, how, (n + offset) % 2 == 1)?;
    }
    Ok(())
}

register!(gpu "drop_order::every_order_on_this_thread" => every_order_here);
/// The pipeline's seven objects dropped in each order of [`orders`] on the test's thread while
/// its spin, stream copy and three graph launches are queued; see the module docs for what
/// each check would catch.
fn every_order_here(gpu: &Gpu) -> anyhow::Result<()> {
    every_order(gpu, Where::Here, 0)
}

register!(gpu "drop_order::every_order_on_another_thread" => every_order_other_thread);
/// As [`every_order_here`], with all drops on one other thread (which also allocates the poison
/// buffers and reads `out` after the `Exec`'s drop); the "sealed" runs are the other half.
fn every_order_other_thread(gpu: &Gpu) -> anyhow::Result<()> {
    every_order(gpu, Where::OneThread, 1)
}

register!(gpu "drop_order::every_order_each_on_its_own_thread" => every_order_thread_each);
/// As [`every_order_here`], with each object dropped on a thread of its own, a fresh thread on
/// which no device was ever made current (a `Drop` that needed the device current, or that
/// panicked, fails here).
fn every_order_thread_each(gpu: &Gpu) -> anyhow::Result<()> {
    every_order(gpu, Where::ThreadEach, 0)
}

/// What the blocking host closure counts (see [`while_a_host_node_is_blocked`]).
#[derive(Default)]
struct HostCounts {
    entered: AtomicU32,
    finished: AtomicU32,
    /// Set by [`Witness`] when the closure was freed while a call of it was under way.
    freed_while_running: AtomicBool,
}

/// Owned by the host closure: its drop is the closure's.
struct Witness(Arc<HostCounts>);

impl Drop for Witness {
    fn drop(&mut self) {
        if self.0.entered.load(SeqCst) != self.0.finished.load(SeqCst) {
            self.0.freed_while_running.store(true, SeqCst);
        }
    }
}

register!(gpu "drop_order::while_a_host_node_is_blocked" => while_a_host_node_is_blocked);
/// The graph's head is a host node that blocks on a gate (60 s at most, so that a wrong wait
/// fails the test instead of hanging it); the test waits until the first launch's host node is
/// blocked in it, then drops the seven objects in each order of [`orders`], on this thread
/// (the gate opened 200 ms after the drops began by another thread) and on another thread (the
/// gate opened by this one). This does not deadlock by design: only the drops that free what a
/// launch uses wait (the `Exec`'s, or a buffer's or the module's last reference), they wait for
/// the GPU with no lock held, and the opener needs nothing the dropping thread holds.
///
/// Checked: the `Exec`'s drop returns only after the gate was opened and every launch's host
/// node finished (a drop that did not wait would return while the first call is blocked);
/// the closure is never freed while a call of it runs ([`Witness`]: an `Exec` or `Dag` that
/// freed its host closures early) and is freed in the end (not leaked: an `Exec`'s drop that
/// took its error path leaks its DAG); `out` is right and no error was deferred.
fn while_a_host_node_is_blocked(gpu: &Gpu) -> anyhow::Result<()> {
    let image = image(gpu)?;
    for (n, order) in orders().iter().enumerate() {
        for how in [Where::Here, Where::OneThread] {
            host_run(&image, order, how)
                .with_context(|| format!("order {n} {order:?}, drops {how:?}"))?;
        }
    }
    Ok(())
}

fn host_run(image: &Compiled, order: &[Item], how: Where) -> anyhow::Result<()> {
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let counts = Arc::new(HostCounts::default());
    let closure = {
        let (gate, counts) = (gate.clone(), counts.clone());
        let witness = Witness(counts.clone());
        move || {
            let _owned = &witness;
            counts.entered.fetch_add(1, SeqCst);
            let (open, cv) = &*gate;
            let guard = open.lock().unwrap_or_else(|p| p.into_inner());
            let (guard, _) = cv
                .wait_timeout_while(guard, Duration::from_secs(60), |o| !*o)
                .unwrap_or_else(|p| p.into_inner());
            drop(guard);
            counts.finished.fetch_add(1, SeqCst);
        }
    };
    let dev = Device::get(0)?;
    let keep = dev.clone();
    let Pipeline {
        items,
        out,
        before: _,
        want,
    } = pipeline(dev, &keep, image, Head::Host(Box::new(closure)), false)?;
    // Opens the gate when this function returns, whatever happened (declared after the
    // pipeline's objects, so dropped before them): no host node stays blocked for 60 s in the
    // `Exec`'s drop when a check below fails early.
    struct OpenOnReturn<'a>(&'a (Mutex<bool>, Condvar));
    impl Drop for OpenOnReturn<'_> {
        fn drop(&mut self) {
            *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.0 .1.notify_all();
        }
    }
    let _open_on_return = OpenOnReturn(&gate);
    let start = Instant::now();
    while counts.entered.load(SeqCst) == 0 {
        ensure!(
            start.elapsed() < Duration::from_secs(20),
            "the first launch's host node never ran"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let opened = AtomicBool::new(false);
    let open_gate = || {
        std::thread::sleep(Duration::from_millis(200));
        opened.store(true, SeqCst);
        *gate.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        gate.1.notify_all();
    };
    let (began, begun) = mpsc::channel::<()>();
    let after = |which: Item| -> anyhow::Result<()> {
        if which == Item::Exec {
            ensure!(
                opened.load(SeqCst),
                "the Exec's drop returned before the gate was opened (its host node was blocked)"
            );
            let done = counts.finished.load(SeqCst);
            ensure!(
                done == LAUNCHES,
                "the Exec's drop returned after {done} of {LAUNCHES} host node calls"
            );
            check(&out.to_vec()?, &want).context("read right after the Exec's drop")?;
        }
        Ok(())
    };
    let dropped = std::thread::scope(|scope| {
        let items_order = (items, order);
        match how {
            Where::OneThread => {
                let dropper = scope.spawn(move || {
                    began.send(()).ok();
                    drop_all(items_order.0, items_order.1, Where::Here, after)
                });
                begun
                    .recv_timeout(Duration::from_secs(20))
                    .context("the dropping thread never began")?;
                open_gate();
                dropper
                    .join()
                    .map_err(|_| anyhow::anyhow!("the dropping thread panicked"))?
            }
            Where::Here | Where::ThreadEach => {
                let opener = scope.spawn(move || {
                    if begun.recv_timeout(Duration::from_secs(20)).is_ok() {
                        open_gate();
                    }
                });
                began.send(()).ok();
                let r = drop_all(items_order.0, items_order.1, Where::Here, after);
                opener
                    .join()
                    .map_err(|_| anyhow::anyhow!("the gate's opener panicked"))?;
                r
            }
        }
    });
    dropped?;
    ensure!(
        !counts.freed_while_running.load(SeqCst),
        "the host closure was freed while a call of it was still running"
    );
    ensure!(
        Arc::strong_count(&counts) == 1,
        "the host closure was never freed (leaked with the DAG that held it)"
    );
    check(&out.to_vec()?, &want).context("read after all drops")?;
    keep.synchronize()
        .context("an error deferred from a Drop, or a sticky CUDA error")?;
    Ok(())
}

register!(gpu "drop_order::the_last_device_handle" => the_last_device_handle);
/// The pipeline made on a `Device` of its own with no clone kept, so that the last handle of
/// that device (and the primary context it retained for `Exec::set_kernel_arg`) goes with the
/// last object dropped, whichever it is; `out` and the probe event are on the suite's device.
/// Each order of [`orders`], alternately here and on another thread. Checked: `out` is right
/// after the `Exec`'s drop and at the end (as in [`every_order_here`]), and afterwards a fresh
/// handle of the same device still works through the driver path (a kernel-argument update,
/// which uses the primary context) and the runtime, with no error kept or sticky: a device
/// whose drop released the primary context more often than it retained it, or released it
/// while work was queued, breaks the context for everyone after it. (Errors deferred to the
/// dropped device are lost with it by design; nothing can report them.)
fn the_last_device_handle(gpu: &Gpu) -> anyhow::Result<()> {
    let image = image(gpu)?;
    for (n, order) in orders().iter().enumerate() {
        let how = if n % 2 == 0 {
            Where::Here
        } else {
            Where::OneThread
        };
        let ctx = || format!("order {n} {order:?}, drops {how:?}");
        let dev = Device::get(0)?;
        let Pipeline {
            items,
            out,
            before,
            want,
        } = pipeline(dev, &gpu.device, &image, Head::Spin, n % 4 < 2)?;
        ensure!(
            !before.query()?,
            "the work should still be queued when the drops begin"
        );
        drop_all(items, order, how, |which| {
            if which == Item::Exec {
                check(&out.to_vec()?, &want).context("read right after the Exec's drop")?;
            }
            Ok(())
        })
        .with_context(ctx)?;
        check(&out.to_vec()?, &want)
            .context("read after all drops")
            .with_context(ctx)?;
        probe(&image, n as f32).with_context(ctx)?;
    }
    Ok(())
}

/// A small graph on a fresh handle of device 0, its kernel argument updated through the driver
/// (the primary context), launched and read; then the device synchronised (deferred or sticky
/// errors).
fn probe(image: &Compiled, value: f32) -> anyhow::Result<()> {
    let d = Device::get(0)?;
    let module = Module::load(&d, &image.image, image.lowered_names.clone())?;
    let scale = module.kernel("scale")?;
    let x = DeviceBuffer::from_slice(&d, &[1.0f32; 256])?;
    let mut dag = Dag::new();
    let k = dag.add_kernel(
        &scale,
        LaunchConfig::new(1, 256),
        &args![&x, 0.0f32, 256i32],
    )?;
    let mut exec = dag.into_exec(&d)?;
    exec.set_kernel_arg(k, 1, value + 2.0)
        .context("the driver path after the last handle of a device was dropped")?;
    let s = Stream::new(&d)?;
    exec.launch(&s)?;
    exec.synchronize()?;
    ensure!(
        x.to_vec()?.iter().all(|&e| e == value + 2.0),
        "the probe graph computed {:?}",
        &x.to_vec()?[..4]
    );
    d.synchronize()
        .context("an error kept or sticky after the drops")?;
    Ok(())
}
