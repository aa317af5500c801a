//! The command line end to end: generate, run (with PNGs), header, and its errors.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"))
}

#[test]
fn generate_run_header_png() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g = bin()
        .args(["generate", "-o"])
        .arg(d.join("raw"))
        .args([
            "--stem",
            "cli",
            "--nchan",
            "2",
            "--ntime",
            "512",
            "--blocks-per-file",
            "3",
            "--files",
            "2",
        ])
        .args([
            "--obsbw",
            "-6.25",
            "--tone",
            "1418.0:20",
            "--drop-block",
            "3",
            "--truncate-bytes",
            "7",
        ])
        .output()
        .unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let r = bin()
        .arg("run")
        .arg(d.join("raw/cli.0000.raw"))
        .args(["-p", "256x2", "-p", "2^4x8:iquv", "--png", "-o"])
        .arg(d.join("out"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(
        stderr.contains("gap:") && stderr.contains("warning:"),
        "{stderr}"
    );
    assert!(stdout.contains("real-time factor"), "{stdout}");
    assert!(stdout.contains("read") && stdout.contains("compute") && stdout.contains("write"));
    for f in ["cli.0.fil", "cli.1.fil", "cli.0.png", "cli.1.png"] {
        let p = d.join("out").join(f);
        assert!(p.is_file(), "{f} missing");
    }
    let png = std::fs::read(d.join("out/cli.0.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // 5 blocks on the time axis (6 − 1 truncated, the dropped one zero-filled): 5 × 512 / 512.
    let h = bin()
        .arg("header")
        .arg(d.join("out/cli.0.fil"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&h.stdout);
    assert!(text.contains("nchans       512"), "{text}");
    assert!(text.contains("spectra      5"), "{text}");
    // The header of a RAW file (any file of the sequence): its scan as `run` reads it, and the
    // first block's cards; the gap and the truncation reported as by `run`.
    let h = bin()
        .arg("header")
        .arg(d.join("raw/cli.0001.raw"))
        .output()
        .unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&h.stdout),
        String::from_utf8_lossy(&h.stderr),
    );
    assert!(h.status.success(), "{err}");
    for line in [
        "files        2",
        "blocks       4 read, 1 dropped (PKTIDX gaps)",
        "obsnchan     2 (1 antenna(s) of 2)",
        "ntime        512 samples per block, overlap 0",
        "samples      2560 per channel",
        "cli.0000.raw block 0 (",
        "  OBSNCHAN = 2",
        "  OBSBW    = -6.25",
        "  BACKEND  = 'GUPPI'",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    assert!(
        err.contains("gap:") && err.contains("ends inside block"),
        "{err}"
    );
    // A filterbank file is read by its header only: the spectra are counted from its size,
    // and a partial spectrum at the end is an error naming the file.
    let fil = d.join("out/cli.0.fil");
    let mut f = std::fs::OpenOptions::new().append(true).open(&fil).unwrap();
    std::io::Write::write_all(&mut f, &[0; 3]).unwrap();
    drop(f);
    let h = bin().arg("header").arg(&fil).output().unwrap();
    assert!(!h.status.success());
    let err = String::from_utf8_lossy(&h.stderr);
    assert!(
        err.contains("cli.0.fil") && err.contains("not a whole number of 2048-byte spectra"),
        "{err}"
    );
    // Nothing else (no temporaries) in the output directory.
    assert_eq!(std::fs::read_dir(d.join("out")).unwrap().count(), 4);
}

#[test]
fn missing_input_and_too_many_products_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let r = bin()
        .args(["run", "x", "-p", "8x1", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("x"), "names the missing input: {err}");
    let mut cmd = bin();
    cmd.args(["run", "x", "-o"]).arg(dir.path());
    for _ in 0..5 {
        cmd.args(["-p", "8x1"]);
    }
    let r = cmd.output().unwrap();
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("at most 4"));
    let r = bin().args(["run", "x", "-p", "8y1"]).output().unwrap();
    assert!(String::from_utf8_lossy(&r.stderr).contains("NFFTxNINT"));
}

/// Without the `fbh5` feature, `--format h5` is refused at once, saying how to get it, and
/// nothing is written.
#[cfg(not(feature = "fbh5"))]
#[test]
fn format_h5_without_the_feature_is_refused_with_the_way_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g = bin()
        .args(["generate", "-o"])
        .arg(d)
        .args([
            "--stem",
            "s",
            "--nchan",
            "1",
            "--ntime",
            "64",
            "--blocks-per-file",
            "2",
        ])
        .output()
        .unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let o = bin()
        .arg("run")
        .arg(d.join("s"))
        .args(["-p", "8x2", "--format", "h5", "-o"])
        .arg(d.join("out"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("fbh5 feature") && e.contains("--features fbh5"),
        "{e}"
    );
    assert!(!d.join("out").join("s.0.h5").exists());
}

/// `header` of an HDF5 file in a build without the `fbh5` feature says how to get one that
/// reads it (the file is recognised by its first bytes, whatever its name).
#[cfg(not(feature = "fbh5"))]
#[test]
fn header_of_an_h5_without_the_feature_says_how_to_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("scan.0.data");
    std::fs::write(&p, b"\x89HDF\r\n\x1a\n\0\0\0\0").unwrap();
    let o = bin().arg("header").arg(&p).output().unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("scan.0.data") && e.contains("HDF5 (FBH5)") && e.contains("--features fbh5"),
        "{e}"
    );
}

/// `--profile` (the per-node profile of the GPU engine's graph) is parsed and checked on the
/// host: refused for the CPU engine and for the stream mode (no graph), `--profile-launches`
/// only with `--profile` and at least 1, and both listed in the help. (A GPU run is in
/// `tests/gpu_engine.rs`: `run_profiles_the_graph_and_writes_the_same_files`.)
#[test]
fn profile_options_are_checked_before_anything_runs() {
    let run = |extra: &[&str]| {
        let o = bin()
            .args(["run", "no-such-input", "-p", "8x1"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{extra:?} was accepted");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = run(&["--profile"]);
    assert!(
        e.contains("--profile only applies to the GPU engine"),
        "{e}"
    );
    let e = run(&["--device", "gpu", "--gpu-mode", "stream", "--profile"]);
    assert!(e.contains("--profile needs the graph mode"), "{e}");
    let e = run(&["--profile-launches", "5"]);
    assert!(e.contains("--profile"), "{e}");
    assert!(e.contains("required"), "{e}");
    let e = run(&["--device", "gpu", "--profile", "--profile-launches", "0"]);
    assert!(e.contains("--profile-launches"), "{e}");
    assert!(e.contains("0 is not in 1.."), "{e}");
    // Accepted by the parser: with the CPU engine the refusal is the engine's, not clap's.
    let e = run(&["--profile", "--profile-launches", "3"]);
    assert!(e.contains("only applies to the GPU engine"), "{e}");
    let h = bin().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&h.stdout);
    assert!(
        help.contains("--profile") && help.contains("--profile-launches <N>"),
        "{help}"
    );
    assert!(help.contains("[default: 20]"), "{help}");
}

#[test]
fn repeat_reads_the_scan_over_as_one_recording_and_prints_memory() {
    use spectrometer::filterbank::Filterbank;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g = bin()
        .args(["generate", "-o"])
        .arg(d.join("raw"))
        .args(["--stem", "s", "--nchan", "2", "--ntime", "512"])
        .args(["--blocks-per-file", "4", "--tone", "1418.0:20"])
        .output()
        .unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let run = |out: &str, repeat: &str| {
        let r = bin()
            .arg("run")
            .arg(d.join("raw/s"))
            .args(["-p", "64x8", "-q", "--repeat", repeat, "-o"])
            .arg(d.join(out))
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        (
            Filterbank::read(&d.join(out).join("s.0.fil")).unwrap(),
            String::from_utf8_lossy(&r.stdout).into_owned(),
        )
    };
    let (once, quiet) = run("once", "1");
    assert!(
        quiet.is_empty(),
        "a plain quiet run prints nothing: {quiet}"
    );
    let (thrice, stdout) = run("thrice", "3");
    // 4 blocks of 512 samples, 64 × 8 a spectrum: 4 spectra a pass, 12 for three.
    assert_eq!(once.nsamples(), 4);
    assert_eq!(thrice.nsamples(), 12);
    assert_eq!(
        thrice.data,
        once.data.repeat(3),
        "each pass gives the same spectra"
    );
    assert!(stdout.contains("soak: memory over the run"), "{stdout}");
    assert!(
        stdout.contains("soak: from the first sample to the last") && stdout.contains("host RSS"),
        "{stdout}"
    );
}
