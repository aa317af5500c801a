//! Bad input gives the expected error variant naming the file, block and key, and leaves no
//! output file behind.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use spectrometer::generate::generate;
use spectrometer::guppi::Header;
use spectrometer::pipeline::{run, run_stem, RunConfig};
use spectrometer::plan::{Detection, Plan, ProductSpec};
use spectrometer::scan::Scan;
use spectrometer::{cpu::CpuEngine, Error};

fn run_on(dir: &Path, stem: &str, products: Vec<ProductSpec>) -> (Result<(), Error>, PathBuf) {
    let out = dir.join("out");
    let cfg = RunConfig {
        inputs: vec![dir.join(stem)],
        out_dir: out.clone(),
        products,
        ..RunConfig::default()
    };
    (run(&cfg).map(|_| ()), out)
}

fn p1() -> Vec<ProductSpec> {
    vec![product(4, 1, Detection::TotalPower)]
}

/// Two good blocks then `bad` as the third block (index 2) of `bad.0000.raw`.
fn with_bad_third_block(dir: &Path, bad: Header) -> PathBuf {
    let path = dir.join("bad.0000.raw");
    let good = |i| (minimal_header(8, i), vec![0u8; 16]);
    write_raw(&path, &[good(0), good(1), (bad, vec![0u8; 16])], false);
    path
}

#[test]
fn missing_key_names_file_block_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(8, 2);
    h.cards.retain(|(k, _)| k != "OBSFREQ");
    let path = with_bad_third_block(dir.path(), h);
    let (r, out) = run_on(dir.path(), "bad", p1());
    match r {
        Err(Error::MissingKey { file, block, key }) => {
            assert_eq!((file, block, key.as_str()), (path, 2, "OBSFREQ"))
        }
        other => panic!("{other:?}"),
    }
    assert!(files_in(&out).is_empty());
}

#[test]
fn malformed_card_and_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    // A card without '=' (raw bytes, since Header only writes well-formed cards).
    let mut bytes = Vec::new();
    let h = minimal_header(8, 0);
    let hb = h.to_bytes(false);
    bytes.extend_from_slice(&hb[..hb.len() - 80]);
    bytes.extend_from_slice(format!("{:<80}", "GARBAGE CARD WITHOUT EQUALS").as_bytes());
    bytes.extend_from_slice(format!("{:<80}", "END").as_bytes());
    bytes.extend_from_slice(&[0u8; 16]);
    let path = dir.path().join("mal.0000.raw");
    std::fs::write(&path, &bytes).unwrap();
    let (r, out) = run_on(dir.path(), "mal", p1());
    match r {
        Err(Error::MalformedCard {
            file,
            block,
            card,
            key,
            ..
        }) => {
            assert_eq!((file, block, key.as_str()), (path, 0, "GARBAGE"));
            assert_eq!(card, h.cards.len());
        }
        other => panic!("{other:?}"),
    }
    assert!(files_in(&out).is_empty());

    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(8, 2);
    h.set("NBITS", spectrometer::guppi::Value::Raw("eight".into()));
    let path = with_bad_third_block(dir.path(), h);
    match run_on(dir.path(), "bad", p1()).0 {
        Err(Error::BadValue {
            file,
            block,
            key,
            value,
            ..
        }) => {
            assert_eq!(
                (file, block, key.as_str(), value.as_str()),
                (path, 2, "NBITS", "eight")
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn blocsize_inconsistent_with_geometry() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(8, 0);
    h.set_int("BLOCSIZE", 17); // 2 bytes per sample: 17 is not whole
    let path = dir.path().join("bs.0000.raw");
    write_raw(&path, &[(h, vec![0u8; 17])], false);
    let (r, out) = run_on(dir.path(), "bs", p1());
    match r {
        Err(e @ Error::BlocsizeMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("bs.0000.raw") && msg.contains("block 0") && msg.contains("BLOCSIZE"),
                "{msg}"
            );
            let Error::BlocsizeMismatch {
                file,
                block,
                blocsize,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!((file, block, blocsize), (path, 0, 17));
        }
        other => panic!("{other:?}"),
    }
    assert!(files_in(&out).is_empty());
}

#[test]
fn unsupported_nbits() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(8, 2);
    h.set_int("NBITS", 2);
    let path = with_bad_third_block(dir.path(), h);
    let (r, out) = run_on(dir.path(), "bad", p1());
    match r {
        Err(e @ Error::UnsupportedNbits { .. }) => {
            assert!(e.to_string().contains("NBITS"));
            let Error::UnsupportedNbits { file, block, nbits } = e else {
                unreachable!()
            };
            assert_eq!((file, block, nbits), (path, 2, 2));
        }
        other => panic!("{other:?}"),
    }
    assert!(files_in(&out).is_empty());
}

#[test]
fn truncated_header_before_any_block() {
    let dir = tempfile::tempdir().unwrap();
    let hb = minimal_header(8, 0).to_bytes(false);
    let path = dir.path().join("th.0000.raw");
    // Five whole cards and half of the sixth; no END.
    std::fs::write(&path, &hb[..5 * 80 + 40]).unwrap();
    let (r, out) = run_on(dir.path(), "th", p1());
    match r {
        Err(Error::TruncatedHeader {
            file,
            block,
            key,
            cards,
        }) => {
            assert_eq!((file, block, key.as_str(), cards), (path, 0, "OBSFREQ", 5));
        }
        other => panic!("{other:?}"),
    }
    assert!(files_in(&out).is_empty());
}

#[test]
fn not_enough_samples_for_one_integration() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny(dir.path(), "short"); // 4 blocks × 64 = 256 samples
    generate(&spec).unwrap();
    let (r, out) = run_on(
        dir.path(),
        "short",
        vec![
            product(16, 16, Detection::TotalPower),
            product(64, 5, Detection::TotalPower),
        ],
    );
    match r {
        Err(Error::NotEnoughSamples {
            product,
            nfft,
            nint,
            needed,
            available,
        }) => {
            assert_eq!(
                (product, nfft, nint, needed, available),
                (1, 64, 5, 320, 256)
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(files_in(&out).is_empty());
}

#[test]
fn too_many_products() {
    let dir = tempfile::tempdir().unwrap();
    generate(&tiny(dir.path(), "many")).unwrap();
    let (r, out) = run_on(
        dir.path(),
        "many",
        vec![product(4, 1, Detection::TotalPower); 5],
    );
    assert!(
        matches!(r, Err(Error::TooManyProducts { count: 5, max: 4 })),
        "{r:?}"
    );
    assert!(files_in(&out).is_empty());
}

#[test]
fn output_directory_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    generate(&tiny(dir.path(), "od")).unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let cfg = RunConfig {
        inputs: vec![dir.path().join("od")],
        out_dir: blocker.join("out"),
        products: p1(),
        ..RunConfig::default()
    };
    match run(&cfg) {
        Err(Error::OutputDir { path, .. }) => assert_eq!(path, blocker.join("out")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn geometry_change_and_irregular_pktidx() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(8, 2);
    h.set_float("OBSFREQ", 1001.0);
    let path = with_bad_third_block(dir.path(), h);
    match run_on(dir.path(), "bad", p1()).0 {
        Err(Error::GeometryChanged {
            file, block, key, ..
        }) => {
            assert_eq!((file, block, key.as_str()), (path, 2, "OBSFREQ"))
        }
        other => panic!("{other:?}"),
    }
    // PKTIDX 0, 1, 1: backwards after a step of 1.
    let dir = tempfile::tempdir().unwrap();
    let path = with_bad_third_block(dir.path(), minimal_header(8, 1));
    match run_on(dir.path(), "bad", p1()).0 {
        Err(Error::PktidxIrregular {
            file,
            block,
            previous,
            now,
            step,
            piperblk,
        }) => {
            assert_eq!(
                (file, block, previous, now, step, piperblk),
                (path, 2, 1, 1, 1, false)
            )
        }
        other => panic!("{other:?}"),
    }
}

/// With PIPERBLK in the first header, the PKTIDX step is PIPERBLK: a jump that is no multiple
/// of it is refused naming PIPERBLK; a PIPERBLK that is no positive number is a warning and the
/// step is inferred as without it.
#[test]
fn piperblk_is_the_step_and_a_bad_one_is_a_warning() {
    // Block `i` (PKTIDX 2i) with PIPERBLK written as `v`.
    fn block(v: &str, i: i64) -> (Header, Vec<u8>) {
        let mut h = minimal_header(8, i * 2);
        h.set("PIPERBLK", spectrometer::guppi::Value::Raw(v.into()));
        (h, vec![0u8; 16])
    }
    // PKTIDX 0, 2, 4 with PIPERBLK 3.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pb.0000.raw");
    write_raw(&path, &[block("3", 0), block("3", 1), block("3", 2)], false);
    let r = Scan::open(&path);
    let Err(
        e @ Error::PktidxIrregular {
            block: 1,
            step: 3,
            piperblk: true,
            ..
        },
    ) = r
    else {
        panic!("{r:?}")
    };
    assert!(
        e.to_string().ends_with("the step 3 given by PIPERBLK"),
        "{e}"
    );
    // PIPERBLK 0 and "x": warnings; the step (2) from the first two blocks.
    for (v, says) in [
        ("0", "PIPERBLK = 0 is not a positive step"),
        ("x", "PIPERBLK"),
    ] {
        write_raw(&path, &[block(v, 0), block(v, 1), block(v, 2)], false);
        let scan = Scan::open(&path).unwrap();
        assert_eq!(scan.pktidx_step, Some(2));
        let w = scan
            .warnings
            .iter()
            .find(|w| w.contains("the PKTIDX step is inferred"));
        assert!(
            w.is_some_and(|w| w.contains(says)),
            "{v}: {:?}",
            scan.warnings
        );
    }
}

#[test]
fn failure_during_processing_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "mid");
    spec.files = 2;
    generate(&spec).unwrap();
    let scan = Scan::open(&dir.path().join("mid")).unwrap();
    let plan = Plan::new(&scan, &p1(), &Default::default()).unwrap();
    // The second file shrinks after indexing: the reader fails mid-run.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&scan.files[1])
        .unwrap();
    f.set_len(100).unwrap();
    let out = dir.path().join("out");
    let cfg = RunConfig {
        out_dir: out.clone(),
        png: true,
        ..RunConfig::default()
    };
    let mut engine = CpuEngine::new(&plan).unwrap();
    let r = run_stem(&scan, &plan, &mut engine, &cfg);
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    assert!(out.is_dir(), "the output directory was created");
    assert!(
        files_in(&out).is_empty(),
        "left behind: {:?}",
        files_in(&out)
    );
}

#[test]
fn missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = run_on(dir.path(), "nothing", p1());
    let Err(e @ Error::NoFiles { .. }) = r else {
        panic!("{r:?}")
    };
    assert!(
        e.to_string().ends_with("; there is no .raw file there"),
        "{e}"
    );
}

/// A stem with no files names the scans of its directory (what may have been meant), and a
/// directory given as the input is refused naming its scans.
#[test]
fn missing_stem_and_directory_name_the_scans_there() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "guppi_60000_1234");
    spec.files = 3;
    generate(&spec).unwrap();
    generate(&tiny(d, "other")).unwrap();
    std::fs::copy(d.join("other.0000.raw"), d.join("sample_puppi.raw")).unwrap();
    std::fs::create_dir(d.join("sub.raw")).unwrap(); // a directory is no scan
    std::fs::write(d.join("notes.txt"), "").unwrap();
    let listing = "guppi_60000_1234 (3 files), other (1 file), sample_puppi (1 file)";
    let (r, _) = run_on(d, "guppi_60000", p1());
    let Err(e @ Error::NoFiles { .. }) = r else {
        panic!("{r:?}")
    };
    let text = e.to_string();
    assert!(text.contains("guppi_60000.0000.raw"), "{text}");
    assert!(
        text.ends_with(&format!("; the scans there: {listing}")),
        "{text}"
    );
    let (r, _) = run_on(d, "", p1());
    let Err(e @ Error::InputIsDirectory { .. }) = r else {
        panic!("{r:?}")
    };
    let text = e.to_string();
    assert!(text.contains("is a directory, not a scan"), "{text}");
    assert!(
        text.ends_with(&format!("; the scans there: {listing}")),
        "{text}"
    );
    // Long listings are cut.
    for i in 0..9 {
        std::fs::write(d.join(format!("s{i}.raw")), "").unwrap();
    }
    let r = Scan::open(d);
    let Err(e @ Error::InputIsDirectory { .. }) = r else {
        panic!("{r:?}")
    };
    assert!(e.to_string().ends_with(", and 4 more"), "{e}");
}
