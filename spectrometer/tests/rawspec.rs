//! `cudagraph-spectrometer rawspec`: rawspec's options, defaults and file names, with the same
//! spectra as `run` computes.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use spectrometer::filterbank::Filterbank;
use spectrometer::generate::{generate, GenerateSpec};
use spectrometer::rawspec::MACHINE_ID;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"))
}

fn rawspec(args: &[&str], stem: &Path) -> Output {
    bin().arg("rawspec").args(args).arg(stem).output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "accepted: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".raw"))
        .collect();
    v.sort();
    v
}

fn scan(dir: &Path, stem: &str, nants: usize, npol: usize) -> GenerateSpec {
    let mut spec = tiny(dir, stem);
    spec.nants = nants;
    spec.npol = npol;
    spec.blocks_per_file = 3;
    spec.files = 2;
    generate(&spec).unwrap();
    spec
}

#[test]
fn names_follow_rawspec_next_to_the_stem_or_in_dest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    scan(d, "guppi_1", 1, 4);
    ok(&rawspec(&["-f", "16,4", "-t", "2,8"], &d.join("guppi_1")));
    assert_eq!(
        names(d),
        ["guppi_1.rawspec.0000.fil", "guppi_1.rawspec.0001.fil"]
    );
    let dest = d.join("dest");
    ok(&rawspec(
        &[
            "-f",
            "16",
            "-t",
            "2",
            "-o",
            "7",
            "-S",
            "-d",
            dest.to_str().unwrap(),
        ],
        &d.join("guppi_1.0001.raw"),
    ));
    assert_eq!(names(&dest), ["guppi_1-ant000.rawspec.0007.fil"]);
}

#[test]
fn several_antennas_split_by_default_and_ics_writes_the_sum_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    scan(d, "multi", 2, 4);
    let o = rawspec(&["-f", "8", "-t", "4"], &d.join("multi"));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("NANTS = 2"));
    assert_eq!(
        names(d),
        [
            "multi-ant000.rawspec.0000.fil",
            "multi-ant001.rawspec.0000.fil"
        ]
    );
    let ics = d.join("ics");
    ok(&rawspec(
        &[
            "-f",
            "8",
            "-t",
            "4",
            "-i",
            "1,3",
            "-d",
            ics.to_str().unwrap(),
        ],
        &d.join("multi"),
    ));
    assert_eq!(names(&ics), ["multi-ics.rawspec.0000.fil"]);
    // The sum with weights 1 and 3 is the weighted sum of the split outputs.
    let a0 = Filterbank::read(&d.join("multi-ant000.rawspec.0000.fil")).unwrap();
    let a1 = Filterbank::read(&d.join("multi-ant001.rawspec.0000.fil")).unwrap();
    let sum = Filterbank::read(&ics.join("multi-ics.rawspec.0000.fil")).unwrap();
    assert_eq!(sum.data.len(), a0.data.len());
    for ((s, x), y) in sum.data.iter().zip(&a0.data).zip(&a1.data) {
        let want = x + 3.0 * y;
        assert!(
            (s - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{s} vs {want}"
        );
    }
    // One weight for all antennas.
    let ics1 = d.join("ics1");
    ok(&rawspec(
        &[
            "-f",
            "8",
            "-t",
            "4",
            "-i",
            "2",
            "-d",
            ics1.to_str().unwrap(),
        ],
        &d.join("multi"),
    ));
    let s1 = Filterbank::read(&ics1.join("multi-ics.rawspec.0000.fil")).unwrap();
    assert!((s1.data[5] - 2.0 * (a0.data[5] + a1.data[5])).abs() <= 1e-4 * s1.data[5]);
}

#[test]
fn the_spectra_are_those_of_run_and_the_pols_map_per_product() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    scan(d, "same", 1, 4);
    let r = rawspec(&["-f", "16,8", "-t", "2,4", "-p", "1,-4"], &d.join("same"));
    ok(&r);
    // rawspec takes the GPU engine where a GPU is usable (and says when it falls back to the
    // CPU): `run` is asked for the same engine, so that the spectra are the same bit for bit.
    let cpu = String::from_utf8_lossy(&r.stderr).contains("using the CPU engine");
    let o = bin()
        .arg("run")
        .arg(d.join("same"))
        .args(["-p", "16x2", "-p", "8x4:iquv", "-q", "-o"])
        .arg(d.join("run"))
        .args(if cpu {
            &[][..]
        } else {
            &["--device", "gpu"][..]
        })
        .output()
        .unwrap();
    ok(&o);
    for (raw, native, nifs) in [("0000", "0", 1), ("0001", "1", 4)] {
        let a = Filterbank::read(&d.join(format!("same.rawspec.{raw}.fil"))).unwrap();
        let b = Filterbank::read(&d.join(format!("run/same.{native}.fil"))).unwrap();
        assert_eq!(a.header.nifs, nifs);
        assert_eq!(a.data, b.data, "product {raw}");
        assert_eq!(a.header.machine_id, MACHINE_ID);
        let mut h = a.header.clone();
        h.machine_id = b.header.machine_id;
        assert_eq!(h, b.header, "only machine_id differs");
    }
    // -p 4 alone: cross pols for every product (the last value repeats).
    let x = d.join("x");
    ok(&rawspec(
        &[
            "-f",
            "16,8",
            "-t",
            "2,4",
            "-p",
            "4",
            "-d",
            x.to_str().unwrap(),
        ],
        &d.join("same"),
    ));
    for f in ["same.rawspec.0000.fil", "same.rawspec.0001.fil"] {
        assert_eq!(Filterbank::read(&x.join(f)).unwrap().header.nifs, 4);
    }
}

#[test]
fn single_pol_input_falls_back_to_total_power_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    scan(d, "one", 1, 1);
    let o = rawspec(&["-f", "8", "-t", "2", "-p", "-4"], &d.join("one"));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("total power"));
    let f = Filterbank::read(&d.join("one.rawspec.0000.fil")).unwrap();
    assert_eq!(f.header.nifs, 1);
}

#[test]
fn channel_selection_and_headers_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "sel");
    spec.nchan = 4;
    spec.directio = true;
    spec.blocks_per_file = 3;
    generate(&spec).unwrap();
    ok(&rawspec(
        &["-f", "8", "-t", "2", "-s", "1", "-n", "2", "-H"],
        &d.join("sel"),
    ));
    let f = Filterbank::read(&d.join("sel.rawspec.0000.fil")).unwrap();
    assert_eq!(f.header.nchans, 2 * 8);
    // The headers file: each block's cards up to its END card, without the DIRECTIO padding.
    let h = std::fs::read(d.join("sel.rawspec.headers")).unwrap();
    assert_eq!(h.len() % 80, 0);
    let cards: Vec<&[u8]> = h.chunks(80).collect();
    let ends = cards.iter().filter(|c| c.starts_with(b"END ")).count();
    assert_eq!(ends, 3, "one header per block");
    assert!(cards.last().unwrap().starts_with(b"END "));
    let raw = std::fs::read(d.join("sel.0000.raw")).unwrap();
    let first_end = cards.iter().position(|c| c.starts_with(b"END ")).unwrap();
    assert_eq!(&raw[..(first_end + 1) * 80], &h[..(first_end + 1) * 80]);
}

#[test]
fn what_cannot_be_honoured_is_refused_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    scan(d, "r", 2, 4);
    let stem = d.join("r");
    for (args, needle) in [
        (&["-d", "blc00:5000"][..], "-d"),
        (&["-f", "8", "-t", "2", "-r", "6"][..], "-r"),
        (&["-f", "8", "-t", "2", "-s", "1"][..], "-s"),
        (&["-f", "8,16", "-t", "2"][..], "same number"),
        (&["-f", "8", "-t", "2", "-p", "2"][..], "1 or +/- 4"),
        (
            &["-f", "8", "-t", "2", "-s", "0", "-n", "1"][..],
            "per antenna",
        ),
        (&["-f", "8", "-t", "2", "-i", "1,2,3"][..], "3 weights"),
        (&["-f", "8,8,8,8,8", "-t", "1,1,1,1,1"][..], "at most 4"),
    ] {
        let e = err(&rawspec(args, &stem));
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    assert!(names(d).is_empty(), "nothing written: {:?}", names(d));
    if !cfg!(feature = "fbh5") {
        let e = err(&rawspec(&["-f", "8", "-t", "2", "-j"], &stem));
        assert!(e.contains("fbh5 feature"), "{e}");
    }
}
