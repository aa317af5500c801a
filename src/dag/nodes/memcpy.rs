//! Copy nodes: 1D (`cudaGraphAddMemcpyNode1D`) and 2D pitched copies (`cudaGraphNodeTypeMemcpy`).
//!
//! The ends of a copy are typed: [`Dag::add_copy`] takes a [`Dst`] and a [`Src`] (made with
//! [`dst`] and [`src`]), so the order cannot be swapped by accident.

use std::ffi::c_void;
use std::sync::Arc;

use super::{out_of_bounds, pitched_extent, wrong_device, Label, NodeOp, RunsOn};
use crate::dag::exec::Exec;
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, Node, NodeId, NodeName, Op};
use crate::error::Result;
use crate::memory::{Allocation, MemorySpace, Region};
use crate::result::runtime as rt;
use crate::sys;

/// The destination of a copy: `dst(&buffer)`.
#[derive(Clone, Debug)]
pub struct Dst(pub Region);

/// The source of a copy: `src(&buffer)`.
#[derive(Clone, Debug)]
pub struct Src(pub Region);

/// Names a copy's destination (a buffer or a region of one).
pub fn dst(to: impl Into<Region>) -> Dst {
    Dst(to.into())
}

/// Names a copy's source (a buffer or a region of one).
pub fn src(from: impl Into<Region>) -> Src {
    Src(from.into())
}

/// Direction of a copy, from the memory spaces of its ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// Pinned host to device.
    HostToDevice,
    /// Device to pinned host.
    DeviceToHost,
    /// Device to device.
    DeviceToDevice,
    /// Pinned host to pinned host.
    HostToHost,
}

impl CopyKind {
    fn of(dst: MemorySpace, src: MemorySpace) -> CopyKind {
        match (src, dst) {
            (MemorySpace::PinnedHost, MemorySpace::Device) => CopyKind::HostToDevice,
            (MemorySpace::Device, MemorySpace::PinnedHost) => CopyKind::DeviceToHost,
            (MemorySpace::Device, MemorySpace::Device) => CopyKind::DeviceToDevice,
            (MemorySpace::PinnedHost, MemorySpace::PinnedHost) => CopyKind::HostToHost,
        }
    }
    fn as_str(self) -> &'static str {
        match self {
            CopyKind::HostToDevice => "H2D",
            CopyKind::DeviceToHost => "D2H",
            CopyKind::DeviceToDevice => "D2D",
            CopyKind::HostToHost => "H2H",
        }
    }
    pub(crate) fn raw(self) -> sys::cudaMemcpyKind {
        use sys::cudaMemcpyKind as K;
        match self {
            CopyKind::HostToDevice => K::cudaMemcpyHostToDevice,
            CopyKind::DeviceToHost => K::cudaMemcpyDeviceToHost,
            CopyKind::DeviceToDevice => K::cudaMemcpyDeviceToDevice,
            CopyKind::HostToHost => K::cudaMemcpyHostToHost,
        }
    }
    /// The kind of a `cudaMemcpyKind` the crate wrote (for the recording backend); `None`
    /// for kinds the crate does not use.
    pub(crate) fn from_raw(k: sys::cudaMemcpyKind) -> Option<CopyKind> {
        [
            CopyKind::HostToDevice,
            CopyKind::DeviceToHost,
            CopyKind::DeviceToDevice,
            CopyKind::HostToHost,
        ]
        .into_iter()
        .find(|c| c.raw() == k)
    }
}

/// A memory copy, 1D (`height == 1`) or 2D (pitched). Sizes are in bytes.
#[derive(Clone, Debug)]
pub struct MemcpyNode {
    pub(crate) dst: Region,
    pub(crate) src: Region,
    /// Bytes per row.
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) dst_pitch: usize,
    pub(crate) src_pitch: usize,
}

impl MemcpyNode {
    /// A 1D copy of all of `src` into `dst` (sizes checked by the caller).
    fn linear(dst: Region, src: Region) -> Self {
        MemcpyNode {
            width: src.len,
            height: 1,
            dst_pitch: dst.len,
            src_pitch: src.len,
            dst,
            src,
        }
    }

    /// Direction of the copy.
    pub fn kind(&self) -> CopyKind {
        CopyKind::of(self.dst.space(), self.src.space())
    }
    /// Bytes copied.
    pub fn bytes(&self) -> usize {
        self.width * self.height
    }
    /// Rows (1 for a 1D copy).
    pub fn height(&self) -> usize {
        self.height
    }
    /// Destination and source offsets in their buffers, in bytes.
    pub fn offsets(&self) -> (usize, usize) {
        (self.dst.offset, self.src.offset)
    }

    /// The copy as `cudaMemcpy3DParms` (depth 1).
    pub(crate) fn copy_3d(&self) -> sys::cudaMemcpy3DParms {
        let pitched = |addr: u64, pitch: usize| sys::cudaPitchedPtr {
            ptr: addr as *mut c_void,
            pitch,
            xsize: self.width,
            ysize: self.height,
        };
        sys::cudaMemcpy3DParms {
            srcPtr: pitched(self.src.raw_addr(), self.src_pitch),
            dstPtr: pitched(self.dst.raw_addr(), self.dst_pitch),
            extent: sys::cudaExtent {
                width: self.width,
                height: self.height,
                depth: 1,
            },
            kind: self.kind().raw(),
            ..Default::default()
        }
    }

    /// The node as lowering hands it to a backend.
    pub(crate) fn node_params(&self) -> NodeParams<'_> {
        if self.height == 1 {
            return NodeParams::Copy1d {
                dst: self.dst.raw_addr(),
                src: self.src.raw_addr(),
                bytes: self.width,
                kind: self.kind().raw(),
            };
        }
        let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeMemcpy);
        raw.__bindgen_anon_1.memcpy = sys::cudaMemcpyNodeParams {
            flags: 0,
            reserved: [0; 3],
            copyParams: self.copy_3d(),
        };
        NodeParams::Generic(raw)
    }
}

impl NodeOp for MemcpyNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        on.check_reach(name, &"destination", &self.dst.alloc)?;
        on.check_reach(name, &"source", &self.src.alloc)
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        f(&self.dst.alloc);
        f(&self.src.alloc);
    }
    fn label(&self) -> Label {
        let mut l = format!(
            "memcpy {:?} {}",
            self.kind(),
            super::byte_count(self.bytes())
        );
        if self.height > 1 {
            l.push_str(&format!(" ({} rows)", self.height));
        }
        Label::new("parallelogram", "#d1e7dd", vec![l])
    }
    fn params(&self) -> NodeParams<'_> {
        self.node_params()
    }
}

/// A 2D copy between pitched regions, for [`Dag::add_memcpy_2d`]. Pitches and width are in
/// elements of the regions' element type; each region starts at its first row.
#[derive(Clone, Debug)]
pub struct Copy2d {
    /// Destination (its start is the first row's first element).
    pub dst: Region,
    /// Elements between the starts of two destination rows.
    pub dst_pitch: usize,
    /// Source.
    pub src: Region,
    /// Elements between the starts of two source rows.
    pub src_pitch: usize,
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

impl Dag {
    /// Adds a 1D copy of all of `src` into all of `dst` (equal sizes). Either end may be a
    /// device buffer or a pinned host buffer (or a region of one):
    /// `dag.add_copy(dst(&device), src(&host))`. The ends are typed, so they cannot be
    /// swapped by accident.
    pub fn add_copy(&mut self, dst: Dst, src: Src) -> Result<NodeId> {
        let node = MemcpyNode::linear(dst.0, src.0);
        check_memcpy(&format!("memcpy#{}", self.next_serial), &node)?;
        Ok(self.push(Op::Memcpy(Box::new(node))))
    }

    /// Adds a 1D copy of all of `src` into all of `dst`, the ends given by position
    /// (destination first, as in `memcpy`). Prefer [`Dag::add_copy`], whose typed ends
    /// cannot be swapped.
    pub fn add_memcpy(&mut self, dst: impl Into<Region>, src: impl Into<Region>) -> Result<NodeId> {
        self.add_copy(Dst(dst.into()), Src(src.into()))
    }

    /// Adds a 2D (pitched) copy.
    pub fn add_memcpy_2d(&mut self, copy: Copy2d) -> Result<NodeId> {
        let name = format!("memcpy#{}", self.next_serial);
        if copy.dst.elem != copy.src.elem {
            return Err(out_of_bounds(
                &name,
                "source and destination element sizes differ",
            ));
        }
        let e = copy.dst.elem;
        let bytes = |n: usize, what: &str| {
            n.checked_mul(e).ok_or_else(|| {
                out_of_bounds(&name, format!("{what} of {n} {e}-byte elements overflows"))
            })
        };
        let node = MemcpyNode {
            width: bytes(copy.width, "a row")?,
            height: copy.height,
            dst_pitch: bytes(copy.dst_pitch, "the destination pitch")?,
            src_pitch: bytes(copy.src_pitch, "the source pitch")?,
            dst: copy.dst,
            src: copy.src,
        };
        check_memcpy(&name, &node)?;
        Ok(self.push(Op::Memcpy(Box::new(node))))
    }

    /// Replaces a 1D copy node's ends (same direction, same size rules as when adding).
    pub fn set_copy(&mut self, id: NodeId, dst: Dst, src: Src) -> Result<()> {
        let node = self.node_mut(id)?;
        let new = node.memcpy_with_ends(dst.0, src.0)?;
        node.op = Op::Memcpy(Box::new(new));
        Ok(())
    }

    /// [`Dag::set_copy`] with the ends given by position (destination first). Prefer
    /// [`Dag::set_copy`], whose typed ends cannot be swapped.
    pub fn set_memcpy(
        &mut self,
        id: NodeId,
        dst: impl Into<Region>,
        src: impl Into<Region>,
    ) -> Result<()> {
        self.set_copy(id, Dst(dst.into()), Src(src.into()))
    }
}

impl Node {
    /// The 1D memcpy node with new ends (same direction), checked like when added.
    pub(crate) fn memcpy_with_ends(&self, dst: Region, src: Region) -> Result<MemcpyNode> {
        let Op::Memcpy(m) = &self.op else {
            return Err(self.wrong_kind("a memcpy node"));
        };
        let name = &self.name();
        if m.height != 1 {
            return Err(out_of_bounds(
                name,
                "set_memcpy replaces 1D copies; this one is 2D",
            ));
        }
        let new = MemcpyNode::linear(dst, src);
        check_memcpy(name, &new)?;
        if new.kind() != m.kind() {
            return Err(out_of_bounds(
                name,
                format!(
                    "the copy is {} and cannot become {}",
                    m.kind().as_str(),
                    new.kind().as_str()
                ),
            ));
        }
        Ok(new)
    }
}

impl Exec {
    /// Replaces the ends of 1D copy node `id` (same direction; checked like when added; each
    /// new end on the same device as the end it replaces, whose access was validated). When
    /// CUDA refuses, nothing changes.
    pub fn set_copy(&mut self, id: NodeId, dst: Dst, src: Src) -> Result<()> {
        let (dst, src) = (dst.0, src.0);
        let node = self.dag.node(id)?;
        // An update is not validated again: each new end must be on the device of the end it
        // replaces (validated, its peer access enabled at lowering).
        if let Op::Memcpy(m) = &node.op {
            for (new, old, what) in [(&dst, &m.dst, "destination"), (&src, &m.src, "source")] {
                let (new, old) = (new.alloc.owner.key(), old.alloc.owner.key());
                if new != old {
                    return Err(wrong_device(
                        &node.name(),
                        format!(
                            "the new {what} buffer belongs to {new}, but the one it replaces to \
                             {old}; update the DAG and the Exec with Exec::update instead"
                        ),
                    ));
                }
            }
        }
        let new = node.memcpy_with_ends(dst, src)?;
        let h = self.handle(id)?;
        // Kept on the 1D call: the node was added with `cudaGraphAddMemcpyNode1D` (see
        // `NodeParams::Copy1d`).
        // SAFETY: `h` is this memcpy node; the regions were bounds-checked and are held by the
        // DAG from now on (committed below), and their host access waits for the launches.
        unsafe {
            rt::graph_exec_memcpy_node_set_params_1d(
                self.raw,
                h,
                new.dst.raw_addr() as *mut _,
                new.src.raw_addr() as *const _,
                new.width,
                new.kind().raw(),
            )?
        };
        self.hold(&new.dst.alloc);
        self.hold(&new.src.alloc);
        let node = self.dag.node_mut(id)?;
        let Op::Memcpy(m) = &mut node.op else {
            unreachable!("checked above")
        };
        let old = std::mem::replace(&mut **m, new);
        self.release(old.dst.alloc);
        self.release(old.src.alloc);
        Ok(())
    }

    /// [`Exec::set_copy`] with the ends given by position (destination first). Prefer
    /// [`Exec::set_copy`], whose typed ends cannot be swapped.
    pub fn set_memcpy(
        &mut self,
        id: NodeId,
        dst: impl Into<Region>,
        src: impl Into<Region>,
    ) -> Result<()> {
        self.set_copy(id, Dst(dst.into()), Src(src.into()))
    }
}

/// Bounds and sizes of a copy.
fn check_memcpy(name: &(impl std::fmt::Display + ?Sized), m: &MemcpyNode) -> Result<()> {
    if m.height <= 1 {
        if m.dst.len != m.src.len {
            return Err(out_of_bounds(
                name,
                format!(
                    "copies {} bytes into a {}-byte destination (sizes must match)",
                    m.src.len, m.dst.len
                ),
            ));
        }
    } else if m.dst_pitch < m.width || m.src_pitch < m.width {
        return Err(out_of_bounds(
            name,
            format!(
                "a row of {} bytes is wider than the pitch (dst {}, src {})",
                m.width, m.dst_pitch, m.src_pitch
            ),
        ));
    }
    // Bounds first: within them, the overlap walk visits at most a row per pitch of the buffer
    // (a huge height, out of bounds, would make it walk for ever).
    for (r, pitch, what) in [
        (&m.dst, m.dst_pitch, "destination"),
        (&m.src, m.src_pitch, "source"),
    ] {
        let extent = pitched_extent(pitch, m.width, m.height);
        let end = r.offset.saturating_add(extent);
        if end > r.alloc.bytes {
            return Err(out_of_bounds(
                name,
                format!(
                    "the {what} range, bytes {}..{end}, is outside its {}-byte buffer",
                    r.offset, r.alloc.bytes
                ),
            ));
        }
    }
    if rows_overlap(m) {
        return Err(out_of_bounds(
            name,
            format!(
                "the source (bytes {}..) and the destination (bytes {}..) overlap in one buffer; \
                 CUDA copies need distinct memory",
                m.src.offset, m.dst.offset
            ),
        ));
    }
    Ok(())
}

/// Whether a copy's source and destination rows share a byte (only possible in one buffer).
fn rows_overlap(m: &MemcpyNode) -> bool {
    if !Arc::ptr_eq(&m.dst.alloc, &m.src.alloc) || m.width == 0 || m.height == 0 {
        return false;
    }
    let rows = |offset: usize, pitch: usize| {
        (0..m.height).map(move |r| {
            let start = offset.saturating_add(pitch.saturating_mul(r));
            (start, start.saturating_add(m.width))
        })
    };
    let (d0, s0) = (m.dst.offset, m.src.offset);
    let (d_end, s_end) = (
        d0.saturating_add(pitched_extent(m.dst_pitch, m.width, m.height)),
        s0.saturating_add(pitched_extent(m.src_pitch, m.width, m.height)),
    );
    if d0 >= s_end || s0 >= d_end {
        return false;
    }
    // Both row lists are sorted: walk them together.
    let (mut d, mut s) = (
        rows(d0, m.dst_pitch).peekable(),
        rows(s0, m.src_pitch).peekable(),
    );
    while let (Some(&(da, db)), Some(&(sa, sb))) = (d.peek(), s.peek()) {
        if da < sb && sa < db {
            return true;
        }
        if db <= sb {
            d.next();
        } else {
            s.next();
        }
    }
    false
}
