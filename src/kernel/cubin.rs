//! A kernel's parameter layout read from a cubin, so that [`Module::kernel`] learns how many
//! parameters a kernel has without asking CUDA for one past the last (a refused call that
//! `compute-sanitizer` lists as an API error).
//!
//! A cubin is a little-endian ELF64 file. Per kernel it has a section
//! `.nv.info.<mangled name>` (type `SHT_CUDA_INFO`, `0x7000_0000`) holding attribute records.
//! Each record starts with a 4-byte header: `u8 format`, `u8 attribute`, then 2 bytes that are
//! the value itself (`EIFMT_BVAL` 0x02: one byte and a zero byte; `EIFMT_HVAL` 0x03: a `u16`;
//! `EIFMT_NVAL` 0x01: unused) or, for `EIFMT_SVAL` (0x04), the `u16` size of the payload that
//! follows. Two attributes matter here:
//!
//! - `EIATTR_KPARAM_INFO` (0x17, `SVAL`, 12 bytes), one per parameter, last parameter first:
//!   `u32` index (0), `u16` ordinal, `u16` offset, `u32` whose bits 18..31 are the size in bytes.
//! - `EIATTR_KPARAM_INFO_V2` (0x45, `SVAL`, 12 bytes), in its place when the parameters take
//!   more than about 4 KiB: `u32` index (0), `u16` ordinal, `u16` offset, `u16` size, `u16`
//!   flags (0x0500 for pointers on `sm_100` and later, else 0).
//! - `EIATTR_CBANK_PARAM_SIZE` (0x19, `HVAL`): the parameters' total size (the end of the last
//!   one, not rounded up); absent for a kernel without parameters.
//!
//! This was checked against NVRTC 13.0's cubins for `sm_75` to `sm_120` (with `-G`, `-lineinfo`,
//! `-rdc=true`; parameters of up to 32,000 bytes): see `cubin/tests.rs`. The records are used
//! only when they describe the parameters completely: ordinals `0..n` each once, sizes non-zero, offsets
//! increasing without overlap, and the last one ending at `CBANK_PARAM_SIZE` (no records and
//! no total: no parameters). Anything else — not an ELF64 cubin (PTX, LTO-IR, a fatbin), no
//! section for the kernel, two of them, a record or header out of bounds, an unknown format —
//! answers `None`, and the caller asks CUDA instead. (A cubin of two versions of a record
//! for one parameter has that ordinal twice: `None`.)
//!
//! The reader never panics, reads only inside the image (every offset is checked, with
//! checked arithmetic), and allocates one vector of at most one entry per 16 bytes of the
//! section.
//!
//! [`Module::kernel`]: super::Module::kernel

/// One kernel parameter as the cubin describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CubinParam {
    /// Its position in the parameter list.
    pub(super) ordinal: u16,
    /// Byte offset in the parameter buffer.
    pub(super) offset: u16,
    /// Size in bytes (14 bits in a `KPARAM_INFO` record, 16 in a `KPARAM_INFO_V2` one).
    pub(super) size: u16,
}

/// The section type of `.nv.info` sections.
const SHT_CUDA_INFO: u32 = 0x7000_0000;
/// The size of an ELF64 section header.
const SHDR_SIZE: usize = 64;

const EIFMT_NVAL: u8 = 0x01;
const EIFMT_BVAL: u8 = 0x02;
const EIFMT_HVAL: u8 = 0x03;
const EIFMT_SVAL: u8 = 0x04;
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
const EIATTR_KPARAM_INFO_V2: u8 = 0x45;
/// The payload size of a `KPARAM_INFO` or `KPARAM_INFO_V2` record.
const KPARAM_INFO_SIZE: usize = 12;

/// The parameters of kernel `symbol` (its mangled name) in `image`, ordered by ordinal (the
/// `i`-th entry has ordinal `i`), or `None` when `image` is not a cubin that describes them
/// completely (see the module's docs).
pub(super) fn kernel_params(image: &[u8], symbol: &str) -> Option<Vec<CubinParam>> {
    let info = find_section(image, ".nv.info.", symbol.as_bytes())?;
    parse_info(info)
}

/// `len` bytes at `offset`, if they lie inside `bytes`.
fn slice_at(bytes: &[u8], offset: usize, len: usize) -> Option<&[u8]> {
    bytes.get(offset..offset.checked_add(len)?)
}

/// The little-endian `u16` at `offset`, if `bytes` holds it (also the fatbin reader's).
pub(super) fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        slice_at(bytes, offset, 2)?.try_into().ok()?,
    ))
}

/// The little-endian `u32` at `offset`, if `bytes` holds it (also the fatbin reader's).
pub(super) fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        slice_at(bytes, offset, 4)?.try_into().ok()?,
    ))
}

/// The little-endian `u64` at `offset`, if `bytes` holds it (also the fatbin reader's).
pub(super) fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        slice_at(bytes, offset, 8)?.try_into().ok()?,
    ))
}

/// One section header's fields this reader uses.
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
}

impl Section {
    /// The section's bytes, if they lie inside `image`.
    fn data<'a>(&self, image: &'a [u8]) -> Option<&'a [u8]> {
        slice_at(
            image,
            usize::try_from(self.offset).ok()?,
            usize::try_from(self.size).ok()?,
        )
    }
}

/// The data of the one `SHT_CUDA_INFO` section named `prefix` + `suffix` in the ELF64 image,
/// or `None` when there is none, more than one, or the image is malformed.
fn find_section<'a>(image: &'a [u8], prefix: &str, suffix: &[u8]) -> Option<&'a [u8]> {
    // ELF identification: magic, 64-bit class, little-endian data, version 1.
    if image.get(..7)? != b"\x7fELF\x02\x01\x01" {
        return None;
    }
    let shoff = usize::try_from(u64_at(image, 0x28)?).ok()?;
    let shentsize = usize::from(u16_at(image, 0x3a)?);
    let shnum = usize::from(u16_at(image, 0x3c)?);
    let shstrndx = usize::from(u16_at(image, 0x3e)?);
    // Extended numbering (0 sections with the count elsewhere, SHN_XINDEX) is not used by
    // cubins: refused like any other header it does not describe.
    if shentsize != SHDR_SIZE || shnum == 0 || shstrndx >= shnum {
        return None;
    }
    let table = slice_at(image, shoff, shnum.checked_mul(SHDR_SIZE)?)?;
    let header = |i: usize| -> Option<Section> {
        let h = slice_at(table, i.checked_mul(SHDR_SIZE)?, SHDR_SIZE)?;
        Some(Section {
            name: u32_at(h, 0)?,
            kind: u32_at(h, 4)?,
            offset: u64_at(h, 0x18)?,
            size: u64_at(h, 0x20)?,
        })
    };
    let names = header(shstrndx)?.data(image)?;
    let mut found = None;
    for i in 0..shnum {
        let s = header(i)?;
        let name = names.get(usize::try_from(s.name).ok()?..)?;
        let name = &name[..name.iter().position(|&b| b == 0)?];
        let matches = name.len() == prefix.len() + suffix.len()
            && name.starts_with(prefix.as_bytes())
            && name.ends_with(suffix);
        if matches {
            if found.is_some() || s.kind != SHT_CUDA_INFO {
                return None;
            }
            found = Some(s.data(image)?);
        }
    }
    found
}

/// The complete parameter list in the records of one `.nv.info.<kernel>` section (see the
/// module's docs), or `None`.
fn parse_info(info: &[u8]) -> Option<Vec<CubinParam>> {
    // Every parameter record takes 16 bytes of the section: this never grows.
    let mut params = Vec::with_capacity(info.len() / (4 + KPARAM_INFO_SIZE));
    let mut total: Option<u16> = None;
    let mut at = 0usize;
    while at < info.len() {
        let format = *info.get(at)?;
        let attribute = *info.get(at + 1)?;
        let field = u16_at(info, at + 2)?;
        let payload_at = at + 4;
        let payload_len = match format {
            EIFMT_NVAL | EIFMT_BVAL | EIFMT_HVAL => 0,
            EIFMT_SVAL => usize::from(field),
            _ => return None,
        };
        let payload = slice_at(info, payload_at, payload_len)?;
        match attribute {
            EIATTR_KPARAM_INFO | EIATTR_KPARAM_INFO_V2 => {
                if format != EIFMT_SVAL || payload.len() != KPARAM_INFO_SIZE {
                    return None;
                }
                let size = if attribute == EIATTR_KPARAM_INFO {
                    // 14 bits: always fits.
                    u16::try_from(u32_at(payload, 8)? >> 18).ok()?
                } else {
                    u16_at(payload, 8)?
                };
                params.push(CubinParam {
                    ordinal: u16_at(payload, 4)?,
                    offset: u16_at(payload, 6)?,
                    size,
                });
            }
            EIATTR_CBANK_PARAM_SIZE => {
                if format != EIFMT_HVAL || total.is_some_and(|t| t != field) {
                    return None;
                }
                total = Some(field);
            }
            _ => {}
        }
        at = payload_at + payload_len;
    }
    // The records come last parameter first; ordinals must be exactly 0..n.
    params.sort_unstable_by_key(|p| p.ordinal);
    let mut end = 0usize;
    for (i, p) in params.iter().enumerate() {
        if usize::from(p.ordinal) != i || p.size == 0 || usize::from(p.offset) < end {
            return None;
        }
        end = usize::from(p.offset) + usize::from(p.size);
    }
    match total {
        // No parameter records, but parameters: records left out.
        Some(t) if usize::from(t) != end => None,
        None if !params.is_empty() => None,
        _ => Some(params),
    }
}

#[cfg(test)]
mod tests;
