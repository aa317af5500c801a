//! The GPU stages alone, fed from the engine's pinned staging buffers (no file reading, no
//! host copy): their pipelined rate ([`GpuEngine::run_from_pinned`]) and where their time goes
//! ([`GpuEngine::profile_from_pinned`]), for the throughput bench.

use std::time::{Duration, Instant};

use cudagraph::Event;

use super::{gpu_err, GpuEngine};
use crate::engine::{Engine, Integration};
use crate::error::Result;

/// What [`GpuEngine::profile_from_pinned`] measured: milliseconds per block of each GPU
/// stage, each timed alone.
#[derive(Clone, Copy, Debug)]
pub struct StageProfile {
    /// Blocks measured.
    pub blocks: u64,
    /// Bytes of one block.
    pub block_bytes: usize,
    /// The host→device copy of one block from pinned memory.
    pub h2d_ms: f64,
    /// The GPU work of one block after its copy (the graph launch, or the stream operations).
    pub work_ms: f64,
}

impl StageProfile {
    /// Input bytes per second with the copy and the work fully overlapped (the bound).
    pub fn overlapped_rate(&self) -> f64 {
        self.block_bytes as f64 / (self.h2d_ms.max(self.work_ms) * 1e-3)
    }

    /// Input bytes per second with the copy and the work one after the other.
    pub fn serial_rate(&self) -> f64 {
        self.block_bytes as f64 / ((self.h2d_ms + self.work_ms) * 1e-3)
    }
}

impl GpuEngine {
    /// Runs `blocks` blocks from the pinned staging buffers as they are (no file reading, no
    /// host copy): the throughput of the GPU stages fed from pinned memory. Returns the wall
    /// time; the integrations are collected and dropped.
    pub fn run_from_pinned(&mut self, blocks: u64) -> Result<Duration> {
        let t = Instant::now();
        let mut sink = Vec::new();
        for _ in 0..blocks {
            let j = self.next_slot(&mut sink)?;
            self.submit_staged(j)?;
            self.drop_previous(&mut sink)?;
        }
        self.finish(&mut sink)?;
        Ok(t.elapsed())
    }

    /// Where the time of the GPU stages goes: runs `blocks` blocks from the pinned staging
    /// buffers one at a time (each block's host→device copy, then its GPU work, timed with
    /// CUDA events, the block waited for before the next), so that neither part overlaps the
    /// other or another block's. The pipelined rate of [`GpuEngine::run_from_pinned`] lies
    /// between `1 / (h2d + work)` (no overlap) and `1 / max(h2d, work)` (full overlap).
    pub fn profile_from_pinned(&mut self, blocks: u64) -> Result<StageProfile> {
        let e = |what: &str, err: cudagraph::Error| gpu_err(what, err);
        let start = Event::new(&self.device).map_err(|x| e("creating an event", x))?;
        let (mut h2d, mut work) = (0f64, 0f64);
        let mut sink = Vec::new();
        for _ in 0..blocks {
            let j = self.next_slot(&mut sink)?;
            start
                .record(&self.copy_stream)
                .map_err(|x| e("profile event", x))?;
            self.submit_staged(j)?;
            // The compute stream waited for the copy, so both have completed.
            self.stream
                .synchronize()
                .map_err(|x| e("profiling a block", x))?;
            h2d += f64::from(
                start
                    .elapsed_ms(&self.h2d_done[j])
                    .map_err(|x| e("profile event", x))?,
            );
            work += f64::from(
                self.h2d_done[j]
                    .elapsed_ms(&self.read_done[j])
                    .map_err(|x| e("profile event", x))?,
            );
            self.drop_previous(&mut sink)?;
        }
        self.finish(&mut sink)?;
        for it in sink.drain(..) {
            self.pool.give(it.data);
        }
        let n = blocks.max(1) as f64;
        Ok(StageProfile {
            blocks,
            block_bytes: self.plan.geometry.blocsize,
            h2d_ms: h2d / n,
            work_ms: work / n,
        })
    }

    /// After queuing block `launched − 1`: collects what the launches `depth` blocks back
    /// copied back (through `sink`, left empty; `GpuEngine::collect_previous`) and hands the
    /// buffers straight back, as the writer does.
    fn drop_previous(&mut self, sink: &mut Vec<Integration>) -> Result<()> {
        self.collect_previous(sink)?;
        for it in sink.drain(..) {
            self.pool.give(it.data);
        }
        Ok(())
    }
}
