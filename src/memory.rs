//! Device memory ([`DeviceBuffer`]), page-locked host memory ([`HostBuffer`]) and regions of
//! them ([`Region`]) that graph nodes refer to.
//!
//! A buffer's allocation is reference-counted: a graph node, or an executable graph, that
//! refers to a buffer holds a count on it, so memory is freed only when the user's buffer *and*
//! every graph using it are gone.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::runtime as rt;
use crate::stream::Stream;
use crate::sys;

/// Plain data that may be copied to and from the GPU byte for byte, and passed to kernels.
///
/// # Safety
/// The type has no padding-dependent invariants, no pointers into host memory, and **every bit
/// pattern of its size is a valid value** (the GPU may write anything into it). Integers,
/// floats, [`num_complex::Complex`] of those, and arrays of such types qualify; `bool`, `char`
/// and references do not.
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}

macro_rules! device_repr {
    ($($t:ty),*) => { $(
        // SAFETY: every bit pattern is a valid value of this primitive type.
        unsafe impl DeviceRepr for $t {}
    )* };
}
device_repr!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize, f32, f64);
// SAFETY: `Complex<T>` is `repr(C)` with two `T` fields and no other invariants.
unsafe impl<T: DeviceRepr> DeviceRepr for num_complex::Complex<T> {}
// SAFETY: an array of valid-for-any-bits elements is valid for any bits.
unsafe impl<T: DeviceRepr, const N: usize> DeviceRepr for [T; N] {}

/// Where an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySpace {
    /// Device memory (`cudaMalloc`).
    Device,
    /// Page-locked host memory (`cudaHostAlloc`), which the GPU can copy from asynchronously.
    PinnedHost,
}

#[derive(Debug)]
pub(crate) enum Owner {
    /// Real memory of this device.
    Cuda(Device),
    /// Placeholder addresses handed out by a recording backend (no memory behind them).
    Recording(u64),
}

/// One allocation; freed when the last reference goes.
pub(crate) struct Allocation {
    pub(crate) ptr: u64,
    pub(crate) bytes: usize,
    pub(crate) space: MemorySpace,
    pub(crate) owner: Owner,
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {:#x}+{}", self.space, self.ptr, self.bytes)
    }
}

impl Allocation {
    pub(crate) fn new(device: &Device, bytes: usize, space: MemorySpace) -> Result<Arc<Self>> {
        device.bind()?;
        let ptr = if bytes == 0 {
            std::ptr::null_mut()
        } else {
            match space {
                // SAFETY: the allocation is owned by the returned value and freed in Drop.
                MemorySpace::Device => unsafe { rt::malloc(bytes)? },
                // SAFETY: as above; portable so any device may copy from it.
                MemorySpace::PinnedHost => unsafe {
                    rt::host_alloc(bytes, sys::cudaHostAllocPortable)?
                },
            }
        };
        Ok(Arc::new(Allocation {
            ptr: ptr as u64,
            bytes,
            space,
            owner: Owner::Cuda(device.clone()),
        }))
    }

    pub(crate) fn device(&self) -> Option<&Device> {
        match &self.owner {
            Owner::Cuda(d) => Some(d),
            Owner::Recording(_) => None,
        }
    }

    /// The device, or an error for recording-backend placeholders.
    pub(crate) fn real_device(&self) -> Result<&Device> {
        self.device().ok_or_else(|| {
            Error::WrongDevice(
                "this buffer was made by a RecordingBackend and has no memory behind it".into(),
            )
        })
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let Owner::Cuda(device) = &self.owner else {
            return;
        };
        if self.ptr == 0 {
            return;
        }
        let p = self.ptr as *mut c_void;
        // SAFETY: the pointer came from the matching allocator and this is its last reference;
        // every graph that used it held a reference, so none can still refer to it.
        let r = unsafe {
            match self.space {
                MemorySpace::Device => rt::free(p),
                MemorySpace::PinnedHost => rt::free_host(p),
            }
        };
        if let Err(e) = r {
            device.defer("a buffer", e);
        }
    }
}

/// A contiguous part of a buffer, in bytes, as graph nodes see it.
///
/// Made with [`DeviceBuffer::region`] / [`HostBuffer::region`] or by converting a whole buffer
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
    /// for a recording backend's buffers). Valid while the buffer lives.
    pub fn addr(&self) -> u64 {
        self.alloc.ptr + self.offset as u64
    }
}

fn element_range(range: impl RangeBounds<usize>, len: usize) -> (usize, usize) {
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

macro_rules! buffer_common {
    ($name:ident) => {
        impl<T: DeviceRepr> $name<T> {
            /// Number of elements.
            pub fn len(&self) -> usize {
                self.len
            }
            /// Whether the buffer has no elements.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// Size in bytes.
            pub fn size_bytes(&self) -> usize {
                self.len * std::mem::size_of::<T>()
            }
            /// The elements `range` (in elements) as a region for graph nodes. The range is
            /// not checked here; nodes using it are.
            pub fn region(&self, range: impl RangeBounds<usize>) -> Region {
                let (start, n) = element_range(range, self.len);
                let sz = std::mem::size_of::<T>();
                Region {
                    alloc: self.alloc.clone(),
                    offset: start.saturating_mul(sz),
                    len: n.saturating_mul(sz),
                    elem: sz,
                }
            }
            /// The address of the first element (a device address for device buffers, a host
            /// address for pinned host buffers). Valid while `self` lives.
            pub fn as_raw_ptr(&self) -> u64 {
                self.alloc.ptr
            }
            fn check_len(&self, n: usize, what: &str) -> Result<()> {
                if n != self.len {
                    return Err(Error::OutOfBounds(format!(
                        "{what}: the buffer has {} elements but the slice has {n}",
                        self.len
                    )));
                }
                Ok(())
            }
        }

        impl<T: DeviceRepr> From<&$name<T>> for Region {
            fn from(b: &$name<T>) -> Region {
                b.region(..)
            }
        }

        impl<T> std::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("len", &self.len)
                    .field("alloc", &self.alloc)
                    .finish()
            }
        }
    };
}

/// A typed array in device memory.
///
/// Copies with the host are synchronous unless named `_async`. They do not wait for work on
/// other streams: synchronise the stream that writes the buffer before reading it.
pub struct DeviceBuffer<T> {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    _t: PhantomData<T>,
}

buffer_common!(DeviceBuffer);

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` elements and zeroes them.
    pub fn zeros(device: &Device, len: usize) -> Result<Self> {
        let b = Self::uninit_zeroable(device, len)?;
        b.memset_bytes(0)?;
        Ok(b)
    }

    fn uninit_zeroable(device: &Device, len: usize) -> Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::OutOfBounds(format!("{len} elements overflow usize")))?;
        Ok(DeviceBuffer {
            alloc: Allocation::new(device, bytes, MemorySpace::Device)?,
            len,
            _t: PhantomData,
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_slice(device: &Device, data: &[T]) -> Result<Self> {
        let b = Self::uninit_zeroable(device, data.len())?;
        b.copy_from_slice(data)?;
        Ok(b)
    }

    pub(crate) fn from_alloc(alloc: Arc<Allocation>, len: usize) -> Self {
        DeviceBuffer {
            alloc,
            len,
            _t: PhantomData,
        }
    }

    /// The device the buffer lives on (`None` for a recording backend's placeholder).
    pub fn device(&self) -> Option<&Device> {
        self.alloc.device()
    }

    /// Overwrites the buffer with `data` (same length).
    pub fn copy_from_slice(&self, data: &[T]) -> Result<()> {
        self.check_len(data.len(), "copy_from_slice")?;
        self.alloc.real_device()?.bind()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are `size_bytes` long; the device range is owned by `self`.
        unsafe {
            rt::memcpy(
                self.alloc.ptr as *mut c_void,
                data.as_ptr().cast(),
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyHostToDevice,
            )
        }
    }

    /// Copies the buffer into `out` (same length).
    pub fn copy_to_slice(&self, out: &mut [T]) -> Result<()> {
        self.check_len(out.len(), "copy_to_slice")?;
        self.alloc.real_device()?.bind()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are `size_bytes` long; any bit pattern is a valid `T`.
        unsafe {
            rt::memcpy(
                out.as_mut_ptr().cast(),
                self.alloc.ptr as *const c_void,
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyDeviceToHost,
            )
        }
    }

    /// Copies the buffer into a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        // SAFETY: every bit pattern, zero included, is a valid `T` (DeviceRepr's contract).
        let mut v = vec![unsafe { std::mem::zeroed::<T>() }; self.len];
        self.copy_to_slice(&mut v)?;
        Ok(v)
    }

    /// Copies all of `src` (same length) into this buffer, device to device.
    pub fn copy_from_device(&self, src: &DeviceBuffer<T>) -> Result<()> {
        self.check_len(src.len, "copy_from_device")?;
        self.alloc.real_device()?.bind()?;
        src.alloc.real_device()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both device ranges are `size_bytes` long and live.
        unsafe {
            rt::memcpy(
                self.alloc.ptr as *mut c_void,
                src.alloc.ptr as *const c_void,
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice,
            )
        }
    }

    /// Sets every byte of the buffer to `value`.
    pub fn memset_bytes(&self, value: u8) -> Result<()> {
        self.alloc.real_device()?.bind()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is owned by `self`.
        unsafe {
            rt::memset(
                self.alloc.ptr as *mut c_void,
                value as i32,
                self.size_bytes(),
            )
        }
    }

    /// Queues a copy from the pinned `src` (same length) on `stream`. The graph-free way to
    /// upload; both buffers are kept alive by the caller's borrow only, so synchronise `stream`
    /// before dropping either.
    pub fn copy_from_host_async(&self, src: &HostBuffer<T>, stream: &Stream) -> Result<()> {
        self.check_len(src.len, "copy_from_host_async")?;
        self.alloc.real_device()?;
        src.alloc.real_device()?;
        // SAFETY: both ranges are `size_bytes` long; the caller keeps them alive until the
        // stream has run the copy (documented).
        unsafe {
            rt::memcpy_async(
                self.alloc.ptr as *mut c_void,
                src.alloc.ptr as *const c_void,
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyHostToDevice,
                stream.raw(),
            )
        }
    }
}

/// A typed array in page-locked (pinned) host memory.
///
/// Graph memcpy nodes to or from the host use these: the graph reads and writes them when it
/// runs, not when it is built, and keeps them alive. The contents are read and written through
/// copies only (never as a Rust slice), since the GPU may be writing them at the same time.
pub struct HostBuffer<T> {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    _t: PhantomData<T>,
}

buffer_common!(HostBuffer);

impl<T: DeviceRepr> HostBuffer<T> {
    /// Allocates `len` zeroed elements of pinned memory.
    pub fn zeros(device: &Device, len: usize) -> Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::OutOfBounds(format!("{len} elements overflow usize")))?;
        let alloc = Allocation::new(device, bytes, MemorySpace::PinnedHost)?;
        if bytes > 0 {
            // SAFETY: the allocation is `bytes` long and not yet shared.
            unsafe { std::ptr::write_bytes(alloc.ptr as *mut u8, 0, bytes) };
        }
        Ok(HostBuffer {
            alloc,
            len,
            _t: PhantomData,
        })
    }

    /// Allocates pinned memory holding a copy of `data`.
    pub fn from_slice(device: &Device, data: &[T]) -> Result<Self> {
        let b = Self::zeros(device, data.len())?;
        b.copy_from_slice(data)?;
        Ok(b)
    }

    pub(crate) fn from_alloc(alloc: Arc<Allocation>, len: usize) -> Self {
        HostBuffer {
            alloc,
            len,
            _t: PhantomData,
        }
    }

    /// Overwrites the contents with `data` (same length).
    pub fn copy_from_slice(&self, data: &[T]) -> Result<()> {
        self.check_len(data.len(), "copy_from_slice")?;
        self.alloc.real_device()?;
        if self.len > 0 {
            // SAFETY: the allocation holds `len` elements; the source is a distinct slice.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.alloc.ptr as *mut T, self.len)
            };
        }
        Ok(())
    }

    /// Copies the contents into `out` (same length).
    pub fn copy_to_slice(&self, out: &mut [T]) -> Result<()> {
        self.check_len(out.len(), "copy_to_slice")?;
        self.alloc.real_device()?;
        if self.len > 0 {
            // SAFETY: as above; any bit pattern is a valid `T`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.alloc.ptr as *const T,
                    out.as_mut_ptr(),
                    self.len,
                )
            };
        }
        Ok(())
    }

    /// Copies the contents into a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        // SAFETY: every bit pattern, zero included, is a valid `T` (DeviceRepr's contract).
        let mut v = vec![unsafe { std::mem::zeroed::<T>() }; self.len];
        self.copy_to_slice(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_ranges() {
        assert_eq!(element_range(.., 10), (0, 10));
        assert_eq!(element_range(2..5, 10), (2, 3));
        assert_eq!(element_range(2..=5, 10), (2, 4));
        assert_eq!(element_range(8.., 10), (8, 2));
        assert_eq!(element_range(12.., 10), (12, 0));
    }
}
