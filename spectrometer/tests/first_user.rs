//! What a first user hit, each checked through the command line: interrupted runs leave no
//! outputs (and stale ones are cleaned up), a closed standard output is no crash, options that
//! do not apply are refused, and messages say things once.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use spectrometer::generate::generate;
use spectrometer::pipeline::filterbank_header;
use spectrometer::plan::{Detection, Plan, Selection};
use spectrometer::scan::Scan;
use spectrometer::Error;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A scan that takes the (debug) CPU engine a few seconds: 16 channels × 64 Ki samples × 16
/// blocks (64 MiB).
fn slow_scan(dir: &Path) {
    let mut spec = tiny(dir, "slow");
    spec.nchan = 16;
    spec.ntime = 65536;
    spec.blocks_per_file = 16;
    generate(&spec).unwrap();
}

#[test]
fn sigterm_removes_the_unfinished_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    slow_scan(d);
    let out = d.join("out");
    let mut child = bin()
        .arg("run")
        .arg(d.join("slow"))
        .args(["-p", "1024x1", "-p", "64x4:full", "-q", "-o"])
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the temporaries exist, then interrupt.
    let t = Instant::now();
    while names(&out).len() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no temporaries appeared"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended too soon"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        names(&out).iter().all(|n| n.contains(".tmp-")),
        "{:?}",
        names(&out)
    );
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let r = child.wait_with_output().unwrap();
    assert_eq!(r.status.code(), Some(130), "{r:?}");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("interrupted"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(names(&out).is_empty(), "left behind: {:?}", names(&out));
}

#[test]
fn stale_temporaries_of_a_killed_run_are_removed_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    generate(&tiny(d, "st")).unwrap();
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    // The pid of a process that has exited.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let stale = out.join(format!(".st.0.tmp-{pid}.fil"));
    std::fs::write(&stale, vec![0u8; 1000]).unwrap();
    let unrelated = out.join(format!(".other.0.tmp-{pid}.fil"));
    std::fs::write(&unrelated, "x").unwrap();
    let r = bin()
        .arg("run")
        .arg(d.join("st"))
        .args(["-p", "8x1", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        stdout.contains("removed") && stdout.contains(&format!("process {pid} is gone")),
        "{stdout}"
    );
    assert!(!stale.exists());
    assert!(unrelated.exists(), "only this run's outputs are cleaned");
    assert!(out.join("st.0.fil").is_file());
}

/// Runs `cmd` with its standard output closed before it writes (the reader of a pipe gone, as
/// with `… | head -0`).
fn with_closed_stdout(mut cmd: Command) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_stdout_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut g = bin();
    g.args([
        "generate", "--stem", "cs", "--nchan", "2", "--ntime", "64", "-o",
    ])
    .arg(d);
    let mut r = bin();
    r.arg("run")
        .arg(d.join("cs"))
        .args(["-p", "8x1", "-o"])
        .arg(d.join("out"));
    let mut h = bin();
    h.arg("header").arg(d.join("out/cs.0.fil"));
    for (what, cmd) in [("generate", g), ("run", r), ("header", h)] {
        let o = with_closed_stdout(cmd);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !stderr.contains("panicked"),
            "{what}: {:?} {stderr}",
            o.status
        );
    }
    // The work was done all the same.
    assert!(d.join("out/cs.0.fil").is_file());
}

#[test]
fn gpu_only_options_are_refused_with_the_cpu_engine() {
    for (args, named) in [
        (&["--gpu", "1"][..], "--gpu"),
        (&["--gpu-mode", "stream"][..], "--gpu-mode"),
        (&["--dot"][..], "--dot"),
        (&["--device", "cpu", "--dot"][..], "--dot"),
    ] {
        let o = bin()
            .args(["run", "nowhere", "-p", "8x1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(
            err.contains(named) && err.contains("GPU engine"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn no_gpu_says_that_the_cpu_engine_runs_anywhere() {
    if cudagraph::Device::get(0).is_ok() {
        return; // a GPU is there: nothing to refuse
    }
    let o = bin()
        .args(["run", "nowhere", "-p", "8x1", "--device", "gpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("CPU engine"), "{err}");
}

#[test]
fn output_directory_errors_say_what_is_wrong_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    generate(&tiny(d, "od")).unwrap();
    let file = d.join("afile");
    std::fs::write(&file, "x").unwrap();
    // `-o` names a file.
    let o = bin()
        .arg("run")
        .arg(d.join("od"))
        .args(["-p", "8x1", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("not a directory") && !err.contains("File exists"),
        "{err}"
    );
    // Below a file: the OS error is said once.
    let o = bin()
        .arg("run")
        .arg(d.join("od"))
        .args(["-p", "8x1", "-o"])
        .arg(file.join("sub"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}

#[test]
fn warnings_are_printed_once_and_the_summary_times_the_plots() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "w");
    spec.blocks_per_file = 6;
    spec.drop_blocks = vec![3];
    generate(&spec).unwrap();
    let o = bin()
        .arg("run")
        .arg(d.join("w"))
        .args(["-p", "8x4", "--png", "-o"])
        .arg(d.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(all.matches("gap:").count(), 1, "{all}");
    assert!(all.contains(", plots "), "{all}");
    assert!(all.contains("memory: host peak RSS "), "{all}");
    let rss = spectrometer::pipeline::host_peak_rss().expect("Linux has /proc");
    assert!(rss > 1 << 20, "{rss}");
}

#[test]
fn counts_that_do_not_fit_the_header_are_an_error_not_a_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny(dir.path(), "big");
    generate(&spec).unwrap();
    let scan = Scan::open(&dir.path().join("big")).unwrap();
    let mut plan = Plan::new(
        &scan,
        &[product(8, 1, Detection::TotalPower)],
        &Selection::default(),
    )
    .unwrap();
    assert!(filterbank_header(&scan, &plan, 0, 0, None, 0).is_ok());
    plan.products[0].nchans = 1 << 31;
    match filterbank_header(&scan, &plan, 0, 0, None, 0) {
        Err(Error::InvalidProduct { reason, .. }) => {
            assert!(reason.contains("nchans = 2147483648"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}
