//! Fill nodes: 1D and 2D memsets of device memory (`cudaGraphNodeTypeMemset`).

use std::sync::Arc;

use super::{out_of_bounds, pitched_extent, Label, NodeOp, RunsOn};
use crate::dag::exec::Exec;
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, Node, NodeId, NodeName, Op};
use crate::error::Result;
use crate::graph_buffer::GraphBufferKey;
use crate::memory::{Allocation, MemorySpace, Region};
use crate::result::runtime as rt;
use crate::sys;

/// The value a memset writes: 1, 2 or 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemsetValue {
    /// One byte.
    U8(u8),
    /// Two bytes.
    U16(u16),
    /// Four bytes.
    U32(u32),
}

impl MemsetValue {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            MemsetValue::U8(_) => 1,
            MemsetValue::U16(_) => 2,
            MemsetValue::U32(_) => 4,
        }
    }
    pub(crate) fn bits(self) -> u32 {
        match self {
            MemsetValue::U8(v) => v as u32,
            MemsetValue::U16(v) => v as u32,
            MemsetValue::U32(v) => v,
        }
    }
}
impl From<u8> for MemsetValue {
    fn from(v: u8) -> Self {
        MemsetValue::U8(v)
    }
}
impl From<u16> for MemsetValue {
    fn from(v: u16) -> Self {
        MemsetValue::U16(v)
    }
}
impl From<u32> for MemsetValue {
    fn from(v: u32) -> Self {
        MemsetValue::U32(v)
    }
}
impl From<f32> for MemsetValue {
    fn from(v: f32) -> Self {
        MemsetValue::U32(v.to_bits())
    }
}

/// What a memset node fills.
#[derive(Clone, Debug)]
pub(crate) enum FillTarget {
    /// A region of a buffer.
    Region(Region),
    /// All of a graph-allocated buffer ([`Dag::add_graph_memset`]). `addr` is 0 in a DAG being
    /// built; lowering fills a copy of the node with the allocation's address, and an
    /// [`Exec`]'s DAG holds its graph's (so a value update passes it on).
    Graph { key: GraphBufferKey, addr: u64 },
}

impl FillTarget {
    /// The address CUDA gets.
    fn addr(&self) -> u64 {
        match self {
            FillTarget::Region(r) => r.raw_addr(),
            FillTarget::Graph { addr, .. } => *addr,
        }
    }
}

/// A memory fill of device memory, 1D (`height == 1`) or 2D.
#[derive(Clone, Debug)]
pub struct MemsetNode {
    pub(crate) dst: FillTarget,
    pub(crate) value: MemsetValue,
    /// Elements of `value`'s size per row.
    pub(crate) width: usize,
    pub(crate) height: usize,
    /// Bytes between rows.
    pub(crate) pitch: usize,
}

impl MemsetNode {
    /// The value written.
    pub fn value(&self) -> MemsetValue {
        self.value
    }
    /// Bytes written.
    pub fn bytes(&self) -> usize {
        self.width * self.value.size() * self.height
    }

    /// The generic node parameters of the fill.
    pub(crate) fn generic(&self) -> sys::cudaGraphNodeParams {
        let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeMemset);
        raw.__bindgen_anon_1.memset = sys::cudaMemsetParamsV2 {
            dst: self.dst.addr() as *mut std::ffi::c_void,
            pitch: self.pitch,
            value: self.value.bits(),
            elementSize: self.value.size() as u32,
            width: self.width,
            height: self.height,
        };
        raw
    }
}

impl NodeOp for MemsetNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        match &self.dst {
            FillTarget::Region(r) => on.check_reach(name, &"destination", &r.alloc),
            // Its span and device: the DAG's graph-memory validation.
            FillTarget::Graph { .. } => Ok(()),
        }
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        if let FillTarget::Region(r) = &self.dst {
            f(&r.alloc)
        }
    }
    fn label(&self) -> Label {
        let mut lines = vec![format!(
            "memset {} of {:#x} ({}-byte)",
            super::byte_count(self.bytes()),
            self.value.bits(),
            self.value.size()
        )];
        if let FillTarget::Graph { key, .. } = &self.dst {
            lines.push(format!("graph buffer #{}", key.index));
        }
        Label::new("parallelogram", "#fff3cd", lines)
    }
    fn params(&self) -> NodeParams<'_> {
        NodeParams::Generic(self.generic())
    }
}

/// A 2D memset for [`Dag::add_memset_2d`]; pitch and width in elements of the region's type.
#[derive(Clone, Debug)]
pub struct Memset2d {
    /// Destination; its start is the first row.
    pub dst: Region,
    /// Elements between row starts.
    pub pitch: usize,
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// The value.
    pub value: MemsetValue,
}

impl Dag {
    /// Adds a 1D fill of `dst` (device memory) with `value`, repeated.
    pub fn add_memset(
        &mut self,
        dst: impl Into<Region>,
        value: impl Into<MemsetValue>,
    ) -> Result<NodeId> {
        let (dst, value): (Region, MemsetValue) = (dst.into(), value.into());
        let name = format!("memset#{}", self.next_serial);
        if !dst.len.is_multiple_of(value.size()) {
            return Err(out_of_bounds(
                &name,
                format!(
                    "{} bytes is not a whole number of {}-byte values",
                    dst.len,
                    value.size()
                ),
            ));
        }
        let node = MemsetNode {
            width: dst.len / value.size(),
            height: 1,
            pitch: dst.len,
            dst: FillTarget::Region(dst),
            value,
        };
        check_memset(&name, &node)?;
        Ok(self.push(Op::Memset(node)))
    }

    /// Adds a 2D fill.
    pub fn add_memset_2d(&mut self, m: Memset2d) -> Result<NodeId> {
        let name = format!("memset#{}", self.next_serial);
        let e = m.dst.elem;
        let bytes = |n: usize, what: &str| {
            n.checked_mul(e).ok_or_else(|| {
                out_of_bounds(&name, format!("{what} of {n} {e}-byte elements overflows"))
            })
        };
        let row = bytes(m.width, "a row")?;
        if !row.is_multiple_of(m.value.size()) {
            return Err(out_of_bounds(
                &name,
                format!("a {row}-byte row is not a whole number of values"),
            ));
        }
        let node = MemsetNode {
            width: row / m.value.size(),
            height: m.height,
            pitch: bytes(m.pitch, "the pitch")?,
            dst: FillTarget::Region(m.dst),
            value: m.value,
        };
        check_memset(&name, &node)?;
        Ok(self.push(Op::Memset(node)))
    }

    /// Replaces a memset node's value (of the same size).
    pub fn set_memset_value(&mut self, id: NodeId, value: impl Into<MemsetValue>) -> Result<()> {
        let node = self.node_mut(id)?;
        let new = node.memset_with_value(value.into())?;
        node.op = Op::Memset(new);
        Ok(())
    }
}

impl Node {
    /// The memset node with `value` instead of its value (same size), checked.
    pub(crate) fn memset_with_value(&self, value: MemsetValue) -> Result<MemsetNode> {
        let Op::Memset(m) = &self.op else {
            return Err(self.wrong_kind("a memset node"));
        };
        if value.size() != m.value.size() {
            return Err(out_of_bounds(
                &self.name(),
                format!(
                    "the node writes {}-byte values; a {}-byte value cannot replace them",
                    m.value.size(),
                    value.size()
                ),
            ));
        }
        Ok(MemsetNode { value, ..m.clone() })
    }
}

impl Exec {
    /// Replaces the value memset node `id` writes (same size). When CUDA refuses, nothing
    /// changes.
    pub fn set_memset_value(&mut self, id: NodeId, value: impl Into<MemsetValue>) -> Result<()> {
        let new = self.dag.node(id)?.memset_with_value(value.into())?;
        let h = self.handle(id)?;
        let mut raw = new.generic();
        // SAFETY: `h` is this memset node; only the value changed.
        unsafe { rt::graph_exec_node_set_params(self.raw, h, &mut raw)? };
        self.dag.node_mut(id)?.op = Op::Memset(new);
        Ok(())
    }
}

fn check_memset(name: &(impl std::fmt::Display + ?Sized), m: &MemsetNode) -> Result<()> {
    let FillTarget::Region(dst) = &m.dst else {
        return Ok(()); // all of a graph buffer: checked by its builder
    };
    if dst.space() != MemorySpace::Device {
        return Err(out_of_bounds(
            name,
            "memset nodes write device memory, not host memory",
        ));
    }
    let row = m.width * m.value.size();
    if m.height > 1 && m.pitch < row {
        return Err(out_of_bounds(
            name,
            format!(
                "a row of {row} bytes is wider than the {}-byte pitch",
                m.pitch
            ),
        ));
    }
    let end = dst
        .offset
        .saturating_add(pitched_extent(m.pitch, row, m.height));
    if end > dst.alloc.bytes {
        return Err(out_of_bounds(
            name,
            format!(
                "writes bytes {}..{end} of a {}-byte buffer",
                dst.offset, dst.alloc.bytes
            ),
        ));
    }
    Ok(())
}
