//! All-reduce over every visible GPU, two ways side by side: as a collective node in a graph
//! (one DAG per rank, instantiated with `Communicators::instantiate`, `K` chained all-reduce
//! nodes per graph) and as `ncclAllReduce` calls on streams (`Communicators::all_reduce`, `K`
//! calls). Prints the GPU time per all-reduce (CUDA events on rank 0's stream, after every
//! rank's stream has been joined there) and the host time to issue one batch, and checks both
//! results against a CPU sum.
//!
//! ```text
//! cargo run --release --example nccl_allreduce [-- ITERS [K]]
//! ```
//!
//! Needs NCCL (`pip install nvidia-nccl-cu13`, or set CUDAGRAPH_NCCL_PATH). NVLink multicast is
//! off (`main` sets NCCL_NVLS_ENABLE=0 first unless it is set).

use std::time::Instant;

use cudagraph::{Communicators, Dag, Device, DeviceBuffer, Event, Exec, ReduceOp, Stream};

fn main() -> anyhow::Result<()> {
    // NVLink multicast off for NCCL (unless the environment says otherwise).
    // SAFETY: first thing in main: no other thread exists yet.
    unsafe { cudagraph::load::set_nccl_nvls_off() };
    let mut args = std::env::args().skip(1);
    let iters: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let k: usize = args.next().map_or(Ok(10), |a| a.parse())?;
    let n = Device::count()?;
    let devices = (0..n)
        .map(Device::get)
        .collect::<cudagraph::Result<Vec<_>>>()?;
    let streams = devices
        .iter()
        .map(Stream::new)
        .collect::<cudagraph::Result<Vec<_>>>()?;
    let comms = Communicators::new(&devices)?;
    println!(
        "{} rank(s): {}; NCCL_NVLS_ENABLE={}; {iters} iterations of {k} all-reduces",
        n,
        devices
            .iter()
            .map(|d| format!("{d:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        std::env::var("NCCL_NVLS_ENABLE").unwrap_or_default()
    );
    println!(
        "{:>10} {:>14} {:>14} {:>16} {:>16}",
        "bytes", "graph us/op", "stream us/op", "graph host us", "stream host us"
    );
    for len in [1usize << 10, 1 << 16, 1 << 20, 1 << 24] {
        let sends = devices
            .iter()
            .enumerate()
            .map(|(r, d)| DeviceBuffer::from_slice(d, &vec![r as f32 + 1.0; len]))
            .collect::<cudagraph::Result<Vec<_>>>()?;
        let recvs = devices
            .iter()
            .map(|d| DeviceBuffer::<f32>::zeros(d, len))
            .collect::<cudagraph::Result<Vec<_>>>()?;
        let dags = (0..n)
            .map(|r| {
                let mut dag = Dag::new();
                let c = comms.comm(r)?;
                let ids = (0..k)
                    .map(|_| dag.add_all_reduce(&c, &sends[r], &recvs[r], ReduceOp::Sum))
                    .collect::<cudagraph::Result<Vec<_>>>()?;
                dag.chain(&ids)?;
                Ok(dag)
            })
            .collect::<cudagraph::Result<Vec<_>>>()?;
        let mut execs: Vec<Exec> = comms.instantiate(&dags.iter().collect::<Vec<_>>())?;
        let s: Vec<&Stream> = streams.iter().collect();
        let send_refs: Vec<_> = sends.iter().collect();
        let recv_refs: Vec<_> = recvs.iter().collect();

        let mut graph_batch = || -> cudagraph::Result<()> {
            for (e, st) in execs.iter_mut().zip(&streams) {
                e.launch(st)?;
            }
            Ok(())
        };
        let mut stream_batch = || -> cudagraph::Result<()> {
            for _ in 0..k {
                comms.all_reduce(&send_refs, &recv_refs, ReduceOp::Sum, &s)?;
            }
            Ok(())
        };
        let (graph_us, graph_host) = time(&devices, &streams, iters, k, &mut graph_batch)?;
        let (stream_us, stream_host) = time(&devices, &streams, iters, k, &mut stream_batch)?;
        let want = (1..=n).map(|r| r as f32).sum::<f32>();
        for (r, b) in recvs.iter().enumerate() {
            anyhow::ensure!(
                b.to_vec()?.iter().all(|&v| v == want),
                "rank {r}: wrong all-reduce result"
            );
        }
        println!(
            "{:>10} {graph_us:>14.2} {stream_us:>14.2} {graph_host:>16.2} {stream_host:>16.2}",
            len * 4
        );
    }
    comms.async_error()?;
    Ok(())
}

/// GPU microseconds per all-reduce and host microseconds per batch of `k`, over `iters`
/// batches (after 5 warm-up batches).
fn time(
    devices: &[Device],
    streams: &[Stream],
    iters: usize,
    k: usize,
    batch: &mut dyn FnMut() -> cudagraph::Result<()>,
) -> anyhow::Result<(f64, f64)> {
    for _ in 0..5 {
        batch()?;
    }
    for st in streams {
        st.synchronize()?;
    }
    let (start, end) = (Event::new(&devices[0])?, Event::new(&devices[0])?);
    start.record(&streams[0])?;
    let t = Instant::now();
    for _ in 0..iters {
        batch()?;
    }
    let host = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    // Rank 0's stream waits for every other rank's before the end event.
    for (d, st) in devices.iter().zip(streams).skip(1) {
        let e = Event::new(d)?;
        e.record(st)?;
        streams[0].wait_event(&e)?;
    }
    end.record(&streams[0])?;
    end.synchronize()?;
    let gpu_us = start.elapsed_ms(&end)? as f64 * 1e3 / (iters * k) as f64;
    for st in streams {
        st.synchronize()?;
    }
    Ok((gpu_us, host))
}
