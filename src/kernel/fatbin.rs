//! The images a fat binary holds, so that [`Module::kernel`] reads a kernel's parameter layout
//! from a module loaded from a fatbin as it does from a cubin or PTX, without asking CUDA for
//! one parameter past the last (a refused call that `compute-sanitizer` lists as an API error).
//!
//! A fatbin (what `nvcc -fatbin` and `fatbinary` write, and what an executable's `.nv_fatbin`
//! section holds) is one or more containers, each a 16-byte header — `u32` magic `0xBA55ED50`,
//! `u16` version 1, `u16` header size, `u64` size of the entries after the header — followed by
//! its entries. Each entry has a header of `header_size` bytes, then its payload:
//!
//! | offset | field |
//! | ---: | --- |
//! | 0 | `u16` kind: 1 PTX, 2 ELF cubin |
//! | 4 | `u32` header size (64, or more for newer architectures) |
//! | 8 | `u64` payload size (padded to 8 bytes when compressed) |
//! | 16 | `u32` compressed size (0 when not compressed) |
//! | 28 | `u32` architecture (`90` for `sm_90`) |
//! | 40 | `u64` flags: `0x8000` zstd-compressed, `0x2000` LZ4-compressed (older toolkits) |
//! | 56 | `u64` decompressed size (0 when not compressed) |
//!
//! NVIDIA does not document this layout; it was read from CUDA 13.0's `fatbinary` (V13.0.88),
//! which by default stores cubins as they are and compresses PTX with zstd, and with
//! `-compress-all` compresses both (see `fatbin/tests.rs` and the fixtures beside it). The
//! reader takes a fatbin only when it can read every image in it: an unknown kind, LZ4 (no
//! fixture to check it against), a size or offset out of bounds, a decompressed size that is
//! not the one announced or over [`MAX_IMAGE`], or bytes after the last container that are
//! not zero padding answer `None`, and the caller asks CUDA instead, as before.
//!
//! The reader never panics and reads only inside the fatbin (checked arithmetic throughout);
//! it allocates the decompressed images, each at most [`MAX_IMAGE`] bytes.
//!
//! [`Module::kernel`]: super::Module::kernel

use std::io::Read;

use super::cubin::{u16_at, u32_at, u64_at};

/// The magic number at the start of every fatbin container.
const MAGIC: u32 = 0xBA55_ED50;
/// The size of a container's header.
const CONTAINER_HEADER: usize = 16;
/// The smallest entry header that holds every field the reader uses.
const MIN_ENTRY_HEADER: usize = 64;
const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
const FLAG_LZ4: u64 = 0x2000;
const FLAG_ZSTD: u64 = 0x8000;
/// The largest decompressed image the reader accepts (an announced size above it is refused
/// before anything is allocated).
pub(super) const MAX_IMAGE: u64 = 1 << 30;

/// One image of a fatbin, decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FatbinImage {
    /// `true` for an ELF cubin, `false` for PTX text.
    pub(super) elf: bool,
    /// The architecture it was built for (`90` for `sm_90` or `compute_90`).
    pub(super) arch: u32,
    pub(super) bytes: Vec<u8>,
}

/// Whether `bytes` starts like a fatbin (its first container's magic and version).
pub(super) fn is_fatbin(bytes: &[u8]) -> bool {
    u32_at(bytes, 0) == Some(MAGIC) && u16_at(bytes, 4) == Some(1)
}

/// Every image of the fatbin `bytes`, in order; `None` when `bytes` is not a fatbin or any
/// part of it cannot be read (see the module docs).
pub(super) fn images(bytes: &[u8]) -> Option<Vec<FatbinImage>> {
    if !is_fatbin(bytes) {
        return None;
    }
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        if u32_at(bytes, at) != Some(MAGIC) || u16_at(bytes, at + 4) != Some(1) {
            // Zero padding may follow the last container; anything else is not read.
            if bytes[at..].iter().all(|&b| b == 0) {
                break;
            }
            return None;
        }
        let header = usize::from(u16_at(bytes, at + 6)?);
        let size = usize::try_from(u64_at(bytes, at + 8)?).ok()?;
        if header < CONTAINER_HEADER {
            return None;
        }
        let start = at.checked_add(header)?;
        let end = start.checked_add(size)?;
        let container = bytes.get(start..end)?;
        let mut entry = 0usize;
        while entry < container.len() {
            let (image, next) = read_entry(container, entry)?;
            out.push(image);
            entry = next;
        }
        at = end;
    }
    (!out.is_empty()).then_some(out)
}

/// The entry at `at` of `container` and where the next one starts.
fn read_entry(container: &[u8], at: usize) -> Option<(FatbinImage, usize)> {
    let kind = u16_at(container, at)?;
    let header = usize::try_from(u32_at(container, at + 4)?).ok()?;
    let size = usize::try_from(u64_at(container, at + 8)?).ok()?;
    let compressed = usize::try_from(u32_at(container, at + 16)?).ok()?;
    let arch = u32_at(container, at + 28)?;
    let flags = u64_at(container, at + 40)?;
    let decompressed = u64_at(container, at + 56)?;
    if header < MIN_ENTRY_HEADER || !(kind == KIND_PTX || kind == KIND_ELF) {
        return None;
    }
    let start = at.checked_add(header)?;
    let next = start.checked_add(size)?;
    let payload = container.get(start..next)?;
    if flags & FLAG_LZ4 != 0 {
        return None;
    }
    let bytes = if flags & FLAG_ZSTD != 0 {
        unzstd(payload.get(..compressed)?, decompressed)?
    } else {
        payload.to_vec()
    };
    let elf = kind == KIND_ELF;
    Some((FatbinImage { elf, arch, bytes }, next))
}

/// The zstd frame `frame` decompressed, which must be exactly `len` bytes (at most
/// [`MAX_IMAGE`]).
fn unzstd(frame: &[u8], len: u64) -> Option<Vec<u8>> {
    if len > MAX_IMAGE {
        return None;
    }
    let decoder = ruzstd::decoding::StreamingDecoder::new(frame).ok()?;
    let mut out = Vec::new();
    // One byte more than announced, to tell a longer stream from an exact one.
    decoder.take(len + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 == len).then_some(out)
}

#[cfg(test)]
mod tests;
