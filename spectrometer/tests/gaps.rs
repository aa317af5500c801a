//! Real recorders' habits: dropped blocks (PKTIDX gaps) become zeros and are reported; a file
//! that ends mid-block stops at its last whole block with a warning.

mod common;

use common::*;
use spectrometer::filterbank::Filterbank;
use spectrometer::generate::{generate, Tone};
use spectrometer::plan::{Detection, Selection};
use spectrometer::scan::{Scan, SlotKind};

#[test]
fn pktidx_gap_is_zero_filled_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "gap");
    spec.blocks_per_file = 3;
    spec.files = 2;
    spec.pktidx_step = 7; // inferred from the first two blocks
    spec.drop_blocks = vec![2, 3]; // the last of file 0 and the first of file 1
    spec.overlap = 16;
    spec.noise = 0.0;
    spec.tones = vec![Tone::new(1399.5, 40.0)];
    let out = dir.path().join("out");
    // One spectrum per block's new samples: integration i is block i.
    let r = gen_and_run(
        &spec,
        &[product(48, 1, Detection::TotalPower)],
        Selection::default(),
        &out,
    );
    let scan = Scan::open(&dir.path().join("gap")).unwrap();
    assert_eq!(scan.pktidx_step, Some(7));
    assert_eq!(scan.gaps.len(), 1);
    let g = &scan.gaps[0];
    assert_eq!(
        (
            g.pktidx_before,
            g.pktidx_after,
            g.missing_blocks,
            g.zero_samples
        ),
        (7, 28, 2, 96)
    );
    assert_eq!(g.file, scan.files[1]);
    assert_eq!(g.block, 0);
    assert_eq!(scan.slots.len(), 6);
    assert_eq!(scan.slots[2], SlotKind::Gap);
    assert_eq!(scan.slots[3], SlotKind::Gap);
    assert_eq!((r.data_blocks, r.gap_blocks), (4, 2));
    assert!(r
        .messages
        .iter()
        .any(|m| m.starts_with("gap:") && m.contains("2 block(s) dropped")));
    assert!(r.to_string().contains("2 zero-filled gap"));
    let fb = Filterbank::read(&out.join("gap.0.fil")).unwrap();
    assert_eq!(fb.nsamples(), 6, "the time axis keeps the dropped blocks");
    let total = |t: usize| -> f32 { (0..fb.header.nchans as usize).map(|c| fb.at(t, 0, c)).sum() };
    for t in [0, 1, 4, 5] {
        assert!(
            total(t) > 1e5,
            "block {t} should hold the tone: {}",
            total(t)
        );
    }
    assert_eq!(total(2), 0.0);
    assert_eq!(total(3), 0.0);
    // Samples after the gap are where the time axis says: the tone's phase continues, so the
    // spectrum of block 4 equals block 1's (a tone on an exact bin has constant power).
    let row = |t: usize| -> Vec<f32> {
        (0..fb.header.nchans as usize)
            .map(|c| fb.at(t, 0, c))
            .collect()
    };
    let (a, b) = (row(1), row(4));
    let peak_a = a.iter().cloned().fold(0.0, f32::max);
    assert!(a
        .iter()
        .zip(&b)
        .all(|(x, y)| (x - y).abs() <= 1e-3 * peak_a));
}

#[test]
fn truncated_last_file_stops_at_last_whole_block() {
    for (cut, in_header) in [(10u64, false), (0, false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = tiny(dir.path(), "cut");
        spec.files = 2;
        spec.directio = true;
        spec.truncate_bytes = cut;
        let out = dir.path().join("out");
        let r = gen_and_run(
            &spec,
            &[product(64, 1, Detection::TotalPower)],
            Selection::default(),
            &out,
        );
        let scan = Scan::open(&dir.path().join("cut")).unwrap();
        if cut == 0 {
            assert!(scan.truncations.is_empty());
            assert_eq!(r.data_blocks, 8);
            continue;
        }
        assert_eq!(scan.truncations.len(), 1);
        let t = &scan.truncations[0];
        assert_eq!(
            (t.file.clone(), t.block, t.in_header),
            (scan.files[1].clone(), 3, in_header)
        );
        assert_eq!(r.data_blocks, 7);
        assert!(r
            .messages
            .iter()
            .any(|m| m.starts_with("warning:") && m.contains("ends inside block 3")));
        let fb = Filterbank::read(&out.join("cut.0.fil")).unwrap();
        assert_eq!(fb.nsamples(), 7);
    }
}

#[test]
fn file_ending_inside_a_later_header_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny(dir.path(), "hdr");
    generate(&spec).unwrap();
    let path = dir.path().join("hdr.0000.raw");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&spec.header(4).to_bytes(false)[..200]);
    std::fs::write(&path, &bytes).unwrap();
    let scan = Scan::open(&dir.path().join("hdr")).unwrap();
    assert_eq!(scan.slots.len(), 4);
    assert_eq!(scan.truncations.len(), 1);
    assert!(scan.truncations[0].in_header);
    assert_eq!(scan.truncations[0].bytes_ignored, 200);
}

/// A file missing from a sequence's numbering is named in a warning (its blocks are a PKTIDX
/// gap here), one warning per hole, a run of missing files as a range; a sequence without
/// holes has no such warning.
#[test]
fn files_missing_from_a_sequence_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "seq");
    spec.blocks_per_file = 2;
    spec.files = 6;
    generate(&spec).unwrap();
    let stem = dir.path().join("seq");
    let missing = |scan: &Scan| -> Vec<String> {
        let w = scan
            .warnings
            .iter()
            .filter(|w| w.contains("missing from the sequence"));
        w.cloned().collect()
    };
    assert_eq!(missing(&Scan::open(&stem).unwrap()), Vec::<String>::new());
    for n in [1, 3, 4] {
        std::fs::remove_file(dir.path().join(format!("seq.000{n}.raw"))).unwrap();
    }
    let scan = Scan::open(&dir.path().join("seq.0005.raw")).unwrap();
    let s = stem.display();
    assert_eq!(
        missing(&scan),
        vec![
            format!("file {s}.0001.raw is missing from the sequence (between {s}.0000.raw and {s}.0002.raw)"),
            format!("files {s}.0003.raw to .0004.raw are missing from the sequence (between {s}.0002.raw and {s}.0005.raw)"),
        ]
    );
    assert_eq!(
        scan.gaps.len(),
        2,
        "the PKTIDX of the next files see them as gaps"
    );
    let lines = scan.report_lines();
    assert!(
        lines.iter().any(|l| l.starts_with("warning: file ")),
        "{lines:?}"
    );
}

/// PIPERBLK (hashpipe's PKTIDX step per block), where the recorder wrote it, is the step from
/// the first block on: a block dropped right after the first is a gap, which the step inferred
/// from the first two blocks cannot show.
#[test]
fn piperblk_shows_a_gap_after_the_first_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "pb");
    spec.drop_blocks = vec![1];
    spec.piperblk = true;
    generate(&spec).unwrap();
    let scan = Scan::open(&dir.path().join("pb")).unwrap();
    assert_eq!(scan.pktidx_step, Some(16));
    assert_eq!(scan.gaps.len(), 1);
    assert_eq!((scan.gaps[0].block, scan.gaps[0].missing_blocks), (1, 1));
    assert_eq!(scan.slot_count(), 4);
    assert!(matches!(scan.slot(1), Some(SlotKind::Gap)));
    // Without it, the first two blocks' difference (32) is taken as the step, and the next
    // (16) does not fit it.
    spec.piperblk = false;
    generate(&spec).unwrap();
    let r = Scan::open(&dir.path().join("pb"));
    assert!(
        matches!(
            r,
            Err(spectrometer::Error::PktidxIrregular {
                step: 32,
                piperblk: false,
                ..
            })
        ),
        "{r:?}"
    );
}
