//! The on-disk cache of NVRTC output, so that a second run of a program does not compile its
//! kernels and cuFFT callbacks again; it also keeps small keyed records for other parts of the
//! crate (the FFT fusion decisions, `*.fftfusion`), with the same key check and atomic writes.
//!
//! The cache lives in `$CUDAGRAPH_CACHE_DIR`, else `$XDG_CACHE_HOME/cudagraph`, else
//! `$HOME/.cache/cudagraph`; `CUDAGRAPH_CACHE_DIR=off` turns it off. An entry is keyed by
//! everything that determines NVRTC's output: the NVRTC version, the program name, the target
//! (kind and architecture), every option (include directories included), the name expressions
//! and the source text. The whole key is stored in the entry and compared when it is read, so
//! a hash collision can never return the wrong image. Headers found through `#include` are not
//! part of the key: a changed header of your own needs a changed option or source (or a
//! cleared cache); the toolkit's headers change with the NVRTC version, which is.
//!
//! The cache never makes a compile fail: an unreadable, corrupt or unwritable entry is
//! ignored (and rewritten). Entries are written to a temporary file and renamed, so readers
//! never see half an entry.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

const MAGIC: &[u8; 12] = b"CGNVRTC-v1\n\0";

/// The cache directory, or `None` when caching is off or no directory is known.
pub(crate) fn dir() -> Option<PathBuf> {
    match std::env::var_os("CUDAGRAPH_CACHE_DIR") {
        Some(v) if v == "off" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|d| d.join("cudagraph")),
    }
}

/// FNV-1a, 64 bits: names the entry file (the key itself is checked on read).
fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What an entry holds.
pub(crate) struct Entry {
    pub(crate) image: Vec<u8>,
    pub(crate) log: String,
    pub(crate) lowered_names: HashMap<String, String>,
}

fn path_in(dir: &std::path::Path, key: &str) -> PathBuf {
    record_path(dir, "nvrtc", key)
}

/// The file of `key`'s entry of kind `kind` (its extension).
fn record_path(dir: &std::path::Path, kind: &str, key: &str) -> PathBuf {
    dir.join(format!("{:016x}.{kind}", fnv64(key.as_bytes())))
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

fn take_bytes<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = input.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
    if rest.len() < len {
        return None;
    }
    let (b, rest) = rest.split_at(len);
    *input = rest;
    Some(b)
}

fn encode(key: &str, e: &Entry) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_bytes(&mut out, key.as_bytes());
    put_bytes(&mut out, e.log.as_bytes());
    let mut names: Vec<_> = e.lowered_names.iter().collect();
    names.sort();
    out.extend_from_slice(&(names.len() as u64).to_le_bytes());
    for (k, v) in names {
        put_bytes(&mut out, k.as_bytes());
        put_bytes(&mut out, v.as_bytes());
    }
    put_bytes(&mut out, &e.image);
    out
}

fn decode(key: &str, bytes: &[u8]) -> Option<Entry> {
    let mut input = bytes.strip_prefix(MAGIC.as_slice())?;
    if take_bytes(&mut input)? != key.as_bytes() {
        return None;
    }
    let log = String::from_utf8(take_bytes(&mut input)?.to_vec()).ok()?;
    let (n, rest) = input.split_first_chunk::<8>()?;
    input = rest;
    let mut lowered_names = HashMap::new();
    for _ in 0..u64::from_le_bytes(*n) {
        let k = String::from_utf8(take_bytes(&mut input)?.to_vec()).ok()?;
        let v = String::from_utf8(take_bytes(&mut input)?.to_vec()).ok()?;
        lowered_names.insert(k, v);
    }
    let image = take_bytes(&mut input)?.to_vec();
    input.is_empty().then_some(Entry {
        image,
        log,
        lowered_names,
    })
}

/// The entry for `key` in `dir`, if there is a valid one.
pub(crate) fn load(dir: &std::path::Path, key: &str) -> Option<Entry> {
    decode(key, &std::fs::read(path_in(dir, key)).ok()?)
}

/// Stores the entry for `key` in `dir` (errors are ignored: the cache is an optimisation).
pub(crate) fn store(dir: &std::path::Path, key: &str, e: &Entry) {
    write_atomic(dir, &path_in(dir, key), &encode(key, e));
}

/// Writes `bytes` to `path` in `dir` through a temporary file and a rename, so readers never
/// see half a file (errors are ignored: the cache is an optimisation).
fn write_atomic(dir: &std::path::Path, path: &std::path::Path, bytes: &[u8]) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let _ = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        // Unique per process and write: two threads storing one key never share a file.
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    })();
}

const RECORD_MAGIC: &[u8; 12] = b"CGRECORD-v1\n";

/// The value stored for `key` under `kind` in `dir` (a small record of another part of the
/// crate, e.g. the FFT fusion decisions), if there is a valid one: the whole key is stored
/// with it and compared, as for NVRTC entries.
pub(crate) fn load_record(dir: &std::path::Path, kind: &str, key: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(record_path(dir, kind, key)).ok()?;
    let mut input = bytes.strip_prefix(RECORD_MAGIC.as_slice())?;
    if take_bytes(&mut input)? != key.as_bytes() {
        return None;
    }
    let value = take_bytes(&mut input)?.to_vec();
    input.is_empty().then_some(value)
}

/// Stores `value` for `key` under `kind` in `dir`, atomically (errors are ignored).
pub(crate) fn store_record(dir: &std::path::Path, kind: &str, key: &str, value: &[u8]) {
    let mut out = RECORD_MAGIC.to_vec();
    put_bytes(&mut out, key.as_bytes());
    put_bytes(&mut out, value);
    write_atomic(dir, &record_path(dir, kind, key), &out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            image: vec![1, 2, 3, 0, 255],
            log: "warning: x".into(),
            lowered_names: [("f<int>".to_string(), "_Z1fIiEvv".to_string())].into(),
        }
    }

    #[test]
    fn entries_round_trip_and_check_their_key() {
        let dir = std::env::temp_dir().join(format!("cudagraph-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(load(&dir, "k1").is_none(), "empty cache");
        store(&dir, "k1", &entry());
        let e = load(&dir, "k1").expect("stored");
        assert_eq!(e.image, entry().image);
        assert_eq!(e.log, "warning: x");
        assert_eq!(e.lowered_names["f<int>"], "_Z1fIiEvv");
        assert!(load(&dir, "k2").is_none(), "another key");
        // An entry whose stored key differs (a collision, or a stale file) is not used.
        std::fs::copy(path_in(&dir, "k1"), path_in(&dir, "k3")).unwrap();
        assert!(load(&dir, "k3").is_none());
        // A truncated entry is not used either.
        let p = path_in(&dir, "k1");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(load(&dir, "k1").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_round_trip_and_check_their_key() {
        let dir =
            std::env::temp_dir().join(format!("cudagraph-record-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(load_record(&dir, "r", "k1").is_none(), "empty cache");
        store_record(&dir, "r", "k1", b"value 1");
        assert_eq!(load_record(&dir, "r", "k1").unwrap(), b"value 1");
        assert!(load_record(&dir, "other", "k1").is_none(), "another kind");
        assert!(load_record(&dir, "r", "k2").is_none(), "another key");
        store_record(&dir, "r", "k1", b"value 2");
        assert_eq!(
            load_record(&dir, "r", "k1").unwrap(),
            b"value 2",
            "replaced"
        );
        // A record whose stored key differs (a collision, or a stale file) is not used.
        std::fs::copy(record_path(&dir, "r", "k1"), record_path(&dir, "r", "k3")).unwrap();
        assert!(load_record(&dir, "r", "k3").is_none());
        // Nor a truncated one, nor an NVRTC entry under the same name.
        let p = record_path(&dir, "r", "k1");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(load_record(&dir, "r", "k1").is_none());
        store(&dir, "k4", &entry());
        std::fs::copy(path_in(&dir, "k4"), record_path(&dir, "r", "k4")).unwrap();
        assert!(load_record(&dir, "r", "k4").is_none());
        // No temporary files are left behind.
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
