//! Kernel arguments: [`KernelArg`] and [`args!`](crate::args). How nodes keep them packed at a
//! kernel's parameter offsets is `packed.rs`.

use std::ffi::c_void;
use std::sync::Arc;

use super::conditional::Conditional;
use super::device_graph::DeviceGraph;
use super::device_node::DeviceNode;
use crate::graph_buffer::{GraphBuffer, GraphBufferKey};
use crate::memory::Region;
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, HostBuffer};

/// Argument values up to this many bytes are held inline (no heap).
pub(crate) const INLINE: usize = 64;

#[derive(Clone)]
enum ArgBytes {
    Inline([u64; INLINE / 8], usize),
    Heap(Box<[u8]>),
}

/// One kernel argument: a value's bytes, or a device buffer (passed as its address and kept
/// alive by any graph node that uses it).
///
/// Made with `KernelArg::from(value)` / `(&buffer).into()`, or all at once with
/// [`args!`](crate::args). No heap allocation for values up to 64 bytes.
///
/// An argument borrows the buffer it passes (`'a`), and making or dropping one changes no
/// reference count: a node that keeps the argument takes its own reference to the buffer
/// when it is added or updated, and a stream launch keeps the buffer from being freed until
/// the launch has run.
#[derive(Clone)]
pub struct KernelArg<'a> {
    bytes: ArgBytes,
    type_name: &'static str,
    pub(crate) buffer: Option<&'a Arc<Allocation>>,
    /// The conditional handle this argument passes ([`Conditional`]): its bytes are a
    /// placeholder until lowering puts the graph's handle in their place.
    pub(crate) conditional: Option<Conditional>,
    /// The graph-allocated buffer this argument passes ([`GraphBuffer`]): its bytes are a
    /// placeholder until lowering puts the allocation's address in their place.
    pub(crate) graph_buffer: Option<GraphBufferKey>,
    /// The device-updatable kernel node this argument passes ([`DeviceNode`]): its bytes are
    /// a placeholder until lowering puts the node's device handle in their place.
    pub(crate) device_node: Option<DeviceNode>,
    /// The graph launched from the device this argument passes ([`DeviceGraph`]): its bytes
    /// are the graph's `cudaGraphExec_t`, and a node keeping the argument keeps the graph.
    pub(crate) device_graph: Option<&'a DeviceGraph>,
    /// How the kernel uses the buffer this argument passes, when marked with [`In`], [`Out`]
    /// or [`InOut`]: the access and the byte range `(offset, len)` of the allocation (a
    /// region's own range, all of a buffer). `None`: unknown, which dependency inference
    /// treats as reading and writing the whole allocation.
    pub(crate) access: Option<(Access, usize, usize)>,
}

/// How a node uses memory, for dependency inference ([`Dag::infer_dependencies`]) and the
/// race check ([`Dag::races`]).
///
/// [`Dag::infer_dependencies`]: crate::Dag::infer_dependencies
/// [`Dag::races`]: crate::Dag::races
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only read.
    Read,
    /// Only written.
    Write,
    /// Read and written.
    ReadWrite,
}

impl Access {
    /// Whether the access reads.
    pub fn reads(self) -> bool {
        self != Access::Write
    }
    /// Whether the access writes.
    pub fn writes(self) -> bool {
        self != Access::Read
    }
}

/// Marks a kernel argument (a `&DeviceBuffer` or `&Region`) as only read by the kernel:
/// `args![In(&x), Out(&y), n]`. Dependency inference ([`Dag::infer_dependencies`]) then orders
/// the node after the last writer of those bytes and lets it run beside other readers. An
/// unmarked buffer argument counts as read and written, all of its allocation.
///
/// [`Dag::infer_dependencies`]: crate::Dag::infer_dependencies
#[derive(Debug, Clone, Copy)]
pub struct In<T>(pub T);

/// Marks a kernel argument as only written by the kernel (see [`In`]).
#[derive(Debug, Clone, Copy)]
pub struct Out<T>(pub T);

/// Marks a kernel argument as read and written by the kernel, in the bytes it passes (a
/// region's own range; an unmarked region counts as all of its allocation). See [`In`].
#[derive(Debug, Clone, Copy)]
pub struct InOut<T>(pub T);

macro_rules! marked_arg {
    ($($wrapper:ident => $access:expr),*) => {$(
        impl<'a, T: DeviceRepr> From<$wrapper<&'a DeviceBuffer<T>>> for KernelArg<'a> {
            fn from(b: $wrapper<&'a DeviceBuffer<T>>) -> Self {
                let mut a = KernelArg::buffer(b.0);
                a.access = Some(($access, 0, b.0.alloc.bytes));
                a
            }
        }
        impl<'a> From<$wrapper<&'a Region>> for KernelArg<'a> {
            fn from(r: $wrapper<&'a Region>) -> Self {
                let mut a = KernelArg::region(r.0);
                a.access = Some(($access, r.0.offset, r.0.len));
                a
            }
        }
    )*};
}

marked_arg!(In => Access::Read, Out => Access::Write, InOut => Access::ReadWrite);

impl std::fmt::Debug for KernelArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl<'a> KernelArg<'a> {
    /// An argument holding a copy of `value`'s bytes.
    pub fn value<T: DeviceRepr>(value: T) -> Self {
        // `Pod`: no padding, so every byte is initialised.
        let src = bytemuck::bytes_of(&value);
        let size = src.len();
        let bytes = if size <= INLINE {
            let mut words = [0u64; INLINE / 8];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..size].copy_from_slice(src);
            ArgBytes::Inline(words, size)
        } else {
            ArgBytes::Heap(src.into())
        };
        KernelArg {
            bytes,
            type_name: std::any::type_name::<T>(),
            buffer: None,
            conditional: None,
            graph_buffer: None,
            device_node: None,
            device_graph: None,
            access: None,
        }
    }

    /// An argument passing conditional handle `c` (a `cudaGraphConditionalHandle`, 8 bytes):
    /// only a kernel node of the graph that declared it (or of a conditional body inside that
    /// graph) can take it, and lowering passes the handle of the graph being built.
    pub fn conditional(c: &Conditional) -> Self {
        let mut a = KernelArg::value(c.placeholder());
        a.type_name = "Conditional";
        a.conditional = Some(*c);
        a
    }

    /// An argument passing the device handle of a device-updatable kernel node `n` (a
    /// `cudaGraphDeviceNode_t`, 8 bytes): only a kernel node of the DAG that declared it can
    /// take it, and lowering passes the handle CUDA gave the node in the graph being built.
    pub fn device_node(n: &DeviceNode) -> Self {
        let mut a = KernelArg::value(n.placeholder());
        a.type_name = "DeviceNode";
        a.device_node = Some(*n);
        a
    }

    /// An argument passing graph `g`, launched from the device by the kernel (its
    /// `cudaGraphExec_t`, 8 bytes): only a kernel node of a DAG can take it, and the DAG (and
    /// any executable graph made from it) keeps `g` alive.
    pub fn device_graph(g: &'a DeviceGraph) -> Self {
        let mut a = KernelArg::value(g.raw());
        a.type_name = "DeviceGraph";
        a.device_graph = Some(g);
        a
    }

    /// An argument passing the address of a graph-allocated buffer (a pointer, 8 bytes):
    /// only a kernel node of the DAG that allocates it, ordered between its allocation and
    /// its free, can take it; lowering passes the address CUDA gave the allocation.
    pub fn graph_buffer<T: DeviceRepr>(b: &GraphBuffer<T>) -> Self {
        let mut a = KernelArg::value(0u64);
        a.type_name = std::any::type_name::<GraphBuffer<T>>();
        a.graph_buffer = Some(b.key);
        a
    }

    /// An argument passing a buffer's device address (kept alive by whatever uses the
    /// argument).
    pub fn buffer<T: DeviceRepr>(buffer: &'a DeviceBuffer<T>) -> Self {
        let mut a = KernelArg::value(buffer.alloc.ptr);
        a.type_name = std::any::type_name::<DeviceBuffer<T>>();
        a.buffer = Some(&buffer.alloc);
        a
    }

    /// An argument passing the address of a region's first byte (kept alive like a buffer's).
    /// The region's bounds are the kernel's business; only device memory is accepted when the
    /// argument is checked.
    pub fn region(region: &'a Region) -> Self {
        let mut a = KernelArg::value(region.raw_addr());
        a.type_name = "Region";
        a.buffer = Some(&region.alloc);
        a
    }

    /// The argument's size in bytes.
    pub fn size(&self) -> usize {
        match &self.bytes {
            ArgBytes::Inline(_, n) => *n,
            ArgBytes::Heap(b) => b.len(),
        }
    }

    /// The argument's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.bytes {
            ArgBytes::Inline(w, n) => {
                // SAFETY: `w` is INLINE bytes long and `n <= INLINE`.
                unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), *n) }
            }
            ArgBytes::Heap(b) => b,
        }
    }

    /// Whether the bytes are held inline (8-byte aligned, no heap).
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self.bytes, ArgBytes::Inline(..))
    }

    pub(super) fn as_ptr(&self) -> *mut c_void {
        self.as_bytes().as_ptr() as *mut c_void
    }

    pub(crate) fn describe(&self) -> String {
        let short = self.type_name.rsplit("::").next().unwrap_or(self.type_name);
        format!("{short}, {} bytes", self.size())
    }

    /// Whether this argument passes a buffer.
    pub fn is_buffer(&self) -> bool {
        self.buffer.is_some()
    }

    /// Whether this argument passes a graph-allocated buffer ([`GraphBuffer`]).
    pub fn is_graph_buffer(&self) -> bool {
        self.graph_buffer.is_some()
    }

    /// How the argument is marked ([`In`], [`Out`], [`InOut`]): the access and the byte
    /// range `(offset, len)` of the buffer's allocation; `None` when unmarked.
    pub fn access(&self) -> Option<(Access, usize, usize)> {
        self.access
    }

    /// The conditional handle this argument passes, if it passes one.
    pub fn as_conditional(&self) -> Option<&Conditional> {
        self.conditional.as_ref()
    }
}

impl From<&Conditional> for KernelArg<'_> {
    fn from(c: &Conditional) -> Self {
        KernelArg::conditional(c)
    }
}

impl From<Conditional> for KernelArg<'_> {
    fn from(c: Conditional) -> Self {
        KernelArg::conditional(&c)
    }
}

impl<'a> From<&'a DeviceGraph> for KernelArg<'a> {
    fn from(g: &'a DeviceGraph) -> Self {
        KernelArg::device_graph(g)
    }
}

impl From<&DeviceNode> for KernelArg<'_> {
    fn from(n: &DeviceNode) -> Self {
        KernelArg::device_node(n)
    }
}

impl From<DeviceNode> for KernelArg<'_> {
    fn from(n: DeviceNode) -> Self {
        KernelArg::device_node(&n)
    }
}

impl<T: DeviceRepr> From<&GraphBuffer<T>> for KernelArg<'_> {
    fn from(b: &GraphBuffer<T>) -> Self {
        KernelArg::graph_buffer(b)
    }
}

impl<T: DeviceRepr> From<T> for KernelArg<'_> {
    fn from(v: T) -> Self {
        KernelArg::value(v)
    }
}

impl<'a, T: DeviceRepr> From<&'a DeviceBuffer<T>> for KernelArg<'a> {
    fn from(b: &'a DeviceBuffer<T>) -> Self {
        KernelArg::buffer(b)
    }
}

impl<'a> From<&'a Region> for KernelArg<'a> {
    fn from(r: &'a Region) -> Self {
        KernelArg::region(r)
    }
}

/// Builds an array of [`KernelArg`]s: `args![&buf, 2.0f32, n as u32]`.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$($crate::KernelArg::from($a)),*]
    };
}

/// Host memory can't be a kernel argument; this exists so the error is a clear compile-time
/// one (no `From<&HostBuffer>` for `KernelArg`).
#[allow(dead_code)] // reason: documents a deliberate absence
fn _no_host_buffer_args(_: &HostBuffer<u8>) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_borrow_their_buffers_without_counting_references() {
        let mut rec = crate::RecordingBackend::new(crate::DeviceLimits::hopper());
        let x = rec.device_buffer::<f32>(16);
        let count = || Arc::strong_count(&x.alloc);
        let before = count();
        let region = x.region(4..8);
        let held = count();
        let args = crate::args![&x, &region, 1u32];
        let copy = args.clone();
        assert_eq!(
            count(),
            held,
            "making and copying arguments takes no reference"
        );
        assert!(args[0].is_buffer() && args[1].is_buffer() && !args[2].is_buffer());
        assert_eq!(args[0].as_bytes(), &x.alloc.ptr.to_ne_bytes());
        assert_eq!(args[1].as_bytes(), &(x.alloc.ptr + 16).to_ne_bytes());
        drop((args, copy));
        drop(region);
        assert_eq!(count(), before, "nor does dropping them give one back");
    }

    #[test]
    fn big_values_go_to_the_heap_and_keep_their_bytes() {
        let v = [7u8; 100];
        let a = KernelArg::from(v);
        assert_eq!(a.size(), 100);
        assert!(a.as_bytes().iter().all(|&b| b == 7));
    }
}
