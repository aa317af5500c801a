//! `run --format h5` and `rawspec -j` end to end (only with the `fbh5` feature). In a test
//! binary of their own: they start the program as child processes, which would inherit the
//! HDF5 file descriptors (and their `flock` locks) that the tests of `tests/fbh5.rs` hold open
//! in parallel threads, so that those tests could not open their own files again.
#![cfg(feature = "fbh5")]

mod common;

use std::process::Command;

use common::tiny;
use spectrometer::fbh5::{bitshuffle_available, read_fbh5};
use spectrometer::filterbank::Filterbank;
use spectrometer::generate::generate;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"))
}

fn ok(o: std::process::Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `run --format h5` and `rawspec -j` write the same header and spectra as the `.fil` outputs.
#[test]
fn run_and_rawspec_write_the_spectra_of_the_fil_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "scan");
    spec.blocks_per_file = 3;
    spec.files = 2;
    generate(&spec).unwrap();
    let stem = d.join("scan");
    for format in ["fil", "h5"] {
        ok(bin()
            .arg("run")
            .arg(&stem)
            .args([
                "-p", "16x2", "-p", "8x4:full", "-q", "--format", format, "-o",
            ])
            .arg(d.join(format))
            .output()
            .unwrap());
    }
    for p in ["0", "1"] {
        let fil = Filterbank::read(&d.join(format!("fil/scan.{p}.fil"))).unwrap();
        let (h5, info) = read_fbh5(&d.join(format!("h5/scan.{p}.h5"))).unwrap();
        assert_eq!(info.bitshuffle, bitshuffle_available());
        assert_eq!(h5.data, fil.data, "product {p}");
        assert!((h5.header.src_raj - fil.header.src_raj).abs() < 1e-6);
        assert!((h5.header.src_dej - fil.header.src_dej).abs() < 1e-6);
        let mut h = h5.header.clone();
        h.src_raj = fil.header.src_raj;
        h.src_dej = fil.header.src_dej;
        assert_eq!(h, fil.header, "product {p}");
    }
    // `header` reads either (by the first bytes): the same lines but for the file's name and
    // the coordinates (degrees packed again as hhmmss.s), then the FBH5 file's own.
    let header = |f: &str| {
        let o = bin().arg("header").arg(d.join(f)).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let (fil, h5) = (header("fil/scan.1.fil"), header("h5/scan.1.h5"));
    let same = |t: &str| {
        t.lines()
            .filter(|l| {
                !["file", "src_raj", "src_dej", "version", "filter", "chunk"]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(same(&h5), same(&fil));
    assert!(fil.contains("spectra      "), "{fil}");
    let filter = if bitshuffle_available() {
        "bitshuffle"
    } else {
        "none"
    };
    assert!(h5.contains(&format!("filter       {filter}")), "{h5}");
    assert!(
        h5.contains("version      ") && h5.contains("chunk        ["),
        "{h5}"
    );
    let names: Vec<_> = std::fs::read_dir(d.join("h5"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporaries left: {names:?}");

    ok(bin()
        .args(["rawspec", "-f", "16", "-t", "2", "-j"])
        .arg(&stem)
        .output()
        .unwrap());
    let (rs, _) = read_fbh5(&d.join("scan.rawspec.0000.h5")).unwrap();
    let fil = Filterbank::read(&d.join("fil/scan.0.fil")).unwrap();
    assert_eq!(rs.data, fil.data);
    assert!(!d.join("scan.rawspec.0000.fil").exists());
}
