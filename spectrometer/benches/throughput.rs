//! Spectrometer throughput on the GPU: the same scan through the GPU engine issued as one graph
//! launch per block and as plain stream operations, side by side in one run, for small blocks
//! (launch overhead dominates) and realistic ones, with the host→device bandwidth measured in the
//! same run. Needs a GPU (exits with a message without one).
//!
//! `cargo bench -p cudagraph-spectrometer --bench throughput`; environment:
//! `SPECTRO_BENCH_DIR` (where the scans are generated; default a temporary directory),
//! `SPECTRO_BENCH_GIB` (size of the realistic scan, default 16, as in the headline;
//! the trio's `2^20x51` product needs 408 blocks, 13 GiB, for one integration).

use std::path::PathBuf;
use std::time::Instant;

use cudagraph::{DeviceBuffer, Event, HostBuffer, Stream};
use spectrometer::generate::{generate, GenerateSpec};
use spectrometer::gpu::{GpuEngine, GpuMode};
use spectrometer::pipeline::{run_stem, EngineKind, RunConfig, StemReport};
use spectrometer::plan::{Plan, ProductSpec, Selection};
use spectrometer::scan::Scan;

fn main() -> anyhow::Result<()> {
    let device = match cudagraph::Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            println!("throughput bench: no GPU ({e}); nothing measured");
            return Ok(());
        }
    };
    println!("GPU: {}", device.properties().name);
    let h2d = h2d_bandwidth(&device)?;
    println!("pinned host→device copy, 256 MiB: {:.1} GB/s", h2d / 1e9);

    let base = std::env::var_os("SPECTRO_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join("cudagraph-spectro-bench");
    let gib: f64 = std::env::var("SPECTRO_BENCH_GIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16.0);
    // Breakthrough Listen compute node band: 64 coarse channels x 2 pols x 8 bits,
    // 2.9296875 MHz per channel, 131,072 samples per block (32 MiB blocks).
    let block_bytes = 64 * 2 * 2 * 131_072usize;
    let blocks = ((gib * (1u64 << 30) as f64) / block_bytes as f64)
        .round()
        .max(4.0) as usize;
    let realistic = scan_spec(&base, "bl", 64, 131_072, blocks);
    // Small blocks: 8 channels x 4,096 samples (128 KiB), where launch costs dominate.
    let small = scan_spec(&base, "small", 8, 4_096, 512);
    for s in [&realistic, &small] {
        let t = Instant::now();
        generate(s).map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "generated {} ({} blocks) in {:.1} s",
            s.stem,
            s.blocks_per_file * s.files,
            t.elapsed().as_secs_f64()
        );
    }

    let headline = [ProductSpec::from_str_checked("1024x16:i")?];
    let fullpol = [ProductSpec::from_str_checked("1024x16:full")?];
    let trio = [
        ProductSpec::from_str_checked("2^20x51:i")?,
        ProductSpec::from_str_checked("8x128:i")?,
        ProductSpec::from_str_checked("1024x3072:i")?,
    ];
    let small_products = [ProductSpec::from_str_checked("64x16:i")?];
    println!();
    println!("GPU stages fed from pinned host memory (no file reading, no host copy), {} blocks of {} MiB:", 64, block_bytes >> 20);
    println!("| products | mode | GB/s | of the H2D bandwidth |");
    println!("| --- | --- | ---: | ---: |");
    let scan =
        Scan::open(&realistic.dir.join(&realistic.stem)).map_err(|e| anyhow::anyhow!("{e}"))?;
    for (products, label) in [(&headline[..], "1024x16:i"), (&fullpol[..], "1024x16:full")] {
        for mode in [GpuMode::Graph, GpuMode::Stream] {
            let plan = Plan::new(&scan, products, &Selection::default())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut engine = GpuEngine::new(&plan, 0, mode).map_err(|e| anyhow::anyhow!("{e}"))?;
            engine
                .run_from_pinned(4)
                .map_err(|e| anyhow::anyhow!("{e}"))?; // warm-up
            let blocks = 64u64;
            let t = engine
                .run_from_pinned(blocks)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let rate = (blocks as usize * block_bytes) as f64 / t.as_secs_f64();
            println!(
                "| {label} | {mode:?} | {:.1} | {:.0}% |",
                rate / 1e9,
                100.0 * rate / h2d
            );
        }
    }
    println!();
    println!("| scan | products | mode | blocks | input GB/s | real-time factor | wall s | GPU engine phases (s) |");
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |");
    let mut rows = Vec::new();
    for (s, products, label) in [
        (&small, &small_products[..], "64x16:i"),
        (&realistic, &headline[..], "1024x16:i"),
        (&realistic, &fullpol[..], "1024x16:full"),
        (&realistic, &trio[..], "2^20x51 + 8x128 + 1024x3072 (i)"),
    ] {
        for mode in [GpuMode::Graph, GpuMode::Stream] {
            let r = run_once(s, products, mode, &base)?;
            println!(
                "| {} | {label} | {mode:?} | {} | {:.2} | {:.1} | {:.2} | {} |",
                s.stem,
                r.data_blocks + r.gap_blocks,
                r.input_rate() / 1e9,
                r.realtime_factor(),
                r.wall.as_secs_f64(),
                r.engine
                    .iter()
                    .map(|(n, d)| format!("{n} {:.2}", d.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            rows.push((s.stem.clone(), label, mode, r.input_rate()));
        }
    }
    println!();
    for pair in rows.chunks(2) {
        if let [(stem, label, _, g), (_, _, _, st)] = pair {
            println!("{stem} {label}: graph / stream throughput = {:.2}", g / st);
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

trait Checked: Sized {
    fn from_str_checked(s: &str) -> anyhow::Result<Self>;
}
impl Checked for ProductSpec {
    fn from_str_checked(s: &str) -> anyhow::Result<Self> {
        s.parse().map_err(|e| anyhow::anyhow!("{e}"))
    }
}

fn scan_spec(
    base: &std::path::Path,
    stem: &str,
    nchan: usize,
    ntime: usize,
    blocks: usize,
) -> GenerateSpec {
    let files = blocks.div_ceil(16).max(1);
    GenerateSpec {
        dir: base.to_path_buf(),
        stem: stem.to_string(),
        nchan,
        nants: 1,
        npol: 4,
        nbits: 8,
        ntime,
        overlap: 0,
        blocks_per_file: blocks.div_ceil(files),
        files,
        obsfreq: 1500.0,
        obsbw: -2.9296875 * nchan as f64,
        noise: 8.0,
        ..GenerateSpec::default()
    }
}

fn run_once(
    s: &GenerateSpec,
    products: &[ProductSpec],
    mode: GpuMode,
    base: &std::path::Path,
) -> anyhow::Result<StemReport> {
    let scan = Scan::open(&s.dir.join(&s.stem)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sel = Selection::default();
    let plan = Plan::new(&scan, products, &sel).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = RunConfig {
        inputs: vec![s.dir.join(&s.stem)],
        out_dir: base.join("out"),
        products: products.to_vec(),
        selection: sel,
        engine: EngineKind::Gpu { ordinal: 0, mode },
        ring: 4,
        ..RunConfig::default()
    };
    let t = Instant::now();
    let mut engine = GpuEngine::new(&plan, 0, mode).map_err(|e| anyhow::anyhow!("{e}"))?;
    let setup = t.elapsed();
    let r = run_stem(&scan, &plan, &mut engine, &cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let _ = std::fs::remove_dir_all(base.join("out"));
    let total = setup + r.wall;
    println!(
        "  ({:?}: engine set-up {:.2} s (compile, plans, instantiate); whole run {:.2} s = {:.2} GB/s; device memory {} MiB)",
        mode,
        setup.as_secs_f64(),
        total.as_secs_f64(),
        r.bytes_read as f64 / total.as_secs_f64() / 1e9,
        engine.device_bytes() >> 20
    );
    Ok(r)
}

/// Pinned host→device bandwidth, bytes per second (best of 5 copies of 256 MiB).
fn h2d_bandwidth(device: &cudagraph::Device) -> anyhow::Result<f64> {
    let n = 256 << 20;
    let host = HostBuffer::<u8>::zeros(device, n)?;
    let dev = DeviceBuffer::<u8>::zeros(device, n)?;
    let s = Stream::new(device)?;
    let (a, b) = (Event::new(device)?, Event::new(device)?);
    let mut best = 0f64;
    for _ in 0..5 {
        a.record(&s)?;
        dev.copy_from_host_async(&host, &s)?;
        b.record(&s)?;
        b.synchronize()?;
        let ms = a.elapsed_ms(&b)? as f64;
        best = best.max(n as f64 / (ms * 1e-3));
    }
    Ok(best)
}
