//! The GPU engine against the CPU reference engine, end to end (generate a scan, run both,
//! compare the filterbank files), for every detection mode, NBITS, polarisation count, OVERLAP,
//! antenna mode, several products in one DAG, negative OBSBW, a dropped block, and both ways of
//! issuing the work (graph and stream).
//!
//! These tests need a GPU: they are `#[ignore]`d (with the reason) in a plain `cargo test`. Run
//! them with `--include-ignored` on a machine with a GPU (the project's `.gpu/run` does, with
//! `CUDAGRAPH_REQUIRE_GPU=1`); there a missing GPU is a failure, not a skip.

use std::path::Path;

use spectrometer::filterbank::Filterbank;
use spectrometer::generate::{generate, GenerateSpec, Tone};
use spectrometer::gpu::GpuMode;
use spectrometer::pipeline::{run, EngineKind, RunConfig};
use spectrometer::plan::{AntennaMode, Detection, ProductSpec, Selection};

/// Relative tolerance of a GPU value against the CPU's, scaled by the largest value of the
/// integration (both sum the same f32 powers; the FFTs differ in rounding only).
const TOL: f64 = 2e-4;

fn gpu_or_fail() {
    if let Err(e) = cudagraph::Device::get(0) {
        panic!("this test needs a GPU and none is usable: {e}");
    }
}

fn p(nfft: usize, nint: usize, detection: Detection) -> ProductSpec {
    ProductSpec {
        nfft,
        nint,
        detection,
    }
}

fn scan(dir: &Path, stem: &str) -> GenerateSpec {
    GenerateSpec {
        dir: dir.to_path_buf(),
        stem: stem.to_string(),
        nchan: 4,
        nants: 1,
        npol: 4,
        nbits: 8,
        ntime: 512,
        overlap: 0,
        blocks_per_file: 3,
        files: 2,
        obsfreq: 1400.0,
        obsbw: 12.0,
        noise: 6.0,
        tones: vec![Tone {
            freq_mhz: 1401.3,
            amp_x: 20.0,
            amp_y: 12.0,
            phase_y_deg: 30.0,
        }],
        ..GenerateSpec::default()
    }
}

/// Runs `products` with the CPU engine and with the GPU engine in `mode`, and compares every
/// output file value by value.
fn compare(spec: &GenerateSpec, products: &[ProductSpec], sel: Selection, mode: GpuMode) {
    generate(spec).expect("generate");
    let out = spec.dir.join("out");
    let run_on = |engine: EngineKind, sub: &str| {
        let cfg = RunConfig {
            inputs: vec![spec.dir.join(&spec.stem)],
            out_dir: out.join(sub),
            products: products.to_vec(),
            selection: sel.clone(),
            engine,
            ..RunConfig::default()
        };
        run(&cfg).expect("run").remove(0)
    };
    let cpu = run_on(EngineKind::Cpu, "cpu");
    let gpu = run_on(EngineKind::Gpu { ordinal: 0, mode }, "gpu");
    let fils = |r: &spectrometer::pipeline::StemReport| -> Vec<_> {
        r.outputs
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "fil"))
            .cloned()
            .collect()
    };
    let (cf, gf) = (fils(&cpu), fils(&gpu));
    assert_eq!(cf.len(), gf.len(), "output files");
    assert!(!cf.is_empty());
    for (c, g) in cf.iter().zip(&gf) {
        assert_eq!(c.file_name(), g.file_name());
        let (a, b) = (Filterbank::read(c).unwrap(), Filterbank::read(g).unwrap());
        assert_eq!(a.header, b.header, "{}: headers", c.display());
        assert_eq!(a.data.len(), b.data.len(), "{}: lengths", c.display());
        assert!(a.nsamples() > 0, "{}: no spectra", c.display());
        let per = a.data.len() / a.nsamples();
        for (t, (x, y)) in a.data.chunks(per).zip(b.data.chunks(per)).enumerate() {
            assert_close(
                x,
                y,
                &format!("{}: spectrum {t}, CPU against GPU", c.display()),
            );
        }
    }
}

/// `y` equals `x` within [`TOL`] of `x`'s largest value (the two sum the same f32 powers).
fn assert_close(x: &[f32], y: &[f32], what: &str) {
    assert_eq!(x.len(), y.len(), "{what}: lengths");
    let scale = x.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-30);
    for (i, (u, v)) in x.iter().zip(y).enumerate() {
        let err = (*u as f64 - *v as f64).abs() / scale;
        assert!(
            err <= TOL,
            "{what}, value {i}: {u} against {v} (error {err:.2e} of the spectrum's largest \
             value {scale})"
        );
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn three_products_one_dag_all_detections() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let products = [
        p(8, 4, Detection::TotalPower),
        p(64, 3, Detection::FullPol),
        p(128, 5, Detection::Stokes),
    ];
    compare(
        &scan(dir.path(), "three"),
        &products,
        Selection::default(),
        GpuMode::Graph,
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn stream_mode_matches_too() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let products = [
        p(16, 7, Detection::Stokes),
        p(256, 2, Detection::TotalPower),
    ];
    compare(
        &scan(dir.path(), "stream"),
        &products,
        Selection::default(),
        GpuMode::Stream,
    );
}

/// Transforms of at most 16 points get no FFT: the detection kernel computes each bin as a
/// direct DFT, one warp per run with `32 / nfft` lanes per bin. Lengths that do not divide 32
/// leave lanes idle; with 480-sample blocks every such length up to 15 tiles them.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn short_transforms_of_any_length_need_no_fft() {
    gpu_or_fail();
    for mode in [GpuMode::Graph, GpuMode::Stream] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = scan(dir.path(), "dft");
        s.ntime = 480;
        compare(
            &s,
            &[
                p(12, 5, Detection::Stokes),
                p(5, 8, Detection::FullPol),
                p(3, 16, Detection::TotalPower),
                p(15, 64, Detection::TotalPower),
            ],
            Selection::default(),
            mode,
        );
    }
}

/// Products whose blocks each complete whole integrations copy them back one block late, in
/// the next block's work beside its FFT (the last block's after the last launch): every
/// integration must still land in the right place, in both modes, from one block up, next
/// to products that copy back at once.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn copies_back_one_block_late_lose_nothing() {
    gpu_or_fail();
    for mode in [GpuMode::Graph, GpuMode::Stream] {
        for (blocks_per_file, files) in [(1, 1), (2, 1), (3, 2)] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = scan(dir.path(), "late");
            (s.blocks_per_file, s.files) = (blocks_per_file, files);
            compare(
                &s,
                &[
                    // 512 samples a block: 16, 1 and 8 integrations completed per block,
                    // copied back late; 128x3 copies back at once.
                    p(8, 4, Detection::TotalPower),
                    p(64, 8, Detection::Stokes),
                    p(32, 2, Detection::FullPol),
                    p(128, 3, Detection::TotalPower),
                ],
                Selection::default(),
                mode,
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn every_nbits_and_single_pol() {
    gpu_or_fail();
    for (nbits, npol) in [(4, 4), (16, 2), (8, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = scan(dir.path(), &format!("b{nbits}p{npol}"));
        s.nbits = nbits;
        s.npol = npol;
        s.noise = if nbits == 4 { 2.0 } else { 6.0 };
        s.tones[0].amp_x = if nbits == 4 { 3.0 } else { 20.0 };
        s.tones[0].amp_y = if nbits == 4 { 2.0 } else { 12.0 };
        let det = if npol == 1 {
            Detection::TotalPower
        } else {
            Detection::FullPol
        };
        // 8 points: no FFT, a direct DFT of the integers in the detection kernel.
        compare(
            &s,
            &[p(32, 6, det), p(8, 5, det)],
            Selection::default(),
            GpuMode::Graph,
        );
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn overlap_negative_bandwidth_gap_and_channel_selection() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let mut s = scan(dir.path(), "ovl");
    s.ntime = 512 + 64;
    s.overlap = 64;
    s.obsbw = -12.0;
    s.drop_blocks = vec![2];
    let sel = Selection {
        chan_start: 1,
        nchan: Some(2),
        ..Selection::default()
    };
    compare(
        &s,
        &[p(64, 3, Detection::Stokes), p(8, 32, Detection::TotalPower)],
        sel,
        GpuMode::Graph,
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn antennas_separate_and_summed_with_weights() {
    gpu_or_fail();
    for mode in [AntennaMode::Separate, AntennaMode::Sum] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = scan(dir.path(), "ants");
        s.nants = 3;
        s.antenna_gains = vec![1.0, 0.5, 2.0];
        let sel = Selection {
            mode,
            weights: (mode == AntennaMode::Sum).then(|| vec![1.0, 3.0, 0.25]),
            ..Selection::default()
        };
        compare(
            &s,
            &[p(32, 4, Detection::FullPol), p(16, 4, Detection::Stokes)],
            sel,
            GpuMode::Graph,
        );
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn ffts_longer_than_a_block_gather_blocks() {
    gpu_or_fail();
    for mode in [GpuMode::Graph, GpuMode::Stream] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = scan(dir.path(), "long");
        s.blocks_per_file = 4; // 8 blocks of 512 samples

        // 2, 4 and 8 blocks a spectrum: the engine cycles through 8 staging buffers, and
        // reads a block's integrations 8 blocks after queuing it (the last ones in `finish`).
        compare(
            &s,
            &[
                p(1024, 1, Detection::Stokes),
                p(2048, 2, Detection::TotalPower),
                p(64, 5, Detection::FullPol),
                p(4096, 1, Detection::TotalPower),
            ],
            Selection::default(),
            mode,
        );
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn fft_lengths_the_engine_cannot_tile_are_a_clear_error() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let s = scan(dir.path(), "long");
    generate(&s).unwrap();
    let cfg = RunConfig {
        inputs: vec![s.dir.join(&s.stem)],
        out_dir: s.dir.join("out"),
        products: vec![p(768, 1, Detection::TotalPower)],
        engine: EngineKind::Gpu {
            ordinal: 0,
            mode: GpuMode::Graph,
        },
        ..RunConfig::default()
    };
    let e = run(&cfg).unwrap_err().to_string();
    assert!(e.contains("nfft must divide"), "{e}");
    assert!(
        std::fs::read_dir(s.dir.join("out"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "nothing written"
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn run_writes_the_graph_as_dot() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let s = scan(dir.path(), "dot");
    generate(&s).expect("generate");
    let bin = || std::process::Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"));
    let run = |extra: &[&str]| {
        bin()
            .arg("run")
            .arg(dir.path().join("dot"))
            .args(["-p", "64x2", "--device", "gpu", "--dot", "-q", "-o"])
            .arg(dir.path().join("out"))
            .args(extra)
            .output()
            .unwrap()
    };
    let r = run(&[]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let dot = std::fs::read_to_string(dir.path().join("out/dot.dot")).expect("dot.dot written");
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("detect+integrate"), "{dot}");
    // The FFT node (no callback), after the kernel that unpacks the integers.
    assert!(dot.contains("fft C2C Forward"), "{dot}");
    assert!(dot.contains("sp_unpack"), "{dot}");
    assert!(!dot.contains("load sp_load_"), "{dot}");
    // Stream mode has no graph: a clear error, not a silent skip.
    let r = run(&["--gpu-mode", "stream"]);
    assert!(!r.status.success());
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("--dot needs the graph mode"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn run_profiles_the_graph_and_writes_the_same_files() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let s = scan(dir.path(), "prof");
    generate(&s).expect("generate");
    let bin = || std::process::Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"));
    // Two products, one of them an FFT longer than a block (a gather node): 1024 > 512.
    let run = |out: &str, extra: &[&str]| {
        bin()
            .arg("run")
            .arg(dir.path().join("prof"))
            .args(["-p", "64x2", "-p", "1024x2:iquv", "--device", "gpu", "-o"])
            .arg(dir.path().join(out))
            .args(extra)
            .output()
            .unwrap()
    };
    let plain = run("plain", &["-q"]);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let r = run(
        "profiled",
        &["--profile", "--profile-launches", "5", "--dot"],
    );
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    println!("{stdout}");
    assert!(stdout.contains("graph of prof (one block):"), "{stdout}");
    // Per product unpack, FFT, detection and D2H, and the long product's gather.
    assert!(stdout.contains("per-node profile: 9 nodes"), "{stdout}");
    assert!(stdout.contains("5 launches"), "{stdout}");
    for node in [
        "unpack 64 x8 (product 0)",
        "unpack 1024 x1 (product 1)",
        "FFT 64",
        "detect+integrate (product 0)",
        "gather 2 blocks",
    ] {
        assert!(stdout.contains(node), "{node} missing: {stdout}");
    }
    assert!(stdout.contains("total (sum of the means)"), "{stdout}");
    assert!(
        stdout.contains("real-time factor"),
        "the run went on: {stdout}"
    );
    let dot = std::fs::read_to_string(dir.path().join("profiled/prof.profile.dot"))
        .expect("prof.profile.dot written");
    assert!(dot.contains("fillcolor=\"#ff0000\""), "{dot}");
    // The profile's launches changed nothing the run writes.
    for f in ["prof.0.fil", "prof.1.fil"] {
        let a = std::fs::read(dir.path().join("plain").join(f)).unwrap();
        let b = std::fs::read(dir.path().join("profiled").join(f)).unwrap();
        assert!(a == b, "{f} differs with --profile");
    }
}

/// Runs `plan` over `scan` through `engine` with a ring of `ring` buffers of the engine's own
/// kind, each block handed over as the pipeline does ([`Engine::process_filled`]), or, with
/// `as_slices`, as a plain slice copied out of a `Vec` ring ([`Engine::process_block`]).
fn integrations(
    scan: &spectrometer::scan::Scan,
    plan: &spectrometer::plan::Plan,
    ring: usize,
    as_slices: bool,
) -> Vec<spectrometer::engine::Integration> {
    use spectrometer::engine::{BlockView, Engine};
    use spectrometer::gpu::GpuEngine;
    use spectrometer::scan::BlockReader;
    let mut engine = GpuEngine::new(plan, 0, GpuMode::Graph).expect("engine");
    let g = plan.geometry;
    let mut out = Vec::new();
    if as_slices {
        let reader = BlockReader::spawn(scan, plan.first_slot, vec![vec![0u8; g.blocsize]; ring]);
        while let Some(b) = reader.next_block() {
            let b = b.expect("block");
            let view = BlockView {
                data: &b.buf,
                seq: b.seq,
                kind: b.kind,
                geometry: &g,
            };
            engine
                .process_block(&view, &mut out)
                .expect("process_block");
            reader.recycle(b.buf);
        }
    } else {
        let buffers = (0..ring)
            .map(|_| engine.alloc_buffer(g.blocsize).expect("pinned ring buffer"))
            .collect();
        let reader = BlockReader::spawn(scan, plan.first_slot, buffers);
        while let Some(b) = reader.next_block() {
            let b = b.expect("block");
            engine
                .process_filled(&b, &g, &mut out)
                .expect("process_filled");
            reader.recycle(b.buf);
        }
    }
    engine.finish(&mut out).expect("finish");
    out.sort_by_key(|it| (it.product, it.output, it.index));
    out
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn pinned_ring_blocks_match_blocks_handed_in_as_slices() {
    gpu_or_fail();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = scan(dir.path(), "ring");
    // Many small blocks, so that the reader refills the one ring buffer while the copy of
    // the block before may still read it: its fill must wait for that copy.
    (spec.ntime, spec.blocks_per_file, spec.files) = (256, 12, 3);
    generate(&spec).expect("generate");
    let scan = spectrometer::scan::Scan::open(&dir.path().join("ring")).expect("scan");
    let products = [p(64, 2, Detection::Stokes), p(512, 1, Detection::FullPol)];
    let plan = spectrometer::plan::Plan::new(&scan, &products, &Selection::default()).unwrap();
    let slices = integrations(&scan, &plan, 2, true);
    assert!(!slices.is_empty());
    for ring in [1, 3] {
        let pinned = integrations(&scan, &plan, ring, false);
        assert_eq!(pinned.len(), slices.len(), "ring of {ring}: integrations");
        for (a, b) in slices.iter().zip(&pinned) {
            let at = (a.product, a.output, a.index);
            assert_eq!(at, (b.product, b.output, b.index), "ring of {ring}");
            let what = format!("ring of {ring}, integration {at:?}: slices against the ring");
            assert_close(&a.data, &b.data, &what);
        }
    }
}
