//! The recording backend: lowering's calls kept as data (and put into words on request), with
//! placeholder buffers and kernels, so a DAG is built, validated and lowered where there is no
//! GPU.

use std::cell::OnceCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::dag::nodes::backend::{sealed, EdgeData, NodeParams};
use crate::dag::nodes::fft::reuse::{FftKit, FftMaker, FftStates};
use crate::dag::nodes::{FftNode, KernelNode};
use crate::dag::NodeName;
use crate::device::{DeviceKey, DeviceLimits, RECORDING_INDEX_BITS};
use crate::error::Result;
use crate::fft::{FftForm, FftPlan, WorkShare};
use crate::kernel::{Dim3, Kernel};
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, HostBuffer, MemorySpace};
use crate::sys;

mod fft;

use fft::{RecordedFft, RecordedFftMaker};

/// One call a [`RecordingBackend`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The CUDA function the CUDA backend would call, e.g. `cudaGraphAddNode`; for a node
    /// disabled in the DAG, `cudaGraphNodeSetEnabled` (made on the executable graph right
    /// after instantiation; these calls come after every node's, with params `enabled=0`).
    pub function: &'static str,
    /// The node type it adds (`kernel`, `memcpy`, `memset`, `host`, `empty`, `graph`,
    /// `conditional`, `mem_alloc`, `mem_free`, or `captured` for work captured from a
    /// stream), or disables; `handle`
    /// for a conditional handle (`cudaGraphConditionalHandleCreate`, named `handle#<index>`).
    pub kind: &'static str,
    /// The node's name.
    pub name: String,
    /// Indexes (into the recording) of the calls this one depends on (for
    /// `cudaGraphNodeSetEnabled`: the call that added the node).
    pub deps: Vec<usize>,
    /// The parameters, in words (deterministic).
    pub params: String,
}

static NEXT_RECORDING: AtomicU64 = AtomicU64::new(1);

/// A backend that records the calls lowering makes, instead of making them. It also hands out
/// placeholder buffers and kernels (with addresses and parameter layouts but no memory or
/// code), so a DAG can be built, validated and lowered where there is no GPU.
///
/// Recording is cheap: a kernel node's call is kept as data (its kernel, launch shape and
/// argument bytes, in arenas shared by all calls) and put into words only when
/// [`RecordingBackend::calls`] or [`RecordingBackend::transcript`] asks for them.
///
/// # Several devices
///
/// [`RecordingBackend::with_devices`] stands in for a machine of several GPUs: device 0 is
/// the home device (the one [`RecordingBackend::new`] has, what unplaced nodes run on), and
/// each device `i` has its own key ([`RecordingBackend::device_key`], for
/// [`Dag::place_on`](crate::Dag::place_on)), buffers ([`RecordingBackend::device_buffer_on`]) and kernels
/// ([`RecordingBackend::kernel_on`]); all share the backend's limits. Every device can access
/// every other by peer unless [`RecordingBackend::set_peer_access`] says otherwise. A call
/// for a node placed on device `i > 0` ends its parameters with ` device=i`; the peer access
/// lowering enabled is listed by [`RecordingBackend::peer_access_enabled`].
///
/// ```
/// use cudagraph::{dst, src, Dag, DeviceLimits, RecordingBackend};
/// # fn main() -> cudagraph::Result<()> {
/// let mut rec = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
/// let a = rec.device_buffer_on::<f32>(0, 256);
/// let b = rec.device_buffer_on::<f32>(1, 256);
/// let mut dag = Dag::new();
/// let fill = dag.add_memset(&b, 0u32)?;
/// dag.place_on(fill, rec.device_key(1))?;
/// let copy = dag.add_copy(dst(&a), src(&b))?; // runs on device 0, reads device 1's memory
/// dag.add_dependency(fill, copy)?;
/// dag.lower(&mut rec)?;
/// assert!(rec.calls()[0].params.ends_with(" device=1"));
/// assert_eq!(rec.peer_access_enabled(), &[(0, 1)]);
/// # Ok(()) }
/// ```
pub struct RecordingBackend {
    id: u64,
    limits: DeviceLimits,
    /// How many devices: device `i`'s key is `DeviceKey::Recording(id + i)`.
    count: usize,
    /// `peer[from * n + to]`: whether device `from` can access memory of device `to`.
    peer: Vec<bool>,
    /// Peer access lowering enabled, as device indexes, in order.
    peer_enabled: Vec<(usize, usize)>,
    /// The device (index) the next recorded nodes run on.
    current: usize,
    next_addr: u64,
    /// The value the next conditional handle gets (from `0xc0de_0000_0000`).
    next_conditional: u64,
    /// The address the next graph allocation gets (from `0x6a00_0000_0000`, 256-byte
    /// aligned, like the pool's).
    next_graph_alloc: u64,
    /// The handle the next device-updatable node gets (from `0xde0_0000_0000`).
    next_device_node: u64,
    /// The FFT nodes' stand-in states (numbered handles), work areas and capture stream, kept
    /// and reused as the CUDA backend's are (`nodes/fft/reuse.rs`).
    fft: FftStates<RecordedFft>,
    /// Makes (numbers and counts) what `fft` holds.
    fft_made: RecordedFftMaker,
    /// The work-area share of each FFT node about to be lowered, by the node's uid (given by
    /// `prepare_ffts`, taken when the node is added).
    fft_shares: std::collections::HashMap<u64, WorkShare>,
    fft_param_buffers: Vec<Arc<Allocation>>,
    /// The calls received, in order, as data.
    entries: Vec<Entry>,
    /// Arenas the entries point into: node names (UTF-8), dependency lists, kernel argument
    /// bytes.
    names: Vec<u8>,
    deps: Vec<usize>,
    arg_bytes: Vec<u8>,
    /// The kernels of kernel entries (one per run of entries with the same kernel: no
    /// reference-count traffic per node).
    kernels: Vec<Kernel>,
    /// `entries` in words, made on first request after a change.
    words: OnceCell<Vec<RecordedCall>>,
}

/// One recorded call, as data.
struct Entry {
    function: &'static str,
    kind: &'static str,
    name: Range<usize>,
    deps: Range<usize>,
    params: Params,
    /// The device (index) the node runs on.
    device: usize,
}

/// A recorded call's parameters.
enum Params {
    /// A kernel node: its words are made from these when asked for.
    Kernel {
        /// Index into [`RecordingBackend::kernels`].
        kernel: usize,
        grid: Dim3,
        block: Dim3,
        smem: u32,
        /// The packed argument values, parameter after parameter (sizes from `kernel`).
        args: Range<usize>,
        /// The launch attributes in words (` priority=-2 cluster=(2,1,1)` …), if any.
        attrs: Option<String>,
        /// Words put after the parameters (edge data), usually empty.
        suffix: String,
    },
    /// Parameters already in words (every other kind: rare, or with nothing to say).
    Words(String),
}

impl RecordingBackend {
    /// A recording backend validating against `limits`.
    pub fn new(limits: DeviceLimits) -> Self {
        Self::with_devices(limits, 1)
    }

    /// A recording backend standing in for `count` devices with these limits (see
    /// [Several devices](RecordingBackend#several-devices)); device 0 is the home device.
    ///
    /// # Panics
    /// If `count` is 0.
    pub fn with_devices(limits: DeviceLimits, count: usize) -> Self {
        assert!(
            (1..=1 << RECORDING_INDEX_BITS).contains(&count),
            "a recording backend has 1 to 65536 devices"
        );
        RecordingBackend {
            id: NEXT_RECORDING.fetch_add(1, Ordering::Relaxed) << RECORDING_INDEX_BITS,
            limits,
            count,
            peer: vec![true; count * count],
            peer_enabled: Vec::new(),
            current: 0,
            next_addr: 0x7000_0000_0000,
            next_conditional: 0xc0de_0000_0000,
            next_graph_alloc: 0x6a00_0000_0000,
            next_device_node: 0xde0_0000_0000,
            fft: FftStates::default(),
            fft_made: RecordedFftMaker::default(),
            fft_shares: std::collections::HashMap::new(),
            fft_param_buffers: Vec::new(),
            entries: Vec::new(),
            names: Vec::new(),
            deps: Vec::new(),
            arg_bytes: Vec::new(),
            kernels: Vec::new(),
            words: OnceCell::new(),
        }
    }

    /// The calls received, in order.
    pub fn calls(&self) -> &[RecordedCall] {
        self.words
            .get_or_init(|| (0..self.entries.len()).map(|i| self.call(i)).collect())
    }

    /// How many calls were received (without putting them into words).
    pub fn call_count(&self) -> usize {
        self.entries.len()
    }

    /// How many devices the backend stands in for.
    pub fn device_count(&self) -> usize {
        self.count
    }

    /// The key of device `index` (for [`Dag::place_on`](crate::Dag::place_on)); device 0's is the backend's.
    ///
    /// # Panics
    /// If there is no device `index`.
    pub fn device_key(&self, index: usize) -> DeviceKey {
        assert!(index < self.count, "no recording device {index}");
        DeviceKey::Recording(self.id + index as u64)
    }

    /// Says whether work on device `from` can access memory of device `to` (by default every
    /// device can access every other, as on a machine whose GPUs are all linked).
    ///
    /// # Panics
    /// If either device does not exist.
    pub fn set_peer_access(&mut self, from: usize, to: usize, can: bool) {
        let n = self.count;
        assert!(from < n && to < n, "no such recording device");
        self.peer[from * n + to] = can;
    }

    /// The peer access lowering enabled, as `(from, to)` device indexes, in order (once per
    /// pair and lowering).
    pub fn peer_access_enabled(&self) -> &[(usize, usize)] {
        &self.peer_enabled
    }

    /// The index of the device with this key, if it is one of the backend's.
    fn index_of(&self, key: DeviceKey) -> Option<usize> {
        match key {
            DeviceKey::Recording(id) => id
                .checked_sub(self.id)
                .map(|i| i as usize)
                .filter(|&i| i < self.count),
            DeviceKey::Cuda(_) => None,
        }
    }

    /// The index of a device validation accepted.
    fn index_known(&self, key: DeviceKey) -> usize {
        self.index_of(key)
            .expect("validation checked that nodes run on the backend's devices")
    }

    /// Forgets the calls received so far, the peer access enabled and the FFT nodes' states
    /// (placeholders handed out stay valid).
    pub fn clear(&mut self) {
        self.fft = FftStates::default();
        self.peer_enabled.clear();
        self.entries.clear();
        self.names.clear();
        self.deps.clear();
        self.arg_bytes.clear();
        self.kernels.clear();
        self.words = OnceCell::new();
    }

    /// Entry `i` in words.
    fn call(&self, i: usize) -> RecordedCall {
        use std::fmt::Write;
        let e = &self.entries[i];
        let params = match &e.params {
            Params::Words(w) => w.clone(),
            Params::Kernel {
                kernel,
                grid,
                block,
                smem,
                args,
                attrs,
                suffix,
            } => {
                let kernel = &self.kernels[*kernel];
                let bytes = &self.arg_bytes[args.clone()];
                let mut s = String::with_capacity(96 + 2 * bytes.len());
                let _ = write!(
                    s,
                    "kernel={} grid={grid} block={block} smem={smem} args=[",
                    kernel.name()
                );
                let mut at = 0;
                for (j, p) in kernel.params().iter().enumerate() {
                    if j > 0 {
                        s.push(',');
                    }
                    s.push_str(&hex(&bytes[at..at + p.size]));
                    at += p.size;
                }
                s.push(']');
                if let Some(a) = attrs {
                    s.push_str(a);
                }
                s.push_str(suffix);
                s
            }
        };
        let params = if e.device == 0 {
            params
        } else {
            format!("{params} device={}", e.device)
        };
        RecordedCall {
            function: e.function,
            kind: e.kind,
            name: String::from_utf8_lossy(&self.names[e.name.clone()]).into_owned(),
            deps: self.deps[e.deps.clone()].to_vec(),
            params,
        }
    }

    fn placeholder(&mut self, bytes: usize, space: MemorySpace) -> Arc<Allocation> {
        self.placeholder_on(0, bytes, space)
    }

    fn placeholder_on(
        &mut self,
        device: usize,
        bytes: usize,
        space: MemorySpace,
    ) -> Arc<Allocation> {
        let DeviceKey::Recording(owner) = self.device_key(device) else {
            unreachable!()
        };
        let ptr = self.next_addr;
        // Keep placeholder ranges apart and 256-byte aligned, like cudaMalloc's (one address
        // space for all devices, like CUDA's unified addressing).
        self.next_addr += (bytes as u64).div_ceil(256).max(1) * 256;
        Arc::new(Allocation::placeholder(ptr, bytes, space, owner))
    }

    /// A placeholder device buffer of `len` elements (no memory behind it) on the home device.
    pub fn device_buffer<T: DeviceRepr>(&mut self, len: usize) -> DeviceBuffer<T> {
        self.device_buffer_on(0, len)
    }

    /// A placeholder device buffer of `len` elements on device `index`.
    ///
    /// # Panics
    /// If there is no device `index`.
    pub fn device_buffer_on<T: DeviceRepr>(&mut self, index: usize, len: usize) -> DeviceBuffer<T> {
        let a = self.placeholder_on(index, len * std::mem::size_of::<T>(), MemorySpace::Device);
        DeviceBuffer::from_alloc(a, len)
    }

    /// A placeholder pinned host buffer of `len` elements (of the home device; pinned memory
    /// may be used from every device).
    pub fn host_buffer<T: DeviceRepr>(&mut self, len: usize) -> HostBuffer<T> {
        let a = self.placeholder(len * std::mem::size_of::<T>(), MemorySpace::PinnedHost);
        HostBuffer::from_alloc(a, len)
    }

    /// A kernel of the home device with parameters of these sizes (laid out with natural
    /// alignment) and no code.
    pub fn kernel(&self, name: &str, param_sizes: &[usize]) -> Kernel {
        self.kernel_on(0, name, param_sizes)
    }

    /// [`RecordingBackend::kernel`] of device `index` (only nodes on that device may launch
    /// it).
    ///
    /// # Panics
    /// If there is no device `index`.
    pub fn kernel_on(&self, index: usize, name: &str, param_sizes: &[usize]) -> Kernel {
        let DeviceKey::Recording(owner) = self.device_key(index) else {
            unreachable!()
        };
        Kernel::recording(name, param_sizes, owner)
    }

    /// A placeholder event of the home device (a made-up handle, never passed to CUDA: for
    /// event record and wait nodes).
    pub fn event(&mut self) -> crate::Event {
        self.event_on(0)
    }

    /// [`RecordingBackend::event`] of device `index`.
    ///
    /// # Panics
    /// If there is no device `index`.
    pub fn event_on(&mut self, index: usize) -> crate::Event {
        let DeviceKey::Recording(owner) = self.device_key(index) else {
            unreachable!()
        };
        // Made-up handles from the placeholder address range, so each is distinct.
        let raw = self.next_addr as usize;
        self.next_addr += 256;
        crate::Event::placeholder(owner, raw)
    }

    /// A placeholder cuBLAS handle of the home device (no library behind it: for GEMM nodes,
    /// which then lower as captured nodes whose recorded work names the product; their
    /// workspaces get made-up addresses from `0xb1a5_0000_0000` on).
    pub fn blas(&mut self) -> crate::Blas {
        let DeviceKey::Recording(owner) = self.device_key(0) else {
            unreachable!()
        };
        crate::Blas::placeholder(owner)
    }

    /// The calls as text, one per line: `index function name deps params`.
    pub fn transcript(&self) -> String {
        let mut s = String::new();
        for (i, c) in self.calls().iter().enumerate() {
            s.push_str(&format!(
                "{i} {} {} `{}` deps={:?} {}\n",
                c.function, c.kind, c.name, c.deps, c.params
            ));
        }
        s
    }

    fn record(
        &mut self,
        function: &'static str,
        kind: &'static str,
        name: &NodeName<'_>,
        deps: &[usize],
        params: Params,
    ) -> usize {
        let n = self.names.len();
        name.write_to(&mut self.names);
        let d = self.deps.len();
        self.deps.extend_from_slice(deps);
        self.entries.push(Entry {
            function,
            kind,
            name: n..self.names.len(),
            deps: d..self.deps.len(),
            params,
            device: self.current,
        });
        self.words.take();
        self.entries.len() - 1
    }

    /// Records a kernel node's call as data.
    fn record_kernel(
        &mut self,
        function: &'static str,
        name: &NodeName<'_>,
        deps: &[usize],
        raw: &sys::cudaKernelNodeParams,
        k: &KernelNode,
        suffix: String,
    ) -> usize {
        let a = self.arg_bytes.len();
        for i in 0..k.arg_count() {
            self.arg_bytes.extend_from_slice(k.arg_bytes(i));
        }
        let dim = |d: sys::dim3| Dim3 {
            x: d.x,
            y: d.y,
            z: d.z,
        };
        if !self
            .kernels
            .last()
            .is_some_and(|last| Arc::ptr_eq(&last.inner, &k.kernel().inner))
        {
            self.kernels.push(k.kernel().clone());
        }
        let params = Params::Kernel {
            kernel: self.kernels.len() - 1,
            grid: dim(raw.gridDim),
            block: dim(raw.blockDim),
            smem: raw.sharedMemBytes,
            args: a..self.arg_bytes.len(),
            attrs: k.attributes().map(|a| a.recording_words()),
            suffix,
        };
        self.record(function, "kernel", name, deps, params)
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The recording's word for a copy direction the crate wrote.
fn copy_kind(k: sys::cudaMemcpyKind) -> String {
    crate::dag::nodes::memcpy::CopyKind::from_raw(k)
        .map_or_else(|| format!("{k:?}"), |c| format!("{c:?}"))
}

/// The recording's words for generic parameters other than a kernel's: the node type and the
/// member it names.
fn describe_generic(raw: &sys::cudaGraphNodeParams) -> (&'static str, String) {
    use sys::cudaGraphNodeType as T;
    let u = &raw.__bindgen_anon_1;
    match raw.type_ {
        T::cudaGraphNodeTypeMemcpy => {
            // SAFETY: as above.
            let c = unsafe { &u.memcpy.copyParams };
            let s = format!(
                "dst={:#x} dst_pitch={} src={:#x} src_pitch={} width={} height={} depth={} kind={}",
                c.dstPtr.ptr as u64,
                c.dstPtr.pitch,
                c.srcPtr.ptr as u64,
                c.srcPtr.pitch,
                c.extent.width,
                c.extent.height,
                c.extent.depth,
                copy_kind(c.kind)
            );
            ("memcpy", s)
        }
        T::cudaGraphNodeTypeMemset => {
            // SAFETY: as above.
            let m = unsafe { &u.memset };
            let s = format!(
                "dst={:#x} value={:#x} element_size={} width={} height={} pitch={}",
                m.dst as u64, m.value, m.elementSize, m.width, m.height, m.pitch
            );
            ("memset", s)
        }
        T::cudaGraphNodeTypeHost => ("host", String::new()),
        T::cudaGraphNodeTypeEventRecord => {
            // SAFETY: the node type names `eventRecord` as the union member in use (the crate
            // wrote it so); it is a plain handle.
            let e = unsafe { u.eventRecord.event };
            ("event_record", format!("event={:#x}", e as usize))
        }
        T::cudaGraphNodeTypeWaitEvent => {
            // SAFETY: the node type names `eventWait` as the union member in use (the crate
            // wrote it so); it is a plain handle.
            let e = unsafe { u.eventWait.event };
            ("event_wait", format!("event={:#x}", e as usize))
        }
        T::cudaGraphNodeTypeEmpty => ("empty", String::new()),
        T::cudaGraphNodeTypeMemFree => {
            // SAFETY: the node type names `free` as the union member in use (the crate wrote
            // it so); it is a plain address.
            let d = unsafe { u.free.dptr };
            ("mem_free", format!("dptr={:#x}", d as u64))
        }
        other => ("other", format!("{other:?}")),
    }
}

impl sealed::Devices for RecordingBackend {
    fn has_device(&self, key: DeviceKey) -> bool {
        self.index_of(key).is_some()
    }
    fn can_access_peer(&self, from: DeviceKey, to: DeviceKey) -> Result<bool> {
        Ok(match (self.index_of(from), self.index_of(to)) {
            (Some(f), Some(t)) => f == t || self.peer[f * self.count + t],
            _ => false,
        })
    }
}

impl sealed::Lower for RecordingBackend {
    type Node = usize;
    fn enable_peer_access(&mut self, from: DeviceKey, to: DeviceKey) -> Result<()> {
        let pair = (self.index_known(from), self.index_known(to));
        self.peer_enabled.push(pair);
        Ok(())
    }
    fn use_device(&mut self, key: DeviceKey) -> Result<()> {
        self.current = self.index_known(key);
        Ok(())
    }
    fn prepare_ffts(&mut self, dag: &crate::dag::Dag, shares: &[Option<WorkShare>]) -> Result<()> {
        // `shares` is by node index.
        for (i, share) in shares.iter().enumerate() {
            let Some(share) = share else { continue };
            let node = dag.graph.node_weight(petgraph::graph::NodeIndex::new(i));
            if let Some(crate::dag::Node {
                op: crate::dag::Op::Fft(f),
                ..
            }) = node
            {
                self.fft_shares.insert(f.uid, share.clone());
            }
        }
        self.fft.prepare(&mut self.fft_made, dag, shares)
    }
    fn disable(&mut self, name: &NodeName<'_>, node: usize) -> Result<()> {
        // The call instantiation makes on the executable graph, naming the node's call.
        let kind = self.entries[node].kind;
        let p = Params::Words("enabled=0".into());
        self.record("cudaGraphNodeSetEnabled", kind, name, &[node], p);
        Ok(())
    }
    fn set_kernel_params(
        &mut self,
        name: &NodeName<'_>,
        node: usize,
        kernel: &KernelNode,
    ) -> Result<()> {
        let raw = kernel.cuda_params();
        self.record_kernel(
            "cudaGraphKernelNodeSetParams",
            name,
            &[node],
            &raw,
            kernel,
            String::new(),
        );
        Ok(())
    }
    fn key(&self) -> DeviceKey {
        DeviceKey::Recording(self.id)
    }
    fn conditional_handle(&mut self, index: u32, default: u32) -> Result<u64> {
        let h = self.next_conditional;
        self.next_conditional += 1;
        let name = NodeName {
            given: None,
            kind: "handle",
            serial: u64::from(index),
        };
        let p = Params::Words(format!(
            "default={default} flags=assign_default handle={h:#x}"
        ));
        self.record("cudaGraphConditionalHandleCreate", "handle", &name, &[], p);
        Ok(h)
    }
    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }
    #[allow(private_interfaces)] // reason: the trait is sealed (see `sealed::Lower::add_node`)
    fn add_node(
        &mut self,
        name: &NodeName<'_>,
        deps: &[usize],
        edges: &[EdgeData],
        params: NodeParams<'_>,
    ) -> Result<usize> {
        let mut edge_words = String::new();
        for e in edges {
            edge_words.push_str(&format!(
                " edge(from_port={} to_port={} type={})",
                e.from_port, e.to_port, e.type_
            ));
        }
        match params {
            NodeParams::Kernel(k) => {
                // As the CUDA backend: the kernel-specific call unless there is edge data.
                let function = if edges.is_empty() {
                    "cudaGraphAddKernelNode"
                } else {
                    "cudaGraphAddNode"
                };
                Ok(self.record_kernel(function, name, deps, &k.cuda_params(), k, edge_words))
            }
            NodeParams::DeviceUpdatableKernel {
                node,
                index,
                dev_node,
            } => {
                let function = if edges.is_empty() {
                    "cudaGraphAddKernelNode"
                } else {
                    "cudaGraphAddNode"
                };
                let h = self.next_device_node;
                self.next_device_node += 0x100;
                dev_node.set(h);
                // The attribute's call, as the CUDA backend makes it after adding the node.
                let suffix = format!("{edge_words} device_updatable=#{index} dev_node={h:#x}");
                Ok(self.record_kernel(function, name, deps, &node.cuda_params(), node, suffix))
            }
            NodeParams::Generic(raw) => {
                let (kind, p) = describe_generic(&raw);
                let p = Params::Words(p + &edge_words);
                Ok(self.record("cudaGraphAddNode", kind, name, deps, p))
            }
            NodeParams::Copy1d {
                dst,
                src,
                bytes,
                kind,
            } => {
                let p = format!(
                    "dst={dst:#x} src={src:#x} bytes={bytes} kind={}",
                    copy_kind(kind)
                );
                let p = Params::Words(p);
                Ok(self.record("cudaGraphAddMemcpyNode1D", "memcpy", name, deps, p))
            }
            NodeParams::Child(child) => {
                let mut sub = RecordingBackend {
                    id: self.id,
                    count: self.count,
                    peer: self.peer.clone(),
                    next_addr: self.next_addr + 0x1000_0000,
                    ..RecordingBackend::new(self.limits.clone())
                };
                sub.fft_made = self.fft_made.for_child();
                // As the CUDA backend: the child's FFT states stay with this context, and an
                // update's lowering takes over the unchanged ones of the same child.
                let lowered = self.fft.lower_child(
                    name.serial(),
                    &mut sub,
                    |b| &mut b.fft,
                    |b| child.lower_validated(b).map(drop),
                );
                self.fft_made.count_child(&sub.fft_made);
                lowered?;
                let inner: Vec<String> = sub
                    .calls()
                    .iter()
                    .map(|c| format!("{} {} `{}` deps={:?}", c.function, c.kind, c.name, c.deps))
                    .collect();
                let p = Params::Words(format!("child=[{}]", inner.join("; ")));
                Ok(self.record("cudaGraphAddNode", "graph", name, deps, p))
            }
            NodeParams::Fft { node: f } => {
                let work = self.fft_shares.remove(&f.uid).ok_or_else(|| {
                    crate::error::Error::Invalid(format!(
                        "FFT node `{name}` was lowered without its work share (prepare_ffts)"
                    ))
                })?;
                self.add_fft(name, deps, f, &work)
            }
            NodeParams::Conditional {
                kind_words,
                handle,
                bodies,
                scopes,
                ..
            } => {
                let mut words =
                    format!("type={kind_words} handle={handle:#x} size={}", bodies.len());
                for (i, body) in bodies.iter().enumerate() {
                    // Each body into a recording of its own, as CUDA gives each its graph.
                    let mut sub = RecordingBackend {
                        id: self.id,
                        count: self.count,
                        peer: self.peer.clone(),
                        next_addr: self.next_addr + 0x1000_0000,
                        next_conditional: self.next_conditional + 0x100 * (i as u64 + 1),
                        ..RecordingBackend::new(self.limits.clone())
                    };
                    body.lower_scoped(&mut sub, scopes)?;
                    let inner: Vec<String> = sub
                        .calls()
                        .iter()
                        .map(|c| {
                            let s = format!(
                                "{} {} `{}` deps={:?} {}",
                                c.function, c.kind, c.name, c.deps, c.params
                            );
                            s.trim_end().to_string()
                        })
                        .collect();
                    words.push_str(&format!(" body{i}=[{}]", inner.join("; ")));
                }
                let p = Params::Words(words);
                Ok(self.record("cudaGraphAddNode", "conditional", name, deps, p))
            }
            NodeParams::MemAlloc { index, bytes, dptr } => {
                let addr = self.next_graph_alloc;
                self.next_graph_alloc += (bytes as u64).div_ceil(256).max(1) * 256;
                dptr.set(addr);
                let p = Params::Words(format!(
                    "graph_buffer=#{index} bytes={bytes} location=device dptr={addr:#x}{edge_words}"
                ));
                Ok(self.record("cudaGraphAddNode", "mem_alloc", name, deps, p))
            }
            NodeParams::Captured(work) => {
                self.fft.capture_stream(&mut self.fft_made)?;
                Ok(self.record(
                    "cudaStreamBeginCaptureToGraph",
                    "captured",
                    name,
                    deps,
                    Params::Words(work.describe()),
                ))
            }
        }
    }
}
