//! Streams and events.

pub(crate) mod marker;
pub(crate) mod queue;
pub(crate) mod track;

use std::sync::Arc;

use crate::device::{Device, DeviceKey, Owner};
use crate::error::{Error, Result};
use crate::result::runtime as rt;
use crate::stream::queue::{QueueGuard, StreamQueue};
use crate::sys;

/// A CUDA stream (created non-blocking: it does not synchronise with the legacy default
/// stream). Cheap to clone; the stream is destroyed when the last clone is dropped.
#[derive(Clone)]
pub struct Stream {
    pub(crate) inner: Arc<StreamQueue>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.inner.raw())
            .finish()
    }
}

impl Stream {
    /// Creates a stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        Ok(Stream {
            inner: StreamQueue::new(device)?,
        })
    }

    /// The raw handle, for calling CUDA directly. It stays valid while `self` lives.
    ///
    /// The crate does not see work queued through it: should such work follow a graph launch
    /// on this stream, waiting for that launch (host access to its buffers,
    /// [`Exec::synchronize`](crate::Exec::synchronize), dropping the `Exec`) waits for that
    /// work too.
    pub fn raw(&self) -> sys::cudaStream_t {
        self.inner.raw()
    }

    /// The stream's device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The stream's tail, locked and sealed, for queuing work: a graph launch queued last
    /// gets its marker first (see `crate::stream::queue`). Mark the work with [`QueueGuard::mark`] and drop
    /// the guard before noting the marker in use lists (lock order).
    ///
    /// An error inside a host node: CUDA forbids CUDA calls there, and the thread must not
    /// wait for a tail that the thread launching its graph may hold.
    pub(crate) fn queue(&self) -> Result<QueueGuard<'_>> {
        check_not_in_host_node()?;
        let mut tail = self.inner.lock();
        tail.seal()?;
        Ok(tail)
    }

    /// An error unless the stream is on `device`.
    pub(crate) fn check_device(&self, device: &Device, what: &str) -> Result<()> {
        if &self.inner.device != device {
            return Err(Error::WrongDevice {
                node: None,
                problem: format!(
                    "{what} is on device {} but the stream is on device {}",
                    device.ordinal(),
                    self.inner.device.ordinal()
                ),
            });
        }
        Ok(())
    }

    /// Makes the work queued on this stream from now on wait for `event` (the work before its
    /// last record on another stream), without blocking the host (`cudaStreamWaitEvent`).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let tail = self.queue()?;
        let raw = event.live()?;
        // SAFETY: both handles are live.
        unsafe { rt::stream_wait_event(tail.raw(), raw) }
    }

    /// Waits until all work queued on the stream has finished, then reports the first error
    /// kept from a `Drop` on this device, if any.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is live.
        unsafe { rt::stream_synchronize(self.inner.raw())? };
        self.inner.device.take_deferred()
    }
}

/// An error when called from a host node (CUDA's callback thread), where no GPU work may be
/// queued.
pub(crate) fn check_not_in_host_node() -> Result<()> {
    if crate::stream::track::in_host_node() {
        return Err(Error::InHostNode {
            what: "queueing GPU work".into(),
            reason: "CUDA forbids CUDA calls there",
        });
    }
    Ok(())
}

/// A CUDA event with timing enabled, for ordering and measuring work. Cheap to clone (clones
/// are the same event); the event is destroyed when the last clone is dropped, so a graph's
/// event record and wait nodes keep the events they use alive.
#[derive(Clone)]
pub struct Event {
    pub(crate) inner: Arc<EventInner>,
}

/// The event a [`Event`] and its clones share.
pub(crate) struct EventInner {
    raw: sys::cudaEvent_t,
    /// Its device, or the recording backend whose placeholder it is.
    pub(crate) owner: Owner,
}

// SAFETY: an event handle may be used from any thread (CUDA's API is thread-safe); the owner
// is `Send`.
unsafe impl Send for EventInner {}
// SAFETY: as above; `EventInner` has no interior mutability of its own.
unsafe impl Sync for EventInner {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("raw", &self.inner.raw)
            .field("device", &self.inner.owner.key())
            .finish()
    }
}

impl PartialEq for Event {
    /// The same event (clones of one another).
    fn eq(&self, other: &Event) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Event {}

impl Event {
    /// Creates an event on `device`.
    pub fn new(device: &Device) -> Result<Event> {
        device.bind()?;
        // SAFETY: the event is owned by the returned value and destroyed in its Drop.
        let raw = unsafe { rt::event_create(sys::cudaEventDefault)? };
        Ok(Event {
            inner: Arc::new(EventInner {
                raw,
                owner: Owner::Cuda(device.clone()),
            }),
        })
    }

    /// A recording backend's placeholder event: `raw` is a made-up handle that is never passed
    /// to CUDA (every stream operation with it is an error).
    pub(crate) fn placeholder(backend: u64, raw: usize) -> Event {
        Event {
            inner: Arc::new(EventInner {
                raw: raw as sys::cudaEvent_t,
                owner: Owner::Recording(backend),
            }),
        }
    }

    /// The raw handle, for graph nodes (which CUDA reads at lowering and update).
    pub(crate) fn raw(&self) -> sys::cudaEvent_t {
        self.inner.raw
    }

    /// The handle for a CUDA call: an error for a recording backend's placeholder.
    fn live(&self) -> Result<sys::cudaEvent_t> {
        match self.inner.owner {
            Owner::Cuda(_) => Ok(self.inner.raw),
            Owner::Recording(_) => Err(Error::Placeholder {
                what: "the event".into(),
                problem: "it cannot be used on a GPU",
            }),
        }
    }

    /// The device the event belongs to (or the recording backend of a placeholder).
    pub(crate) fn key(&self) -> DeviceKey {
        self.inner.owner.key()
    }

    /// Records the event on `stream`: it completes when the work queued before it has.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let raw = self.live()?;
        // SAFETY: both handles are live.
        unsafe { rt::event_record(raw, stream.raw()) }
    }

    /// Whether the work before the event's last record has completed (`cudaEventQuery`);
    /// `true` for an event never recorded.
    pub fn query(&self) -> Result<bool> {
        let raw = self.live()?;
        // SAFETY: the event is live.
        unsafe { rt::event_query(raw) }
    }

    /// Waits until the event has completed.
    pub fn synchronize(&self) -> Result<()> {
        let raw = self.live()?;
        // SAFETY: the event is live.
        unsafe { rt::event_synchronize(raw) }
    }

    /// Milliseconds between `self` and the later event `end` (both recorded and completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        let (a, b) = (self.live()?, end.live()?);
        // SAFETY: both events are live; CUDA reports an error if either has not completed.
        unsafe { rt::event_elapsed_ms(a, b) }
    }
}

impl Drop for EventInner {
    fn drop(&mut self) {
        if let Owner::Cuda(device) = &self.owner {
            // SAFETY: the handle is live and owned; the last clone is gone, and the graphs
            // that used it (which hold clones) have been dropped after their launches.
            if let Err(e) = unsafe { rt::event_destroy(self.raw) } {
                device.defer("an event", e);
            }
        }
    }
}
