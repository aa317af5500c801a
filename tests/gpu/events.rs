//! GPU tests of event record and wait nodes: two graphs on two streams ordered by an event, a
//! stream waiting for a graph's event, and `Exec::set_event`.

use anyhow::ensure;
use cudagraph::{args, dst, src, Dag, DeviceBuffer, Event, LaunchConfig, Stream};

use crate::common::Gpu;

/// About 0.1 s of GPU time on one thread: long enough that unordered work would overtake it.
const SPIN: i64 = 200_000_000;

register!(gpu "events::order_two_graphs_on_two_streams" => order_two_graphs_on_two_streams);
/// Graph A (stream 1): spin, write 7, record E. Graph B (stream 2): wait for E, copy what A
/// wrote. B's copy sees 7 only if it waited for A.
fn order_two_graphs_on_two_streams(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [spin, write] = gpu.kernels(["spin", "write_slot"])?;
    let out = DeviceBuffer::<u32>::zeros(d, 2)?;
    let e = Event::new(d)?;
    let mut a = Dag::new();
    let s = a.add_kernel(&spin, LaunchConfig::new(1, 1), &args![SPIN])?;
    let w = a.add_kernel(&write, LaunchConfig::new(1, 1), &args![&out, 0u32, 7u32])?;
    let r = a.add_event_record(&e);
    a.chain(&[s, w, r])?;
    let mut b = Dag::new();
    let wait = b.add_event_wait(&e);
    let c = b.add_copy(dst(out.region(1..2)), src(out.region(0..1)))?;
    b.add_dependency(wait, c)?;
    let (mut xa, mut xb) = (a.instantiate(d)?, b.instantiate(d)?);
    drop(e); // the graphs keep it alive
    let s2 = Stream::new(d)?;
    xa.launch(&gpu.stream)?;
    xb.launch(&s2)?;
    xb.synchronize()?;
    let got = out.to_vec()?;
    xa.synchronize()?;
    ensure!(
        got[1] == 7,
        "B copied {} before A wrote 7: it did not wait",
        got[1]
    );
    Ok(())
}

register!(gpu "events::a_stream_waits_for_a_graphs_event" => a_stream_waits_for_a_graphs_event);
/// A graph records an event after slow work; a stream waits for it, then copies.
fn a_stream_waits_for_a_graphs_event(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let [spin, write] = gpu.kernels(["spin", "write_slot"])?;
    let out = DeviceBuffer::<u32>::zeros(d, 2)?;
    let e = Event::new(d)?;
    let mut a = Dag::new();
    let s = a.add_kernel(&spin, LaunchConfig::new(1, 1), &args![SPIN])?;
    let w = a.add_kernel(&write, LaunchConfig::new(1, 1), &args![&out, 0u32, 9u32])?;
    let r = a.add_event_record(&e);
    a.chain(&[s, w, r])?;
    let mut xa = a.instantiate(d)?;
    let s2 = Stream::new(d)?;
    xa.launch(&gpu.stream)?;
    s2.wait_event(&e)?;
    write.launch(&s2, LaunchConfig::new(1, 1), &args![&out, 1u32, 5u32])?;
    s2.synchronize()?;
    // The stream's write ran after the event, so after the graph's write.
    ensure!(
        e.query()?,
        "the event had not completed when the stream's work had"
    );
    let got = out.to_vec()?;
    ensure!(got == [9, 5], "{got:?}");
    xa.synchronize()?;
    Ok(())
}

register!(gpu "events::exec_set_event" => exec_set_event);
/// `Exec::set_event`: after the update the graph records the new event (it is recorded after
/// `start`, where before the update it was recorded only before it); a node without an event
/// is refused.
fn exec_set_event(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (e1, e2, start) = (Event::new(d)?, Event::new(d)?, Event::new(d)?);
    let [spin] = gpu.kernels(["spin"])?;
    let mut dag = Dag::new();
    let r = dag.add_event_record(&e1);
    let mut x = dag.instantiate(d)?;
    e2.record(&gpu.stream)?;
    // A gap between e2 and start, so that their order shows in the elapsed time.
    spin.launch(&gpu.stream, LaunchConfig::new(1, 1), &args![1_000_000i64])?;
    start.record(&gpu.stream)?;
    x.launch(&gpu.stream)?;
    x.synchronize()?;
    start.elapsed_ms(&e1)?; // e1 was recorded
    let before = start.elapsed_ms(&e2)?;
    ensure!(
        before < 0.0,
        "e2 was recorded only before start: {before} ms"
    );
    x.set_event(r, &e2)?;
    start.record(&gpu.stream)?;
    x.launch(&gpu.stream)?;
    x.synchronize()?;
    let ms = start.elapsed_ms(&e2)?;
    ensure!(ms >= 0.0, "the graph recorded e2 after start: {ms} ms");
    let empty = {
        let mut dag = Dag::new();
        let id = dag.add_empty();
        (dag.instantiate(d)?, id)
    };
    let (mut xe, id) = empty;
    ensure!(xe.set_event(id, &e1).is_err(), "an empty node has no event");
    Ok(())
}
