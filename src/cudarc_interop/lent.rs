//! cudarc buffers lent to DAGs without leaving cudarc ([`Lent`]), and the launches that bind
//! them ([`Exec::launch_lent`] with [`Lend`]s).
//!
//! A DAG keeps the crate's own buffers alive by holding them; a cudarc slice stays cudarc's,
//! so a DAG holds only its address. What makes the address safe to use is the binding at
//! each launch: [`Exec::launch_lent`] takes every lent slice the graph uses by `&mut` (so it
//! is alive, and nothing else uses it through cudarc's safe API during the call), makes the
//! launch stream wait for the slice's recorded reads and writes, launches, and records the
//! launch as the slice's latest write (cudarc's multi-stream event tracking). cudarc then
//! orders whatever it does with the slice afterwards after the launch, on any stream: reads
//! and writes wait for the write event, and dropping the slice frees it on its stream after
//! waiting for it (`cuMemFreeAsync`, stream-ordered), so a queued launch never uses freed
//! memory. Where cudarc tracks no events (one stream, or tracking turned off), the launch
//! must be on the slice's own stream, whose order does the same.

use std::ops::RangeBounds;
use std::sync::Arc;

use ::cudarc::driver::{
    CudaSlice, CudaStream, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};

use super::cudarc_call;
use crate::dag::Exec;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{In, InOut, KernelArg, Out};
use crate::memory::{DeviceBuffer, DeviceRepr, LentMemory, Region};
use crate::stream::Stream;

/// A cudarc buffer (a [`CudaSlice`], or a view of one) lent to DAGs: its memory as an operand
/// of graph nodes (kernel arguments, with [`In`]/[`Out`]/[`InOut`] marks, copy and memset
/// ends, FFT input and output, through [`Region`]), while the slice stays cudarc's.
///
/// A `Lent` holds the address, not the slice: an `Exec` whose graph uses lent memory is
/// launched only with [`Exec::launch_lent`], which binds each slice for the launch and keeps
/// cudarc's ordering of the slice's reads, writes and free (see the module docs in the
/// README's "Using it with cudarc"). [`Exec::launch`] refuses such a graph, and stream
/// operations (a stream kernel launch, a `StreamFft`) refuse lent memory, since nothing binds
/// the slice there. Cheap to clone.
pub struct Lent<T> {
    buf: DeviceBuffer<T>,
}

impl<T: DeviceRepr> Clone for Lent<T> {
    fn clone(&self) -> Self {
        Lent {
            buf: DeviceBuffer::from_alloc(Arc::clone(&self.buf.alloc), self.buf.len()),
        }
    }
}

impl<T> std::fmt::Debug for Lent<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent")
            .field("addr", &format_args!("{:#x}", self.buf.alloc.ptr))
            .field("bytes", &self.buf.alloc.bytes)
            .finish()
    }
}

impl<T: DeviceRepr> Lent<T> {
    /// Lends `slice` (a [`CudaSlice`], [`CudaView`](::cudarc::driver::CudaView) or
    /// [`CudaViewMut`]) to DAGs. Only its address, length and device are taken: no access is
    /// made, and nothing is recorded on it.
    ///
    /// Refused ([`Error::Cudarc`]): a slice of a non-primary context, as for
    /// [`Device::from_cudarc`].
    pub fn new(slice: &impl DevicePtr<T>) -> Result<Lent<T>> {
        let stream = slice.stream();
        let device = Device::from_cudarc(stream.context())?;
        let (ptr, record) = slice.device_ptr(stream);
        // Only the address is wanted: recording a read here would replace cudarc's record of
        // reads on other streams (it keeps one read event per slice). `record` holds only
        // references, so forgetting it leaks nothing.
        std::mem::forget(record);
        Ok(Lent {
            buf: super::device_buffer_of(
                device,
                ptr,
                slice.num_bytes(),
                slice.len(),
                Box::new(LentMemory),
            ),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The elements `range` as a region for graph nodes (checked by the nodes using it).
    pub fn region(&self, range: impl RangeBounds<usize>) -> Region {
        self.buf.region(range)
    }
}

impl<T: DeviceRepr> From<&Lent<T>> for Region {
    fn from(l: &Lent<T>) -> Region {
        Region::from(&l.buf)
    }
}

impl<'a, T: DeviceRepr> From<&'a Lent<T>> for KernelArg<'a> {
    fn from(l: &'a Lent<T>) -> Self {
        KernelArg::from(&l.buf)
    }
}

macro_rules! marked_lent {
    ($($wrapper:ident),*) => {$(
        impl<'a, T: DeviceRepr> From<$wrapper<&'a Lent<T>>> for KernelArg<'a> {
            fn from(l: $wrapper<&'a Lent<T>>) -> Self {
                KernelArg::from($wrapper(&l.0.buf))
            }
        }
    )*};
}

marked_lent!(In, Out, InOut);

/// A cudarc slice bound for one [`Exec::launch_lent`]: `&mut` access to a [`CudaSlice`] or a
/// [`CudaViewMut`] whose memory holds lent memory the graph uses.
pub struct Lend<'a> {
    target: &'a mut dyn Lendable,
}

impl<'a> Lend<'a> {
    /// Binds `slice` for a launch.
    pub fn new<T: 'a>(slice: &'a mut CudaSlice<T>) -> Lend<'a> {
        Lend { target: slice }
    }

    /// Binds a mutable view of a slice for a launch.
    pub fn view<T: 'a>(view: &'a mut CudaViewMut<'_, T>) -> Lend<'a> {
        Lend { target: view }
    }
}

/// A slice as a launch binds it, its element type erased.
trait Lendable {
    /// The stream cudarc frees the slice on and, without event tracking, orders it by.
    fn stream(&self) -> &Arc<CudaStream>;
    /// Bytes.
    fn bytes(&self) -> usize;
    /// cudarc's write access on `stream` (`device_ptr_mut`): `stream` waits for the slice's
    /// recorded reads and writes; dropping the guard records a write after what was queued.
    fn access<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
}

macro_rules! lendable {
    ($($ty:ty),*) => {$(
        impl<T> Lendable for $ty {
            fn stream(&self) -> &Arc<CudaStream> {
                DeviceSlice::stream(self)
            }
            fn bytes(&self) -> usize {
                self.num_bytes()
            }
            fn access<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
                self.device_ptr_mut(stream)
            }
        }
    )*};
}

lendable!(CudaSlice<T>, CudaViewMut<'_, T>);

impl Exec {
    /// [`Exec::launch`] for a graph that uses memory lent by cudarc ([`Lent`]), on `stream`,
    /// a cudarc stream ([`Stream::from_cudarc`]) of the graph's device, binding `lends`: for
    /// each lent allocation the graph uses, a [`Lend`] of a slice whose memory contains it
    /// (the slice the `Lent` was made from, or one at the same memory). Allocates nothing.
    ///
    /// The stream first waits for the reads and writes cudarc recorded on each slice; after
    /// the launch, a write is recorded on each, so cudarc orders its later use of the slices,
    /// including freeing them, after the launch: reading a slice through cudarc's API after
    /// this call sees the graph's writes with no explicit synchronisation. Where cudarc tracks
    /// no events (its context made no stream besides the default one, or tracking was turned
    /// off), each slice must belong to `stream`, whose order does the same.
    ///
    /// To launch many times with the slices bound once (the waits and the record paid once,
    /// not per launch), use [`Exec::with_lent`].
    ///
    /// Refused, launching nothing ([`Error::Cudarc`]): a stream the crate did not take from
    /// cudarc; lent memory of the graph that no lend contains (naming its address and size);
    /// a slice of another context than the graph's device's, of another `CudaContext` object
    /// than the stream's (cudarc tracks events per object: open the context once and share the
    /// `Arc`), or of another stream while cudarc tracks no events; more than 64 lends. A
    /// failure cudarc kept from its waits is [`Error::CudarcCall`].
    pub fn launch_lent(&mut self, stream: &Stream, lends: &mut [Lend<'_>]) -> Result<()> {
        self.bind_lent("Exec::launch_lent", stream, lends, |l| l.launch())
    }

    /// Binds `lends` once, as [`Exec::launch_lent`] does for one launch, and runs `f`, which
    /// may launch the graph any number of times on `stream` with them bound
    /// ([`LentLaunches::launch`]) and change the `Exec` between launches
    /// ([`LentLaunches::exec`]: kernel arguments, enabled nodes, updates).
    ///
    /// The stream waits for cudarc's recorded reads and writes of each slice before `f` runs;
    /// one write is recorded on each after it returns (or unwinds), after every launch it
    /// made. That is sound for any number of launches because the slices stay borrowed by
    /// `&mut` for the whole call: cudarc's safe API can neither use nor free them meanwhile.
    /// Each launch checks again that the lends contain the lent memory the graph uses (an
    /// update may have changed it), without calling the driver; the checks of the stream and
    /// of each slice's context are made once, here. A loop of launches then costs what
    /// [`Exec::launch`] costs, where `launch_lent` adds, per launch and slice, cudarc's two
    /// event waits and one event record (when it tracks events).
    ///
    /// ```ignore
    /// exec.with_lent(&stream, &mut [Lend::new(&mut x), Lend::new(&mut y)], |l| {
    ///     for step in 0..1000 {
    ///         l.exec().set_kernel_arg(node, 1, step as f32)?;
    ///         l.launch()?;
    ///     }
    ///     Ok(())
    /// })?;
    /// ```
    ///
    /// Refused before `f` runs, as [`Exec::launch_lent`] is; an error of `f` (or of a launch in
    /// it) is returned after the writes are recorded. A failure cudarc kept from its waits or
    /// records is [`Error::CudarcCall`] (the stream is synchronised first, so no slice is
    /// left in use without a record).
    pub fn with_lent<R>(
        &mut self,
        stream: &Stream,
        lends: &mut [Lend<'_>],
        f: impl FnOnce(&mut LentLaunches<'_>) -> Result<R>,
    ) -> Result<R> {
        self.bind_lent("Exec::with_lent", stream, lends, f)
    }

    /// [`Exec::with_lent`], its errors naming `what`.
    fn bind_lent<R>(
        &mut self,
        what: &'static str,
        stream: &Stream,
        lends: &mut [Lend<'_>],
        f: impl FnOnce(&mut LentLaunches<'_>) -> Result<R>,
    ) -> Result<R> {
        let problem = |problem: String| Error::Cudarc { what, problem };
        let cs = stream
            .inner
            .owner()
            .and_then(|o| o.downcast_ref::<Arc<CudaStream>>())
            .ok_or_else(|| {
                problem(
                    "the stream is not a cudarc stream (Stream::from_cudarc): cudarc's \
                     ordering of the lent slices needs its stream"
                        .into(),
                )
            })?;
        let ctx = cs.context();
        if lends.len() > MAX_LENDS {
            return Err(problem(format!(
                "{} lends: at most {MAX_LENDS} slices are bound per launch",
                lends.len()
            )));
        }
        let tracked = ctx.is_managing_stream_synchronization();
        let primary = self.device().primary_context()?;
        for l in lends.iter() {
            let s = l.target.stream();
            let check = LendCheck {
                same_context: Arc::ptr_eq(s.context(), ctx),
                primary: std::ptr::eq(s.context().cu_ctx().cast(), primary),
                tracked,
                same_stream: s.cu_stream() == cs.cu_stream(),
            };
            if let Some(p) = check.problem() {
                return Err(problem(p.into()));
            }
        }
        let mut f = Some(f);
        let mut out = None;
        let r = bind(lends, cs, None, &mut |bound| {
            ctx.check_err()
                .map_err(cudarc_call("CudaContext::check_err"))?;
            let f = f.take().expect("bind runs its closure once");
            let mut launches = LentLaunches {
                exec: &mut *self,
                stream,
                what,
                bound,
            };
            out = Some(f(&mut launches)?);
            Ok(())
        });
        if let Err(e) = ctx.check_err() {
            // A write event may not have been recorded: cudarc could then use a slice a
            // launch still writes. Wait for the launches before reporting.
            let _ = cs.synchronize();
            return Err(cudarc_call("CudaContext::check_err")(e));
        }
        r.map(|()| out.expect("set when the closure succeeded"))
    }
}

/// Launches of an [`Exec`] with cudarc slices bound ([`Exec::with_lent`]).
pub struct LentLaunches<'a> {
    exec: &'a mut Exec,
    stream: &'a Stream,
    what: &'static str,
    bound: Option<&'a Bound<'a>>,
}

impl LentLaunches<'_> {
    /// Launches the graph on the bound stream. Refused, launching nothing
    /// ([`Error::Cudarc`]), when the graph uses lent memory that none of the bound slices
    /// contains (after an update that brought in another `Lent`); otherwise as
    /// [`Exec::launch`]. Allocates nothing and calls the driver only to launch.
    pub fn launch(&mut self) -> Result<()> {
        for a in self.exec.lent() {
            if !covered(a.ptr, a.bytes, self.bound) {
                return Err(Error::Cudarc {
                    what: self.what,
                    problem: format!(
                        "the graph uses lent memory at {:#x} ({} bytes) that no Lend contains",
                        a.ptr, a.bytes
                    ),
                });
            }
        }
        self.exec.launch_bound(self.stream)
    }

    /// The `Exec`, to change between launches (kernel arguments, enabled nodes, updates).
    pub fn exec(&mut self) -> &mut Exec {
        self.exec
    }
}

/// At most this many slices are bound per launch ([`bind`] recurses once per slice).
const MAX_LENDS: usize = 64;

/// What decides whether a lent slice may be bound for a launch on a cudarc stream.
#[derive(Debug, Clone, Copy)]
struct LendCheck {
    /// The slice's context is the launch stream's `CudaContext` (the same `Arc`: cudarc keeps
    /// its event-tracking state per `CudaContext` object, and the slice's drop and accesses
    /// consult the slice's, the write record after the launch the stream's).
    same_context: bool,
    /// The slice's context is the graph's device's primary context.
    primary: bool,
    /// cudarc manages stream synchronisation in that context (events recorded and waited).
    tracked: bool,
    /// The slice's stream is the launch stream.
    same_stream: bool,
}

impl LendCheck {
    /// Why the slice may not be bound, if it may not.
    fn problem(self) -> Option<&'static str> {
        if !self.primary {
            return Some(
                "a lent slice belongs to another context than the graph's device's primary \
                 context",
            );
        }
        if !self.same_context {
            return Some(
                "a lent slice belongs to another CudaContext object than the launch stream \
                 (cudarc tracks events per CudaContext, so the launch would not be ordered \
                 with the slice's free): use one CudaContext for both",
            );
        }
        if !self.tracked && !self.same_stream {
            return Some(
                "cudarc tracks no events (its context made no stream besides the default \
                 one, or tracking is off), and a lent slice belongs to another stream than \
                 the launch's: launch on the slice's stream",
            );
        }
        None
    }
}

/// Whether `bytes` at `ptr` lie inside one of the bound slices.
fn covered(ptr: u64, bytes: usize, mut bound: Option<&Bound<'_>>) -> bool {
    let end = ptr + bytes as u64;
    while let Some(l) = bound {
        if l.start <= ptr && end <= l.end {
            return true;
        }
        bound = l.prev;
    }
    false
}

/// The memory of one bound slice, and those bound before it.
struct Bound<'p> {
    start: u64,
    end: u64,
    prev: Option<&'p Bound<'p>>,
}

/// Runs `launch` with every slice of `lends` accessed for writing on `stream` (waits queued
/// before, writes recorded after, whether the launch happened or not: recording a write after
/// nothing new only orders cudarc's later work after the stream's tail), giving it the bound
/// memory. Recursive, one level per lend, so the guards and the list of bound memory live on
/// the stack: nothing is allocated.
fn bind(
    lends: &mut [Lend<'_>],
    stream: &CudaStream,
    prev: Option<&Bound<'_>>,
    launch: &mut dyn FnMut(Option<&Bound<'_>>) -> Result<()>,
) -> Result<()> {
    match lends.split_first_mut() {
        None => launch(prev),
        Some((first, rest)) => {
            let bytes = first.target.bytes() as u64;
            let (start, record) = first.target.access(stream);
            let here = Bound {
                start,
                end: start + bytes,
                prev,
            };
            let r = bind(rest, stream, Some(&here), launch);
            drop(record);
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lend_is_refused_across_contexts_and_untracked_streams() {
        let ok = LendCheck {
            same_context: true,
            primary: true,
            tracked: true,
            same_stream: false,
        };
        assert_eq!(ok.problem(), None, "tracked: any stream of the context");
        let p = LendCheck {
            primary: false,
            ..ok
        }
        .problem()
        .unwrap();
        assert!(p.contains("primary context"), "{p}");
        let p = LendCheck {
            same_context: false,
            ..ok
        }
        .problem()
        .unwrap();
        assert!(p.contains("another CudaContext object"), "{p}");
        let p = LendCheck {
            tracked: false,
            ..ok
        }
        .problem()
        .unwrap();
        assert!(p.contains("launch on the slice's stream"), "{p}");
        let same = LendCheck {
            tracked: false,
            same_stream: true,
            ..ok
        };
        assert_eq!(same.problem(), None, "untracked: the slice's own stream");
    }

    #[test]
    fn lent_memory_must_lie_inside_one_bound_slice() {
        let a = Bound {
            start: 0x1000,
            end: 0x2000,
            prev: None,
        };
        let b = Bound {
            start: 0x8000,
            end: 0x8100,
            prev: Some(&a),
        };
        assert!(covered(0x1000, 0x1000, Some(&b)), "all of the first");
        assert!(covered(0x8040, 0x40, Some(&b)), "inside the second");
        assert!(!covered(0x1800, 0x1000, Some(&b)), "past the first's end");
        assert!(
            !covered(0x1f00, 0x6200, Some(&b)),
            "across both, inside neither"
        );
        assert!(!covered(0x4000, 4, Some(&b)), "between them");
        assert!(!covered(0x1000, 4, None), "nothing bound");
    }
}
