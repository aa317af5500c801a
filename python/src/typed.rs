//! A device buffer whose element size is the Python dtype's (1, 2, 4, 8 or 16 bytes), so that
//! the regions nodes see carry it (FFT nodes check their buffers' element sizes). The element
//! types are stand-ins of that size; the bytes are the Python side's.

use cudagraph::{Device, DeviceBuffer, ForeignOwner, RecordingBackend, Region};

use crate::dtype::Dtype;

/// One device buffer of 1-, 2-, 4-, 8- or 16-byte elements.
pub(crate) enum TypedBuffer {
    B1(DeviceBuffer<u8>),
    B2(DeviceBuffer<u16>),
    B4(DeviceBuffer<u32>),
    B8(DeviceBuffer<u64>),
    B16(DeviceBuffer<[u64; 2]>),
}

macro_rules! each {
    ($self:expr, $b:ident => $e:expr) => {
        match $self {
            TypedBuffer::B1($b) => $e,
            TypedBuffer::B2($b) => $e,
            TypedBuffer::B4($b) => $e,
            TypedBuffer::B8($b) => $e,
            TypedBuffer::B16($b) => $e,
        }
    };
}

/// Builds the variant for `dtype`'s element size with `$make::<T>`.
macro_rules! by_size {
    ($dtype:expr, |$t:ident| $e:expr) => {
        match $dtype.size {
            1 => {
                type $t = u8;
                $e.map(TypedBuffer::B1)
            }
            2 => {
                type $t = u16;
                $e.map(TypedBuffer::B2)
            }
            4 => {
                type $t = u32;
                $e.map(TypedBuffer::B4)
            }
            8 => {
                type $t = u64;
                $e.map(TypedBuffer::B8)
            }
            _ => {
                type $t = [u64; 2];
                $e.map(TypedBuffer::B16)
            }
        }
    };
}

impl TypedBuffer {
    /// Another handle to the same buffer (its allocation counted once more).
    pub(crate) fn share(&self) -> Self {
        match self {
            TypedBuffer::B1(b) => TypedBuffer::B1(b.view_as()),
            TypedBuffer::B2(b) => TypedBuffer::B2(b.view_as()),
            TypedBuffer::B4(b) => TypedBuffer::B4(b.view_as()),
            TypedBuffer::B8(b) => TypedBuffer::B8(b.view_as()),
            TypedBuffer::B16(b) => TypedBuffer::B16(b.view_as()),
        }
    }

    /// `bytes` zeroed bytes of `device` (a whole number of elements: the caller's shape).
    pub(crate) fn zeros(device: &Device, dtype: Dtype, bytes: usize) -> cudagraph::Result<Self> {
        let n = bytes / dtype.size;
        by_size!(dtype, |T| DeviceBuffer::<T>::zeros(device, n))
    }

    /// A copy of `bytes` on `device`.
    pub(crate) fn from_bytes(
        device: &Device,
        dtype: Dtype,
        bytes: &[u8],
    ) -> cudagraph::Result<Self> {
        by_size!(dtype, |T| DeviceBuffer::<T>::from_slice(
            device,
            &bytemuck::pod_collect_to_vec::<u8, T>(bytes)
        ))
    }

    /// A recording backend's placeholder of `bytes`, holding `owner` when given.
    pub(crate) fn recording(
        rec: &mut RecordingBackend,
        dtype: Dtype,
        bytes: usize,
        owner: Option<ForeignOwner>,
    ) -> Self {
        let n = bytes / dtype.size;
        let made: cudagraph::Result<Self> =
            by_size!(dtype, |T| Ok::<_, cudagraph::Error>(match owner {
                Some(o) => rec.foreign_device_buffer::<T>(n, o),
                None => rec.device_buffer::<T>(n),
            }));
        made.expect("placeholders are infallible")
    }

    /// Another library's memory (see `DeviceBuffer::from_foreign`).
    ///
    /// # Safety
    /// As for `DeviceBuffer::from_foreign`, with `bytes` the memory's size.
    pub(crate) unsafe fn from_foreign(
        device: &Device,
        dtype: Dtype,
        ptr: u64,
        bytes: usize,
        owner: ForeignOwner,
    ) -> cudagraph::Result<Self> {
        let n = bytes / dtype.size;
        // SAFETY: the caller's contract; `n` elements are `bytes` (a whole number of them).
        by_size!(dtype, |T| unsafe {
            DeviceBuffer::<T>::from_foreign(device, ptr, n, owner)
        })
    }

    /// All of it as a region.
    pub(crate) fn region(&self) -> Region {
        each!(self, b => b.region(..))
    }

    /// The device (`None` for a placeholder).
    pub(crate) fn device(&self) -> Option<&Device> {
        each!(self, b => b.device())
    }

    /// Size in bytes.
    pub(crate) fn size_bytes(&self) -> usize {
        each!(self, b => b.size_bytes())
    }

    /// The address of the first byte.
    ///
    /// # Safety
    /// As for `DeviceBuffer::as_raw_ptr`: it keeps nothing alive.
    pub(crate) unsafe fn as_raw_ptr(&self) -> u64 {
        // SAFETY: the caller's contract.
        each!(self, b => unsafe { b.as_raw_ptr() })
    }

    /// Waits for the queued GPU work that uses the buffer.
    pub(crate) fn synchronize(&self) -> cudagraph::Result<()> {
        each!(self, b => b.synchronize())
    }

    /// The contents, after the queued GPU work that uses the buffer.
    pub(crate) fn to_bytes(&self) -> cudagraph::Result<Vec<u8>> {
        each!(self, b => b.to_vec().map(|v| bytemuck::cast_slice(&v).to_vec()))
    }

    /// Overwrites the contents with `bytes` (the same size), after the queued GPU work.
    pub(crate) fn copy_from_bytes(&self, bytes: &[u8]) -> cudagraph::Result<()> {
        each!(self, b => b.copy_from_slice(&bytemuck::pod_collect_to_vec(bytes)))
    }
}
