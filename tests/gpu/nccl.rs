//! NCCL: communicators over every visible GPU (one on a one-GPU machine; the same code checks N
//! ranks where there are N), each collective as a graph node and called directly on streams,
//! against a CPU reference: integers exactly, floats within `F32_TOL` (relative; the sums of
//! at most a few ranks' small integers in f32 are exact in practice, the tolerance allows for
//! NCCL's reduction order).

use anyhow::{ensure, Context};
use cudagraph::{
    Communicators, Dag, Device, DeviceBuffer, Exec, NcclType, NodeId, ReduceOp, Stream,
};

use crate::common::{assert_close, Gpu};

const F32_TOL: f32 = 1e-6;

/// Every visible device, a stream on each.
fn all_devices(gpu: &Gpu) -> anyhow::Result<(Vec<Device>, Vec<Stream>)> {
    let n = Device::count()?;
    let mut devices = vec![gpu.device.clone()];
    for i in 1..n {
        devices.push(Device::get(i)?);
    }
    let streams = devices
        .iter()
        .map(Stream::new)
        .collect::<cudagraph::Result<Vec<_>>>()?;
    Ok((devices, streams))
}

register!(nccl "nccl::communicators_over_all_devices" => communicators);
fn communicators(gpu: &Gpu) -> anyhow::Result<()> {
    let (devices, _) = all_devices(gpu)?;
    let comms = Communicators::new(&devices)?;
    let n = devices.len();
    ensure!(comms.len() == n);
    let info = comms.nccl_info()?;
    for (r, (ranks, ordinal, rank)) in info.into_iter().enumerate() {
        ensure!(
            ranks == n && rank == r && ordinal == devices[r].ordinal(),
            "rank {r}"
        );
    }
    // `main` sets it off when the environment did not (before any thread started).
    let nvls = cudagraph::load::nccl_nvls_setting()?;
    ensure!(
        nvls == "0",
        "NCCL_NVLS_ENABLE={nvls}: the GPU tests run with NVLink multicast off"
    );
    comms.async_error()?;
    eprintln!("nccl: {n} rank(s), NCCL_NVLS_ENABLE={nvls}");
    Ok(())
}

/// Rank `r`'s input: small integers, distinct per rank and element.
fn input<T: NcclType>(r: usize, len: usize, from: impl Fn(i64) -> T) -> Vec<T> {
    (0..len)
        .map(|i| from(((i * 7 + r * 13) % 50) as i64 - 20))
        .collect()
}

struct Case {
    n: usize,
    len: usize,
}

/// The CPU references for every rank.
impl Case {
    fn sum_i32(&self) -> Vec<i32> {
        let mut out = vec![0; self.len];
        for r in 0..self.n {
            for (o, v) in out.iter_mut().zip(input(r, self.len, |v| v as i32)) {
                *o += v;
            }
        }
        out
    }
    fn max_i32(&self) -> Vec<i32> {
        let mut out = vec![i32::MIN; self.len];
        for r in 0..self.n {
            for (o, v) in out.iter_mut().zip(input(r, self.len, |v| v as i32)) {
                *o = (*o).max(v);
            }
        }
        out
    }
    fn sum_f32(&self) -> Vec<f32> {
        self.sum_i32().iter().map(|&v| v as f32 * 0.5).collect()
    }
    fn gather_u8(&self, part: usize) -> Vec<u8> {
        (0..self.n)
            .flat_map(|r| input(r, part, |v| (v + 20) as u8))
            .collect()
    }
}

/// One rank's buffers.
struct Rank {
    i: DeviceBuffer<i32>,
    sum: DeviceBuffer<i32>,
    max: DeviceBuffer<i32>,
    f: DeviceBuffer<f32>,
    fsum: DeviceBuffer<f32>,
    g_send: DeviceBuffer<u8>,
    g_recv: DeviceBuffer<u8>,
    rs_recv: DeviceBuffer<i32>,
    bc: DeviceBuffer<i64>,
    ring_send: DeviceBuffer<f64>,
    ring_recv: DeviceBuffer<f64>,
}

const LEN: usize = 3 * 1024; // divisible by 1, 2, 3, 4, 6, 8 ranks
const PART: usize = 1000;

fn rank_buffers(device: &Device, r: usize, n: usize) -> anyhow::Result<Rank> {
    Ok(Rank {
        i: DeviceBuffer::from_slice(device, &input(r, LEN, |v| v as i32))?,
        sum: DeviceBuffer::zeros(device, LEN)?,
        max: DeviceBuffer::zeros(device, LEN)?,
        f: DeviceBuffer::from_slice(device, &input(r, LEN, |v| v as f32 * 0.5))?,
        fsum: DeviceBuffer::zeros(device, LEN)?,
        g_send: DeviceBuffer::from_slice(device, &input(r, PART, |v| (v + 20) as u8))?,
        g_recv: DeviceBuffer::zeros(device, n * PART)?,
        rs_recv: DeviceBuffer::zeros(device, LEN / n)?,
        bc: DeviceBuffer::from_slice(device, &vec![r as i64 * 1_000_000_007; PART])?,
        ring_send: DeviceBuffer::from_slice(device, &vec![r as f64 + 0.25; PART])?,
        ring_recv: DeviceBuffer::zeros(device, PART)?,
    })
}

fn check_rank(case: &Case, r: usize, b: &Rank) -> anyhow::Result<()> {
    let n = case.n;
    ensure!(b.sum.to_vec()? == case.sum_i32(), "rank {r}: i32 sum");
    ensure!(b.max.to_vec()? == case.max_i32(), "rank {r}: i32 max");
    assert_close(&b.fsum.to_vec()?, &case.sum_f32(), F32_TOL).context(format!("rank {r}: f32"))?;
    ensure!(
        b.g_recv.to_vec()? == case.gather_u8(PART),
        "rank {r}: all-gather"
    );
    let block = LEN / n;
    ensure!(
        b.rs_recv.to_vec()? == case.sum_i32()[r * block..(r + 1) * block],
        "rank {r}: reduce-scatter"
    );
    ensure!(
        b.bc.to_vec()? == vec![(n - 1) as i64 * 1_000_000_007; PART],
        "rank {r}: broadcast"
    );
    let from = (r + n - 1) % n;
    ensure!(
        b.ring_recv.to_vec()? == vec![from as f64 + 0.25; PART],
        "rank {r}: ring shift"
    );
    Ok(())
}

fn rank_dag(comms: &Communicators, r: usize, b: &Rank) -> anyhow::Result<(Dag, Vec<NodeId>)> {
    let n = comms.len();
    let c = comms.comm(r)?;
    let mut dag = Dag::new();
    let nodes = vec![
        dag.add_all_reduce(&c, &b.i, &b.sum, ReduceOp::Sum)?,
        dag.add_all_reduce(&c, &b.i, &b.max, ReduceOp::Max)?,
        dag.add_all_reduce(&c, &b.f, &b.fsum, ReduceOp::Sum)?,
        dag.add_all_gather(&c, &b.g_send, &b.g_recv)?,
        dag.add_reduce_scatter(&c, &b.i, &b.rs_recv, ReduceOp::Sum)?,
        dag.add_broadcast(&c, &b.bc, &b.bc, n - 1)?,
        dag.add_send_recv(&c, &b.ring_send, (r + 1) % n, &b.ring_recv, (r + n - 1) % n)?,
    ];
    dag.chain(&nodes)?;
    Ok((dag, nodes))
}

register!(nccl "nccl::collectives_in_graphs_match_cpu" => in_graphs);
fn in_graphs(gpu: &Gpu) -> anyhow::Result<()> {
    let (devices, streams) = all_devices(gpu)?;
    let n = devices.len();
    let comms = Communicators::new(&devices)?;
    let bufs = devices
        .iter()
        .enumerate()
        .map(|(r, d)| rank_buffers(d, r, n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dags = (0..n)
        .map(|r| rank_dag(&comms, r, &bufs[r]).map(|d| d.0))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let refs: Vec<&Dag> = dags.iter().collect();
    let mut execs: Vec<Exec> = comms.instantiate(&refs)?;
    // Three launches of every rank's graph, from this one thread (launches only queue work).
    for _ in 0..3 {
        for (e, s) in execs.iter_mut().zip(&streams) {
            e.launch(s)?;
        }
    }
    for e in &mut execs {
        e.synchronize()?;
    }
    comms.async_error()?;
    let case = Case { n, len: LEN };
    for (r, b) in bufs.iter().enumerate() {
        check_rank(&case, r, b)?;
    }
    Ok(())
}

register!(nccl "nccl::collectives_on_streams_match_cpu" => on_streams);
fn on_streams(gpu: &Gpu) -> anyhow::Result<()> {
    let (devices, streams) = all_devices(gpu)?;
    let n = devices.len();
    let comms = Communicators::new(&devices)?;
    let bufs = devices
        .iter()
        .enumerate()
        .map(|(r, d)| rank_buffers(d, r, n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let s: Vec<&Stream> = streams.iter().collect();
    let all = |f: fn(&Rank) -> &DeviceBuffer<i32>| bufs.iter().map(f).collect::<Vec<_>>();
    comms.all_reduce(&all(|b| &b.i), &all(|b| &b.sum), ReduceOp::Sum, &s)?;
    comms.all_reduce(&all(|b| &b.i), &all(|b| &b.max), ReduceOp::Max, &s)?;
    let f: Vec<_> = bufs.iter().map(|b| &b.f).collect();
    let fsum: Vec<_> = bufs.iter().map(|b| &b.fsum).collect();
    comms.all_reduce(&f, &fsum, ReduceOp::Sum, &s)?;
    let gs: Vec<_> = bufs.iter().map(|b| &b.g_send).collect();
    let gr: Vec<_> = bufs.iter().map(|b| &b.g_recv).collect();
    comms.all_gather(&gs, &gr, &s)?;
    comms.reduce_scatter(&all(|b| &b.i), &all(|b| &b.rs_recv), ReduceOp::Sum, &s)?;
    let bc: Vec<_> = bufs.iter().map(|b| &b.bc).collect();
    comms.broadcast(&bc, &bc, n - 1, &s)?;
    let rs: Vec<_> = bufs.iter().map(|b| &b.ring_send).collect();
    let rr: Vec<_> = bufs.iter().map(|b| &b.ring_recv).collect();
    let to: Vec<usize> = (0..n).map(|r| (r + 1) % n).collect();
    let from: Vec<usize> = (0..n).map(|r| (r + n - 1) % n).collect();
    comms.send_recv(&rs, &to, &rr, &from, &s)?;
    // `to_vec` waits for the collectives that use each buffer.
    let case = Case { n, len: LEN };
    for (r, b) in bufs.iter().enumerate() {
        check_rank(&case, r, b)?;
    }
    comms.async_error()?;
    Ok(())
}

register!(nccl "nccl::graph_and_stream_all_reduce_agree" => graph_vs_stream);
fn graph_vs_stream(gpu: &Gpu) -> anyhow::Result<()> {
    let (devices, streams) = all_devices(gpu)?;
    let n = devices.len();
    let comms = Communicators::new(&devices)?;
    let len = 1 << 20;
    let mut sends = Vec::new();
    let (mut via_graph, mut via_stream) = (Vec::new(), Vec::new());
    for (r, d) in devices.iter().enumerate() {
        let x: Vec<f32> = (0..len).map(|i| ((i + r) % 97) as f32 * 0.125).collect();
        sends.push(DeviceBuffer::from_slice(d, &x)?);
        via_graph.push(DeviceBuffer::<f32>::zeros(d, len)?);
        via_stream.push(DeviceBuffer::<f32>::zeros(d, len)?);
    }
    let dags = (0..n)
        .map(|r| {
            let mut dag = Dag::new();
            dag.add_all_reduce(&comms.comm(r)?, &sends[r], &via_graph[r], ReduceOp::Sum)?;
            Ok(dag)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut execs = comms.instantiate(&dags.iter().collect::<Vec<_>>())?;
    for (e, s) in execs.iter_mut().zip(&streams) {
        e.launch(s)?;
    }
    let s: Vec<&Stream> = streams.iter().collect();
    comms.all_reduce(
        &sends.iter().collect::<Vec<_>>(),
        &via_stream.iter().collect::<Vec<_>>(),
        ReduceOp::Sum,
        &s,
    )?;
    let want: Vec<f32> = (0..len)
        .map(|i| (0..n).map(|r| ((i + r) % 97) as f32 * 0.125).sum())
        .collect();
    for r in 0..n {
        let (g, st) = (via_graph[r].to_vec()?, via_stream[r].to_vec()?);
        // Same NCCL call, same inputs: the graph and the stream give the same bits.
        ensure!(g == st, "rank {r}: graph and stream results differ");
        assert_close(&g, &want, F32_TOL).context(format!("rank {r}"))?;
    }
    Ok(())
}

register!(nccl "nccl::dag_instantiate_refuses_collectives" => refused);
fn refused(gpu: &Gpu) -> anyhow::Result<()> {
    let comms = Communicators::new(std::slice::from_ref(&gpu.device))?;
    let x = DeviceBuffer::<u32>::zeros(&gpu.device, 64)?;
    let mut dag = Dag::new();
    dag.add_all_reduce(&comms.comm(0)?, &x, &x, ReduceOp::Sum)?;
    let err = match dag.instantiate(&gpu.device) {
        Ok(_) => anyhow::bail!("Dag::instantiate accepted a collective node"),
        Err(e) => e.to_string(),
    };
    ensure!(err.contains("Communicators::instantiate"), "{err}");
    let mut exec = comms.instantiate(&[&dag])?;
    gpu.launch_and_wait(&mut exec[0])?;
    Ok(())
}
