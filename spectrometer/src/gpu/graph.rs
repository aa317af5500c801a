//! The graph mode's DAG: one branch per product, each reading the block from its staging
//! buffer (see the module docs of `gpu`).

use cudagraph::{dst, src, Dag};

use super::{copy_back, gpu_err, GpuEngine, ProductNodes};
use crate::error::Result;

impl GpuEngine {
    /// Builds the per-block DAG and instantiates it: per product its gather (FFTs longer than
    /// a block), unpack and FFT (none for a direct DFT), detection and D2H (a root of its own
    /// where the copy runs a block late). The nodes that read the block (gather, unpack, or a
    /// direct DFT's detection) read staging buffer 0 here; each launch points them at its
    /// block's (`Exec::set_kernel_arg`).
    pub(super) fn build_graph(&mut self) -> Result<()> {
        let mut dag = Dag::new();
        let e = |what: &str, err: cudagraph::Error| gpu_err(what, err);
        let mut nodes = Vec::new();
        let mut gathers = Vec::new();
        for (i, product) in self.products.iter().enumerate() {
            let gather = match &product.gather {
                None => None,
                Some(l) => {
                    let n = dag
                        .add_kernel(&self.gather, l.cfg, &self.gather_args(l, 0, 0))
                        .map_err(|x| e("gather node", x))?;
                    dag.set_name(n, format!("gather {} blocks (product {i})", l.blocks));
                    Some(n)
                }
            };
            gathers.push(gather);
            let f = match &product.fft {
                Some(fft) => {
                    let u = dag
                        .add_kernel(
                            &self.unpack,
                            fft.unpack.cfg,
                            &self.unpack_args(product, fft, 0),
                        )
                        .map_err(|x| e("unpack node", x))?;
                    dag.set_name(
                        u,
                        format!("unpack {} x{} (product {i})", product.p.nfft, product.spb),
                    );
                    let f = dag
                        .add_fft(Self::fft_spec(fft))
                        .map_err(|x| e("FFT node", x))?;
                    dag.set_name(
                        f,
                        format!("FFT {} x{} (product {i})", product.p.nfft, product.spb),
                    );
                    Some((u, f))
                }
                None => None,
            };
            let d = dag
                .add_kernel(
                    self.detect_kernel(product),
                    product.detect_args.0,
                    &self.detect_args(product, 0, 0),
                )
                .map_err(|x| e("detect node", x))?;
            dag.set_name(
                d,
                match f {
                    Some(_) => format!("detect+integrate (product {i})"),
                    None => format!(
                        "DFT {} x{} + detect+integrate (product {i})",
                        product.p.nfft, product.spb
                    ),
                },
            );
            // The size of every block's copy (`Exec::set_copy` changes where, not how much).
            let r = copy_back(product, 0);
            let c = dag
                .add_copy(
                    dst(product.out[0].region(r.clone())),
                    src(product.acc.region(r)),
                )
                .map_err(|x| e("D2H node", x))?;
            let mut chain: Vec<_> = gather.into_iter().collect();
            chain.extend(f.into_iter().flat_map(|(u, f)| [u, f]));
            chain.push(d);
            if product.backs.deferred {
                // A root beside the rest: it copies what the previous launch completed,
                // which this launch's detection does not touch (`deferred_copy`).
                dag.set_name(
                    c,
                    format!("D2H previous block's integrations (product {i})"),
                );
            } else {
                dag.set_name(c, format!("D2H integrations (product {i})"));
                chain.push(c);
            }
            dag.chain(&chain).map_err(|x| e("edges", x))?;
            nodes.push(ProductNodes {
                reads_block: chain[0],
                fft: f,
                detect: d,
                d2h: c,
            });
        }
        for ((product, n), gather) in self.products.iter_mut().zip(nodes).zip(gathers) {
            product.nodes = Some(n);
            if let Some(l) = &mut product.gather {
                l.node = gather;
            }
        }
        let exec = dag
            .into_exec(&self.device)
            .map_err(|x| e("instantiating", x))?;
        self.exec = Some(exec);
        Ok(())
    }
}
