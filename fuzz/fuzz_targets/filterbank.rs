//! Fuzz target `filterbank`: the SIGPROC filterbank reader of the spectrometer on arbitrary
//! bytes.
//!
//! Each input is parsed twice: as a header ([`FilterbankHeader::parse`] on the bytes) and as a
//! whole file ([`Filterbank::read`] on the bytes written to a file). Properties:
//! - no panic: every refusal is an `Err`;
//! - a parsed header's length lies within the input, and the header written back
//!   ([`FilterbankHeader::to_bytes`]) parses to a header that writes the same bytes;
//! - a file read holds a whole number of spectra: `data.len() == nsamples × nifs × nchans`,
//!   and [`Filterbank::at`] reaches its last value;
//! - the header-only reader ([`read_header`], which `header` uses) gives the same header and
//!   number of spectra as the whole-file reader wherever that one reads the file, and refuses
//!   nothing it reads.
//!
//! Memory: the reader holds the file and its values (8 bytes per input byte at most); run with
//! `-rss_limit_mb=2048 -malloc_limit_mb=64` (inputs are at most `-max_len` bytes, 64 KiB in CI).

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use spectrometer::filterbank::{read_header, Filterbank, FilterbankHeader};

/// One file per fuzzing process, in memory where the system has `/dev/shm`.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = PathBuf::from("/dev/shm");
        let dir = if dir.is_dir() {
            dir
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("cudagraph-fuzz-{}.fil", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok((header, len)) = FilterbankHeader::parse(data) {
        assert!(len <= data.len(), "header length {len} beyond the input");
        let bytes = header.to_bytes();
        let (again, again_len) =
            FilterbankHeader::parse(&bytes).expect("a header written parses back");
        assert_eq!(again_len, bytes.len());
        assert_eq!(again.to_bytes(), bytes, "written, read and written again");
    }

    let path = scratch();
    std::fs::write(path, data).expect("writing the scratch file");
    let header_only = read_header(path);
    match Filterbank::read(path) {
        Ok(fb) => {
            let (h, spectra) =
                header_only.expect("the header reader reads what the file reader reads");
            // By their bytes: a header may hold NaN, which is not equal to itself.
            assert_eq!(
                h.to_bytes(),
                fb.header.to_bytes(),
                "the same header both ways"
            );
            assert_eq!(
                spectra,
                fb.nsamples() as u64,
                "the same number of spectra both ways"
            );
            let (nifs, nchans) = (fb.header.nifs as usize, fb.header.nchans as usize);
            assert!(nifs > 0 && nchans > 0, "a file read has IFs and channels");
            let n = fb.nsamples();
            assert_eq!(fb.data.len(), n * nifs * nchans, "whole spectra");
            if n > 0 {
                let last = fb.at(n - 1, nifs - 1, nchans - 1);
                assert_eq!(last.to_bits(), fb.data[fb.data.len() - 1].to_bits());
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
