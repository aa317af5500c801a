//! Queuing a block: its H2D on the copy stream, then its work on the compute stream, as one
//! graph launch with the per-block parameters updated, or as the same operations on streams.

use cudagraph::{dst, src, Direction, HostBuffer};

use super::{copy_back, gpu_err, run_start, GpuEngine, GpuMode, COL_ARG, PHASE_ARG, SLOT_ARG};
use crate::error::Result;

impl GpuEngine {
    /// Queues block `launched` from staging buffer `j` ([`GpuEngine::staging`]), as
    /// [`GpuEngine::next_slot`] gave it.
    pub(super) fn submit_staged(&mut self, j: usize) -> Result<()> {
        self.staging()?;
        let staging = self.staging.as_ref().expect("allocated above");
        self.queue_h2d(j, &staging[j])?;
        self.launch_block(j)
    }

    /// Queues the H2D of block `launched` from the pinned `block` into `d_stage[j]` on the copy
    /// stream, ordered after the launch that last read `d_stage[j]` and before the next work on
    /// the compute stream. `block` may be handed on (or dropped) at once: cudagraph notes the
    /// copy on it, and host writes to it wait for the copy.
    pub(super) fn queue_h2d(&self, j: usize, block: &HostBuffer<u8>) -> Result<()> {
        let e = |what: &str, err: cudagraph::Error| gpu_err(what, err);
        if self.launched >= self.d_stage.len() as u64 {
            // The launch `depth` blocks back read `d_stage[j]`.
            self.copy_stream
                .wait_event(&self.read_done[j])
                .map_err(|x| e("ordering the H2D", x))?;
        }
        self.d_stage[j]
            .copy_from_host_async(block, &self.copy_stream)
            .map_err(|x| e("H2D", x))?;
        self.h2d_done[j]
            .record(&self.copy_stream)
            .map_err(|x| e("H2D event", x))?;
        self.stream
            .wait_event(&self.h2d_done[j])
            .map_err(|x| e("ordering the launch", x))
    }

    /// Queues the work of block `launched`, whose H2D into `d_stage[j]` is queued
    /// ([`GpuEngine::queue_h2d`]): one graph launch, or the same operations on the stream.
    pub(super) fn launch_block(&mut self, j: usize) -> Result<()> {
        let e = |what: &str, err: cudagraph::Error| gpu_err(what, err);
        let k = self.launched;
        match self.mode {
            GpuMode::Graph => {
                let exec = self.exec.as_mut().expect("graph mode has an exec");
                let block = &self.d_stage[j];
                for product in &mut self.products {
                    let nodes = product.nodes.expect("built");
                    let (f, d, c) = (nodes.fft, nodes.detect, nodes.d2h);
                    let (complete, g0) = Self::block_spectra(product, k);
                    exec.set_kernel_arg(nodes.reads_block, 0, block)
                        .map_err(|x| e("switching the staging buffer", x))?;
                    if let Some(l) = &product.gather {
                        let col = (k % l.blocks as u64) * l.row_bytes;
                        exec.set_kernel_arg(l.node.expect("built"), COL_ARG, col)
                            .map_err(|x| e("gather column", x))?;
                        // The unpack, FFT and detection run only on the block that completes
                        // a spectrum (the FFT's captured kernels are disabled together).
                        if let Some((u, f)) = f {
                            exec.set_enabled(u, complete)
                                .map_err(|x| e("enabling the unpack", x))?;
                            exec.set_enabled(f, complete)
                                .map_err(|x| e("enabling the FFT", x))?;
                        }
                        exec.set_enabled(d, complete)
                            .map_err(|x| e("enabling detection", x))?;
                    }
                    let (phase, slot0) = run_start(product, g0);
                    exec.set_kernel_arg(d, PHASE_ARG, phase)
                        .map_err(|x| e("integration phase", x))?;
                    exec.set_kernel_arg(d, SLOT_ARG, slot0)
                        .map_err(|x| e("integration slot", x))?;
                    // The integrations go back only from a block that completes one, into
                    // that block's output buffer.
                    let copied = product.backs.copied_by(k);
                    exec.set_enabled(c, copied.is_some())
                        .map_err(|x| e("enabling the D2H", x))?;
                    if let Some((b, first)) = copied {
                        let r = copy_back(product, first);
                        let i = product.backs.next_out(b);
                        exec.set_copy(
                            c,
                            dst(product.out[i].region(r.clone())),
                            src(product.acc.region(r)),
                        )
                        .map_err(|x| e("switching the output buffer", x))?;
                    }
                }
                exec.launch(&self.stream).map_err(|x| e("launch", x))?;
            }
            GpuMode::Stream => {
                // The deferred copies of the previous block's integrations go on a stream of
                // their own beside this block's work, as the graph's root D2H nodes run.
                let fork = self
                    .products
                    .iter()
                    .any(|p| p.backs.deferred && p.backs.copied_by(k).is_some());
                if fork {
                    self.fork
                        .record(&self.stream)
                        .map_err(|x| e("fork event", x))?;
                    self.d2h_stream
                        .wait_event(&self.fork)
                        .map_err(|x| e("ordering the D2H", x))?;
                    for product in self.products.iter_mut().filter(|p| p.backs.deferred) {
                        if let Some((b, first)) = product.backs.copied_by(k) {
                            product
                                .queue_copy_back(b, first, &self.d2h_stream)
                                .map_err(|x| e("D2H", x))?;
                        }
                    }
                    self.join
                        .record(&self.d2h_stream)
                        .map_err(|x| e("join event", x))?;
                }
                for i in 0..self.products.len() {
                    let (complete, g0) = Self::block_spectra(&self.products[i], k);
                    if let Some(l) = &self.products[i].gather {
                        let args = self.gather_args(l, k, j);
                        self.gather
                            .launch(&self.stream, l.cfg, &args)
                            .map_err(|x| e("gather", x))?;
                    }
                    if !complete {
                        continue;
                    }
                    if let Some(fft) = &self.products[i].fft {
                        self.unpack
                            .launch(
                                &self.stream,
                                fft.unpack.cfg,
                                &self.unpack_args(&self.products[i], fft, j),
                            )
                            .map_err(|x| e("unpack", x))?;
                        let spec = Self::fft_spec(fft);
                        let fft = self.products[i].fft.as_mut().expect("matched above");
                        fft.stream
                            .as_mut()
                            .expect("stream mode has plans")
                            .exec(
                                &self.stream,
                                Direction::Forward,
                                &spec.input,
                                &spec.output,
                                &spec.params,
                            )
                            .map_err(|x| e("FFT", x))?;
                    }
                    let product = &self.products[i];
                    self.detect_kernel(product)
                        .launch(
                            &self.stream,
                            product.detect_args.0,
                            &self.detect_args(product, g0, j),
                        )
                        .map_err(|x| e("detect", x))?;
                    let product = &mut self.products[i];
                    if product.backs.deferred {
                        continue;
                    }
                    if let Some((b, first)) = product.backs.copied_by(k) {
                        product
                            .queue_copy_back(b, first, &self.stream)
                            .map_err(|x| e("D2H", x))?;
                    }
                }
                if fork {
                    self.stream
                        .wait_event(&self.join)
                        .map_err(|x| e("joining the D2H", x))?;
                }
            }
        }
        self.read_done[j]
            .record(&self.stream)
            .map_err(|x| e("launch event", x))?;
        self.launched += 1;
        Ok(())
    }
}
