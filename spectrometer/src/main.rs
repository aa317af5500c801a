//! `cudagraph-spectrometer`: the command line. See the README for every option.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};

use spectrometer::cpu::CpuEngine;
use spectrometer::generate::{generate, GenerateSpec, Tone};
use spectrometer::gpu::{GpuEngine, GpuMode};
use spectrometer::inspect;
use spectrometer::pipeline::{run_stem, EngineKind, OutputFormat, RunConfig};
use spectrometer::plan::{AntennaMode, Plan, ProductSpec, Selection, MAX_PRODUCTS};
use spectrometer::rawspec::{Naming, RawspecOptions};
use spectrometer::scan::{Scan, ScanOptions};
use spectrometer::Error;

#[derive(Parser)]
#[command(
    name = "cudagraph-spectrometer",
    version,
    about = "GUPPI RAW baseband scans to SIGPROC filterbank spectra"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Channelise, detect and integrate scans into filterbank files.
    Run(RunArgs),
    /// Write a synthetic GUPPI RAW scan (tones plus Gaussian noise).
    Generate(GenArgs),
    /// rawspec's command line: its options, defaults and output names (a drop-in for scripts
    /// that call rawspec; see the README for the mapping and what is not supported).
    Rawspec(RawspecArgs),
    /// Print the header of a filterbank (`.fil`) or FBH5 (`.h5`) file and its number of
    /// spectra, or of a GUPPI RAW file: its scan (files, blocks, geometry, gaps) and the first
    /// block's header cards. Reads headers only, however large the file.
    Header {
        /// The `.fil`, `.h5` or `.raw` file (recognised by its first bytes, not its name).
        file: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Gpu,
}

#[derive(Clone, Copy, ValueEnum)]
enum GpuModeArg {
    /// One cudagraph DAG launched per block.
    Graph,
    /// The same operations issued one by one on a stream (the baseline).
    Stream,
}

#[derive(Clone, Copy, ValueEnum)]
enum AntModeArg {
    Separate,
    Sum,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    /// SIGPROC filterbank (`.fil`).
    Fil,
    /// FBH5, HDF5 filterbank (`.h5`; a build with the `fbh5` feature).
    H5,
}

#[derive(Args)]
struct RunArgs {
    /// Stems (`dir/name` for `dir/name.0000.raw`, …), any one file `NAME.NNNN.raw` of a
    /// sequence, or any other RAW file (read alone).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// A product `NFFTxNINT[:MODE]` (MODE i, full or iquv; default i), e.g. `2^20x51`,
    /// `8x128:iquv`. Up to 4; at least 1.
    #[arg(short, long = "product", required = true, value_name = "SPEC")]
    products: Vec<String>,
    /// Output directory (created if absent).
    #[arg(short, long, default_value = ".")]
    out_dir: PathBuf,
    /// Spectra file format.
    #[arg(long, value_enum, default_value = "fil")]
    format: FormatArg,
    /// Engine.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// With `--device gpu`: which GPU [default: 0].
    #[arg(long)]
    gpu: Option<usize>,
    /// With `--device gpu`: issue each block's work as one graph launch or as stream
    /// operations [default: graph].
    #[arg(long, value_enum)]
    gpu_mode: Option<GpuModeArg>,
    /// First coarse channel (per antenna, 0-based).
    #[arg(long, default_value_t = 0)]
    chan_start: usize,
    /// Number of coarse channels (default: to the last).
    #[arg(long)]
    nchan: Option<usize>,
    /// Process one antenna (0-based); default all.
    #[arg(long)]
    antenna: Option<usize>,
    /// With several antennas: one output per antenna, or their incoherent sum.
    #[arg(long, value_enum, default_value = "separate")]
    antenna_mode: AntModeArg,
    /// Comma-separated weights of the selected antennas in the sum (default all 1).
    #[arg(long, value_delimiter = ',')]
    weights: Option<Vec<f32>>,
    /// Skip this many blocks at the start (tstart moves accordingly).
    #[arg(long, default_value_t = 0)]
    skip_blocks: usize,
    /// The most blocks one PKTIDX jump may mean were dropped (zero-filled); a larger jump is an
    /// error (a corrupt PKTIDX, most likely).
    #[arg(long, default_value_t = spectrometer::scan::DEFAULT_MAX_GAP_BLOCKS)]
    max_gap_blocks: u64,
    /// Also write a PNG (mean spectrum and waterfall) per product and output.
    #[arg(long)]
    png: bool,
    /// With `--device gpu` in graph mode: also write the instantiated graph as Graphviz DOT
    /// to `OUT_DIR/STEM.dot` (every node, with its parameters).
    #[arg(long)]
    dot: bool,
    /// With `--device gpu` in graph mode: before the run, time each node of the graph (nodes
    /// one at a time over `--profile-launches` launches) and print the table, slowest first;
    /// with `--dot`, also write it as `OUT_DIR/STEM.profile.dot` (and `.svg` when Graphviz is
    /// installed). The run then goes on as without it: its outputs are the same.
    #[arg(long)]
    profile: bool,
    /// With `--profile`: how many launches to time (the mean, shortest and longest are shown).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 20,
        requires = "profile",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    profile_launches: u32,
    /// Block buffers in the reader's ring (host memory ≈ ring × BLOCSIZE).
    #[arg(long, default_value_t = 4)]
    ring: usize,
    /// Compute threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// `telescope_id` to write (default: from TELESCOP; 0 when unknown).
    #[arg(long)]
    telescope_id: Option<i32>,
    /// `machine_id` to write.
    #[arg(long, default_value_t = 0)]
    machine_id: i32,
    /// A soak test: read each scan N times over, as one continuous recording (the outputs hold
    /// every repeat); prints device memory in use and host RSS every 30 s and the change from
    /// the first sample to the last.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// No progress bar and no summary.
    #[arg(short, long)]
    quiet: bool,
}

/// rawspec's options, spelled as rawspec spells them.
#[derive(Args)]
#[command(disable_version_flag = true)]
struct RawspecArgs {
    /// Stems (`dir/name` for `dir/name.0000.raw`, …).
    stems: Vec<PathBuf>,
    /// The 0-indexed antenna to exclusively process.
    #[arg(short = 'a', long = "ant", value_name = "ANT")]
    ant: Option<usize>,
    /// Batch process BC coarse channels at a time (accepted and ignored).
    #[arg(short = 'b', long = "batch", value_name = "BC")]
    batch: Option<i64>,
    /// Destination directory (rawspec's HOST:PORT network output is not supported).
    #[arg(short = 'd', long = "dest", value_name = "DEST")]
    dest: Option<String>,
    /// FFT lengths [default: 1048576,8,1024].
    #[arg(
        short = 'f',
        long = "ffts",
        value_name = "N1[,N2...]",
        value_delimiter = ','
    )]
    ffts: Vec<usize>,
    /// Select the GPU to use [default: 0 when usable, else the CPU engine].
    #[arg(short = 'g', long = "gpu", visible_alias = "GPU", value_name = "IDX")]
    gpu: Option<usize>,
    /// Save headers to a separate file (DEST/STEM.rawspec.headers).
    #[arg(short = 'H', long = "hdrs")]
    hdrs: bool,
    /// Output the incoherent sum (only), with per-antenna weights or one uniform weight.
    #[arg(
        short = 'i',
        long = "ics",
        value_name = "W1[,W2...]",
        value_delimiter = ','
    )]
    ics: Option<Vec<f32>>,
    /// Write FBH5 (.h5) instead of SIGPROC filterbank (.fil).
    #[arg(short = 'j', long = "fbh5")]
    fbh5: bool,
    /// Number of coarse channels to process [default: all].
    #[arg(short = 'n', long = "nchan", value_name = "N", default_value_t = 0)]
    nchan: usize,
    /// First index number for output files.
    #[arg(short = 'o', long = "outidx", value_name = "N", default_value_t = 0)]
    outidx: usize,
    /// Output polarisations per product: 1 total power, 4 cross pols, -4 full Stokes
    /// [default: 1].
    #[arg(
        short = 'p',
        long = "pols",
        value_name = "{1|4|-4}[,...]",
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    pols: Vec<i32>,
    /// Network data rate in Gbps (network output is not supported: refused).
    #[arg(short = 'r', long = "rate", value_name = "GBPS")]
    rate: Option<f64>,
    /// First coarse channel to process.
    #[arg(short = 's', long = "schan", value_name = "C", default_value_t = 0)]
    schan: usize,
    /// Split output into per-antenna files.
    #[arg(short = 'S', long = "splitant")]
    splitant: bool,
    /// Spectra to integrate [default: 51,128,3072].
    #[arg(
        short = 't',
        long = "ints",
        value_name = "N1[,N2...]",
        value_delimiter = ','
    )]
    ints: Vec<usize>,
    /// Also print the plan.
    #[arg(short = 'z', long = "debug")]
    debug: bool,
    /// Show the version and exit.
    #[arg(short = 'v', long = "version")]
    version: bool,
}

#[derive(Args)]
struct GenArgs {
    /// Output directory.
    #[arg(short, long, default_value = ".")]
    out_dir: PathBuf,
    /// Stem file name: files are STEM.0000.raw, STEM.0001.raw, …
    #[arg(long, default_value = "synthetic")]
    stem: String,
    /// Coarse channels per antenna.
    #[arg(long, default_value_t = 4)]
    nchan: usize,
    /// Antennas (NANTS).
    #[arg(long, default_value_t = 1)]
    nants: usize,
    /// NPOL written: 1 (one complex pol), 2 or 4 (two complex pols).
    #[arg(long, default_value_t = 4)]
    npol: usize,
    /// NBITS: 4, 8 or 16.
    #[arg(long, default_value_t = 8)]
    nbits: usize,
    /// Time samples per block (overlap included).
    #[arg(long, default_value_t = 4096)]
    ntime: usize,
    /// OVERLAP samples repeated between blocks.
    #[arg(long, default_value_t = 0)]
    overlap: usize,
    /// Set DIRECTIO (header and data padded to 512 bytes).
    #[arg(long)]
    directio: bool,
    /// Blocks per file.
    #[arg(long, default_value_t = 8)]
    blocks_per_file: usize,
    /// Files.
    #[arg(long, default_value_t = 1)]
    files: usize,
    /// OBSFREQ, MHz.
    #[arg(long, default_value_t = 1420.0)]
    obsfreq: f64,
    /// OBSBW, MHz (negative: channels run high to low).
    #[arg(long, default_value_t = 12.5, allow_negative_numbers = true)]
    obsbw: f64,
    /// A tone `FREQ_MHZ[:AMP[:POLS]]` (POLS xy, x or y; default amplitude 10, both pols).
    #[arg(long = "tone", value_name = "TONE")]
    tones: Vec<String>,
    /// Noise standard deviation per real and imaginary part, in quantisation levels.
    #[arg(long, default_value_t = 4.0)]
    noise: f32,
    /// Noise seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Comma-separated per-antenna gains.
    #[arg(long, value_delimiter = ',')]
    antenna_gains: Vec<f32>,
    /// Drop global block N (0-based over all files; repeatable): a PKTIDX gap.
    #[arg(long = "drop-block", value_name = "N")]
    drop_blocks: Vec<usize>,
    /// Cut this many bytes off the end of the last file (ends it mid-block).
    #[arg(long, default_value_t = 0)]
    truncate_bytes: u64,
    /// PKTIDX step per block.
    #[arg(long, default_value_t = 16)]
    pktidx_step: i64,
    /// Write PIPERBLK (the PKTIDX step per block, as hashpipe recorders do) in every header.
    #[arg(long)]
    piperblk: bool,
    /// STT_IMJD.
    #[arg(long, default_value_t = 60000)]
    stt_imjd: i64,
    /// STT_SMJD.
    #[arg(long, default_value_t = 43200)]
    stt_smjd: i64,
    /// STT_OFFS.
    #[arg(long, default_value_t = 0.25)]
    stt_offs: f64,
    /// SRC_NAME.
    #[arg(long, default_value = "SYNTH")]
    src_name: String,
    /// RA_STR.
    #[arg(long, default_value = "12:34:56.7800")]
    ra: String,
    /// DEC_STR.
    #[arg(long, default_value = "+12:34:56.7800", allow_hyphen_values = true)]
    dec: String,
    /// TELESCOP.
    #[arg(long, default_value = "GBT")]
    telescope: String,
}

fn parse_tone(s: &str) -> anyhow::Result<Tone> {
    let mut it = s.split(':');
    let f: f64 = it
        .next()
        .unwrap_or("")
        .parse()
        .with_context(|| format!("tone {s:?}: frequency"))?;
    let amp: f32 = match it.next() {
        Some(a) => a
            .parse()
            .with_context(|| format!("tone {s:?}: amplitude"))?,
        None => 10.0,
    };
    let (ax, ay) = match it.next().unwrap_or("xy") {
        "xy" | "XY" => (amp, amp),
        "x" | "X" => (amp, 0.0),
        "y" | "Y" => (0.0, amp),
        other => bail!("tone {s:?}: polarisations {other:?} (xy, x or y)"),
    };
    Ok(Tone {
        freq_mhz: f,
        amp_x: ax,
        amp_y: ay,
        phase_y_deg: 0.0,
    })
}

/// Writes to standard output; an error (a closed pipe: `… | head`) is returned, not a panic.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*).context("writing to standard output")
    };
}

/// The engine a run asks for, with the GPU-only options refused for the CPU engine (they
/// would be silently ignored).
fn engine_of(a: &RunArgs) -> anyhow::Result<EngineKind> {
    match a.device {
        DeviceArg::Cpu => {
            let gpu_only = [
                ("--gpu", a.gpu.is_some()),
                ("--gpu-mode", a.gpu_mode.is_some()),
                ("--dot", a.dot),
                ("--profile", a.profile),
            ];
            let given: Vec<&str> = gpu_only
                .iter()
                .filter(|(_, set)| *set)
                .map(|(name, _)| *name)
                .collect();
            if !given.is_empty() {
                bail!(
                    "{} only appl{} to the GPU engine: add --device gpu, or leave {} out for the CPU engine (the default)",
                    given.join(", "),
                    if given.len() == 1 { "ies" } else { "y" },
                    if given.len() == 1 { "it" } else { "them" }
                );
            }
            Ok(EngineKind::Cpu)
        }
        DeviceArg::Gpu => {
            let ordinal = a.gpu.unwrap_or(0);
            let mode = match a.gpu_mode.unwrap_or(GpuModeArg::Graph) {
                GpuModeArg::Graph => GpuMode::Graph,
                GpuModeArg::Stream => GpuMode::Stream,
            };
            if a.dot && mode != GpuMode::Graph {
                bail!(
                    "--dot needs the graph mode (--gpu-mode graph): the stream mode makes no graph"
                );
            }
            if a.profile && mode != GpuMode::Graph {
                bail!(
                    "--profile needs the graph mode (--gpu-mode graph): the stream mode makes no graph to profile"
                );
            }
            if let Err(e) = cudagraph::Device::get(ordinal) {
                bail!(
                    "--device gpu: GPU {ordinal} cannot be used: {e}\n  the CPU engine runs anywhere: leave out --device gpu (the CPU engine is the default) or say --device cpu"
                );
            }
            Ok(EngineKind::Gpu { ordinal, mode })
        }
    }
}

fn cmd_run(a: RunArgs) -> anyhow::Result<()> {
    if a.products.len() > MAX_PRODUCTS {
        return Err(Error::TooManyProducts {
            count: a.products.len(),
            max: MAX_PRODUCTS,
        }
        .into());
    }
    if let Some(n) = a.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("configuring the thread pool")?;
    }
    let products = a
        .products
        .iter()
        .map(|s| s.parse::<ProductSpec>())
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = RunConfig {
        inputs: a.inputs.clone(),
        out_dir: a.out_dir.clone(),
        products,
        selection: Selection {
            chan_start: a.chan_start,
            nchan: a.nchan,
            antenna: a.antenna,
            mode: match a.antenna_mode {
                AntModeArg::Separate => AntennaMode::Separate,
                AntModeArg::Sum => AntennaMode::Sum,
            },
            weights: a.weights.clone(),
            skip_blocks: a.skip_blocks,
        },
        engine: engine_of(&a)?,
        ring: a.ring.max(1),
        png: a.png,
        progress: !a.quiet && std::io::stderr().is_terminal(),
        telescope_id: a.telescope_id,
        machine_id: a.machine_id,
        naming: Naming::Native,
        save_headers: false,
        format: match a.format {
            FormatArg::Fil => OutputFormat::Filterbank,
            FormatArg::H5 => OutputFormat::Fbh5,
        },
        scan: ScanOptions {
            max_gap_blocks: a.max_gap_blocks,
        },
        repeat: a.repeat as usize,
    };
    if !cfg.format.available() {
        bail!("--format h5 needs a build with the fbh5 feature: cargo build --release -p cudagraph-spectrometer --features fbh5 (see the README)");
    }
    for input in &cfg.inputs {
        let scan = Scan::open_with(input, &cfg.scan)?.repeated(cfg.repeat);
        for line in scan.report_lines() {
            eprintln!("{line}");
        }
        let plan = Plan::new(&scan, &cfg.products, &cfg.selection)?;
        let profile = a.profile.then_some(a.profile_launches);
        process(&scan, &plan, &cfg, a.dot, profile, a.quiet)?;
    }
    Ok(())
}

/// Runs one stem with the engine `cfg` names (writing the graph's DOT first when `dot`, and
/// printing its per-node profile over `profile` launches when given), then prints the summary
/// unless `quiet`.
fn process(
    scan: &Scan,
    plan: &Plan,
    cfg: &RunConfig,
    dot: bool,
    profile: Option<u32>,
    quiet: bool,
) -> anyhow::Result<()> {
    let report = match cfg.engine {
        EngineKind::Cpu => run_stem(scan, plan, &mut CpuEngine::new(plan)?, cfg),
        EngineKind::Gpu { ordinal, mode } => {
            let mut engine = GpuEngine::new(plan, ordinal, mode)?;
            eprintln!(
                "GPU engine ({:?}): {} MiB of device memory",
                mode,
                engine.device_bytes() >> 20
            );
            if dot {
                let path = cfg.out_dir.join(format!("{}.dot", scan.name()));
                let text = engine
                    .to_dot()
                    .context("--dot needs the graph mode (--gpu-mode graph)")?;
                std::fs::create_dir_all(&cfg.out_dir)
                    .and_then(|()| std::fs::write(&path, text))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if let Some(launches) = profile {
                print_profile(scan, cfg, &engine, launches, dot)?;
            }
            run_stem(scan, plan, &mut engine, cfg)
        }
    }
    .with_context(|| format!("processing {}", scan.stem.display()))?;
    if !quiet {
        write!(std::io::stdout().lock(), "{report}").context("writing to standard output")?;
    }
    if !report.memory.is_empty() {
        print!("{}", soak_table(&report.memory));
    }
    Ok(())
}

/// The memory samples of a soak run (`--repeat`) and the change from the first to the last.
fn soak_table(samples: &[spectrometer::pipeline::MemorySample]) -> String {
    use std::fmt::Write as _;
    let mib = spectrometer::pipeline::MemorySample::mib;
    let mut t = String::from(
        "soak: memory over the run\n  elapsed s     blocks  device in use MiB  host RSS MiB\n",
    );
    for m in samples {
        let _ = writeln!(
            t,
            "  {:>9.0}  {:>9}  {:>17}  {:>12}",
            m.elapsed.as_secs_f64(),
            m.blocks,
            mib(m.device_in_use),
            mib(m.host_rss)
        );
    }
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:+} bytes", b as i64 - a as i64),
        _ => "not known".into(),
    };
    let _ = writeln!(
        t,
        "soak: from the first sample to the last ({:.0} s, {} blocks): device memory in use {}, host RSS {}",
        (last.elapsed - first.elapsed).as_secs_f64(),
        last.blocks - first.blocks,
        delta(first.device_in_use, last.device_in_use),
        delta(first.host_rss, last.host_rss)
    );
    t
}

/// Prints the per-node profile of the engine's graph over `launches` launches (`--profile`) and,
/// with `--dot`, writes it as `OUT_DIR/STEM.profile.dot` and, where Graphviz is installed,
/// `.svg`.
fn print_profile(
    scan: &Scan,
    cfg: &RunConfig,
    engine: &GpuEngine,
    launches: u32,
    dot: bool,
) -> anyhow::Result<()> {
    let p = engine
        .node_profile(launches)?
        .context("--profile needs the graph mode (--gpu-mode graph)")?;
    out!("graph of {} (one block):", scan.name())?;
    write!(std::io::stdout().lock(), "{p}").context("writing to standard output")?;
    if dot {
        let path = cfg.out_dir.join(format!("{}.profile.dot", scan.name()));
        std::fs::create_dir_all(&cfg.out_dir)
            .and_then(|()| std::fs::write(&path, p.to_dot()))
            .with_context(|| format!("writing {}", path.display()))?;
        let svg = path.with_extension("svg");
        match p.write_svg(&svg) {
            Ok(()) => {}
            Err(cudagraph::Error::GraphvizNotFound { .. }) => eprintln!(
                "note: Graphviz `dot` is not installed: {} not written (the .dot is)",
                svg.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("writing {}", svg.display())),
        }
    }
    Ok(())
}

fn cmd_rawspec(a: RawspecArgs) -> anyhow::Result<()> {
    if a.version {
        out!(
            "cudagraph-spectrometer {} (rawspec-compatible command line)",
            env!("CARGO_PKG_VERSION")
        )?;
        return Ok(());
    }
    if a.stems.is_empty() {
        bail!("a file stem must be specified (rawspec [options] STEM [...])");
    }
    if a.batch.is_some() {
        eprintln!("note: -b (batch) is ignored: the engines choose their own batching");
    }
    let opts = RawspecOptions {
        ffts: a.ffts,
        ints: a.ints,
        pols: a.pols,
        dest: a.dest,
        ant: a.ant,
        splitant: a.splitant,
        ics: a.ics,
        schan: a.schan,
        nchan: a.nchan,
        outidx: a.outidx,
        fbh5: a.fbh5,
        hdrs: a.hdrs,
        rate: a.rate,
    };
    opts.check()?;
    if opts.fbh5 && !cfg!(feature = "fbh5") {
        bail!("-j (FBH5 output) needs a build with the fbh5 feature: cargo build --release -p cudagraph-spectrometer --features fbh5 (see the README)");
    }
    let engine = match a.gpu {
        Some(ordinal) => {
            if let Err(e) = cudagraph::Device::get(ordinal) {
                bail!("-g {ordinal}: GPU {ordinal} cannot be used: {e}\n  without -g the CPU engine is used when no GPU is");
            }
            EngineKind::Gpu {
                ordinal,
                mode: GpuMode::Graph,
            }
        }
        None => match cudagraph::Device::get(0) {
            Ok(_) => EngineKind::Gpu {
                ordinal: 0,
                mode: GpuMode::Graph,
            },
            Err(e) => {
                eprintln!("note: no usable GPU ({e}); using the CPU engine");
                EngineKind::Cpu
            }
        },
    };
    for stem in &a.stems {
        out!("working stem: {}", stem.display())?;
        let scan = Scan::open(stem)?;
        for line in scan.report_lines() {
            eprintln!("{line}");
        }
        let req = opts.request(&scan)?;
        for n in &req.notes {
            eprintln!("note: {n}");
        }
        let cfg = RunConfig {
            inputs: vec![stem.clone()],
            out_dir: req.out_dir,
            products: req.products,
            selection: req.selection,
            engine,
            ring: 4,
            png: false,
            progress: std::io::stderr().is_terminal(),
            telescope_id: None,
            machine_id: spectrometer::rawspec::MACHINE_ID,
            naming: req.naming,
            save_headers: opts.hdrs,
            format: if opts.fbh5 {
                OutputFormat::Fbh5
            } else {
                OutputFormat::Filterbank
            },
            scan: ScanOptions::default(),
            repeat: 1,
        };
        let plan = Plan::new(&scan, &cfg.products, &cfg.selection)?;
        if a.debug {
            out!("{plan:#?}")?;
        }
        process(&scan, &plan, &cfg, false, None, false)?;
    }
    Ok(())
}

fn cmd_generate(a: GenArgs) -> anyhow::Result<()> {
    let tones = a
        .tones
        .iter()
        .map(|t| parse_tone(t))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let spec = GenerateSpec {
        dir: a.out_dir,
        stem: a.stem,
        nchan: a.nchan,
        nants: a.nants,
        npol: a.npol,
        nbits: a.nbits,
        ntime: a.ntime,
        overlap: a.overlap,
        directio: a.directio,
        blocks_per_file: a.blocks_per_file,
        files: a.files,
        obsfreq: a.obsfreq,
        obsbw: a.obsbw,
        tones,
        noise: a.noise,
        seed: a.seed,
        antenna_gains: a.antenna_gains,
        drop_blocks: a.drop_blocks,
        truncate_bytes: a.truncate_bytes,
        pktidx_step: a.pktidx_step,
        piperblk: a.piperblk,
        stt_imjd: a.stt_imjd,
        stt_smjd: a.stt_smjd,
        stt_offs: a.stt_offs,
        src_name: a.src_name,
        ra_str: a.ra,
        dec_str: a.dec,
        telescop: a.telescope,
    };
    let r = generate(&spec)?;
    for f in &r.files {
        out!("wrote {}", f.display())?;
    }
    println!(
        "{} block(s) of {} bytes written, {} dropped; coarse channels of {} MHz centred at {}",
        r.blocks_written,
        spec.blocsize(),
        r.blocks_dropped,
        spec.chan_bw(),
        (0..spec.nchan)
            .map(|c| format!("{:.6}", spec.coarse_centre(c)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// `header`: the lines of [`inspect::describe`] on standard output, its warnings on standard
/// error.
fn cmd_header(file: PathBuf) -> anyhow::Result<()> {
    let d = inspect::describe(&file)?;
    for w in &d.warnings {
        eprintln!("{w}");
    }
    for line in &d.lines {
        out!("{line}")?;
    }
    Ok(())
}

/// Whether `e` comes from writing to a pipe whose reader has gone.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> std::process::ExitCode {
    // On SIGINT, SIGTERM or SIGHUP: remove the unfinished outputs, then exit as a process
    // killed by SIGINT would report it to a shell (128 + 2).
    if let Err(e) = ctrlc::set_handler(|| spectrometer::output::remove_all_and_exit(130)) {
        eprintln!("warning: no signal handler ({e}): an interrupted run may leave unfinished outputs, removed by the next run");
    }
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Run(a) => cmd_run(a),
        Command::Generate(a) => cmd_generate(a),
        Command::Rawspec(a) => cmd_rawspec(a),
        Command::Header { file } => cmd_header(file),
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of our standard output went away (`… | head`): nothing more to say.
        Err(e) if closed_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
