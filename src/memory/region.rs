//! [`Region`]: a contiguous part of a buffer, in bytes, as graph nodes see it.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::{Allocation, MemorySpace};
use crate::device::Owner;

/// A contiguous part of a buffer, in bytes, as graph nodes see it.
///
/// Made with [`DeviceBuffer::region`](super::DeviceBuffer::region) /
/// [`HostBuffer::region`](super::HostBuffer::region) or by converting a whole buffer
/// (`(&buf).into()`). A region may describe elements past the buffer's end: that is reported
/// when a node using it is added, naming the node.
#[derive(Clone, Debug)]
pub struct Region {
    pub(crate) alloc: Arc<Allocation>,
    /// Offset from the allocation's start, in bytes.
    pub(crate) offset: usize,
    /// Length in bytes.
    pub(crate) len: usize,
    /// Element size in bytes.
    pub(crate) elem: usize,
}

impl Region {
    /// Offset from the start of the buffer, in bytes.
    pub fn offset_bytes(&self) -> usize {
        self.offset
    }
    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len
    }
    /// Size of the buffer the region is part of, in bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.alloc.bytes
    }
    /// Where the memory lives.
    pub fn space(&self) -> MemorySpace {
        self.alloc.space
    }
    /// The address of the region's first byte (device or pinned-host address; a placeholder
    /// for a recording backend's buffers).
    ///
    /// # Safety
    /// Nothing keeps the memory alive through the address: GPU work given it (as a raw kernel
    /// argument, or to a raw CUDA call) must complete before the buffer is dropped, and must
    /// not race host access of pinned memory. Pass regions and buffers to nodes and kernels as
    /// such ([`KernelArg::from`](crate::KernelArg) of a `&Region`) to have them tracked.
    pub unsafe fn addr(&self) -> u64 {
        self.raw_addr()
    }

    /// Whether the two regions share a byte: overlapping address ranges, in one address space
    /// (real memory: CUDA's unified addresses are unique in the process, whatever device, so
    /// managed memory wrapped for two devices is seen too; placeholders: one recording
    /// backend's). Unlike comparing allocations, this sees one memory wrapped twice (another
    /// library's array given as two foreign buffers) and views of one buffer.
    pub(crate) fn overlaps(&self, other: &Region) -> bool {
        let (a, b) = (self.raw_addr(), other.raw_addr());
        self.one_space(other)
            && a < b.saturating_add(other.len as u64)
            && b < a.saturating_add(self.len as u64)
    }

    /// Whether the two regions are the same memory: one address and length in one address
    /// space (as for [`Region::overlaps`]), whatever allocations they were made from.
    pub(crate) fn same_memory(&self, other: &Region) -> bool {
        self.one_space(other) && self.raw_addr() == other.raw_addr() && self.len == other.len
    }

    /// Whether the addresses of the two regions can be compared: real memory (unified
    /// addresses, whatever device), or placeholders of one recording backend.
    fn one_space(&self, other: &Region) -> bool {
        match (&self.alloc.owner, &other.alloc.owner) {
            (Owner::Cuda(_), Owner::Cuda(_)) => true,
            (x, y) => x.key() == y.key(),
        }
    }

    /// The address, for the crate's own use (which keeps the allocation alive). A region may
    /// start anywhere past its buffer (nodes check their bounds; a kernel argument's are the
    /// kernel's business), so the sum wraps as address arithmetic does.
    pub(crate) fn raw_addr(&self) -> u64 {
        self.alloc.ptr.wrapping_add(self.offset as u64)
    }
}

/// The `(start, count)` of the elements `range` names in a buffer of `len` (a count of 0
/// where it is empty; the start may lie past the end).
pub(super) fn element_range(range: impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start, end.saturating_sub(start))
}
