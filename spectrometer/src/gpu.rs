//! The GPU engine: every product is a branch of **one** cudagraph DAG, instantiated once and
//! launched once per block.
//!
//! ```text
//!                  ┌─> unpack ─> FFT (in place) ─> detect+integrate ─> D2H          (product 0)
//! H2D (block) ─────┼─> unpack ─> FFT ─> detect+integrate ─> D2H                     (product 1)
//!                  └─> …
//! D2H of the previous block's integrations (products whose copy runs late, see below)
//! ```
//!
//! - **H2D**, outside the graph on a copy stream so that it overlaps the previous block's GPU
//!   work: the block goes from the reader's ring, which is page-locked (the engine's
//!   [`Engine::Buffer`] is a `HostBuffer<u8>`, so the file is read straight into pinned memory
//!   and no host copy is made), to one of the device staging buffers (two, or one per block
//!   of the longest FFT where that spans blocks, at most eight: `stage_depth` says why);
//!   events order it after the launch that last read that device buffer and before the
//!   launch that reads it. The ring buffer goes back to the reader at once: cudagraph notes
//!   the copy on it, and the reader's next fill waits for that copy. (A block handed in as a
//!   plain slice, [`Engine::process_block`], is first copied on every core into one of as
//!   many pinned staging buffers.)
//! - No copy of the block on the device: the nodes that read it (each product's gather,
//!   unpack, or direct DFT) read its staging buffer, their first argument switched per block
//!   with `Exec::set_kernel_arg`. (A D2D node copied the block into one input buffer for them
//!   before, 28 µs of every 32 MiB block's GPU time on an H100.)
//! - **unpack kernel** per product (`sp_unpack`): the recorder's `[channel][time][pol][re, im]`
//!   integers (4, 8 or 16 bits) of the selected channels and antennas as the FFTs' complex
//!   input, one thread per time step, its writes coalesced.
//! - **FFT node** per product: C2C, `nfft` points, in place, one transform per (coarse channel,
//!   antenna, polarisation, spectrum of the block), with no callback. (A custom cuFFT load
//!   callback decoded the integers before; cudagraph's automatic choice ran it as its
//!   conversion kernel before the transform, fused being slower, and that kernel cost twice
//!   `sp_unpack`'s time: every sample's callback divided its offset four times and read its
//!   parameters from memory.)
//! - **No FFT for short transforms** (at most 16 points, `DFT_MAX`, e.g. the 8x128 product
//!   of Breakthrough Listen's set): the detection kernel `sp_dft_detect` computes each
//!   spectrum's bin as a direct DFT of the integers it reads from the device input (decoded as
//!   `sp_unpack` decodes them), so the product's branch is one kernel node, with no
//!   spectra written to device memory and read back. Measured on an H100 (32 MiB blocks): the
//!   8x128 product's branch took 313 µs a block as FFT and detection, 142 µs as one kernel.
//! - **detect+integrate kernel** per product: fft shift, detection (total power, full
//!   polarisation or Stokes), the antenna sum with weights, and integration over `nint`
//!   spectra into a small ring of integration slots on the device. An integration that spans
//!   blocks carries over (the kernel overwrites a slot only at an integration's first
//!   spectrum). Where the block starts in the integrations (its phase and the slot of its
//!   first integration, computed on the host) are kernel arguments updated per block
//!   (`Exec::set_kernel_arg`).
//! - **D2H** per product: the slots a block completed (one unwrapped run of them where the
//!   product's shape allows, see `slot_ring`; else the whole slot ring) into the same place in
//!   the product's next pinned output buffer (one per staging buffer, taken in turn by the
//!   blocks that copy back; two for a slot ring too large for that, `out_depth`). Where every block
//!   completes exactly the integrations it starts (`spb` a multiple of `nint`: 1024x16 and
//!   the like), the copy runs **one block late**: the D2H node is a root of the graph that
//!   copies what the previous launch completed, beside this block's FFT and detection (which
//!   write other slots, see `deferred_copy`), so it costs no time on the GPU's critical path;
//!   the last block's goes after the last launch. Otherwise it follows the block's own
//!   detection. After launching block `k`, the engine reads the integrations launches
//!   `depth − 1` blocks back copied back (block `k − depth + 1`'s, one block older when
//!   late; `depth` the number of staging buffers), which waits only for those launches
//!   (cudagraph tracks which launches may still use a buffer), so the engine queues blocks
//!   as far ahead as the staging buffers allow and reading overlaps the GPU work of the
//!   blocks queued since.
//!
//! The same work can be issued with plain stream operations instead ([`GpuMode::Stream`]) to
//! measure what the graph gains.
//!
//! - **FFTs longer than a block** (e.g. 2^20 points from 131,072-sample blocks): a gather
//!   kernel node copies each block's samples into its column of a long buffer (the column is a
//!   kernel argument updated per block); the FFT reads the long buffer; the FFT and detect
//!   nodes are enabled (`Exec::set_enabled`, which disables all of an FFT node's captured
//!   kernels) only on the block that completes a spectrum.
//!
//! Limits of this engine (checked when it is made, with an error naming the product): `nfft`
//! must divide the block's new samples (`ntime − OVERLAP`) or be a multiple of them.

use std::time::{Duration, Instant};

use cudagraph::{
    args, Device, DeviceBuffer, Direction, Event, Exec, FftParams, FftPlan, FftPlanDesc, FftSpec,
    FftType, HostBuffer, Kernel, KernelArg, LaunchConfig, Module, NodeId, Stream, StreamFft,
};
use num_complex::Complex32;
use rayon::prelude::*;

use crate::engine::{BlockView, Engine, Integration, SpectraPool};
use crate::error::{Error, Result};
use crate::guppi::Geometry;
use crate::plan::{AntennaMode, Detection, Plan, ProductPlan};

mod collect;
mod graph;
mod launch;
mod slots;
mod stages;
use crate::scan::FilledBlock;
use slots::{
    block_start, deferred_copy, detect_block, max_runs, out_depth, slot_ring, slots_copied,
    stage_depth, CopyBacks,
};
pub use stages::StageProfile;

/// How the GPU work of a block is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuMode {
    /// One cudagraph `Exec` launched per block (the default).
    #[default]
    Graph,
    /// The same operations issued one by one on a stream (the baseline).
    Stream,
}

fn gpu_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Engine(format!("GPU engine: {what}: {e}"))
}

/// The kernels' source (`sp_gather`, `sp_detect`, `sp_detect_single`, `sp_dft_detect`).
const DETECT_SRC: &str = include_str!("cuda/detect.cu");

/// Argument indices of `phase` and `slot0` in `sp_detect` (where the block starts, see
/// [`run_start`]).
const PHASE_ARG: usize = 12;
const SLOT_ARG: usize = 13;
/// Argument index of `col` in `sp_gather`.
const COL_ARG: usize = 5;

/// The elements of `product`'s slot ring that block `k` (which completes integrations) copies
/// back: the slots from the first integration it completes, or the whole ring.
fn copy_back(product: &GpuProduct, first_done: u64) -> std::ops::Range<usize> {
    slots_copied(
        product.d2h_slots,
        product.nslots,
        first_done,
        product.slot_len,
    )
}

impl GpuProduct {
    /// Queues on `stream` the copy-back of the integrations block `block` completed, from
    /// integration `first` (see [`copy_back`]), into the next pinned output buffer.
    fn queue_copy_back(
        &mut self,
        block: u64,
        first: u64,
        stream: &Stream,
    ) -> cudagraph::Result<()> {
        let r = copy_back(self, first);
        let i = self.backs.next_out(block);
        self.acc
            .copy_range_to_host_async(r, &mut self.out[i], stream)
    }
}

/// Where a block whose first spectrum has global index `g0` starts in `product`'s
/// integrations, as `sp_detect` takes it: the phase `g0 mod nint` (spectra of the current
/// integration before the block) and the slot of that integration, `(g0 div nint) mod nslots`.
/// The kernel derives every run's slot from these with 32-bit additions: the 64-bit divisions
/// it made per thread before cost more than the detection itself for 2^20-point products.
fn run_start(product: &GpuProduct, g0: u64) -> (u32, u32) {
    block_start(g0, product.p.nint, product.nslots)
}

/// Where the samples of a product whose FFT spans `blocks` blocks are gathered (one row per
/// stream, `blocks` blocks' worth of new samples long).
struct GatherBuffer {
    blocks: usize,
    buf: DeviceBuffer<u8>,
    /// Launch shape and the first five arguments' values of `sp_gather` (all but `col`).
    cfg: LaunchConfig,
    row_bytes: u64,
    in_pitch: u64,
    out_pitch: u64,
    /// The gather node in the graph.
    node: Option<NodeId>,
}

/// A product's FFT node (or stream-mode plan), and the spectra it transforms in place for
/// `sp_detect`.
struct ProductFft {
    spectra: DeviceBuffer<Complex32>,
    plan: FftPlan,
    unpack: Unpack,
    /// Stream mode: the plan on a stream.
    stream: Option<StreamFft>,
}

/// Products whose transforms have at most this many points get no FFT: `sp_dft_detect` computes
/// each spectrum as a direct DFT of the recorder's integers while it detects (at most 16
/// multiply-adds per sample and polarisation, from a block it reads once), where cuFFT's node
/// would read the block, write 8 bytes per sample of spectra and `sp_detect` read them back.
/// Must equal `SP_DFT_MAX` in `cuda/detect.cu`.
const DFT_MAX: usize = 16;

/// Spectra a thread of `sp_detect` loads at once; products whose runs of spectra in a block
/// are shorter (a long FFT's, one spectrum a block; an integration of fewer spectra) get
/// `sp_detect_single`, which needs fewer registers (`cuda/detect.cu` says why). Must equal
/// `SP_RUN_UNROLL` there.
const RUN_UNROLL: usize = 8;

/// A product's nodes in the graph.
#[derive(Clone, Copy)]
struct ProductNodes {
    /// The node that reads the block, its argument 0 switched to the block's staging buffer
    /// per launch: the gather, else the unpack kernel, else (a direct DFT) the detection.
    reads_block: NodeId,
    /// The unpack kernel and the FFT (none for a direct DFT).
    fft: Option<(NodeId, NodeId)>,
    detect: NodeId,
    d2h: NodeId,
}

/// `sp_unpack`'s launch shape and its arguments after the first two (the input and the
/// spectra).
struct Unpack {
    cfg: LaunchConfig,
    /// Time steps per (channel, antenna) row: `spb * nfft`.
    len: u64,
    /// `npol`, `nant`, `ant0`, `chan_start`, `nchan_per_ant`.
    dims: [u32; 5],
    /// Samples per channel of what is unpacked (the block, or the long buffer: `nfft`).
    ntime: u64,
    nbits: u32,
}

/// One product's device state.
struct GpuProduct {
    p: ProductPlan,
    /// Spectra per stream per block.
    spb: usize,
    /// Integration slots on the device.
    nslots: usize,
    /// Slots a block's D2H copies back ([`copy_back`]): the `n` slots from the first
    /// integration the block completes, where every completing block completes at most `n`
    /// and they never wrap around the ring; `None`: the whole ring.
    d2h_slots: Option<usize>,
    /// Values per slot: outputs × IFs × channels.
    slot_len: usize,
    /// The product's FFT; `None` for a transform of at most [`DFT_MAX`] points, which the
    /// detection kernel computes itself (`sp_dft_detect`).
    fft: Option<ProductFft>,
    acc: DeviceBuffer<f32>,
    /// The pinned output buffers, used in turn by the blocks that copy integrations back.
    out: Vec<HostBuffer<f32>>,
    /// Which blocks copy integrations back, into which of `out`, and which are unread. The
    /// D2H of block `k`'s integrations may run one block late (`backs.deferred`), in block
    /// `k + 1`'s work beside its FFT and detection, instead of after block `k`'s detection
    /// ([`deferred_copy`]).
    backs: CopyBacks,
    weights: DeviceBuffer<f32>,
    /// The detection kernel's launch shape and its arguments after the first three, but for
    /// `phase` and `slot0` (per block): 9 before them, 5 after.
    detect_args: (LaunchConfig, [u32; 14]),
    /// Its nodes in the graph.
    nodes: Option<ProductNodes>,
    /// For an FFT longer than a block: where its samples are gathered.
    gather: Option<GatherBuffer>,
}

/// The GPU engine (see the module docs).
pub struct GpuEngine {
    plan: Plan,
    device: Device,
    stream: Stream,
    mode: GpuMode,
    /// Pinned staging buffers (one per device staging buffer) for blocks handed in as slices
    /// ([`Engine::process_block`]) and for [`GpuEngine::run_from_pinned`]; allocated on first
    /// use (the pipeline's blocks come in pinned ring buffers and need none).
    staging: Option<Vec<HostBuffer<u8>>>,
    /// Device staging buffers the copy stream fills, block `k` into `d_stage[k % depth]`
    /// ([`stage_depth`]).
    d_stage: Vec<DeviceBuffer<u8>>,
    copy_stream: Stream,
    /// Recorded on the copy stream after the H2D into `d_stage[j]`.
    h2d_done: Vec<Event>,
    /// Recorded on the compute stream after the launch that read `d_stage[j]`.
    read_done: Vec<Event>,
    /// Stream mode: the stream of the deferred D2H copies, forked from the compute stream
    /// (`fork`) at a block's start and joined back (`join`) at its end.
    d2h_stream: Stream,
    fork: Event,
    join: Event,
    detect: Kernel,
    /// `sp_detect_single`, for products whose runs are shorter than [`RUN_UNROLL`] spectra.
    detect_single: Kernel,
    /// `sp_dft_detect`, for products without an FFT.
    dft_detect: Kernel,
    gather: Kernel,
    unpack: Kernel,
    _module: Module,
    products: Vec<GpuProduct>,
    exec: Option<Exec>,
    /// Blocks launched.
    launched: u64,
    stage_time: Duration,
    submit_time: Duration,
    collect_time: Duration,
    /// Where the integrations' buffers come from (the writer hands them back).
    pool: SpectraPool,
}

impl GpuEngine {
    /// Makes the engine for `plan` on GPU `ordinal`: compiles the kernels,
    /// allocates the device and pinned buffers, and (in graph mode) builds and instantiates
    /// the DAG.
    pub fn new(plan: &Plan, ordinal: usize, mode: GpuMode) -> Result<GpuEngine> {
        let g = &plan.geometry;
        let device = Device::get(ordinal).map_err(|e| gpu_err("opening the GPU", e))?;
        let stream = Stream::new(&device).map_err(|e| gpu_err("creating a stream", e))?;
        let module =
            Module::from_source(&device, DETECT_SRC).map_err(|e| gpu_err("compiling", e))?;
        let detect = module
            .kernel("sp_detect")
            .map_err(|e| gpu_err("detect kernel", e))?;
        let detect_single = module
            .kernel("sp_detect_single")
            .map_err(|e| gpu_err("detect kernel", e))?;
        let dft_detect = module
            .kernel("sp_dft_detect")
            .map_err(|e| gpu_err("DFT detect kernel", e))?;
        let gather = module
            .kernel("sp_gather")
            .map_err(|e| gpu_err("gather kernel", e))?;
        let unpack = module
            .kernel("sp_unpack")
            .map_err(|e| gpu_err("unpack kernel", e))?;
        let new = g.new_samples();
        let ants: Vec<usize> = plan.antennas.clone();
        if ants.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err(gpu_err(
                "antenna selection",
                "the selected antennas must be consecutive",
            ));
        }
        let nant = ants.len();
        if !matches!(g.nbits, 4 | 8 | 16) {
            return Err(gpu_err("NBITS", format!("{} is not supported", g.nbits)));
        }
        let alloc = |what: &str, e: cudagraph::Error| gpu_err(what, e);
        let depth = stage_depth(new, plan.products.iter().map(|p| p.nfft));
        let d_stage = (0..depth)
            .map(|_| {
                DeviceBuffer::<u8>::zeros(&device, g.blocsize).map_err(|e| alloc("staging", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let copy_stream = Stream::new(&device).map_err(|e| gpu_err("creating a stream", e))?;
        let event = || Event::new(&device).map_err(|e| gpu_err("creating an event", e));
        let events = || (0..depth).map(|_| event()).collect::<Result<Vec<_>>>();
        let (h2d_done, read_done) = (events()?, events()?);
        let d2h_stream = Stream::new(&device).map_err(|e| gpu_err("creating a stream", e))?;
        let (fork, join) = (event()?, event()?);
        let mut products = Vec::new();
        for p in &plan.products {
            // An FFT within a block: `spb` spectra per block. Longer: one spectrum every
            // `blocks` blocks, its samples gathered in a long buffer.
            let (spb, blocks) = if new.is_multiple_of(p.nfft) {
                (new / p.nfft, 1)
            } else if p.nfft.is_multiple_of(new) {
                (1, p.nfft / new)
            } else {
                return Err(Error::Engine(format!(
                    "GPU engine: product {} (nfft {}): nfft must divide the {new} new samples per \
                     block, or be a multiple of them (other lengths run on the CPU engine: \
                     --device cpu)",
                    p.index, p.nfft
                )));
            };
            let long = if blocks > 1 {
                let bpt = g.bytes_per_time();
                let row_bytes = (new * bpt) as u64;
                let out_pitch = (p.nfft * bpt) as u64;
                Some(GatherBuffer {
                    blocks,
                    buf: DeviceBuffer::zeros(&device, g.obsnchan * p.nfft * bpt)
                        .map_err(|e| alloc("long-FFT buffer", e))?,
                    cfg: LaunchConfig::new((256, g.obsnchan as u32), 256),
                    row_bytes,
                    in_pitch: (g.ntime * bpt) as u64,
                    out_pitch,
                    node: None,
                })
            } else {
                None
            };
            let nstreams = plan.nchan * nant * g.npol;
            let batch = nstreams * spb;
            let nout = plan.outputs.len();
            let slot_len = nout * p.nifs * p.nchans;
            let (nslots, d2h_slots) = slot_ring(spb, p.nint, blocks > 1);
            let weights = match plan.mode {
                AntennaMode::Sum => plan.weights.clone(),
                AntennaMode::Separate => vec![1.0; nant],
            };
            let mode_code = match p.detection {
                Detection::TotalPower => 0u32,
                Detection::FullPol => 1,
                Detection::Stokes => 2,
            };
            let (ant0, chan_start, nchan_per_ant) = (
                ants[0] as u32,
                plan.chan_start as u32,
                g.nchan_per_ant as u32,
            );
            // Samples per channel of what the FFT reads: the long buffer holds `nfft`.
            let ntime = if blocks > 1 { p.nfft } else { g.ntime };
            let fft = if p.nfft <= DFT_MAX && blocks == 1 {
                None
            } else {
                let desc = FftPlanDesc::new(FftType::C2C, &[p.nfft as i64], batch as i64);
                let fft = FftPlan::new(desc).map_err(|e| gpu_err("FFT plan", e))?;
                // One thread per time step of each (channel, antenna) row.
                let len = (spb * p.nfft) as u64;
                let rows = (plan.nchan * nant) as u32;
                Some(ProductFft {
                    spectra: DeviceBuffer::zeros(&device, batch * p.nfft)
                        .map_err(|e| alloc("spectra", e))?,
                    plan: fft,
                    unpack: Unpack {
                        cfg: LaunchConfig::new((len.div_ceil(256) as u32, rows), 256),
                        len,
                        dims: [g.npol as u32, nant as u32, ant0, chan_start, nchan_per_ant],
                        ntime: ntime as u64,
                        nbits: g.nbits as u32,
                    },
                    stream: None,
                })
            };
            // Runs of spectra per block: at most `max_runs`. A thread block is one run's
            // 256 fine channels, or, for nfft < 256, `per` = 256 / nfft whole runs (an 8-point
            // FFT would otherwise make blocks of 8 threads, a quarter of a warp); grid.z covers
            // the runs (each z-block loops over them with a stride, so the limit of 65,535 is
            // never hit). `sp_dft_detect` takes one warp per run instead, 8 per block.
            let cfg = if fft.is_none() {
                let z = max_runs(spb, p.nint).div_ceil(8).min(4096) as u32;
                LaunchConfig::new((1, plan.nchan as u32, z), 256)
            } else {
                let (threads, per) = detect_block(p.nfft);
                let nruns = max_runs(spb, p.nint).div_ceil(per).min(4096) as u32;
                LaunchConfig::new(
                    (p.nfft.div_ceil(256) as u32, plan.nchan as u32, nruns),
                    threads,
                )
            };
            let ring = nslots * slot_len;
            let out = (0..out_depth(depth, ring * size_of::<f32>()))
                .map(|_| HostBuffer::zeros(&device, ring).map_err(|e| alloc("output", e)))
                .collect::<Result<Vec<_>>>()?;
            products.push(GpuProduct {
                spb,
                nslots,
                d2h_slots,
                slot_len,
                fft,
                acc: DeviceBuffer::zeros(&device, nslots * slot_len)
                    .map_err(|e| alloc("accumulator", e))?,
                backs: CopyBacks::new(
                    spb,
                    blocks,
                    p.nint,
                    p.integrations,
                    deferred_copy(spb, p.nint, blocks > 1),
                    out.len(),
                ),
                out,
                weights: DeviceBuffer::from_slice(&device, &weights)
                    .map_err(|e| alloc("weights", e))?,
                detect_args: (
                    cfg,
                    [
                        p.nfft as u32,
                        spb as u32,
                        g.npol as u32,
                        plan.nchan as u32,
                        nant as u32,
                        (plan.mode == AntennaMode::Sum) as u32,
                        mode_code,
                        p.nint as u32,
                        nslots as u32,
                        g.nbits as u32,
                        ant0,
                        chan_start,
                        nchan_per_ant,
                        ntime as u32,
                    ],
                ),
                nodes: None,
                gather: long,
                p: p.clone(),
            });
        }
        let mut engine = GpuEngine {
            plan: plan.clone(),
            device,
            stream,
            mode,
            staging: None,
            d_stage,
            copy_stream,
            h2d_done,
            read_done,
            d2h_stream,
            fork,
            join,
            detect,
            detect_single,
            dft_detect,
            gather,
            unpack,
            _module: module,
            products,
            exec: None,
            launched: 0,
            stage_time: Duration::ZERO,
            submit_time: Duration::ZERO,
            collect_time: Duration::ZERO,
            pool: SpectraPool::new(),
        };
        match mode {
            GpuMode::Graph => engine.build_graph()?,
            GpuMode::Stream => {
                for fft in engine.products.iter_mut().filter_map(|p| p.fft.as_mut()) {
                    fft.stream = Some(
                        StreamFft::new(&engine.device, &fft.plan)
                            .map_err(|e| gpu_err("FFT plan on a stream", e))?,
                    );
                }
            }
        }
        Ok(engine)
    }

    /// The FFT of `product`, whose FFT is `fft`: in place on the spectra `sp_unpack` wrote.
    fn fft_spec(fft: &ProductFft) -> FftSpec {
        FftSpec {
            plan: fft.plan.clone(),
            direction: Direction::Forward,
            input: (&fft.spectra).into(),
            output: (&fft.spectra).into(),
            params: FftParams::none(),
        }
    }

    /// `sp_unpack`'s arguments for `product`, whose FFT is `fft`: from the block in staging
    /// buffer `j`, or from the long buffer for an FFT longer than a block.
    fn unpack_args<'a>(
        &'a self,
        product: &'a GpuProduct,
        fft: &'a ProductFft,
        j: usize,
    ) -> [KernelArg<'a>; 10] {
        let Unpack {
            len,
            dims: a,
            ntime,
            nbits,
            ..
        } = fft.unpack;
        let input = match &product.gather {
            None => KernelArg::from(&self.d_stage[j]),
            Some(l) => KernelArg::from(&l.buf),
        };
        args![
            input,
            &fft.spectra,
            len,
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            ntime,
            nbits
        ]
    }

    /// The detection kernel of `product`: `sp_detect` after an FFT (`sp_detect_single` where
    /// a block's runs of spectra are shorter than [`RUN_UNROLL`]), else `sp_dft_detect`.
    fn detect_kernel(&self, product: &GpuProduct) -> &Kernel {
        match product.fft {
            Some(_) if product.spb.min(product.p.nint) < RUN_UNROLL => &self.detect_single,
            Some(_) => &self.detect,
            None => &self.dft_detect,
        }
    }

    /// The detection kernel's arguments for a block whose first spectrum is `g0`: the spectra,
    /// or (no FFT) the block itself in staging buffer `j`, first.
    fn detect_args<'a>(
        &'a self,
        product: &'a GpuProduct,
        g0: u64,
        j: usize,
    ) -> [KernelArg<'a>; 19] {
        let a = product.detect_args.1;
        let (phase, slot0) = run_start(product, g0);
        let input = match &product.fft {
            Some(fft) => KernelArg::from(&fft.spectra),
            None => KernelArg::from(&self.d_stage[j]),
        };
        args![
            input,
            &product.acc,
            &product.weights,
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
            a[6],
            a[7],
            a[8],
            phase,
            slot0,
            a[9],
            a[10],
            a[11],
            a[12],
            a[13]
        ]
    }

    /// `sp_gather`'s arguments for block `block`, in staging buffer `j`.
    fn gather_args<'a>(
        &'a self,
        l: &'a GatherBuffer,
        block: u64,
        j: usize,
    ) -> [cudagraph::KernelArg<'a>; 6] {
        let col = (block % l.blocks as u64) * l.row_bytes;
        args![
            &self.d_stage[j],
            &l.buf,
            l.row_bytes,
            l.in_pitch,
            l.out_pitch,
            col
        ]
    }

    /// Whether block `k` completes a spectrum of `product`, and the global index of the block's
    /// first (or only) spectrum.
    fn block_spectra(product: &GpuProduct, k: u64) -> (bool, u64) {
        match &product.gather {
            None => (true, k * product.spb as u64),
            Some(l) => ((k + 1).is_multiple_of(l.blocks as u64), k / l.blocks as u64),
        }
    }

    /// The DOT text of the graph (graph mode).
    pub fn to_dot(&self) -> Option<String> {
        self.exec.as_ref().map(|x| x.to_dot())
    }

    /// Each node's time in the per-block graph (graph mode; `None` in stream mode), over
    /// `launches` launches of a sequential copy of it on the compute stream
    /// ([`cudagraph::Exec::profile`]: the nodes one at a time, events between them). The
    /// engine's own graph is not launched. The copy runs on the engine's buffers as they are:
    /// before the first block it reads the zeroed staging buffer, which only the timings see
    /// (FFT, detection and copies take the same time whatever the values), and every buffer
    /// it writes is written again by the first blocks before anything reads it (a long FFT's
    /// columns by their gathers, the FFTs' spectra, which they
    /// transform in place, by `sp_unpack`, each integration slot at its integration's first
    /// spectrum, the output buffers by the blocks' copies). So a run after
    /// it writes the same files as one without.
    pub fn node_profile(&self, launches: u32) -> Result<Option<cudagraph::Profile>> {
        self.exec
            .as_ref()
            .map(|x| {
                x.profile(&self.stream, launches)
                    .map_err(|e| gpu_err("profiling the graph", e))
            })
            .transpose()
    }

    /// Device memory the engine allocated, bytes.
    pub fn device_bytes(&self) -> usize {
        self.d_stage.len() * self.d_stage[0].size_bytes()
            + self
                .products
                .iter()
                .map(|p| {
                    p.fft.as_ref().map_or(0, |f| f.spectra.size_bytes())
                        + p.acc.size_bytes()
                        + p.weights.size_bytes()
                        + p.gather.as_ref().map_or(0, |l| l.buf.size_bytes())
                })
                .sum::<usize>()
    }

    /// The pinned staging buffers, allocated on first use.
    fn staging(&mut self) -> Result<&mut [HostBuffer<u8>]> {
        if self.staging.is_none() {
            let n = self.plan.geometry.blocsize;
            let alloc =
                || HostBuffer::<u8>::zeros(&self.device, n).map_err(|e| gpu_err("staging", e));
            self.staging = Some(
                (0..self.d_stage.len())
                    .map(|_| alloc())
                    .collect::<Result<_>>()?,
            );
        }
        Ok(self.staging.as_mut().expect("allocated above"))
    }
}

impl Engine for GpuEngine {
    type Buffer = HostBuffer<u8>;

    fn name(&self) -> &'static str {
        match self.mode {
            GpuMode::Graph => "gpu (graph)",
            GpuMode::Stream => "gpu (stream)",
        }
    }

    fn alloc_buffer(&mut self, len: usize) -> Result<HostBuffer<u8>> {
        HostBuffer::zeros(&self.device, len).map_err(|e| gpu_err("a pinned ring buffer", e))
    }

    fn process_block(&mut self, block: &BlockView<'_>, out: &mut Vec<Integration>) -> Result<()> {
        crate::engine::check_block(&self.plan, block)?;
        let j = self.next_slot(out)?;
        let t = Instant::now();
        // Waits only for the H2D `depth` blocks back, the last one that read this buffer; the
        // copy runs on every core.
        self.staging()?[j]
            .write_with(|dst| {
                const CHUNK: usize = 1 << 20;
                dst.par_chunks_mut(CHUNK)
                    .zip(block.data.par_chunks(CHUNK))
                    .for_each(|(d, s)| d.copy_from_slice(s));
            })
            .map_err(|x| gpu_err("staging the block", x))?;
        self.stage_time += t.elapsed();
        let t = Instant::now();
        self.submit_staged(j)?;
        self.submit_time += t.elapsed();
        self.collect_previous(out)
    }

    /// The pipeline's path: the H2D reads the pinned ring buffer itself (no host copy).
    fn process_filled(
        &mut self,
        block: &FilledBlock<HostBuffer<u8>>,
        _geometry: &Geometry,
        out: &mut Vec<Integration>,
    ) -> Result<()> {
        crate::engine::check_block_size(&self.plan, block.seq, block.buf.len())?;
        let j = self.next_slot(out)?;
        let t = Instant::now();
        self.queue_h2d(j, &block.buf)?;
        self.launch_block(j)?;
        self.submit_time += t.elapsed();
        self.collect_previous(out)
    }

    fn finish(&mut self, out: &mut Vec<Integration>) -> Result<()> {
        let t = Instant::now();
        if let Some(last) = self.launched.checked_sub(1) {
            // Every copy queued; then a deferred copy's last block, copied back here on the
            // stream after the last launch (its output buffers all read, so room is made).
            self.collect_all(out)?;
            for product in self.products.iter_mut().filter(|p| p.backs.deferred) {
                if let Some(first) = product.backs.first_completed(last) {
                    product
                        .queue_copy_back(last, first, &self.stream)
                        .map_err(|x| gpu_err("D2H of the last block", x))?;
                }
            }
            self.collect_all(out)?;
        }
        if let Some(exec) = &mut self.exec {
            exec.synchronize().map_err(|x| gpu_err("finishing", x))?;
        }
        self.stream
            .synchronize()
            .map_err(|x| gpu_err("finishing", x))?;
        self.collect_time += t.elapsed();
        Ok(())
    }

    fn device_bytes(&self) -> usize {
        GpuEngine::device_bytes(self)
    }

    fn device_memory_in_use(&self) -> Option<u64> {
        let (free, total) = self.device.memory_info().ok()?;
        Some(total.saturating_sub(free) as u64)
    }

    fn spectra_pool(&self) -> &SpectraPool {
        &self.pool
    }

    fn timings(&self) -> Vec<(&'static str, Duration)> {
        vec![
            ("stage (host copy to pinned)", self.stage_time),
            ("submit (H2D, GPU, D2H queued)", self.submit_time),
            ("wait + collect", self.collect_time),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::{DETECT_SRC, DFT_MAX, RUN_UNROLL};

    /// The value of `#define NAME` in `detect.cu`.
    fn define(name: &str) -> usize {
        let prefix = format!("#define {name} ");
        let value = DETECT_SRC
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{name} in detect.cu"));
        value.trim().parse().expect("a number")
    }

    /// The host's limit for a direct DFT is the one `sp_dft_detect` was written for.
    #[test]
    fn the_direct_dft_limit_matches_the_kernels() {
        assert_eq!(define("SP_DFT_MAX"), DFT_MAX);
    }

    /// The run length from which the host chooses `sp_detect` is the one it was written for.
    #[test]
    fn the_run_unroll_matches_the_kernels() {
        assert_eq!(define("SP_RUN_UNROLL"), RUN_UNROLL);
    }
}
