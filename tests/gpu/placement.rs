//! GPU tests of node placement: a DAG whose nodes are all placed on device 0 computes what the
//! unplaced DAG does; with two GPUs, a DAG with kernels on both and a copy between them
//! (checked against the CPU). The two-GPU test goes through [`gpus_test`]: with one GPU (or two
//! without peer access) it is ignored with the reason, and `CUDAGRAPH_REQUIRE_GPUS=2` makes
//! that a failure.

use anyhow::ensure;
use cudagraph::{args, dst, src, Dag, Device, DeviceBuffer, HostBuffer, LaunchConfig, Module};

use crate::common::{assert_close, Gpu, Unsupported, KERNELS};

register!(gpu "placement::placed_on_device_0_as_unplaced" => placed_on_device_0_as_unplaced);
/// upload -> fill, scale -> add -> download; every node placed on device 0 (the home device)
/// or none: the same results, both equal to the CPU's.
fn placed_on_device_0_as_unplaced(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    ensure!(d.can_access_peer(d)?, "a device reaches its own memory");
    let [scale, add] = gpu.kernels(["scale", "add"])?;
    let n = 4096usize;
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let cfg = LaunchConfig::for_elements(n as u32, 256);
    let want: Vec<f32> = input.iter().map(|v| 2.0 * v + 1.5).collect();
    let mut results = Vec::new();
    for place in [false, true] {
        let h_in = HostBuffer::from_slice(d, &input)?;
        let h_out = HostBuffer::<f32>::zeros(d, n)?;
        let x = DeviceBuffer::<f32>::zeros(d, n)?;
        let y = DeviceBuffer::<f32>::zeros(d, n)?;
        let mut dag = Dag::new();
        let up = dag.add_copy(dst(&x), src(&h_in))?;
        let fill = dag.add_memset(&y, 1.5f32)?;
        let s = dag.add_kernel(&scale, cfg, &args![&x, 2.0f32, n as i32])?;
        let a = dag.add_kernel(&add, cfg, &args![&x, &y, n as i32])?;
        let join = dag.add_empty();
        let down = dag.add_copy(dst(&h_out), src(&x))?;
        dag.chain(&[up, s, a, join, down])?;
        dag.add_dependency(fill, a)?;
        if place {
            for id in [up, fill, s, a, join, down] {
                dag.place(id, d)?;
            }
        }
        let mut exec = dag.instantiate(d)?;
        gpu.launch_and_wait(&mut exec)?;
        let got = h_out.to_vec()?;
        assert_close(&got, &want, 0.0)?;
        results.push(got);
    }
    ensure!(
        results[0] == results[1],
        "placed and unplaced results differ"
    );
    Ok(())
}

register!(gpus 2 "placement::two_devices" => two_devices);
/// Device 0 (home): upload, scale. Device 1: fill, copy from device 0 (placed on whichever
/// device reaches the other by peer), axpy, download to pinned host memory. Checked against the
/// CPU, over two launches.
fn two_devices(gpu: &Gpu) -> anyhow::Result<()> {
    let count = Device::count()?;
    let d0 = &gpu.device;
    let d1 = Device::get(1)?;
    let (from1, from0) = (d1.can_access_peer(d0)?, d0.can_access_peer(&d1)?);
    if !from1 && !from0 {
        return Err(Unsupported("devices 0 and 1 cannot access each other by peer".into()).into());
    }
    let scale = gpu.kernel("scale")?;
    let axpy = Module::from_source(&d1, KERNELS)?.kernel("axpy")?;
    let n = 1 << 16;
    let input: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let cfg = LaunchConfig::for_elements(n as u32, 256);
    let h_in = HostBuffer::from_slice(d0, &input)?;
    let h_out = HostBuffer::<f32>::zeros(d0, n)?;
    let x0 = DeviceBuffer::<f32>::zeros(d0, n)?;
    let x1 = DeviceBuffer::<f32>::zeros(&d1, n)?;
    let y1 = DeviceBuffer::<f32>::zeros(&d1, n)?;

    let mut dag = Dag::new();
    let up = dag.add_copy(dst(&x0), src(&h_in))?;
    let s = dag.add_kernel(&scale, cfg, &args![&x0, 2.0f32, n as i32])?; // 2v
    let fill = dag.add_memset(&y1, 0.5f32)?;
    dag.place(fill, &d1)?;
    let cross = dag.add_copy(dst(&x1), src(&x0))?;
    if from1 {
        dag.place(cross, &d1)?;
    } // else: on device 0 (home), which reaches device 1
    let k = dag.add_kernel(&axpy, cfg, &args![&x1, 4.0f32, &y1, n as i32])?; // 2v + 2
    dag.place(k, &d1)?;
    let down = dag.add_copy(dst(&h_out), src(&x1))?;
    dag.place(down, &d1)?;
    dag.chain(&[up, s, cross, k, down])?;
    dag.add_dependency(fill, k)?;

    let mut exec = dag.instantiate(d0)?;
    let want: Vec<f32> = input.iter().map(|v| 2.0 * v + 2.0).collect();
    for launch in 0..2 {
        gpu.launch_and_wait(&mut exec)?;
        assert_close(&h_out.to_vec()?, &want, 0.0)
            .map_err(|e| e.context(format!("launch {launch}")))?;
    }
    println!(
        "placement::two_devices: ran on 2 of {count} GPUs (copy placed on device {})",
        if from1 { 1 } else { 0 }
    );
    Ok(())
}
