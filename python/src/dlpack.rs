//! DLPack both ways.
//!
//! Export (`DeviceBuffer.__dlpack__`, `__dlpack_device__`): the capsule's tensor holds a region
//! of the buffer (its allocation's reference count), so the memory outlives the buffer while a
//! consumer (CuPy, PyTorch, JAX) uses it.
//!
//! Import ([`import`]): an array that has `__dlpack__` but no `__cuda_array_interface__` (an
//! array-API library's) is taken as DLPack's consumer takes it: its capsule is checked,
//! renamed `used_…`, and the managed tensor is owned by the buffer made over its memory, its
//! deleter called once the crate's GPU work using the memory is done.

use std::ffi::{c_void, CStr};

use cudagraph::Region;
use pyo3::prelude::*;

use crate::device::drop_detached;
use crate::dtype::Dtype;
use crate::errors::invalid;

/// `kDLCUDA`.
pub(crate) const DL_CUDA: i32 = 2;
/// `kDLCUDAManaged`.
pub(crate) const DL_CUDA_MANAGED: i32 = 13;
/// `DLPACK_FLAG_BITMASK_READ_ONLY` of a versioned tensor's `flags`.
const FLAG_READ_ONLY: u64 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// `DLManagedTensor` (DLPack before 1.0: the capsule `dltensor`).
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

#[repr(C)]
struct DlPackVersion {
    major: u32,
    minor: u32,
}

/// `DLManagedTensorVersioned` (DLPack 1.x: the capsule `dltensor_versioned`).
#[repr(C)]
struct DlManagedTensorVersioned {
    version: DlPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

/// What a tensor's `manager_ctx` owns: the shape array and the memory's region.
struct Ctx {
    shape: Vec<i64>,
    _region: Region,
}

/// The capsule names; a consumer that takes the tensor renames the capsule `used_…`.
const NAME: &CStr = c"dltensor";
const NAME_V: &CStr = c"dltensor_versioned";

fn dl_dtype(d: Dtype) -> DlDataType {
    let code = match d.kind {
        'i' => 0,
        'u' => 1,
        'f' => 2,
        'c' => 5,
        _ => 6, // bool
    };
    DlDataType {
        code,
        bits: (d.size * 8) as u8,
        lanes: 1,
    }
}

/// Frees a tensor's context, with the GIL released (dropping the region may wait for the GPU
/// work using the memory).
///
/// # Safety
/// `ctx` came from `Box::into_raw` of a `Ctx` and is not used afterwards.
unsafe fn free_ctx(ctx: *mut c_void) {
    // SAFETY: the caller's contract.
    let ctx = unsafe { Box::from_raw(ctx as *mut Ctx) };
    drop_detached(ctx);
}

/// # Safety
/// `t` is a tensor made by `export` (legacy), deleted once.
unsafe extern "C" fn delete_legacy(t: *mut DlManagedTensor) {
    // SAFETY: the caller's contract: `t` came from `Box::into_raw` in `export`.
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: its context came from `Box::into_raw` and is freed once, here.
    unsafe { free_ctx(t.manager_ctx) };
}

/// # Safety
/// `t` is a tensor made by `export` (versioned), deleted once.
unsafe extern "C" fn delete_versioned(t: *mut DlManagedTensorVersioned) {
    // SAFETY: as in `delete_legacy`.
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: as in `delete_legacy`.
    unsafe { free_ctx(t.manager_ctx) };
}

/// The capsule destructor: deletes the tensor unless a consumer took it (renamed the
/// capsule), as the DLPack protocol asks.
///
/// # Safety
/// Called by Python with a capsule made by `export`.
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule (Python calls this while destroying it).
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) == 1 {
            let t = pyo3::ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()) as *mut DlManagedTensor;
            delete_legacy(t);
        } else if pyo3::ffi::PyCapsule_IsValid(capsule, NAME_V.as_ptr()) == 1 {
            let t = pyo3::ffi::PyCapsule_GetPointer(capsule, NAME_V.as_ptr())
                as *mut DlManagedTensorVersioned;
            delete_versioned(t);
        }
        // Otherwise renamed (`used_…`): the consumer owns the tensor and calls its deleter.
    }
}

/// A DLPack capsule of `region` (device `device`, C-contiguous `shape` of `dtype`): versioned
/// (DLPack 1.0) when the consumer supports it, the legacy `dltensor` otherwise.
pub(crate) fn export(
    py: Python<'_>,
    region: Region,
    data: u64,
    device: usize,
    shape: &[usize],
    dtype: Dtype,
    versioned: bool,
) -> PyResult<PyObject> {
    let mut ctx = Box::new(Ctx {
        shape: shape.iter().map(|&n| n as i64).collect(),
        _region: region,
    });
    let tensor = DlTensor {
        data: data as *mut c_void,
        device: DlDevice {
            device_type: DL_CUDA,
            device_id: i32::try_from(device).map_err(|_| invalid("device ordinal overflows"))?,
        },
        ndim: i32::try_from(shape.len()).map_err(|_| invalid("too many dimensions"))?,
        dtype: dl_dtype(dtype),
        shape: ctx.shape.as_mut_ptr(),
        // C-contiguous: no strides (allowed by DLPack for compact row-major tensors).
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let ctx = Box::into_raw(ctx) as *mut c_void;
    let (ptr, name): (*mut c_void, &CStr) = if versioned {
        let t = Box::new(DlManagedTensorVersioned {
            version: DlPackVersion { major: 1, minor: 0 },
            manager_ctx: ctx,
            deleter: Some(delete_versioned),
            flags: 0,
            dl_tensor: tensor,
        });
        (Box::into_raw(t) as *mut c_void, NAME_V)
    } else {
        let t = Box::new(DlManagedTensor {
            dl_tensor: tensor,
            manager_ctx: ctx,
            deleter: Some(delete_legacy),
        });
        (Box::into_raw(t) as *mut c_void, NAME)
    };
    // SAFETY: `ptr` is a live tensor owned by the capsule from now on: freed by the capsule's
    // destructor unless a consumer renames the capsule and takes it (then its deleter frees
    // it). `name` is a static C string, as the capsule requires (it keeps the pointer).
    let capsule = unsafe { pyo3::ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so the tensor is still ours to free, once.
        unsafe {
            if versioned {
                delete_versioned(ptr as *mut DlManagedTensorVersioned);
            } else {
                delete_legacy(ptr as *mut DlManagedTensor);
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, owned from here.
    Ok(unsafe { PyObject::from_owned_ptr(py, capsule) })
}

/// A tensor taken from a producer's capsule (renamed `used_…`): its deleter is called once, when
/// this is dropped.
enum Taken {
    Legacy(*mut DlManagedTensor),
    Versioned(*mut DlManagedTensorVersioned),
}

// SAFETY: `Taken` gives no access to the tensor but its deleter, which DLPack lets the consumer
// call when it is done with the data, on whichever thread that is: the protocol ties it to no
// thread, and producers' deleters take the GIL themselves where they need Python (cuda.core's
// and CuPy's are `with gil`, PyTorch's takes it).
unsafe impl Send for Taken {}
// SAFETY: no method reads or writes through the pointer from `&Taken`.
unsafe impl Sync for Taken {}

impl Drop for Taken {
    fn drop(&mut self) {
        // SAFETY: the tensor was taken from its capsule by renaming it (`take`), so nobody else
        // calls its deleter; this is the one call, after which the pointer is not used.
        unsafe {
            match *self {
                Taken::Legacy(t) => {
                    if let Some(d) = (*t).deleter {
                        d(t)
                    }
                }
                Taken::Versioned(t) => {
                    if let Some(d) = (*t).deleter {
                        d(t)
                    }
                }
            }
        }
    }
}

/// The owner of an imported tensor's memory: its deleter runs as [`drop_detached`] drops
/// things (with the GIL released where this thread holds it; later, outside a host callable,
/// when dropped inside one, since a producer's deleter may call CUDA).
struct Imported(Option<Taken>);

impl Drop for Imported {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            drop_detached(t);
        }
    }
}

/// What an imported tensor says, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    /// `data + byte_offset`.
    pub ptr: u64,
    pub bytes: usize,
    pub dtype: Dtype,
    /// `(device_type, device_id)`: `kDLCUDA` or `kDLCUDAManaged`.
    pub device: (i32, usize),
    /// A versioned tensor's read-only flag.
    pub readonly: bool,
}

fn from_dl_dtype(t: DlDataType, what: &str) -> PyResult<Dtype> {
    let kind = match t.code {
        0 => 'i',
        1 => 'u',
        2 => 'f',
        5 => 'c',
        6 => 'b',
        4 => {
            return Err(invalid(format!(
                "{what}: bfloat16 arrays are not supported"
            )))
        }
        c => {
            return Err(invalid(format!(
                "{what}: unsupported DLPack dtype (code {c}, {} bits)",
                t.bits
            )))
        }
    };
    if t.lanes != 1 {
        return Err(invalid(format!(
            "{what}: vector dtypes ({} lanes) are not supported",
            t.lanes
        )));
    }
    let d = Dtype {
        kind,
        size: usize::from(t.bits) / 8,
    };
    if !t.bits.is_multiple_of(8) || Dtype::parse(&d.typestr()).ok() != Some(d) {
        return Err(invalid(format!(
            "{what}: unsupported DLPack dtype ({kind}, {} bits)",
            t.bits
        )));
    }
    Ok(d)
}

/// Checks a tensor as [`crate::buffers::read_cai`] checks an interface: a CUDA (or managed)
/// device, a supported dtype, C-contiguous strides (in elements; length-1 dimensions may have
/// any), a non-null pointer unless empty.
///
/// # Safety
/// `t.shape` points to `t.ndim` values, and `t.strides` is null or points to `t.ndim` values,
/// as DLPack's producer guarantees while the tensor lives.
unsafe fn describe(t: &DlTensor, readonly: bool, what: &str) -> PyResult<Described> {
    let ndim = usize::try_from(t.ndim)
        .map_err(|_| invalid(format!("{what}: negative ndim {}", t.ndim)))?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let shape: Vec<usize> = shape
        .iter()
        .map(|&n| usize::try_from(n))
        .collect::<Result<_, _>>()
        .map_err(|_| invalid(format!("{what}: negative extent in shape {shape:?}")))?;
    let dtype = from_dl_dtype(t.dtype, what)?;
    let bytes = shape
        .iter()
        .try_fold(dtype.size, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| invalid(format!("{what}: shape {shape:?} overflows")))?;
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: the caller's contract.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut expect = 1i64;
        for (&n, &s) in shape.iter().zip(strides).rev() {
            if n > 1 && s != expect {
                return Err(invalid(format!(
                    "{what}: strides {strides:?} (elements) of shape {shape:?} are not \
                     C-contiguous; pass a contiguous array"
                )));
            }
            expect = expect.saturating_mul(n as i64);
        }
    }
    let device = match t.device.device_type {
        DL_CUDA | DL_CUDA_MANAGED => (
            t.device.device_type,
            usize::try_from(t.device.device_id)
                .map_err(|_| invalid(format!("{what}: negative device id")))?,
        ),
        k => {
            return Err(invalid(format!(
                "{what}: the array is not in CUDA device memory (DLPack device type {k})"
            )))
        }
    };
    let ptr = (t.data as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| invalid(format!("{what}: data + byte_offset overflows")))?;
    if t.data.is_null() && bytes > 0 {
        return Err(invalid(format!("{what}: the data pointer is null")));
    }
    crate::buffers::check_aligned(ptr, dtype, what)?;
    Ok(Described {
        ptr,
        bytes,
        dtype,
        device,
        readonly,
    })
}

/// Takes the tensor out of a `__dlpack__` capsule as DLPack's consumer does: checked while the
/// capsule still owns it (a refused tensor goes back with the capsule, whose destructor calls
/// its deleter), then renamed `used_…` and owned by the returned owner.
pub(crate) fn take(
    capsule: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<(Described, cudagraph::ForeignOwner)> {
    let py = capsule.py();
    let cap = capsule.as_ptr();
    // SAFETY: `cap` is a live object (`capsule` holds it); `PyCapsule_IsValid` accepts any
    // object and says whether it is a capsule of that name with a non-null pointer.
    let versioned = unsafe { pyo3::ffi::PyCapsule_IsValid(cap, NAME_V.as_ptr()) } == 1;
    // SAFETY: as above.
    let legacy = unsafe { pyo3::ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) } == 1;
    if versioned {
        // SAFETY: a valid capsule named `dltensor_versioned` holds a producer's live
        // `DLManagedTensorVersioned` (DLPack's contract), which the capsule owns until renamed.
        let t = unsafe {
            pyo3::ffi::PyCapsule_GetPointer(cap, NAME_V.as_ptr()) as *mut DlManagedTensorVersioned
        };
        // SAFETY: as above; only the version is read before it is checked (its place is the
        // one DLPack keeps across major versions; the rest is laid out as 1.x says only then).
        let (major, minor) = unsafe { ((*t).version.major, (*t).version.minor) };
        if major != 1 {
            return Err(invalid(format!(
                "{what}: DLPack {major}.{minor} is not supported (this reads 1.x)"
            )));
        }
        // SAFETY: a DLPack 1.x tensor, live as above.
        let flags = unsafe { (*t).flags };
        // SAFETY: a DLPack 1.x tensor: `shape` and `strides` as `describe` needs them.
        let d = unsafe { describe(&(*t).dl_tensor, flags & FLAG_READ_ONLY != 0, what)? };
        rename(py, cap, c"used_dltensor_versioned")?;
        Ok((d, Box::new(Imported(Some(Taken::Versioned(t))))))
    } else if legacy {
        // SAFETY: a valid capsule named `dltensor` holds a producer's live `DLManagedTensor`.
        let t =
            unsafe { pyo3::ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()) as *mut DlManagedTensor };
        // SAFETY: as above.
        let d = unsafe { describe(&(*t).dl_tensor, false, what)? };
        rename(py, cap, c"used_dltensor")?;
        Ok((d, Box::new(Imported(Some(Taken::Legacy(t))))))
    } else {
        Err(invalid(format!(
            "{what}: __dlpack__() did not return an unused DLPack capsule (`dltensor` or \
             `dltensor_versioned`)"
        )))
    }
}

/// Renames a capsule to take its tensor (`name` is static: the capsule keeps the pointer).
fn rename(py: Python<'_>, cap: *mut pyo3::ffi::PyObject, name: &'static CStr) -> PyResult<()> {
    // SAFETY: `cap` is a live capsule (checked valid by the caller, still held).
    if unsafe { pyo3::ffi::PyCapsule_SetName(cap, name.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
}

/// The device an array says it is on (`__dlpack_device__()`): `(device_type, device_id)`.
pub(crate) fn device_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<(i32, usize)>> {
    if !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    Ok(obj.call_method0("__dlpack_device__")?.extract().ok())
}

/// Calls `obj.__dlpack__` as a consumer of DLPack 1.0 (`max_version=(1, 0)`, falling back to
/// the older signature when the producer refuses that keyword), asking the producer to order
/// its pending work before `stream` (DLPack's encoding for CUDA: a stream handle above 2, or
/// -1 for no synchronisation), and takes the tensor.
pub(crate) fn import(
    obj: &Bound<'_, PyAny>,
    stream: isize,
    what: &str,
) -> PyResult<(Described, cudagraph::ForeignOwner)> {
    let py = obj.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("stream", stream)?;
    kwargs.set_item("max_version", (1, 0))?;
    let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => {
            // A producer from before DLPack 1.0 (no `max_version`).
            kwargs.del_item("max_version")?;
            obj.call_method("__dlpack__", (), Some(&kwargs))?
        }
        Err(e) => return Err(e),
    };
    take(&capsule, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Exports a placeholder holding a drop counter; returns the capsule and the counter.
    fn exported(py: Python<'_>, versioned: bool) -> (PyObject, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut rec = cudagraph::RecordingBackend::new(cudagraph::DeviceLimits::hopper());
        let buf = rec.foreign_device_buffer::<u64>(6, Box::new(Counted(drops.clone())));
        let dtype = Dtype { kind: 'c', size: 8 };
        let capsule = export(py, buf.region(..), 0x1000, 3, &[2, 3], dtype, versioned).unwrap();
        drop(buf);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the capsule holds the memory"
        );
        (capsule, drops)
    }

    #[test]
    fn a_capsule_describes_the_tensor_and_frees_it_when_not_consumed() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            let (capsule, drops) = exported(py, false);
            // SAFETY: a capsule made by `export` (legacy), alive while `capsule` is.
            let t = unsafe {
                &*(pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), NAME.as_ptr())
                    as *const DlManagedTensor)
            };
            assert_eq!(t.dl_tensor.data as usize, 0x1000);
            assert_eq!(
                (t.dl_tensor.device.device_type, t.dl_tensor.device.device_id),
                (2, 3)
            );
            assert_eq!(t.dl_tensor.ndim, 2);
            assert_eq!((t.dl_tensor.dtype.code, t.dl_tensor.dtype.bits), (5, 64));
            // SAFETY: `shape` points to `ndim` values owned by the tensor's context.
            let shape = unsafe { std::slice::from_raw_parts(t.dl_tensor.shape, 2) };
            assert_eq!(shape, &[2, 3]);
            assert!(t.dl_tensor.strides.is_null());
            drop(capsule);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                1,
                "freed by the capsule's destructor"
            );
        });
    }

    #[test]
    fn a_consumed_capsule_leaves_the_tensor_to_its_deleter() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            let (capsule, drops) = exported(py, true);
            // SAFETY: as a consumer does: take the pointer, rename the capsule, call the
            // deleter once done.
            unsafe {
                let t = pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), NAME_V.as_ptr())
                    as *mut DlManagedTensorVersioned;
                assert_eq!(((*t).version.major, (*t).version.minor), (1, 0));
                assert_eq!((*t).dl_tensor.ndim, 2);
                pyo3::ffi::PyCapsule_SetName(capsule.as_ptr(), c"used_dltensor_versioned".as_ptr());
                drop(capsule);
                assert_eq!(drops.load(Ordering::SeqCst), 0, "the consumer owns it now");
                ((*t).deleter.expect("a deleter"))(t);
            }
            assert_eq!(drops.load(Ordering::SeqCst), 1);
        });
    }

    #[test]
    fn an_imported_address_includes_the_byte_offset() {
        let mut shape = [2i64, 3];
        let t = DlTensor {
            data: 0x1000 as *mut c_void,
            device: DlDevice {
                device_type: DL_CUDA,
                device_id: 1,
            },
            ndim: 2,
            dtype: DlDataType {
                code: 2,
                bits: 32,
                lanes: 1,
            },
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 256,
        };
        // SAFETY: `shape` holds `ndim` values; no strides.
        let d = unsafe { describe(&t, false, "x") }.unwrap();
        assert_eq!(
            d,
            Described {
                ptr: 0x1100,
                bytes: 24,
                dtype: Dtype { kind: 'f', size: 4 },
                device: (DL_CUDA, 1),
                readonly: false,
            }
        );
    }

    #[test]
    fn an_exported_capsule_is_imported_and_freed_once_by_its_new_owner() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            for versioned in [false, true] {
                let (capsule, drops) = exported(py, versioned);
                let (d, owner) = take(capsule.bind(py), "x").unwrap();
                assert_eq!((d.ptr, d.bytes, d.device), (0x1000, 48, (DL_CUDA, 3)));
                assert_eq!(d.dtype, Dtype { kind: 'c', size: 8 });
                assert!(
                    take(capsule.bind(py), "x").is_err(),
                    "a used capsule is not taken twice"
                );
                drop(capsule);
                assert_eq!(drops.load(Ordering::SeqCst), 0, "the importer owns it");
                drop(owner);
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    1,
                    "deleted once, by the owner"
                );
            }
        });
    }
}
