//! Streams and events.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::marker::{Marker, MarkerPool};
use crate::result::runtime as rt;
use crate::sys;

pub(crate) struct StreamInner {
    pub(crate) raw: sys::cudaStream_t,
    pub(crate) device: Device,
    /// Never reused within a process (raw handles are): what markers name their stream by.
    id: u64,
    /// Markers of the operations queued on this stream (see `marker` and `track`).
    markers: Mutex<MarkerPool>,
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

// SAFETY: a CUDA stream handle may be used from any thread; the runtime serialises access.
// The marker pool is behind a mutex.
unsafe impl Send for StreamInner {}
// SAFETY: as above.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // SAFETY: the handle is live and this is its last owner. Work still queued on it runs
        // to completion (CUDA releases the stream afterwards); everything that work uses is
        // kept alive by the markers in the objects' use lists, not by the stream.
        if let Err(e) = unsafe { rt::stream_destroy(self.raw) } {
            self.device.defer("a stream", e);
        }
    }
}

/// A CUDA stream (created non-blocking: it does not synchronise with the legacy default
/// stream). Cheap to clone; the stream is destroyed when the last clone is dropped.
#[derive(Clone)]
pub struct Stream {
    pub(crate) inner: Arc<StreamInner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.inner.raw)
            .finish()
    }
}

impl Stream {
    /// Creates a stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        device.bind()?;
        // SAFETY: the stream is owned by the returned value and destroyed in its Drop.
        let raw = unsafe { rt::stream_create(sys::cudaStreamNonBlocking)? };
        Ok(Stream {
            inner: Arc::new(StreamInner {
                raw,
                device: device.clone(),
                id: NEXT_STREAM.fetch_add(1, Ordering::Relaxed),
                markers: Mutex::new(MarkerPool::new(device)),
            }),
        })
    }

    /// The raw handle, for calling CUDA directly. It stays valid while `self` lives.
    pub fn raw(&self) -> sys::cudaStream_t {
        self.inner.raw
    }

    /// The stream's device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// A marker recorded on this stream now: it completes when the work queued so far has.
    pub(crate) fn mark(&self) -> Result<Arc<Marker>> {
        let mut pool = self.inner.markers.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the stream is live and of the pool's device (made together in `new`).
        unsafe { pool.record(self.inner.raw, self.inner.id) }
    }

    /// An error unless the stream is on `device`.
    pub(crate) fn check_device(&self, device: &Device, what: &str) -> Result<()> {
        if &self.inner.device != device {
            return Err(Error::WrongDevice(format!(
                "{what} is on device {} but the stream is on device {}",
                device.ordinal(),
                self.inner.device.ordinal()
            )));
        }
        Ok(())
    }

    /// Makes the work queued on this stream from now on wait for `event` (the work before its
    /// last record on another stream), without blocking the host (`cudaStreamWaitEvent`).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { rt::stream_wait_event(self.inner.raw, event.raw) }
    }

    /// Waits until all work queued on the stream has finished, then reports the first error
    /// kept from a `Drop` on this device, if any.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is live.
        unsafe { rt::stream_synchronize(self.inner.raw)? };
        self.inner.device.take_deferred()
    }
}

/// A CUDA event with timing enabled, for ordering and measuring work.
pub struct Event {
    raw: sys::cudaEvent_t,
    device: Device,
}

// SAFETY: event handles may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event on `device`.
    pub fn new(device: &Device) -> Result<Event> {
        device.bind()?;
        // SAFETY: the event is owned by the returned value and destroyed in its Drop.
        let raw = unsafe { rt::event_create(sys::cudaEventDefault)? };
        Ok(Event {
            raw,
            device: device.clone(),
        })
    }

    /// Records the event on `stream`: it completes when the work queued before it has.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { rt::event_record(self.raw, stream.raw()) }
    }

    /// Whether the work before the event's last record has completed (`cudaEventQuery`);
    /// `true` for an event never recorded.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: the event is live.
        unsafe { rt::event_query(self.raw) }
    }

    /// Waits until the event has completed.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the event is live.
        unsafe { rt::event_synchronize(self.raw) }
    }

    /// Milliseconds between `self` and the later event `end` (both recorded and completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: both events are live; CUDA reports an error if either has not completed.
        unsafe { rt::event_elapsed_ms(self.raw, end.raw) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the handle is live and owned.
        if let Err(e) = unsafe { rt::event_destroy(self.raw) } {
            self.device.defer("an event", e);
        }
    }
}
