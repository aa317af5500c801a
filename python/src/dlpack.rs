//! DLPack export of `DeviceBuffer` (`__dlpack__`, `__dlpack_device__`): the capsule's tensor
//! holds a region of the buffer (its allocation's reference count), so the memory outlives the
//! buffer while a consumer (CuPy, PyTorch, JAX) uses it.

use std::ffi::{c_void, CStr};

use cudagraph::Region;
use pyo3::prelude::*;

use crate::device::drop_detached;
use crate::dtype::Dtype;
use crate::errors::invalid;

/// `kDLCUDA`.
pub(crate) const DL_CUDA: i32 = 2;

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
}
