//! Markers: CUDA events recorded on a stream right after some work, which complete when that
//! work has. [`crate::stream::track`] keeps them in use lists; stream queues (`crate::stream::queue`) record
//! them, after stream operations and, when needed, after graph launches.
//!
//! Markers come from a [`MarkerPool`] (one per stream), which re-records a marker only when
//! nobody else holds it, so steady-state launches and updates create no event and allocate
//! nothing. A marker names its stream by the stream's process-unique id, so this module needs
//! no stream type (and `queue` and `track` both build on it).

use std::sync::Arc;

use crate::device::Device;
use crate::error::Result;
use crate::result::runtime as rt;
use crate::sys;

/// A CUDA event recorded after some work on one stream.
pub(crate) struct Marker {
    raw: sys::cudaEvent_t,
    device: Device,
    /// The stream it was last recorded on (the `id` of its [`StreamQueue`](crate::stream::queue::StreamQueue)), 0
    /// before the first record.
    stream: u64,
}

// SAFETY: CUDA event handles may be used from any thread; a marker is re-recorded only through
// `&mut` (so by one thread), and shared references only query or wait, which CUDA allows
// concurrently.
unsafe impl Send for Marker {}
// SAFETY: as above.
unsafe impl Sync for Marker {}

impl Marker {
    fn new(device: &Device) -> Result<Marker> {
        device.bind()?;
        // SAFETY: the event is owned by the marker and destroyed in its Drop.
        let raw = unsafe { rt::event_create(sys::cudaEventDisableTiming)? };
        Ok(Marker {
            raw,
            device: device.clone(),
            stream: 0,
        })
    }

    /// Records the marker on the stream `raw`, whose process-unique id is `id`.
    ///
    /// # Safety
    /// `raw` is a live stream of the marker's device.
    unsafe fn record(&mut self, raw: sys::cudaStream_t, id: u64) -> Result<()> {
        // SAFETY: the event is live; the caller vouches for the stream.
        unsafe { rt::event_record(self.raw, raw)? };
        self.stream = id;
        Ok(())
    }

    /// Waits until the marked work has completed.
    pub(crate) fn wait(&self) -> Result<()> {
        if self.stream == 0 {
            return Ok(());
        }
        // SAFETY: the event is live.
        unsafe { rt::event_synchronize(self.raw) }
    }

    /// Whether the marked work has completed.
    pub(crate) fn done(&self) -> Result<bool> {
        if self.stream == 0 {
            return Ok(true);
        }
        // SAFETY: the event is live.
        unsafe { rt::event_query(self.raw) }
    }

    /// The stream it marks work on.
    pub(crate) fn stream(&self) -> u64 {
        self.stream
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        // SAFETY: the event is owned; destroying an event whose work is pending is allowed
        // (CUDA releases it when the work completes).
        if let Err(e) = unsafe { rt::event_destroy(self.raw) } {
            self.device.defer("an event", e);
        }
    }
}

/// Markers owned by one stream, reused once nobody else holds them.
pub(crate) struct MarkerPool {
    device: Device,
    markers: Vec<Arc<Marker>>,
}

/// Above this many markers, the pool stops keeping markers others still hold.
const POOL_KEEP: usize = 64;

/// How many markers the pool makes when none is free. A stream's steady state needs a few at
/// once (its latest marker, those the use lists of buffers and an `Exec`'s retired entries
/// hold, which `Exec` bounds): making them together, the first time, keeps later launches and
/// updates from creating events or allocating when the GPU falls behind.
const POOL_GROW: usize = 8;

impl MarkerPool {
    pub(crate) fn new(device: &Device) -> Self {
        MarkerPool {
            device: device.clone(),
            markers: Vec::with_capacity(POOL_KEEP + POOL_GROW),
        }
    }

    /// A marker recorded now (after the work queued so far) on the stream `raw`, whose
    /// process-unique id is `id`.
    ///
    /// # Safety
    /// `raw` is a live stream of the pool's device.
    pub(crate) unsafe fn record(&mut self, raw: sys::cudaStream_t, id: u64) -> Result<Arc<Marker>> {
        let free = self
            .markers
            .iter()
            .position(|m| Arc::strong_count(m) == 1 && Arc::weak_count(m) == 0);
        let i = match free {
            Some(i) => i,
            None => {
                if self.markers.len() >= POOL_KEEP {
                    // Those still held elsewhere are released by their holders.
                    self.markers.retain(|m| Arc::strong_count(m) == 1);
                }
                for _ in 0..POOL_GROW {
                    self.markers.push(Arc::new(Marker::new(&self.device)?));
                }
                self.markers.len() - 1
            }
        };
        let m = &mut self.markers[i];
        let free = Arc::get_mut(m).expect("a free marker is held by the pool only");
        // SAFETY: the caller vouches for the stream; the marker is of the pool's device.
        unsafe { free.record(raw, id)? };
        Ok(m.clone())
    }
}
