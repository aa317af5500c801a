//! GPU tests of kernel launch attributes: cluster dimensions seen by the kernel, a cooperative
//! launch that fits and one that does not (refused in validation, naming the node), and the
//! cache and synchronisation attributes accepted by CUDA.

use anyhow::ensure;
use cudagraph::{
    args, AccessPolicy, AccessProperty, Dag, DeviceBuffer, Error, LaunchAttributes, LaunchConfig,
    MemSyncDomain,
};

use crate::common::Gpu;

pub(crate) const SOURCE: &str = r#"
// Each block writes the size of its cluster and its rank in it (PTX special registers).
extern "C" __global__ void cluster_size(unsigned int* out) {
    unsigned int n, rank;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x == 0) { out[2 * b] = n; out[2 * b + 1] = rank; }
}
extern "C" __global__ void fill(unsigned int* out, unsigned int v, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
"#;

register!(gpu "attributes::cluster_dimensions" => cluster_dimensions);
fn cluster_dimensions(gpu: &Gpu) -> anyhow::Result<()> {
    let k = gpu.module(SOURCE)?.kernel("cluster_size")?;
    let blocks = 8u32;
    let out = DeviceBuffer::<u32>::zeros(&gpu.device, 2 * blocks as usize)?;
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(blocks, 32), &args![&out])?;
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            cluster: Some((4, 1, 1).into()),
            ..Default::default()
        },
    )?;
    let mut exec = dag.instantiate(&gpu.device)?;
    gpu.launch_and_wait(&mut exec)?;
    let got = out.to_vec()?;
    for b in 0..blocks as usize {
        ensure!(
            got[2 * b] == 4,
            "block {b}: cluster of {} blocks",
            got[2 * b]
        );
        ensure!(
            got[2 * b + 1] == b as u32 % 4,
            "block {b}: rank {}",
            got[2 * b + 1]
        );
    }
    // Without the attribute each block is its own cluster.
    let mut plain = Dag::new();
    plain.add_kernel(&k, LaunchConfig::new(blocks, 32), &args![&out])?;
    let mut exec = plain.instantiate(&gpu.device)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(
        out.to_vec()?[0] == 1,
        "an unclustered block is a cluster of one"
    );
    Ok(())
}

register!(gpu "attributes::cooperative_launch" => cooperative_launch);
fn cooperative_launch(gpu: &Gpu) -> anyhow::Result<()> {
    let k = gpu.module(SOURCE)?.kernel("fill")?;
    let per_sm = k
        .max_active_blocks_per_multiprocessor(1024, 0)?
        .expect("a CUDA kernel has an occupancy");
    let fit = per_sm * gpu.device.limits().multiprocessors;
    let n = fit * 1024;
    let out = DeviceBuffer::<u32>::zeros(&gpu.device, n as usize)?;
    let cooperative = LaunchAttributes {
        cooperative: true,
        ..Default::default()
    };
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(fit, 1024), &args![&out, 3u32, n])?;
    dag.set_launch_attributes(a, cooperative.clone())?;
    let mut exec = dag.instantiate(&gpu.device)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(
        out.to_vec()?.iter().all(|&v| v == 3),
        "the cooperative launch ran"
    );
    // One block more than fits at once is refused before CUDA sees it.
    let mut big = Dag::new();
    let b = big.add_kernel(&k, LaunchConfig::new(fit + 1, 1024), &args![&out, 3u32, n])?;
    big.set_name(b, "too big");
    big.set_launch_attributes(b, cooperative)?;
    match big.instantiate(&gpu.device) {
        Err(Error::LaunchShape {
            node: Some(node),
            problem,
            ..
        }) => {
            ensure!(
                node == "too big" && problem.contains("does not fit"),
                "{problem}"
            )
        }
        Err(e) => anyhow::bail!("wrong error: {e}"),
        Ok(_) => anyhow::bail!("an oversized cooperative launch was accepted"),
    }
    Ok(())
}

register!(gpu "attributes::cache_and_sync_attributes" => cache_and_sync_attributes);
fn cache_and_sync_attributes(gpu: &Gpu) -> anyhow::Result<()> {
    let k = gpu.module(SOURCE)?.kernel("fill")?;
    let n = 1u32 << 20;
    let out = DeviceBuffer::<u32>::zeros(&gpu.device, n as usize)?;
    let mut dag = Dag::new();
    let a = dag.add_kernel(
        &k,
        LaunchConfig::for_elements(n, 256),
        &args![&out, 9u32, n],
    )?;
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            priority: Some(0),
            shared_mem_carveout: Some(25),
            access_policy: Some(AccessPolicy {
                window: out.region(..),
                hit_ratio: 0.6,
                hit: AccessProperty::Persisting,
                miss: AccessProperty::Streaming,
            }),
            mem_sync_domain: Some(MemSyncDomain::Remote),
            ..Default::default()
        },
    )?;
    let mut exec = dag.instantiate(&gpu.device)?;
    gpu.launch_and_wait(&mut exec)?;
    ensure!(out.to_vec()?.iter().all(|&v| v == 9));
    Ok(())
}
