//! Spectrometer throughput on the GPU: every configuration through the GPU engine issued as one
//! graph launch per block and as plain stream operations, side by side in one run: Stokes I,
//! full polarisation, IQUV and the three-product Breakthrough Listen set on the headline scan,
//! small blocks (launch overhead dominates), NBITS 4 and 16, three antennas; with the
//! host→device bandwidth, the GPU stages fed from pinned memory, device memory and host peak
//! RSS per configuration, and the targets of issue 27 checked at the end. Needs a GPU (exits
//! with a message without one).
//!
//! `cargo bench -p cudagraph-spectrometer --bench throughput`; environment:
//! `SPECTRO_BENCH_DIR` (where the scans are generated; default a temporary directory),
//! `SPECTRO_BENCH_GIB` (size of the realistic scan, default 16, as in the headline;
//! the trio's `2^20x51` product needs 408 blocks, 13 GiB, for one integration).
//! `SPECTRO_BENCH_ONLY` (comma-separated parts of configuration labels: only those run, e.g.
//! `full pol,IQUV`).

use std::path::PathBuf;
use std::time::Instant;

use cudagraph::{DeviceBuffer, Event, HostBuffer, Stream};
use spectrometer::generate::{generate, GenerateSpec};
use spectrometer::gpu::{GpuEngine, GpuMode};
use spectrometer::pipeline::{host_peak_rss, run_stem, EngineKind, RunConfig, StemReport};
use spectrometer::plan::{Plan, ProductSpec, Selection};
use spectrometer::scan::Scan;

/// One measured configuration: a scan and its products.
struct Config {
    scan: usize,
    label: &'static str,
    products: Vec<ProductSpec>,
}

/// What one (configuration, mode) run measured.
struct Row {
    label: &'static str,
    stem: String,
    mode: GpuMode,
    /// Input bytes per second from engine set-up to files closed.
    whole: f64,
    /// Input bytes per second of `run_stem` alone (set-up excluded).
    blocks: f64,
    /// The slowest and fastest whole-run rates of this mode's runs (the row is the median).
    spread: (f64, f64),
    setup_s: f64,
    /// Device memory in use at the end of the run beyond what was in use before the engine
    /// was made (`cudaMemGetInfo`), bytes: buffers, cuFFT plans and work areas, the graph.
    device_used: usize,
    /// Device memory the engine allocated for its buffers, bytes.
    device_buffers: usize,
    /// Peak resident host memory of this run (VmHWM after a reset), bytes.
    host_rss: Option<u64>,
}

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
    let blocks_for = |gib: f64, block_bytes: usize| {
        ((gib * (1u64 << 30) as f64) / block_bytes as f64)
            .round()
            .max(8.0) as usize
    };
    // The scans: the headline, small blocks (8 channels x 4,096 samples, 128 KiB: launch costs
    // dominate), NBITS 4 and 16, and three antennas, the last three an eighth of the headline.
    let side = gib / 8.0;
    let mut nbits4 = scan_spec(
        &base,
        "nbits4",
        64,
        131_072,
        blocks_for(side, block_bytes / 2),
    );
    nbits4.nbits = 4;
    let mut nbits16 = scan_spec(
        &base,
        "nbits16",
        64,
        131_072,
        blocks_for(side, block_bytes * 2),
    );
    nbits16.nbits = 16;
    let mut ants3 = scan_spec(
        &base,
        "ants3",
        16,
        131_072,
        blocks_for(side, block_bytes * 3 / 4),
    );
    ants3.nants = 3;
    let scans = [
        scan_spec(&base, "bl", 64, 131_072, blocks_for(gib, block_bytes)),
        scan_spec(&base, "small", 8, 4_096, 512),
        nbits4,
        nbits16,
        ants3,
    ];
    let p = |s: &str| ProductSpec::from_str_checked(s);
    let trio = vec![p("2^20x51:i")?, p("8x128:i")?, p("1024x3072:i")?];
    let configs = vec![
        Config {
            scan: 0,
            label: "1024x16 Stokes I",
            products: vec![p("1024x16:i")?],
        },
        Config {
            scan: 0,
            label: "1024x16 full pol",
            products: vec![p("1024x16:full")?],
        },
        Config {
            scan: 0,
            label: "1024x16 IQUV",
            products: vec![p("1024x16:iquv")?],
        },
        Config {
            scan: 0,
            label: "trio 2^20x51 + 8x128 + 1024x3072 (I)",
            products: trio,
        },
        Config {
            scan: 1,
            label: "small blocks, 64x16 I",
            products: vec![p("64x16:i")?],
        },
        Config {
            scan: 2,
            label: "NBITS 4, 1024x16 I",
            products: vec![p("1024x16:i")?],
        },
        Config {
            scan: 3,
            label: "NBITS 16, 1024x16 I",
            products: vec![p("1024x16:i")?],
        },
        Config {
            scan: 4,
            label: "3 antennas, 1024x16 I",
            products: vec![p("1024x16:i")?],
        },
    ];
    // SPECTRO_BENCH_ONLY: the configurations whose label contains one of its comma-separated
    // parts (all without it); only their scans are generated.
    let only = std::env::var("SPECTRO_BENCH_ONLY").ok();
    let configs: Vec<Config> = configs
        .into_iter()
        .filter(|c| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|part| c.label.contains(part.trim())))
        })
        .collect();
    if configs.is_empty() {
        anyhow::bail!("SPECTRO_BENCH_ONLY={only:?} matches no configuration");
    }
    for (i, s) in scans.iter().enumerate() {
        if !configs.iter().any(|c| c.scan == i) {
            continue;
        }
        let t = Instant::now();
        generate(s).map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "generated {} ({} blocks of {} MiB, NBITS {}, {} antenna(s)) in {:.1} s",
            s.stem,
            s.blocks_per_file * s.files,
            s.blocsize() >> 20,
            s.nbits,
            s.nants,
            t.elapsed().as_secs_f64()
        );
    }

    println!();
    println!(
        "GPU stages fed from pinned host memory (no file reading, no host copy), 64 blocks of {} MiB:",
        block_bytes >> 20
    );
    println!("| products | mode | GB/s | of the H2D bandwidth |");
    println!("| --- | --- | ---: | ---: |");
    let mut pinned = Vec::new();
    let mut profiles = Vec::new();
    // The headline scan, opened once, when a configuration on it was asked for (it is not
    // generated otherwise).
    let headline = configs
        .iter()
        .any(|c| c.scan == 0)
        .then(|| Scan::open(&scans[0].dir.join(&scans[0].stem)))
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for c in configs.iter().filter(|c| c.scan == 0) {
        let scan = headline.as_ref().expect("opened: a configuration is on it");
        for mode in [GpuMode::Graph, GpuMode::Stream] {
            // A scan too short for the products (the trio's 2^20x51 below 13 GiB): said, and
            // the configuration skipped, so that a smaller SPECTRO_BENCH_GIB measures the rest.
            let plan = match Plan::new(scan, &c.products, &Selection::default()) {
                Ok(p) => p,
                Err(e) => {
                    println!("| {} | {mode:?} | skipped: {e} | |", c.label);
                    continue;
                }
            };
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
                "| {} | {mode:?} | {:.1} | {:.0}% |",
                c.label,
                rate / 1e9,
                100.0 * rate / h2d
            );
            pinned.push((c.label, mode, rate));
            profiles.push((
                c.label,
                mode,
                rate,
                engine
                    .profile_from_pinned(16)
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ));
        }
    }
    println!();
    println!(
        "Where the GPU stages' time goes (16 blocks, each block's copy and work timed alone \
         with events; the pipelined rate above lies between the serial and the overlapped \
         rate):"
    );
    println!("| products | mode | H2D ms/block | GPU work ms/block | serial GB/s | overlapped GB/s | pipelined GB/s |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for (label, mode, rate, p) in &profiles {
        println!(
            "| {label} | {mode:?} | {:.3} | {:.3} | {:.1} | {:.1} | {:.1} |",
            p.h2d_ms,
            p.work_ms,
            p.serial_rate() / 1e9,
            p.overlapped_rate() / 1e9,
            rate / 1e9
        );
    }

    println!();
    println!(
        "Whole runs (engine set-up to files closed; the scans in the page cache; each mode run \
         {REPEATS} times per configuration, the two modes alternating (G S S G G S …), the median \
         run by whole-run rate shown: the first run of a configuration pays for compiling its \
         kernels, which later runs of the process find cached, whichever mode they use; that \
         first run's set-up is listed after the table). The reader, the engine and the writer \
         are threads running at once: each phase is one thread's busy time, and the slowest \
         thread sets the run's pace (sync: the files' final write-back to the disk, after the \
         last integration):"
    );
    println!("| configuration | mode | blocks | whole run GB/s | every run's whole GB/s | blocks only GB/s | set-up s | real-time factor | device used MiB | device buffers MiB | host peak RSS MiB | threads' phases (s) |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut rows = Vec::new();
    let mut cold = Vec::new();
    for c in &configs {
        let scan = Scan::open(&scans[c.scan].dir.join(&scans[c.scan].stem))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Err(e) = Plan::new(&scan, &c.products, &Selection::default()) {
            println!("| {} | both | skipped: {e} |", c.label);
            continue;
        }
        let mut runs: [Vec<(Row, StemReport)>; 2] = [Vec::new(), Vec::new()];
        for (i, mode) in ORDER.iter().cycle().take(2 * REPEATS).enumerate() {
            let run = run_once(&device, &scans[c.scan], c, *mode, &base)?;
            if i == 0 {
                cold.push((c.label, *mode, run.0.setup_s));
            }
            runs[usize::from(*mode == GpuMode::Stream)].push(run);
        }
        for mut of_mode in runs {
            of_mode.sort_by(|a, b| a.0.whole.total_cmp(&b.0.whole));
            // The spread, to tell a difference between the modes from run-to-run noise.
            let every = of_mode
                .iter()
                .map(|(r, _)| format!("{:.2}", r.whole / 1e9))
                .collect::<Vec<_>>()
                .join(" ");
            let spread = (of_mode[0].0.whole, of_mode[of_mode.len() - 1].0.whole);
            let (mut row, r) = of_mode.swap_remove(of_mode.len() / 2);
            row.spread = spread;
            let mode = row.mode;
            println!(
                "| {} | {mode:?} | {} | {:.2} | {every} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} |",
                c.label,
                r.data_blocks + r.gap_blocks,
                row.whole / 1e9,
                row.blocks / 1e9,
                row.setup_s,
                r.realtime_factor(),
                row.device_used >> 20,
                row.device_buffers >> 20,
                row.host_rss
                    .map_or("?".to_string(), |b| (b >> 20).to_string()),
                std::iter::once(("reader: read", r.read))
                    .chain(r.engine.iter().copied())
                    .chain([("writer: write", r.write), ("sync", r.sync)])
                    .map(|(n, d)| format!("{n} {:.2}", d.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            rows.push(row);
        }
    }
    for (label, mode, setup) in &cold {
        println!("- first run of {label} in this process ({mode:?}): set-up {setup:.2} s");
    }

    println!();
    println!("Targets:");
    for pair in rows.chunks(2) {
        if let [g, st] = pair {
            let ratio = g.whole / st.whole;
            // Whether each mode's median lies within the other mode's runs: a difference the
            // run-to-run spread can make.
            let within = |x: f64, (lo, hi): (f64, f64)| (lo..=hi).contains(&x);
            let overlap = within(g.whole, st.spread) || within(st.whole, g.spread);
            println!(
                "- {} ({}): graph / stream whole run = {ratio:.2}, blocks only = {:.2}: {}{}",
                g.label,
                g.stem,
                g.blocks / st.blocks,
                if ratio >= 1.0 {
                    "met"
                } else {
                    "MISSED (graph slower)"
                },
                if overlap {
                    format!(
                        " (within the spread: graph runs {:.2}–{:.2}, stream runs {:.2}–{:.2} GB/s)",
                        g.spread.0 / 1e9,
                        g.spread.1 / 1e9,
                        st.spread.0 / 1e9,
                        st.spread.1 / 1e9
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    for (label, mode, rate) in &pinned {
        let share = rate / h2d;
        println!(
            "- GPU stages from pinned, {label} ({mode:?}): {:.0}% of H2D: {}",
            100.0 * share,
            if share >= 0.8 {
                "met (>= 80%)"
            } else {
                "MISSED (< 80%)"
            }
        );
    }
    for g in rows
        .iter()
        .filter(|r| r.mode == GpuMode::Graph && r.stem == "bl")
    {
        let (need, what) = if g.label.starts_with("1024x16 Stokes I") {
            let stages = pinned
                .iter()
                .find(|(l, m, _)| *l == g.label && *m == GpuMode::Graph)
                .map_or(0.0, |p| p.2);
            (0.9 * stages, "90% of its GPU-stage rate")
        } else {
            (7.5e9, "7.5 GB/s")
        };
        println!(
            "- whole run, {} (graph): {:.2} GB/s, target {what} = {:.2} GB/s: {}",
            g.label,
            g.whole / 1e9,
            need / 1e9,
            if g.whole >= need { "met" } else { "MISSED" }
        );
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

/// Resets the process's peak resident set size (Linux: `5` to `/proc/self/clear_refs`), so
/// that the next [`host_peak_rss`] is this run's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Runs of each mode per whole-run configuration (the median is shown). Five: the last run's
/// three per mode spread by 10–40 %, more than the modes differ.
const REPEATS: usize = 5;

/// The order of the whole runs of one configuration, repeated: each mode runs first as often
/// as last, so neither gains from what the other left warm (caches, the page cache, files).
const ORDER: [GpuMode; 4] = [
    GpuMode::Graph,
    GpuMode::Stream,
    GpuMode::Stream,
    GpuMode::Graph,
];

fn run_once(
    device: &cudagraph::Device,
    s: &GenerateSpec,
    c: &Config,
    mode: GpuMode,
    base: &std::path::Path,
) -> anyhow::Result<(Row, StemReport)> {
    let scan = Scan::open(&s.dir.join(&s.stem)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sel = Selection::default();
    let plan = Plan::new(&scan, &c.products, &sel).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = RunConfig {
        inputs: vec![s.dir.join(&s.stem)],
        out_dir: base.join("out"),
        products: c.products.clone(),
        selection: sel,
        engine: EngineKind::Gpu { ordinal: 0, mode },
        ring: 4,
        ..RunConfig::default()
    };
    reset_peak_rss();
    let (free_before, _) = device.memory_info()?;
    let t = Instant::now();
    let mut engine = GpuEngine::new(&plan, 0, mode).map_err(|e| anyhow::anyhow!("{e}"))?;
    let setup = t.elapsed();
    let r = run_stem(&scan, &plan, &mut engine, &cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (free_after, _) = device.memory_info()?;
    drop(engine);
    let _ = std::fs::remove_dir_all(base.join("out"));
    let total = setup + r.wall;
    let row = Row {
        label: c.label,
        stem: s.stem.clone(),
        mode,
        whole: r.bytes_read as f64 / total.as_secs_f64(),
        spread: (0.0, 0.0),
        blocks: r.input_rate(),
        setup_s: setup.as_secs_f64(),
        device_used: free_before.saturating_sub(free_after),
        device_buffers: r.device_bytes,
        host_rss: host_peak_rss(),
    };
    Ok((row, r))
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
