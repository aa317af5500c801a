//! Devices: selection, properties, launch limits, and errors deferred from `Drop`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result, Version};
use crate::result::driver as dr;
use crate::result::runtime as rt;
use crate::sys;

/// The launch limits a DAG is validated against.
///
/// [`Device::limits`] reads them from a GPU; they can also be written by hand to validate a DAG
/// for a device that is not present (see [`crate::dag::RecordingBackend`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Compute capability `(major, minor)`.
    pub compute_capability: (u32, u32),
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most threads along each block dimension.
    pub max_block_dim: [u32; 3],
    /// Most blocks along each grid dimension.
    pub max_grid_dim: [u32; 3],
    /// Shared memory a block may use without opting in (bytes).
    pub max_shared_mem_per_block: usize,
    /// Shared memory a block may use after opting in with
    /// [`Kernel::set_max_dynamic_shared_mem`](crate::Kernel::set_max_dynamic_shared_mem) (bytes).
    pub max_shared_mem_per_block_optin: usize,
    /// Streaming multiprocessors (how many blocks of a cooperative launch fit at once is this
    /// times the kernel's resident blocks per multiprocessor).
    pub multiprocessors: u32,
    /// The largest L2 access-policy window, bytes (`cudaDevAttrMaxAccessPolicyWindowSize`).
    pub max_access_policy_window: usize,
}

impl DeviceLimits {
    /// The limits of a compute-capability 9.0 device (H100, H200), for validating without a GPU.
    pub fn hopper() -> Self {
        DeviceLimits {
            compute_capability: (9, 0),
            max_threads_per_block: 1024,
            max_block_dim: [1024, 1024, 64],
            max_grid_dim: [i32::MAX as u32, 65535, 65535],
            max_shared_mem_per_block: 48 * 1024,
            max_shared_mem_per_block_optin: 227 * 1024,
            multiprocessors: 132,
            max_access_policy_window: 134_213_632,
        }
    }
}

/// What a device is.
#[derive(Debug, Clone)]
pub struct DeviceProperties {
    /// The marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Number of streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// Launch limits.
    pub limits: DeviceLimits,
    /// The CUDA runtime library's version.
    pub runtime_version: Version,
    /// The highest CUDA version the installed driver supports.
    pub driver_version: Version,
}

pub(crate) struct DeviceInner {
    ordinal: i32,
    props: DeviceProperties,
    deferred: Mutex<Vec<Error>>,
    has_deferred: AtomicBool,
    /// The device's primary context, retained on first use by a driver call
    /// ([`Device::primary_context`]) and released when the device is dropped.
    primary: OnceLock<PrimaryContext>,
}

/// A retained primary context's handle.
struct PrimaryContext(sys::CUcontext);

// SAFETY: a context handle is a process-wide name the driver accepts from any thread (the
// driver API is thread-safe); this type only passes it to driver calls and never dereferences
// it. The reference it stands for is released once, in `DeviceInner`'s `Drop`.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; `&PrimaryContext` only reads the handle.
unsafe impl Sync for PrimaryContext {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if self.primary.get().is_some() {
            // SAFETY: `primary` holds the one reference `primary_context` retained, and with
            // the device gone nothing uses the context through it. A failure has no one left
            // to be reported to (the device was its reporter); the runtime still holds its own
            // reference, so the context lives on either way.
            let _ = unsafe { dr::primary_ctx_release(self.ordinal) };
        }
    }
}

/// A CUDA device (its primary context), cheap to clone.
///
/// Every object made on a device keeps it alive. Errors that happen while an object is dropped
/// (where nothing can be returned) are kept here and reported by the next
/// [`Device::synchronize`], [`Stream::synchronize`](crate::Stream::synchronize) or
/// [`Exec::synchronize`](crate::Exec::synchronize).
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.ordinal)
            .field("name", &self.inner.props.name)
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.inner.ordinal == other.inner.ordinal
    }
}
impl Eq for Device {}

/// Required driver: the one that supports the CUDA version the bindings come from.
const MIN_DRIVER: Version = Version {
    major: 13,
    minor: 0,
};

impl Device {
    /// The number of CUDA devices, or a typed error saying why there are none usable
    /// (library missing, no driver, driver too old).
    pub fn count() -> Result<usize> {
        // SAFETY: plain queries with valid out-pointers.
        let driver = unsafe { rt::driver_version()? };
        if driver == 0 {
            return Err(Error::NoDevice(
                "no NVIDIA driver is installed (libcuda.so.1 was not found)".into(),
            ));
        }
        let driver = Version::from_cuda(driver);
        if driver < MIN_DRIVER {
            return Err(Error::TooOld {
                what: "the NVIDIA driver",
                found: driver,
                required: MIN_DRIVER,
                hint: "install an NVIDIA driver of the 580 series or newer",
            });
        }
        // SAFETY: as above.
        match unsafe { rt::device_count() } {
            Ok(n) => Ok(n as usize),
            Err(Error::Cuda { name, message, .. }) => {
                Err(Error::NoDevice(format!("{name}: {message}")))
            }
            Err(e) => Err(e),
        }
    }

    /// Opens device `ordinal` and makes it current on this thread.
    pub fn get(ordinal: usize) -> Result<Device> {
        let count = Device::count()?;
        if ordinal >= count {
            return Err(Error::NoDevice(format!(
                "device {ordinal} does not exist ({count} found)"
            )));
        }
        let ordinal = ordinal as i32;
        // SAFETY: `ordinal` was checked against the device count.
        unsafe { rt::set_device(ordinal)? };
        let attr = |a: sys::cudaDeviceAttr| -> Result<u32> {
            // SAFETY: `ordinal` is valid.
            Ok(unsafe { rt::device_attribute(a, ordinal)? }.max(0) as u32)
        };
        use sys::cudaDeviceAttr as A;
        let limits = DeviceLimits {
            compute_capability: (
                attr(A::cudaDevAttrComputeCapabilityMajor)?,
                attr(A::cudaDevAttrComputeCapabilityMinor)?,
            ),
            max_threads_per_block: attr(A::cudaDevAttrMaxThreadsPerBlock)?,
            max_block_dim: [
                attr(A::cudaDevAttrMaxBlockDimX)?,
                attr(A::cudaDevAttrMaxBlockDimY)?,
                attr(A::cudaDevAttrMaxBlockDimZ)?,
            ],
            max_grid_dim: [
                attr(A::cudaDevAttrMaxGridDimX)?,
                attr(A::cudaDevAttrMaxGridDimY)?,
                attr(A::cudaDevAttrMaxGridDimZ)?,
            ],
            max_shared_mem_per_block: attr(A::cudaDevAttrMaxSharedMemoryPerBlock)? as usize,
            max_shared_mem_per_block_optin: attr(A::cudaDevAttrMaxSharedMemoryPerBlockOptin)?
                as usize,
            multiprocessors: attr(A::cudaDevAttrMultiProcessorCount)?,
            max_access_policy_window: attr(A::cudaDevAttrMaxAccessPolicyWindowSize)? as usize,
        };
        // SAFETY: `ordinal` is valid.
        let raw = unsafe { rt::device_properties(ordinal)? };
        // SAFETY: CUDA fills `name` with a NUL-terminated string within the array.
        let name = unsafe { std::ffi::CStr::from_ptr(raw.name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: plain version queries.
        let (runtime, driver) = unsafe { (rt::runtime_version()?, rt::driver_version()?) };
        let props = DeviceProperties {
            name,
            multiprocessor_count: attr(A::cudaDevAttrMultiProcessorCount)?,
            total_memory: raw.totalGlobalMem,
            limits,
            runtime_version: Version::from_cuda(runtime),
            driver_version: Version::from_cuda(driver),
        };
        Ok(Device {
            inner: Arc::new(DeviceInner {
                ordinal,
                props,
                deferred: Mutex::new(Vec::new()),
                has_deferred: AtomicBool::new(false),
                primary: OnceLock::new(),
            }),
        })
    }

    /// The key objects of this device carry (what validation compares).
    pub fn key(&self) -> DeviceKey {
        DeviceKey::Cuda(self.ordinal() as i32)
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal as usize
    }

    /// The device's properties.
    pub fn properties(&self) -> &DeviceProperties {
        &self.inner.props
    }

    /// The device's launch limits.
    pub fn limits(&self) -> &DeviceLimits {
        &self.inner.props.limits
    }

    /// The device's primary context (the runtime's context for it), for the calls the crate
    /// makes through the driver ([`crate::result::driver`]), which name their context rather
    /// than rely on the calling thread's. Retained the first time, held until the device is
    /// dropped; later calls read it back (one load).
    #[inline]
    pub(crate) fn primary_context(&self) -> Result<sys::CUcontext> {
        match self.inner.primary.get() {
            Some(c) => Ok(c.0),
            None => self.retain_primary_context(),
        }
    }

    #[cold]
    fn retain_primary_context(&self) -> Result<sys::CUcontext> {
        // SAFETY: the ordinal was validated when the device was opened; the reference is
        // released by `DeviceInner`'s `Drop` (kept below) or right here (another thread kept
        // its own first).
        let ctx = unsafe { dr::primary_ctx_retain(self.inner.ordinal)? };
        if let Err(PrimaryContext(_)) = self.inner.primary.set(PrimaryContext(ctx)) {
            // Another thread kept its reference first. A failure to release this one only
            // leaks a reference count (the context is the same one, and the cell's is usable),
            // so it does not fail the caller.
            // SAFETY: this call's reference, unused: the cell holds another thread's.
            let _ = unsafe { dr::primary_ctx_release(self.inner.ordinal) };
        }
        Ok(self.inner.primary.get().expect("set above").0)
    }

    /// Makes this device current on the calling thread (the runtime API's per-thread state).
    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: the ordinal was validated when the device was opened.
        unsafe { rt::set_device(self.inner.ordinal) }
    }

    /// Whether kernels and copies running on this device can use memory of `peer` once peer
    /// access is enabled (`cudaDeviceCanAccessPeer`); `true` for the device itself. Lowering a
    /// DAG enables peer access for every pair its nodes need (see
    /// [`Dag::place`](crate::Dag::place)).
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        can_access_peer(self.inner.ordinal, peer.inner.ordinal)
    }

    /// Free and total device memory, bytes (`cudaMemGetInfo`).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        // SAFETY: the device is current.
        unsafe { rt::mem_get_info() }
    }

    /// Waits for all work on the device, then reports the first error kept from a `Drop`.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: no preconditions.
        unsafe { rt::device_synchronize()? };
        self.take_deferred()
    }

    /// Keeps an error that happened in a `Drop`, for the next synchronising call to report.
    pub(crate) fn defer(&self, what: &'static str, err: Error) {
        let mut list = self
            .inner
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        list.push(Error::Deferred {
            what,
            source: Box::new(err),
        });
        self.inner.has_deferred.store(true, Ordering::Release);
    }

    /// Returns (and forgets) the first error kept from a `Drop`, if any.
    pub(crate) fn take_deferred(&self) -> Result<()> {
        if !self.inner.has_deferred.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut list = self
            .inner
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let first = if list.is_empty() {
            None
        } else {
            Some(list.remove(0))
        };
        if list.is_empty() {
            self.inner.has_deferred.store(false, Ordering::Release);
        }
        first.map_or(Ok(()), Err)
    }
}

/// Checks that `ordinal` names a device of this machine.
fn check_ordinal(ordinal: i32) -> Result<()> {
    let count = Device::count()?;
    if ordinal < 0 || ordinal as usize >= count {
        return Err(Error::NoDevice(format!(
            "device {ordinal} does not exist ({count} found)"
        )));
    }
    Ok(())
}

/// Whether device `from` can use memory of device `to` by peer access (`true` when they are
/// the same device).
pub(crate) fn can_access_peer(from: i32, to: i32) -> Result<bool> {
    if from == to {
        return Ok(true);
    }
    check_ordinal(from)?;
    check_ordinal(to)?;
    // SAFETY: both ordinals were checked against the device count.
    unsafe { rt::device_can_access_peer(from, to) }
}

/// Lets device `from` use memory of device `to` (`cudaDeviceEnablePeerAccess`; already
/// enabled is success). Leaves `from` current on the calling thread.
pub(crate) fn enable_peer_access(from: i32, to: i32) -> Result<()> {
    bind_ordinal(from)?;
    check_ordinal(to)?;
    // SAFETY: `to` was checked against the device count.
    unsafe { rt::device_enable_peer_access(to) }
}

/// Makes device `ordinal` current on the calling thread (what [`Device::bind`] does, for a
/// device known by its key).
pub(crate) fn bind_ordinal(ordinal: i32) -> Result<()> {
    check_ordinal(ordinal)?;
    // SAFETY: the ordinal was checked against the device count.
    unsafe { rt::set_device(ordinal) }
}

/// Whether `ordinal` names a device of this machine (no error: `false` when there is none).
pub(crate) fn ordinal_exists(ordinal: i32) -> bool {
    check_ordinal(ordinal).is_ok()
}

/// The versions of the CUDA runtime and of the driver, without opening a device.
pub fn versions() -> Result<(Version, Version)> {
    // SAFETY: plain version queries.
    let (rt_v, drv) = unsafe { (rt::runtime_version()?, rt::driver_version()?) };
    Ok((Version::from_cuda(rt_v), Version::from_cuda(drv)))
}

/// Whose an object is: a device's (real memory, events), or a recording backend's (a
/// placeholder with nothing behind it).
#[derive(Debug)]
pub(crate) enum Owner {
    /// A real object of this device.
    Cuda(Device),
    /// A placeholder handed out by the recording backend with this id.
    Recording(u64),
}

impl Owner {
    /// The device (or recording backend) the object belongs to.
    pub(crate) fn key(&self) -> DeviceKey {
        match self {
            Owner::Cuda(d) => d.key(),
            Owner::Recording(id) => DeviceKey::Recording(*id),
        }
    }
}

/// Which device (or recording backend's device) an object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKey {
    /// A CUDA device, by ordinal.
    Cuda(i32),
    /// A device of a recording backend, by an id naming both: the backend's number times
    /// 2<sup>16</sup> plus the device's index (0 for the home device, and for a backend made
    /// with [`RecordingBackend::new`](crate::dag::RecordingBackend::new)).
    Recording(u64),
}

/// Bits of a [`DeviceKey::Recording`] id that hold the device's index.
pub(crate) const RECORDING_INDEX_BITS: u32 = 16;

impl DeviceKey {
    /// Whether both keys are CUDA devices, or devices of the same recording backend.
    pub(crate) fn same_backend(self, other: DeviceKey) -> bool {
        match (self, other) {
            (DeviceKey::Cuda(_), DeviceKey::Cuda(_)) => true,
            (DeviceKey::Recording(a), DeviceKey::Recording(b)) => {
                a >> RECORDING_INDEX_BITS == b >> RECORDING_INDEX_BITS
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKey::Cuda(o) => write!(f, "CUDA device {o}"),
            DeviceKey::Recording(id) => {
                let (backend, index) = (
                    id >> RECORDING_INDEX_BITS,
                    id & ((1 << RECORDING_INDEX_BITS) - 1),
                );
                if index == 0 {
                    write!(f, "recording backend {backend}")
                } else {
                    write!(f, "recording backend {backend} device {index}")
                }
            }
        }
    }
}
