//! [`GraphBuffer`]: device memory that a graph allocates and frees itself (graph memory
//! nodes, `cudaGraphNodeTypeMemAlloc` / `cudaGraphNodeTypeMemFree`), named by the DAG that
//! allocates it. It has no address outside a built graph and no host or stream operation:
//! only nodes of its DAG use it (the node kinds are in `dag/nodes/graph_memory.rs`).

use std::marker::PhantomData;

use crate::memory::DeviceRepr;

/// Which graph allocation a [`GraphBuffer`] is: the DAG that allocates it (its scope, unique
/// in the process; a copy of the DAG keeps it) and its number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GraphBufferKey {
    pub(crate) scope: u64,
    pub(crate) index: u32,
}

/// A buffer of `len` elements of `T` that a graph allocates when a launch reaches its
/// allocation node and frees when it reaches its free node ([`Dag::add_alloc`],
/// [`Dag::add_free`]): per-launch scratch memory, taken from CUDA's graph memory pool, which
/// keeps the physical memory between launches (reusing an `Exec` allocates nothing new).
///
/// It is a name, not memory: it has no address until the DAG is lowered (CUDA gives the
/// allocation's address when the allocation node is added to the graph, and lowering writes
/// it into the nodes that use the buffer), no host copies and no stream operations. Only
/// nodes of the DAG that allocated it use it, and only between its allocation and its free:
/// kernel arguments (`KernelArg::from(&buffer)`, or in [`args!`](crate::args)) and fills
/// ([`Dag::add_graph_memset`]); [`Dag::validate`] refuses any other use, naming the node.
///
/// [`Dag::add_alloc`]: crate::Dag::add_alloc
/// [`Dag::add_free`]: crate::Dag::add_free
/// [`Dag::add_graph_memset`]: crate::Dag::add_graph_memset
/// [`Dag::validate`]: crate::Dag::validate
pub struct GraphBuffer<T> {
    pub(crate) key: GraphBufferKey,
    pub(crate) len: usize,
    _elem: PhantomData<fn() -> T>,
}

impl<T> Clone for GraphBuffer<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for GraphBuffer<T> {}

impl<T> std::fmt::Debug for GraphBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GraphBuffer<{}>(#{}, {} elements)",
            std::any::type_name::<T>(),
            self.key.index,
            self.len
        )
    }
}

impl<T: DeviceRepr> GraphBuffer<T> {
    pub(crate) fn new(key: GraphBufferKey, len: usize) -> Self {
        GraphBuffer {
            key,
            len,
            _elem: PhantomData,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements (never: an allocation has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Its number among its DAG's graph allocations, in allocation order (DOT and recordings
    /// show it as `graph buffer #n`).
    pub fn index(&self) -> u32 {
        self.key.index
    }
}
