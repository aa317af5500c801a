//! GPU tests of DAGs: every node kind, every update path, queued-launch isolation, host-node
//! panics, keep-alive, a 10,000-node chain, CUDA's own DOT.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use anyhow::ensure;
use cudagraph::{
    args, dst, src, Copy2d, Dag, Device, DeviceBuffer, Error, Exec, HostBuffer, Kernel,
    LaunchConfig, Memset2d, Module, NodeId, Region, Stream, UpdateOutcome,
};

use crate::common::{assert_close, Gpu, KERNELS};

register!(gpu "dag::every_node_kind" => every_node_kind);
/// upload -> (scale, axpy from a child) fan-out/fan-in -> host -> download, plus memset,
/// D2D and empty nodes.
fn every_node_kind(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [scale, add] = gpu.kernels(["scale", "add"])?;
    let n = 4096usize;
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let h_in = HostBuffer::from_slice(d, &input)?;
    let h_out = HostBuffer::<f32>::zeros(d, n)?;
    let x = DeviceBuffer::<f32>::zeros(d, n)?;
    let y = DeviceBuffer::<f32>::zeros(d, n)?;
    let z = DeviceBuffer::<f32>::zeros(d, n)?;
    let cfg = LaunchConfig::for_elements(n as u32, 256);
    let calls = Arc::new(AtomicU32::new(0));

    let mut dag = Dag::new();
    let up = dag.add_copy(dst(&x), src(&h_in))?;
    let fill = dag.add_memset(&y, 1.0f32)?;
    let fork = dag.add_empty();
    let s = dag.add_kernel(&scale, cfg, &args![&x, 2.0f32, n as i32])?;
    // A child graph: z = copy of y, then z += y (so z = 2).
    let mut child = Dag::new();
    let c1 = child.add_copy(dst(&z), src(&y))?;
    let c2 = child.add_kernel(&add, cfg, &args![&z, &y, n as i32])?;
    child.add_dependency(c1, c2)?;
    let ch = dag.add_child(&child);
    let join = dag.add_kernel(&add, cfg, &args![&x, &z, n as i32])?; // x = 2i + 2
    let c = calls.clone();
    let host = dag.add_host(move || {
        c.fetch_add(1, Ordering::SeqCst);
    });
    let down = dag.add_copy(dst(&h_out), src(&x))?;
    dag.add_dependency(up, fork)?;
    dag.add_dependency(fill, fork)?;
    dag.fan_out(fork, &[s, ch])?;
    dag.fan_in(&[s, ch], join)?;
    dag.chain(&[join, host, down])?;

    let mut exec = dag.instantiate(d)?;
    for _ in 0..3 {
        exec.launch(&gpu.stream)?;
    }
    exec.synchronize()?;
    ensure!(
        calls.load(Ordering::SeqCst) == 3,
        "host node ran {:?}",
        calls
    );
    let want: Vec<f32> = input.iter().map(|v| 2.0 * v + 2.0).collect();
    assert_close(&h_out.to_vec()?, &want, 0.0)
}

register!(gpu "dag::pitched_copies_and_fills" => pitched_copies_and_fills);
fn pitched_copies_and_fills(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    // A 6x4 block of a 10-wide source matrix into an 8-wide destination at column 1.
    let (sw, dw, w, h) = (10usize, 8usize, 4usize, 6usize);
    let values: Vec<u32> = (0..(sw * h) as u32).collect();
    let s = DeviceBuffer::from_slice(d, &values)?;
    let target = DeviceBuffer::<u32>::zeros(d, dw * h)?;
    let host = HostBuffer::<u32>::zeros(d, dw * h)?;
    let mut dag = Dag::new();
    let fill = dag.add_memset_2d(Memset2d {
        dst: target.region(..),
        pitch: dw,
        width: dw,
        height: h,
        value: 7u32.into(),
    })?;
    let copy = dag.add_memcpy_2d(Copy2d {
        dst: target.region(1..),
        dst_pitch: dw,
        src: s.region(2..),
        src_pitch: sw,
        width: w,
        height: h,
    })?;
    let down = dag.add_copy(dst(&host), src(&target))?;
    dag.chain(&[fill, copy, down])?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let got = host.to_vec()?;
    for r in 0..h {
        for c in 0..dw {
            let want = if (1..1 + w).contains(&c) {
                values[r * sw + 2 + (c - 1)]
            } else {
                7
            };
            ensure!(
                got[r * dw + c] == want,
                "row {r} col {c}: {} vs {want}",
                got[r * dw + c]
            );
        }
    }
    Ok(())
}

register!(gpu "dag::kernel_updates_from_a_thread_without_a_device" => kernel_updates_from_a_thread_without_a_device);
/// Kernel-node updates name their context (the kernel's device's primary context) rather than
/// rely on the calling thread's: a thread that never made a device current updates an `Exec`,
/// in place (a value) and through the staged path (another buffer), and the launches after
/// see both. The kernel is loaded on a device handle of its own, so the first update, from that
/// thread, is also the one that retains the context.
fn kernel_updates_from_a_thread_without_a_device(_gpu: &Gpu) -> anyhow::Result<()> {
    let d = Device::get(0)?;
    let stream = Stream::new(&d)?;
    let write = Module::from_source(&d, KERNELS)?.kernel("write_slot")?;
    let a = DeviceBuffer::<u32>::zeros(&d, 4)?;
    let b = DeviceBuffer::<u32>::zeros(&d, 4)?;
    let mut dag = Dag::new();
    let w = dag.add_kernel(&write, LaunchConfig::new(1, 1), &args![&a, 0u32, 5u32])?;
    let mut exec = dag.instantiate(&d)?;
    let launch = |exec: &mut Exec| -> anyhow::Result<()> {
        exec.launch(&stream)?;
        exec.synchronize()?;
        Ok(())
    };
    // Scoped threads, fresh for each step: neither has made a device current.
    let updated = std::thread::scope(|t| {
        t.spawn(|| -> anyhow::Result<()> {
            exec.set_kernel_arg(w, 1, 2u32)?;
            exec.set_kernel_arg(w, 2, 6u32)?;
            Ok(())
        })
        .join()
    });
    updated.map_err(|_| anyhow::anyhow!("the updating thread panicked"))??;
    launch(&mut exec)?;
    ensure!(a.to_vec()? == [0, 0, 6, 0], "a = {:?}", a.to_vec()?);
    let updated = std::thread::scope(|t| {
        t.spawn(|| exec.set_kernel_args(w, &args![&b, 3u32, 8u32]))
            .join()
    });
    updated.map_err(|_| anyhow::anyhow!("the updating thread panicked"))??;
    launch(&mut exec)?;
    ensure!(b.to_vec()? == [0, 0, 0, 8], "b = {:?}", b.to_vec()?);
    ensure!(a.to_vec()? == [0, 0, 6, 0], "a changed: {:?}", a.to_vec()?);
    Ok(())
}

register!(gpu "dag::kernel_updates" => kernel_updates);
fn kernel_updates(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [write, scale] = gpu.kernels(["write_slot", "scale"])?;
    let a = DeviceBuffer::<u32>::zeros(d, 8)?;
    let b = DeviceBuffer::<u32>::zeros(d, 8)?;
    let f = DeviceBuffer::from_slice(d, &[1.0f32; 1000])?;
    let mut dag = Dag::new();
    let w = dag.add_kernel(&write, LaunchConfig::new(1, 1), &args![&a, 0u32, 5u32])?;
    let s = dag.add_kernel(
        &scale,
        LaunchConfig::new(1, 100),
        &args![&f, 2.0f32, 1000i32],
    )?;
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?;
    // One argument, then all of them (to another buffer), then the launch shape.
    exec.set_kernel_arg(w, 1, 3u32)?;
    exec.launch(&gpu.stream)?;
    exec.set_kernel_args(w, &args![&b, 7u32, 9u32])?;
    exec.launch(&gpu.stream)?;
    exec.set_launch_config(s, LaunchConfig::new(10, 100))?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(
        a.to_vec()? == [5, 0, 0, 5, 0, 0, 0, 0],
        "a = {:?}",
        a.to_vec()?
    );
    ensure!(
        b.to_vec()? == [0, 0, 0, 0, 0, 0, 0, 9],
        "b = {:?}",
        b.to_vec()?
    );
    let fv = f.to_vec()?;
    // 3 launches scaled the first 100 elements, the 4th all 1000.
    ensure!(
        fv[0] == 16.0 && fv[100] == 2.0 && fv[999] == 2.0,
        "{} {} {}",
        fv[0],
        fv[100],
        fv[999]
    );
    // Validation on update.
    let e = exec.set_kernel_arg(w, 1, 3u64).unwrap_err();
    ensure!(e.to_string().contains("argument 1 is 8 bytes"), "{e}");
    let e = exec.set_kernel_args(w, &args![&b]).unwrap_err();
    ensure!(e.to_string().contains("takes 3 arguments"), "{e}");
    let e = exec
        .set_launch_config(s, LaunchConfig::new(1, 5000))
        .unwrap_err();
    ensure!(
        matches!(&e, Error::LaunchShape { node: Some(n), .. } if n == "kernel#1"),
        "{e:?}"
    );
    ensure!(e.to_string().contains("block.x = 5000"), "{e}");
    Ok(())
}

register!(gpu "dag::memcpy_memset_host_updates" => memcpy_memset_host_updates);
fn memcpy_memset_host_updates(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let src1 = DeviceBuffer::from_slice(d, &[1u32; 16])?;
    let src2 = DeviceBuffer::from_slice(d, &[2u32; 16])?;
    let target = DeviceBuffer::<u32>::zeros(d, 32)?;
    let tag = Arc::new(AtomicU32::new(0));
    let mut dag = Dag::new();
    let set = dag.add_memset(target.region(16..), 5u32)?;
    let cp = dag.add_copy(dst(target.region(..16)), src(&src1))?;
    let t = tag.clone();
    let host = dag.add_host(move || t.store(1, Ordering::SeqCst));
    dag.chain(&[set, cp, host])?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(target.to_vec()?[..16] == [1; 16] && target.to_vec()?[16..] == [5; 16]);
    ensure!(tag.load(Ordering::SeqCst) == 1);

    exec.set_copy(cp, dst(target.region(..16)), src(&src2))?;
    exec.set_memset_value(set, 6u32)?;
    let t = tag.clone();
    exec.set_host_fn(host, move || t.store(2, Ordering::SeqCst))?;
    gpu.launch_and_wait(&mut exec)?;
    let v = target.to_vec()?;
    ensure!(v[..16] == [2; 16] && v[16..] == [6; 16], "{v:?}");
    ensure!(tag.load(Ordering::SeqCst) == 2);
    // Wrong updates are refused with the node's name.
    let e = exec
        .set_copy(cp, dst(target.region(..8)), src(&src2))
        .unwrap_err();
    ensure!(e.to_string().contains("sizes must match"), "{e}");
    let e = exec.set_memset_value(set, 1u8).unwrap_err();
    ensure!(e.to_string().contains("4-byte values"), "{e}");
    let e = exec.set_memset_value(cp, 1u32).unwrap_err();
    ensure!(
        e.to_string()
            .contains("is a memcpy node, not a memset node"),
        "{e}"
    );
    let hbuf = HostBuffer::<u32>::zeros(d, 16)?;
    let e = exec
        .set_copy(cp, dst(target.region(..16)), src(&hbuf))
        .unwrap_err();
    ensure!(e.to_string().contains("cannot become"), "{e}");
    Ok(())
}

register!(gpu "dag::enable_disable" => enable_disable);
fn enable_disable(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let a = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&c])?;
    let b = dag.add_kernel(&inc, LaunchConfig::new(1, 10), &args![&c])?;
    dag.add_dependency(a, b)?;
    let e = dag.add_empty();
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?; // +11
    exec.set_enabled(b, false)?;
    exec.launch(&gpu.stream)?; // +1
    ensure!(
        exec.to_dot().contains("dashed"),
        "disabled nodes are dashed in DOT"
    );
    exec.set_enabled(b, true)?;
    exec.launch(&gpu.stream)?; // +11
    exec.synchronize()?;
    ensure!(c.to_vec()? == [23], "{:?}", c.to_vec()?);
    let err = exec.set_enabled(e, false).unwrap_err();
    ensure!(err.to_string().contains("is an empty node"), "{err}");
    Ok(())
}

register!(gpu "dag::whole_graph_update" => whole_graph_update);
fn whole_graph_update(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let write = gpu.kernel("write_slot")?;
    let out = DeviceBuffer::<u32>::zeros(d, 4)?;
    let mut dag = Dag::new();
    let w = dag.add_kernel(&write, LaunchConfig::new(1, 1), &args![&out, 0u32, 1u32])?;
    let fill = dag.add_memset(out.region(3..), 9u32)?;
    dag.add_dependency(w, fill)?;
    dag.set_name(w, "writer");
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?;
    // Edit the DAG (same topology) and update in place.
    dag.set_kernel_args(w, &args![&out, 1u32, 2u32])?;
    dag.set_memset_value(fill, 8u32)?;
    exec.update(&dag)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(out.to_vec()? == [1, 2, 0, 8], "{:?}", out.to_vec()?);
    // Per-node updates still work after a whole-graph update.
    exec.set_kernel_arg(w, 1, 2u32)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(out.to_vec()? == [1, 2, 2, 8]);
    ensure!(exec.cuda_dot()?.contains("digraph"));

    // A topology change is refused with the node named ...
    let mut other = dag.clone();
    let extra = other.add_empty();
    other.add_dependency(w, extra)?;
    let e = exec.update(&other).unwrap_err();
    ensure!(matches!(e, Error::UpdateRefused { .. }), "{e}");
    ensure!(e.to_string().contains("empty#2"), "{e}");
    // ... and so is a changed edge, which only CUDA sees.
    let mut rewired = Dag::new();
    let w2 = rewired.add_kernel(&write, LaunchConfig::new(1, 1), &args![&out, 0u32, 3u32])?;
    let f2 = rewired.add_memset(out.region(3..), 4u32)?;
    let _ = (w2, f2); // no edge this time
    let e = exec.update(&rewired).unwrap_err();
    ensure!(matches!(e, Error::UpdateRefused { .. }), "{e}");
    // ... and update_or_reinstantiate handles both.
    ensure!(exec.update_or_reinstantiate(&rewired)? == UpdateOutcome::Reinstantiated);
    gpu.launch_and_wait(&mut exec)?;
    ensure!(out.to_vec()? == [3, 2, 2, 4], "{:?}", out.to_vec()?);
    rewired.set_memset_value(f2, 5u32)?;
    ensure!(exec.update_or_reinstantiate(&rewired)? == UpdateOutcome::Updated);
    gpu.launch_and_wait(&mut exec)?;
    ensure!(out.to_vec()? == [3, 2, 2, 5]);
    Ok(())
}

register!(gpu "dag::host_panic_is_an_error" => host_panic_is_an_error);
fn host_panic_is_an_error(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let k = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&c])?;
    let h = dag.add_host(|| panic!("host node failed on purpose"));
    dag.set_name(h, "bad host");
    let k2 = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&c])?;
    dag.chain(&[k, h, k2])?;
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?;
    let e = exec.synchronize().unwrap_err();
    match &e {
        Error::HostNodePanicked { node, message } => {
            ensure!(node == "bad host");
            ensure!(message.contains("failed on purpose"));
        }
        other => anyhow::bail!("expected a host panic, got {other:?}"),
    }
    // The process lives on, the graph still works, and a launch after a panic reports it.
    ensure!(c.to_vec()? == [2], "both kernels ran: {:?}", c.to_vec()?);
    exec.set_host_fn(h, || {})?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(c.to_vec()? == [4]);
    exec.set_host_fn(h, || panic!("again"))?;
    exec.launch(&gpu.stream)?;
    gpu.stream.synchronize()?;
    let e = exec.launch(&gpu.stream).unwrap_err();
    ensure!(
        e.to_string() == "host node `bad host` panicked: again",
        "{e}"
    );
    Ok(())
}

register!(gpu "dag::dropped_buffers_stay_alive" => dropped_buffers_stay_alive);
fn dropped_buffers_stay_alive(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let m = gpu.module(KERNELS)?;
    let scale = m.kernel("scale")?;
    let n = 1 << 20;
    let out = HostBuffer::<f32>::zeros(d, n)?;
    let mut exec = {
        let x = DeviceBuffer::from_slice(d, &vec![1.5f32; n])?;
        let input = HostBuffer::from_slice(d, &vec![1.5f32; n])?;
        let mut dag = Dag::new();
        let up = dag.add_copy(dst(&x), src(&input))?;
        let k = dag.add_kernel(
            &scale,
            LaunchConfig::for_elements(n as u32, 256),
            &args![&x, 2.0f32, n as i32],
        )?;
        let down = dag.add_copy(dst(&out), src(&x))?;
        dag.chain(&[up, k, down])?;
        dag.instantiate(d)?
        // x, input, dag and the module handle are dropped here.
    };
    drop(m);
    drop(scale);
    // Allocate and fill other memory that would reuse the freed addresses.
    let junk: Vec<_> = (0..4)
        .map(|_| DeviceBuffer::from_slice(d, &vec![-7.0f32; n]))
        .collect::<Result<_, _>>()?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(out.to_vec()?.iter().all(|&v| v == 3.0));
    drop(junk);
    Ok(())
}

register!(gpu "dag::chain_of_10000" => chain_of_10000);
fn chain_of_10000(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let mut prev = None;
    for _ in 0..10_000 {
        let n = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&c])?;
        if let Some(p) = prev {
            dag.add_dependency(p, n)?;
        }
        prev = Some(n);
    }
    let mut exec = dag.instantiate(d)?;
    exec.launch(&gpu.stream)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(c.to_vec()? == [20_000], "{:?}", c.to_vec()?);
    Ok(())
}

register!(gpu "dag::cuda_dot" => cuda_dot);
fn cuda_dot(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let a = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&c])?;
    let b = dag.add_memset(&c, 0u32)?;
    dag.add_dependency(b, a)?;
    let exec = dag.instantiate(d)?;
    let dot = exec.cuda_dot()?;
    ensure!(dot.contains("digraph"), "{dot}");
    ensure!(dot.contains("inc"), "the kernel's name appears: {dot}");
    // The Exec's DOT shows the graph as it is now: a disabled node is dashed there, not in
    // the DAG it was made from.
    let mut exec = exec;
    ensure!(!exec.to_dot().contains("dashed"));
    exec.set_enabled(a, false)?;
    ensure!(exec.to_dot().contains("dashed"), "{}", exec.to_dot());
    ensure!(!dag.to_dot().contains("dashed"));
    Ok(())
}

register!(gpu "dag::validation_on_device" => validation_on_device);
fn validation_on_device(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let k = dag.add_kernel(&inc, LaunchConfig::new(1, 2048), &args![&c])?;
    dag.set_name(k, "wide");
    let e = dag.instantiate(d).err().expect("invalid launch shape");
    ensure!(
        e.to_string()
            .starts_with("node `wide`: kernel `inc` launch"),
        "{e}"
    );
    // A recording backend's buffer cannot go into a real graph.
    let mut rec = cudagraph::RecordingBackend::new(d.limits().clone());
    let fake = rec.device_buffer::<u32>(1);
    let mut dag = Dag::new();
    dag.add_copy(dst(&c), src(&fake))?;
    let e = dag.instantiate(d).err().expect("foreign buffer");
    ensure!(e.to_string().contains("recording backend"), "{e}");
    Ok(())
}

register!(gpu "dag::into_exec_consumes_the_dag" => into_exec);
fn into_exec(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(d, 1)?;
    let mut dag = Dag::new();
    let a = dag.add_kernel(&inc, LaunchConfig::new(1, 3), &args![&c])?;
    dag.set_name(a, "three");
    let mut exec = dag.into_exec(d)?;
    ensure!(exec.dag().node(a)?.name() == "three");
    exec.launch(&gpu.stream)?;
    exec.set_launch_config(a, LaunchConfig::new(1, 4))?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(c.to_vec()? == [7], "{:?}", c.to_vec()?);
    Ok(())
}

register!(gpu "dag::captured_nodes" => captured_nodes);
/// A captured node (a `cudaMemsetAsync` recorded from the capture stream) between kernel
/// nodes: it runs in DAG order, can be disabled and enabled, and a failing or panicking capture
/// leaves nothing behind (the next instantiation captures normally).
fn captured_nodes(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [scale, inc] = gpu.kernels(["scale", "inc"])?;
    let n = 1024usize;
    let x = DeviceBuffer::<f32>::zeros(d, n)?;
    let count = DeviceBuffer::<u32>::zeros(d, 1)?;
    let region = Region::from(&x);
    let fill = move |s: &cudagraph::CaptureStream<'_>| {
        // cudaMemsetAsync sets bytes: every element becomes 0x40404040 (about 3.01).
        // SAFETY: the region is of a live buffer the node keeps; the memset is stream-ordered.
        unsafe {
            cudagraph::result::runtime::memset_async(
                region.addr() as *mut std::ffi::c_void,
                0x40,
                region.len_bytes(),
                s.raw(),
            )
        }
    };
    let mut dag = Dag::new();
    let first = dag.add_kernel(&inc, LaunchConfig::new(1, 1), &args![&count])?;
    // SAFETY: the work only enqueues a memset of `x`, which is declared in `uses`.
    let cap = unsafe { dag.add_captured("memset x to 0x40 bytes", [Region::from(&x)], fill) };
    let after = dag.add_kernel(
        &scale,
        LaunchConfig::for_elements(n as u32, 256),
        &args![&x, 0.5f32, n as i32],
    )?;
    dag.add_dependency(first, cap)?;
    dag.add_dependency(cap, after)?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let filled = f32::from_bits(0x4040_4040);
    let want = vec![filled * 0.5; n];
    assert_close(&x.to_vec()?, &want, 0.0)?;

    // Disabled: the memset does not run, so the kernel halves again.
    exec.set_enabled(cap, false)?;
    gpu.launch_and_wait(&mut exec)?;
    assert_close(&x.to_vec()?, &vec![filled * 0.25; n], 0.0)?;
    exec.set_enabled(cap, true)?;
    gpu.launch_and_wait(&mut exec)?;
    assert_close(&x.to_vec()?, &want, 0.0)?;
    ensure!(count.to_vec()? == [3], "{:?}", count.to_vec()?);

    // A failing capture step fails the instantiation with its error.
    let mut bad = Dag::new();
    // SAFETY: enqueues nothing.
    unsafe {
        bad.add_captured("fails", [], |_| {
            Err(Error::Invalid("the library refused".into()))
        })
    };
    let e = bad.instantiate(d).err().expect("the capture step failed");
    ensure!(e.to_string().contains("the library refused"), "{e}");
    // A panicking one unwinds to the caller after the capture ended ...
    let mut panics = Dag::new();
    // SAFETY: enqueues nothing.
    unsafe { panics.add_captured("panics", [], |_| panic!("inside the capture")) };
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panics.instantiate(d)));
    ensure!(caught.is_err(), "the panic reached the caller");
    // ... and the same graph works again once the step works (a fresh capture).
    let mut exec2 = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec2)?;
    assert_close(&x.to_vec()?, &want, 0.0)?;
    Ok(())
}

/// A child DAG of `nodes` kernels in a chain, each scaling `x` by `a`.
fn scaling_child(
    scale: &Kernel,
    x: &DeviceBuffer<f32>,
    a: f32,
    nodes: usize,
) -> anyhow::Result<Dag> {
    let n = x.len();
    let cfg = LaunchConfig::for_elements(n as u32, 256);
    let mut c = Dag::new();
    let mut prev = None;
    for _ in 0..nodes {
        let k = c.add_kernel(scale, cfg, &args![x, a, n as i32])?;
        if let Some(p) = prev {
            c.add_dependency(p, k)?;
        }
        prev = Some(k);
    }
    Ok(c)
}

/// x = 1, then a graph scaling it by 2 (node `first`) then by 3 (a child DAG, `child`),
/// launched once (x = 6).
struct ChildSetup {
    scale: Kernel,
    x: DeviceBuffer<f32>,
    first: NodeId,
    child: NodeId,
    exec: Exec,
    stream: Stream,
}

fn child_setup(gpu: &Gpu) -> anyhow::Result<ChildSetup> {
    let d = &gpu.device;
    let [scale] = gpu.kernels(["scale"])?;
    let n = 1024usize;
    let x = DeviceBuffer::from_slice(d, &vec![1.0f32; n])?;
    let cfg = LaunchConfig::for_elements(n as u32, 256);
    let mut dag = Dag::new();
    let first = dag.add_kernel(&scale, cfg, &args![&x, 2.0f32, n as i32])?;
    let child = dag.add_child(&scaling_child(&scale, &x, 3.0, 1)?);
    dag.set_name(child, "times a");
    dag.add_dependency(first, child)?;
    let mut exec = dag.instantiate(d)?;
    let stream = Stream::new(d)?;
    exec.launch(&stream)?;
    ensure!(x.to_vec()?.iter().all(|&v| v == 6.0), "1 x 2 x 3");
    Ok(ChildSetup {
        scale,
        x,
        first,
        child,
        exec,
        stream,
    })
}

register!(gpu "dag::a_child_dag_is_updated_on_the_exec" => child_update);
/// A child DAG (scale x by a) replaced on the `Exec` by one built the same way with another
/// factor: the next launches use it, without instantiating again. A node that is not a child
/// graph is refused before CUDA is asked.
fn child_update(gpu: &Gpu) -> anyhow::Result<()> {
    let ChildSetup {
        scale,
        x,
        first,
        child,
        mut exec,
        stream,
    } = child_setup(gpu)?;
    exec.update_child(child, &scaling_child(&scale, &x, 5.0, 1)?)?;
    exec.launch(&stream)?;
    ensure!(
        x.to_vec()?.iter().all(|&v| v == 60.0),
        "6 x 2 x 5 after the child's update"
    );
    match exec.update_child(first, &scaling_child(&scale, &x, 7.0, 1)?) {
        Err(Error::Dag(cudagraph::DagError::WrongKind { node, .. })) => {
            ensure!(node == "kernel#0", "{node}")
        }
        other => anyhow::bail!("a kernel node: expected WrongKind, got {other:?}"),
    }
    Ok(())
}

register!(gpu "dag::a_child_of_another_shape_is_refused_and_changes_nothing" => child_update_refused);
/// A child of another shape is refused by CUDA (`cudaGraphExecUpdate`, asked on purpose:
/// `refused` in the name keeps the test out of the sanitizer runs) as
/// `Error::UpdateRefused`, and changes nothing.
fn child_update_refused(gpu: &Gpu) -> anyhow::Result<()> {
    let ChildSetup {
        scale,
        x,
        child,
        mut exec,
        stream,
        ..
    } = child_setup(gpu)?;
    match exec.update_child(child, &scaling_child(&scale, &x, 7.0, 2)?) {
        Err(Error::UpdateRefused { .. }) => {}
        other => anyhow::bail!("a child of another shape: expected UpdateRefused, got {other:?}"),
    }
    exec.launch(&stream)?;
    ensure!(
        x.to_vec()?.iter().all(|&v| v == 36.0),
        "the refused update changed nothing: 6 x 2 x 3"
    );
    Ok(())
}
