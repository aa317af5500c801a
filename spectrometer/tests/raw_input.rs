//! RAW input that a first user or a review of issue 27 found mishandled: file names outside the
//! `STEM.NNNN.raw` pattern, empty and truncated files, corrupt `PKTIDX` jumps, header counts that
//! overflow, FITS blank cards, long strings in the generator, and filterbank string lengths.
//! Each is a typed error naming the file and block (and key), or is accepted, never a panic.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use spectrometer::filterbank::{FilterbankHeader, MAX_STRING_LEN};
use spectrometer::generate::generate;
use spectrometer::guppi::{read_header, Header, HeaderRead, Loc, Value, MAX_STRING_CHARS};
use spectrometer::plan::{Detection, Plan, Selection};
use spectrometer::scan::{Scan, ScanOptions, DEFAULT_MAX_GAP_BLOCKS};
use spectrometer::Error;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudagraph-spectrometer"))
}

/// Header bytes of `h` with `extra` cards (raw text, padded to 80 characters) before `END`.
fn header_with_cards(h: &Header, extra: &[&str]) -> Vec<u8> {
    let mut bytes = h.to_bytes(false);
    bytes.truncate(bytes.len() - 80);
    for card in extra {
        bytes.extend_from_slice(format!("{card:<80}").as_bytes());
    }
    bytes.extend_from_slice(format!("{:<80}", "END").as_bytes());
    bytes
}

/// Writes `path` with blocks of [`minimal_header`] (8 samples, 16 data bytes) whose headers
/// are the given bytes.
fn write_blocks(path: &Path, headers: &[Vec<u8>]) {
    let mut bytes = Vec::new();
    for h in headers {
        bytes.extend_from_slice(h);
        bytes.extend_from_slice(&[0u8; 16]);
    }
    std::fs::write(path, bytes).unwrap();
}

/// Blocks of [`minimal_header`] with these PKTIDX values in `name.0000.raw`.
fn with_pktidx(dir: &Path, name: &str, pktidx: &[i64]) -> PathBuf {
    let path = dir.join(format!("{name}.0000.raw"));
    let blocks: Vec<_> = pktidx
        .iter()
        .map(|&p| (minimal_header(8, p), vec![0u8; 16]))
        .collect();
    write_raw(&path, &blocks, false);
    path
}

// 1. Any file path is accepted; the sequence is derived only from `NAME.NNNN.raw`.

#[test]
fn a_raw_file_not_named_as_a_sequence_is_read_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "seq");
    spec.files = 2;
    generate(&spec).unwrap();
    let single = d.join("sample_puppi.raw");
    std::fs::copy(d.join("seq.0000.raw"), &single).unwrap();
    let scan = Scan::open(&single).unwrap();
    assert_eq!(scan.files, vec![single.clone()]);
    assert_eq!(scan.stem, d.join("sample_puppi"));
    assert_eq!(scan.name(), "sample_puppi");
    assert_eq!(scan.slots.len(), 4);
    // Any name at all, if it is a file.
    let other = d.join("recording.dat");
    std::fs::copy(d.join("seq.0001.raw"), &other).unwrap();
    assert_eq!(Scan::open(&other).unwrap().files, vec![other.clone()]);
    // One file of a sequence still stands for all of it.
    let scan = Scan::open(&d.join("seq.0001.raw")).unwrap();
    assert_eq!(scan.files.len(), 2);
    assert_eq!(scan.stem, d.join("seq"));
    // A `.raw` file that is not there is named as such.
    match Scan::open(&d.join("nothere.raw")) {
        Err(Error::Io { path, source }) => {
            assert_eq!(path, d.join("nothere.raw"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    // Through the command line: outputs are named after the file.
    let o = bin()
        .arg("run")
        .arg(&single)
        .args(["-p", "8x1", "-q", "-o"])
        .arg(d.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.join("out/sample_puppi.0.fil").is_file());
}

// 2. Empty files and files ending inside their first block say what is wrong.

#[test]
fn an_empty_file_or_one_ending_in_its_first_block_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Empty.
    let empty = d.join("e.0000.raw");
    std::fs::write(&empty, b"").unwrap();
    match Scan::open(&d.join("e")) {
        Err(e @ Error::EmptyFile { .. }) => {
            assert!(matches!(&e, Error::EmptyFile { file } if *file == empty));
            assert!(e.to_string().contains("empty"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // The first block's data cut short: 10 of 16 bytes.
    let path = d.join("t.0000.raw");
    let mut bytes = minimal_header(8, 0).to_bytes(false);
    bytes.extend_from_slice(&[0u8; 10]);
    std::fs::write(&path, &bytes).unwrap();
    match Scan::open(&path) {
        Err(
            e @ Error::TruncatedData {
                block: 0,
                bytes: 10,
                blocsize: 16,
                ..
            },
        ) => {
            let msg = e.to_string();
            assert!(
                msg.contains("t.0000.raw") && msg.contains("block 0") && msg.contains("10 of"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    // An empty first file followed by a good one: a warning, and the good one is read.
    let mut spec = tiny(d, "g");
    spec.files = 2;
    generate(&spec).unwrap();
    std::fs::write(d.join("g.0000.raw"), b"").unwrap();
    let scan = Scan::open(&d.join("g")).unwrap();
    assert_eq!(scan.slots.len(), 4);
    assert!(
        scan.report_lines()
            .iter()
            .any(|l| l.contains("g.0000.raw") && l.contains("empty")),
        "{:?}",
        scan.report_lines()
    );
}

#[test]
fn a_later_block_cut_short_reports_its_data_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "cut");
    spec.truncate_bytes = 28;
    generate(&spec).unwrap();
    let scan = Scan::open(&dir.path().join("cut")).unwrap();
    let blocsize = scan.geometry.blocsize;
    assert_eq!(scan.truncations.len(), 1);
    assert_eq!(scan.truncations[0].data_bytes, blocsize as u64 - 28);
    let want = format!("{} of BLOCSIZE {blocsize} bytes", blocsize - 28);
    assert!(
        scan.report_lines()
            .iter()
            .any(|l| l.contains("ends inside block 3") && l.contains(&want)),
        "{:?}",
        scan.report_lines()
    );
}

// 3. A corrupt PKTIDX is an error, not a time axis of millions of zero blocks.

#[test]
fn a_pktidx_jump_beyond_the_gap_limit_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, jump) in [("a", 2000i64), ("b", 200_000_000)] {
        let path = with_pktidx(d, name, &[0, 1, jump, jump + 1]);
        match Scan::open(&path) {
            Err(
                e @ Error::PktidxGapTooLong {
                    block: 2,
                    previous: 1,
                    step: 1,
                    ..
                },
            ) => {
                let Error::PktidxGapTooLong {
                    file, missing, max, ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(
                    (file, *missing, *max),
                    (&path, jump as u64 - 2, DEFAULT_MAX_GAP_BLOCKS)
                );
                assert!(e.to_string().contains("--max-gap-blocks"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The limit is an option: 3 dropped blocks pass with 3, not with 2.
    let path = with_pktidx(d, "c", &[0, 1, 5, 6]);
    let open = |max| {
        Scan::open_with(
            &path,
            &ScanOptions {
                max_gap_blocks: max,
            },
        )
    };
    assert_eq!(open(3).unwrap().slots.len(), 7);
    assert!(matches!(
        open(2),
        Err(Error::PktidxGapTooLong {
            missing: 3,
            max: 2,
            ..
        })
    ));
    // A difference that does not fit in 64 bits is irregular, not an overflow.
    let path = with_pktidx(d, "o", &[i64::MIN, i64::MIN + 1, i64::MAX]);
    assert!(matches!(
        Scan::open(&path),
        Err(Error::PktidxIrregular { block: 2, .. })
    ));
}

#[test]
fn max_gap_blocks_is_a_command_line_option() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "gap");
    spec.blocks_per_file = 8;
    spec.drop_blocks = vec![3, 4, 5];
    generate(&spec).unwrap();
    let run = |max: &str| {
        bin()
            .arg("run")
            .arg(d.join("gap"))
            .args(["-p", "8x1", "-q", "--max-gap-blocks", max, "-o"])
            .arg(d.join("out"))
            .output()
            .unwrap()
    };
    let o = run("2");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("gap.0000.raw") && err.contains("block 3") && err.contains("3 dropped"),
        "{err}"
    );
    assert!(run("3").status.success());
}

// 4. Geometry products that overflow are typed errors.

#[test]
fn geometry_products_that_overflow_are_errors_not_wraps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // OBSNCHAN × 2 pols × 2 × 8 bits / 8 = 2^64: wraps to 0 without checking.
    let mut h = minimal_header(8, 0);
    h.set_int("OBSNCHAN", 1 << 62);
    h.set_int("NPOL", 4);
    let path = d.join("huge.0000.raw");
    write_raw(&path, &[(h, vec![0u8; 16])], false);
    match Scan::open(&path) {
        Err(Error::BadValue {
            file, block, key, ..
        }) => assert_eq!((file, block, key.as_str()), (path, 0, "OBSNCHAN")),
        other => panic!("{other:?}"),
    }
    // Nfft × Nint and channels × Nfft, and a channel selection past the end of usize.
    let spec = tiny(d, "ok");
    generate(&spec).unwrap();
    let scan = Scan::open(&d.join("ok")).unwrap();
    let sel = Selection::default();
    let r = Plan::new(
        &scan,
        &[product(1 << 40, 1 << 40, Detection::TotalPower)],
        &sel,
    );
    assert!(
        matches!(&r, Err(Error::InvalidProduct { reason, .. }) if reason.contains("Nfft × Nint")),
        "{r:?}"
    );
    let sel = Selection {
        chan_start: 1,
        nchan: Some(usize::MAX),
        ..Selection::default()
    };
    let r = Plan::new(&scan, &[product(8, 1, Detection::TotalPower)], &sel);
    assert!(matches!(r, Err(Error::Selection(_))), "{r:?}");
    // The generator's BLOCSIZE.
    let mut big = tiny(d, "big");
    big.nchan = usize::MAX / 2;
    let r = generate(&big);
    assert!(
        matches!(&r, Err(Error::Generate(m)) if m.contains("BLOCSIZE")),
        "{r:?}"
    );
}

// 5. FITS blank cards.

#[test]
fn a_blank_card_is_kept_and_only_a_needed_blank_key_fails() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let blanks = ["OBSERVER=   / undefined", "PROJID  =", "SRC_NAME=  / none"];
    let path = d.join("bl.0000.raw");
    let headers: Vec<_> = (0..3)
        .map(|i| header_with_cards(&minimal_header(8, i), &blanks))
        .collect();
    write_blocks(&path, &headers);
    let scan = Scan::open(&path).unwrap();
    assert_eq!(scan.slots.len(), 3);
    assert_eq!(scan.header.get("OBSERVER"), Some(&Value::Blank));
    assert_eq!(scan.header.get("PROJID"), Some(&Value::Blank));
    assert_eq!(scan.info.src_name, "", "a blank string is absent");
    // A blank key that is read: block 1's TBIN.
    let mut h = minimal_header(8, 1);
    h.cards.retain(|(k, _)| k != "TBIN");
    let headers = vec![
        headers[0].clone(),
        header_with_cards(&h, &["TBIN    =                      / undefined"]),
    ];
    let path = d.join("bt.0000.raw");
    write_blocks(&path, &headers);
    match Scan::open(&path) {
        Err(e @ Error::BlankValue { .. }) => {
            let Error::BlankValue { file, block, key } = &e else {
                unreachable!()
            };
            assert_eq!((file, *block, key.as_str()), (&path, 1, "TBIN"));
            assert!(e.to_string().contains("TBIN"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A blank value is written back as a blank card.
    let mut h = minimal_header(8, 0);
    h.set("OBSERVER", Value::Blank);
    let loc = Loc::new(Path::new("x.raw"), 0);
    let HeaderRead::Complete { header, .. } =
        read_header(&mut &h.to_bytes(false)[..], &loc).unwrap()
    else {
        panic!("incomplete")
    };
    assert_eq!(header, h);
}

// 6. Long strings: written validly (cut, closing quote kept), and the generator refuses them.

#[test]
fn long_strings_keep_their_closing_quote_and_read_back() {
    let loc = Loc::new(Path::new("x.raw"), 0);
    let long = "x".repeat(100);
    let quote_at_edge = format!("{}'tail", "y".repeat(MAX_STRING_CHARS - 1));
    let quotes = "'".repeat(40);
    for (value, back) in [
        (long.as_str(), "x".repeat(MAX_STRING_CHARS)),
        // The doubled quote would end one past the limit: it is left out whole.
        (quote_at_edge.as_str(), "y".repeat(MAX_STRING_CHARS - 1)),
        (quotes.as_str(), "'".repeat(MAX_STRING_CHARS / 2)),
    ] {
        let mut h = Header::default();
        h.set_str("SRC_NAME", value);
        h.set_int("NBITS", 8);
        let bytes = h.to_bytes(false);
        assert_eq!(bytes.len(), 3 * 80);
        let HeaderRead::Complete { header, .. } = read_header(&mut &bytes[..], &loc).unwrap()
        else {
            panic!("incomplete")
        };
        assert_eq!(header.opt_str("SRC_NAME").unwrap(), back);
        assert_eq!(header.int("NBITS", &loc).unwrap(), 8);
    }
}

#[test]
fn the_generator_refuses_strings_a_card_cannot_hold_and_reads_back_the_longest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut spec = tiny(d, "long");
    spec.src_name = "s".repeat(MAX_STRING_CHARS + 1);
    let r = generate(&spec);
    assert!(
        matches!(&r, Err(Error::Generate(m)) if m.contains("SRC_NAME")),
        "{r:?}"
    );
    // Quotes count twice.
    spec.src_name = "'".repeat(MAX_STRING_CHARS / 2 + 1);
    assert!(matches!(generate(&spec), Err(Error::Generate(_))));
    // The longest that fits makes the round trip.
    spec.src_name = format!("{}'", "s".repeat(MAX_STRING_CHARS - 2));
    spec.telescop = "t".repeat(MAX_STRING_CHARS);
    generate(&spec).unwrap();
    let scan = Scan::open(&d.join("long")).unwrap();
    assert_eq!(scan.info.src_name, spec.src_name);
    assert_eq!(scan.info.telescop, spec.telescop);
}

// 7. Filterbank header strings stay within what readers accept (the counts are checked by
// first_user.rs's counts_that_do_not_fit_the_header_are_an_error_not_a_wrap).

#[test]
fn filterbank_strings_longer_than_readers_accept_are_cut() {
    let h = FilterbankHeader {
        telescope_id: 6,
        machine_id: 0,
        data_type: 1,
        rawdatafile: "r".repeat(MAX_STRING_LEN + 10),
        source_name: "SRC".into(),
        src_raj: 0.0,
        src_dej: 0.0,
        tstart: 60000.0,
        tsamp: 1e-3,
        fch1: 1400.0,
        foff: -0.1,
        nchans: 16,
        nifs: 1,
        nbits: 32,
        ibeam: 0,
        nbeams: 1,
    };
    let (back, _) = FilterbankHeader::parse(&h.to_bytes()).unwrap();
    assert_eq!(back.rawdatafile, "r".repeat(MAX_STRING_LEN));
    assert_eq!(back.nchans, 16);
}

/// A repeated scan (`--repeat`, the soak) goes through its one list of slots again and again:
/// the time axis, the plan and the reader see every pass, from any first slot, and nothing is
/// copied per pass.
#[test]
fn a_repeated_scan_reads_every_pass_from_one_list_of_slots() {
    use spectrometer::scan::BlockReader;
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny(dir.path(), "rep");
    generate(&spec).unwrap();
    let once = Scan::open(&dir.path().join("rep")).unwrap();
    let n = once.slots.len();
    assert!(n >= 2);
    let scan = once.clone().repeated(3);
    assert_eq!(
        (scan.slots.len(), scan.repeats(), scan.slot_count()),
        (n, 3, 3 * n)
    );
    assert_eq!(scan.slot(2 * n + 1), Some(once.slots[1]));
    assert_eq!(scan.slot(3 * n), None);
    assert_eq!(scan.samples_from(0), 3 * once.samples_from(0));
    let sel = Selection {
        skip_blocks: n + 1,
        ..Selection::default()
    };
    let plan = Plan::new(&scan, &[product(8, 1, Detection::TotalPower)], &sel).unwrap();
    assert_eq!(plan.blocks, 2 * n - 1);
    // The blocks read from slot n + 1 on: the second pass from its block 1, then the third.
    let read = |scan: &Scan, first: usize| {
        let g = scan.geometry;
        let reader = BlockReader::spawn(scan, first, vec![vec![0u8; g.blocsize]; 2]);
        let mut blocks = Vec::new();
        while let Some(b) = reader.next_block() {
            let b = b.unwrap();
            blocks.push((b.slot, b.buf.clone()));
            reader.recycle(b.buf);
        }
        blocks
    };
    // Each base slot's bytes straight from its file, independently of the reader.
    let base: Vec<Vec<u8>> = once
        .slots
        .iter()
        .map(|s| {
            let spectrometer::scan::SlotKind::Data { file, offset, .. } = *s else {
                panic!("the tiny scan has no gaps")
            };
            let bytes = std::fs::read(&once.files[file]).unwrap();
            bytes[offset as usize..offset as usize + once.geometry.blocsize].to_vec()
        })
        .collect();
    assert_ne!(base[0], base[1], "blocks differ, so a wrong slot shows");
    let got = read(&scan, n + 1);
    assert_eq!(got.len(), 2 * n - 1);
    for (k, (slot, bytes)) in got.iter().enumerate() {
        assert_eq!(*slot, n + 1 + k);
        assert_eq!(bytes, &base[slot % n], "slot {slot}");
    }
}
