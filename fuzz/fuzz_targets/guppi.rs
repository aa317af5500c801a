//! Fuzz target `guppi`: the spectrometer's GUPPI RAW reading on arbitrary bytes.
//!
//! Each input is read twice:
//! - in memory, header after header ([`guppi::read_header`], then [`Geometry::from_header`]
//!   and [`ObsInfo::from_header`] where the header is whole), skipping each block's data as the
//!   scan does;
//! - as a file `…/fuzz-<pid>.0000.raw` opened with [`Scan::open`] (the sequence's stem), every
//!   slot read through a [`BlockReader`] with one `BLOCSIZE` buffer, a few samples of each
//!   block decoded ([`Geometry::decode`]), and the report put into words.
//!
//! Properties: no panic (every refusal is an `Err`); an opened scan has at least one slot,
//! each read block is exactly `BLOCSIZE` bytes, the blocks come in slot order, and the reader
//! stops after the last slot.
//!
//! Memory bound: nothing is allocated in proportion to a header's claims, only to the input:
//! the one block buffer (`BLOCSIZE` bytes, which a whole block must have on disk), the decoded
//! samples (at most 8 bytes per input byte), the slot list (at most
//! [`DEFAULT_MAX_GAP_BLOCKS`](spectrometer::scan::DEFAULT_MAX_GAP_BLOCKS) + 1 slots per block),
//! the reader's 64 KiB buffer. Run with `-rss_limit_mb=2048 -malloc_limit_mb=64` (inputs are at
//! most `-max_len` bytes, 64 KiB in CI): a single allocation of 64 MiB fails the run.

#![no_main]

use std::io::{Cursor, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use num_complex::Complex32;
use spectrometer::guppi::{self, Geometry, HeaderRead, Loc, ObsInfo};
use spectrometer::scan::{BlockReader, Scan, SlotKind};

/// One directory per fuzzing process, in memory where the system has `/dev/shm`.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let base = PathBuf::from("/dev/shm");
        let base = if base.is_dir() {
            base
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("cudagraph-fuzz-guppi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("making the scratch directory");
        dir.join("fuzz.0000.raw")
    })
}

/// Headers and geometry straight from the bytes, block after block.
fn headers_in_memory(data: &[u8]) {
    let mut r = Cursor::new(data);
    let loc = Loc::new(std::path::Path::new("memory"), 0);
    for _ in 0..64 {
        let Ok(HeaderRead::Complete { header, len }) = guppi::read_header(&mut r, &loc) else {
            return;
        };
        assert!(
            len >= guppi::CARD_LEN as u64,
            "a header has at least its END card"
        );
        let Ok(g) = Geometry::from_header(&header, &loc) else {
            return;
        };
        assert!(g.ntime > g.overlap && g.new_samples() > 0);
        assert_eq!(
            g.obsnchan * g.bytes_per_chan(),
            g.blocsize,
            "BLOCSIZE is whole channels"
        );
        if let Ok((info, _)) = ObsInfo::from_header(&header, &g, &loc) {
            let _ = (info.coarse_centre(0), info.start_mjd());
        }
        let Some(next) = r.position().checked_add(g.data_len_on_disk()) else {
            return;
        };
        if next >= data.len() as u64 || r.seek(SeekFrom::Start(next)).is_err() {
            return;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    headers_in_memory(data);

    let path = scratch();
    std::fs::write(path, data).expect("writing the scratch file");
    let scan = match Scan::open(path) {
        Ok(scan) => scan,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(!scan.slots.is_empty(), "an opened scan has a block");
    let _ = (scan.report_lines(), scan.name(), scan.samples_from(0));
    let g = scan.geometry;
    assert!(g.blocsize <= data.len(), "a whole block is in the file");
    let reader = BlockReader::spawn(&scan, 0, vec![vec![0u8; g.blocsize]]);
    let mut samples = vec![Complex32::default(); g.ntime];
    let mut expected = 0usize;
    while let Some(block) = reader.next_block() {
        let block = block.expect("a block indexed by Scan::open reads back");
        assert_eq!(block.slot, expected, "blocks in slot order");
        assert_eq!(block.kind, scan.slots[expected]);
        assert_eq!(block.buf.len(), g.blocsize);
        if matches!(block.kind, SlotKind::Gap) {
            assert!(block.buf.iter().all(|&b| b == 0), "a gap reads as zeros");
        }
        for chan in [0, g.obsnchan - 1] {
            g.decode(&block.buf, chan, g.npol - 1, 0, &mut samples);
        }
        expected += 1;
        reader.recycle(block.buf);
    }
    assert_eq!(expected, scan.slots.len(), "every slot read");
    let _ = reader.finish();
});
