//! GPU benchmark: the crate's `Dag` → `Exec` against the ways CUDA users run the same work.
//!
//! Run it on a machine with a GPU: `cargo bench --bench graphs` (or the staged binary,
//! `.gpu/benches/graphs`, from the repository root). Without a usable GPU it prints
//! `no GPU: <reason>` and exits 0 (1 when `CUDAGRAPH_REQUIRE_GPU=1`).
//!
//! Every experiment runs each method side by side in the same process and run, interleaving
//! the repetitions of the methods, and reports the median. The methods:
//!
//! 1. **stream launches**: `cudaLaunchKernel` per node (fan-out/fan-in through 8 worker streams
//!    and events), no graph;
//! 2. **stream capture**: the same stream work captured (`cudaStreamBeginCapture` /
//!    `cudaStreamEndCapture`), then `cudaGraphInstantiate` and `cudaGraphLaunch`;
//! 3. **raw graph**: an explicit graph built with the raw runtime calls of the crate's `sys`
//!    layer (function pointers fetched once): `cudaGraphCreate`, `cudaGraphAddKernelNode`,
//!    `cudaGraphInstantiate`, `cudaGraphLaunch`, `cudaGraphExecKernelNodeSetParams`,
//!    `cudaGraphExecUpdate`: the floor for any wrapper;
//! 4. **cudagraph**: the crate's `Dag` built node by node, then `Dag::into_exec` (or `Dag::instantiate`, which keeps the DAG) → `Exec`.
//!
//! Every node is the same tiny kernel, `tiny(unsigned* c, unsigned v)`, one block of 32
//! threads, for N = 1, 10, 100, 1,000 and 10,000 nodes, as a chain and as fan-out/fan-in of
//! width 8 (stages of 1, 8, 1, 8, ..., 1 nodes). GPU time comes from CUDA events, CPU time from
//! `std::time::Instant`.
//!
//! The **FFT experiment** (`fft`) runs batched C2C transforms of complex 8-bit input (256 and
//! 4,096 points, batch 1, 16, 256 and 1,024) four ways: the crate's FFT node in a graph
//! (plan with the `ComplexI8` LTO load callback), the same, with `Exec::set_fft_params` before
//! every launch, the same plan called on a stream (`StreamFft`), and unfused (an NVRTC kernel
//! converting int8 to complex float, then a callback-free plan through `StreamFft`). Each
//! plan and graph is made once per configuration; GPU time comes from CUDA events around 200
//! back-to-back iterations, CPU time from the calls that queue them. Before timing, the graph,
//! stream and unfused outputs of every configuration are checked against rustfft (f64).
//! Its tables have one column per (points × batch) configuration, in µs per iteration.
//!
//! Output: one Markdown table per measurement on stdout, and `graphs.csv`, `graphs.md` and
//! `graphs.svg` (time per node against N, or per iteration against the configuration; one
//! panel per table) in `$CUDAGRAPH_BENCH_OUT`
//! (default `bench-results/` under the current directory). A "targets" section at the end
//! compares the measured ratios with the project's targets.
//!
//! Knobs (environment): `CUDAGRAPH_BENCH_NS` (comma-separated N values, default
//! `1,10,100,1000,10000`), `CUDAGRAPH_BENCH_REPS_SCALE` (multiplies the repetition counts,
//! default 1), `CUDAGRAPH_BENCH_ONLY` (comma-separated experiment names, default all:
//! `launch,construction,update,host,fft`).
//!
//! Adding an experiment: write a function
//! `fn(&mut Bench, &mut Report) -> Result<()>` that measures, adds [`Table`]s with
//! [`Report::table`] and, if it has targets, [`Report::target`]; then list it in
//! [`experiments`]. Tables are printed, written to CSV/Markdown and plotted without further
//! work. Columns are node counts N ([`Table::new`]) or named configurations
//! ([`Table::configs`]; the CSV's `n` field then holds the column's name, e.g. `4096×16`).

#[path = "host.rs"]
#[allow(dead_code)] // reason: host.rs is also a bench of its own; its `main` is unused here
mod host;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::ptr;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use cudagraph::result::runtime as rt;
use cudagraph::{
    args, sys, CallbackParams, CompileOptions, Dag, Device, DeviceBuffer, Direction, Event, Exec,
    FftParams, FftPlan, FftPlanDesc, FftSpec, FftType, Kernel, LaunchConfig, LoadCallback, Module,
    NodeId, Stream, StreamFft,
};

use host::{build_shape, median, stages, Topology};

// ---- allocation counting -------------------------------------------------------------------

/// Counts heap allocations of the current thread (a thread-local counter: no atomics, so the
/// cost on the measured paths is negligible), to show how many the crate's update and launch
/// paths make.
struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: the thread-local may already be gone while a thread exits.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// Allocations made by this thread so far.
fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting has no effect on
// the memory returned.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: as above.
        unsafe { System.realloc(p, layout, new_size) }
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Allocations seen on one of the crate's hot paths (after warm-up).
#[derive(Debug, Default, Clone, Copy)]
struct AllocCount {
    allocations: u64,
    calls: u64,
}

impl AllocCount {
    fn add(&mut self, allocations: u64, calls: u64) {
        self.allocations += allocations;
        self.calls += calls;
    }
}

// ---- the raw runtime calls -----------------------------------------------------------------

type Status = sys::cudaError_t;
type Uint = std::os::raw::c_uint;

/// The runtime functions the raw methods call, taken once from the crate's `sys` function
/// table (`cudagraph::load::cudart()`), so the raw paths pay nothing per call beyond CUDA.
#[derive(Clone, Copy)]
struct Api {
    launch_kernel: unsafe extern "C" fn(
        *const c_void,
        sys::dim3,
        sys::dim3,
        *mut *mut c_void,
        usize,
        sys::cudaStream_t,
    ) -> Status,
    event_record: unsafe extern "C" fn(sys::cudaEvent_t, sys::cudaStream_t) -> Status,
    stream_wait_event: unsafe extern "C" fn(sys::cudaStream_t, sys::cudaEvent_t, Uint) -> Status,
    begin_capture: unsafe extern "C" fn(sys::cudaStream_t, sys::cudaStreamCaptureMode) -> Status,
    end_capture: unsafe extern "C" fn(sys::cudaStream_t, *mut sys::cudaGraph_t) -> Status,
    graph_create: unsafe extern "C" fn(*mut sys::cudaGraph_t, Uint) -> Status,
    graph_add_kernel_node: unsafe extern "C" fn(
        *mut sys::cudaGraphNode_t,
        sys::cudaGraph_t,
        *const sys::cudaGraphNode_t,
        usize,
        *const sys::cudaKernelNodeParams,
    ) -> Status,
    graph_instantiate: unsafe extern "C" fn(
        *mut sys::cudaGraphExec_t,
        sys::cudaGraph_t,
        std::os::raw::c_ulonglong,
    ) -> Status,
    graph_launch: unsafe extern "C" fn(sys::cudaGraphExec_t, sys::cudaStream_t) -> Status,
    exec_kernel_node_set_params: unsafe extern "C" fn(
        sys::cudaGraphExec_t,
        sys::cudaGraphNode_t,
        *const sys::cudaKernelNodeParams,
    ) -> Status,
    exec_update: unsafe extern "C" fn(
        sys::cudaGraphExec_t,
        sys::cudaGraph_t,
        *mut sys::cudaGraphExecUpdateResultInfo,
    ) -> Status,
    exec_destroy: unsafe extern "C" fn(sys::cudaGraphExec_t) -> Status,
    graph_destroy: unsafe extern "C" fn(sys::cudaGraph_t) -> Status,
}

macro_rules! sym {
    ($lib:expr, $f:ident) => {
        *$lib
            .$f
            .as_ref()
            .map_err(|e| anyhow!("the CUDA runtime lacks {}: {e}", stringify!($f)))?
    };
}

impl Api {
    fn load() -> Result<Api> {
        let lib = cudagraph::load::cudart()?;
        Ok(Api {
            launch_kernel: sym!(lib, cudaLaunchKernel),
            event_record: sym!(lib, cudaEventRecord),
            stream_wait_event: sym!(lib, cudaStreamWaitEvent),
            begin_capture: sym!(lib, cudaStreamBeginCapture),
            end_capture: sym!(lib, cudaStreamEndCapture),
            graph_create: sym!(lib, cudaGraphCreate),
            graph_add_kernel_node: sym!(lib, cudaGraphAddKernelNode),
            graph_instantiate: sym!(lib, cudaGraphInstantiate),
            graph_launch: sym!(lib, cudaGraphLaunch),
            exec_kernel_node_set_params: sym!(lib, cudaGraphExecKernelNodeSetParams),
            exec_update: sym!(lib, cudaGraphExecUpdate),
            exec_destroy: sym!(lib, cudaGraphExecDestroy),
            graph_destroy: sym!(lib, cudaGraphDestroy),
        })
    }
}

/// A CUDA status as a `Result`, with CUDA's name for the error.
fn ck(call: &'static str, status: Status) -> Result<()> {
    rt::check(call, status).map_err(Into::into)
}

/// The two arguments of `tiny` and the pointer array CUDA reads, on the heap at a fixed
/// address. Values are written through the raw pointer only, so the array stays valid.
#[repr(C)]
struct Slots {
    ptr: u64,
    val: u32,
    array: [*mut c_void; 2],
}

struct RawArgs(*mut Slots);

impl RawArgs {
    fn new(ptr: u64, val: u32) -> RawArgs {
        let s = Box::into_raw(Box::new(Slots {
            ptr,
            val,
            array: [ptr::null_mut(); 2],
        }));
        // SAFETY: `s` is a live, exclusively owned allocation; the array points into it.
        unsafe {
            (*s).array = [
                ptr::addr_of_mut!((*s).ptr).cast(),
                ptr::addr_of_mut!((*s).val).cast(),
            ];
        }
        RawArgs(s)
    }

    fn set(&self, val: u32) {
        // SAFETY: the allocation lives as long as `self`; CUDA reads it only during calls.
        unsafe { (*self.0).val = val };
    }

    fn set_ptr(&self, ptr: u64) {
        // SAFETY: as above.
        unsafe { (*self.0).ptr = ptr };
    }

    /// The `kernelParams` / `args` array.
    fn array(&self) -> *mut *mut c_void {
        // SAFETY: as above.
        unsafe { ptr::addr_of_mut!((*self.0).array).cast() }
    }
}

impl Drop for RawArgs {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `new`, freed once here.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// A graph made with the raw calls (explicitly or by capture), destroyed on drop.
struct RawGraph {
    graph: sys::cudaGraph_t,
    /// The kernel nodes in creation order (empty for a captured graph).
    nodes: Vec<sys::cudaGraphNode_t>,
    destroy: unsafe extern "C" fn(sys::cudaGraph_t) -> Status,
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: the graph is owned and nothing uses it any more (executable graphs made from
        // it do not refer to it).
        let _ = unsafe { (self.destroy)(self.graph) };
    }
}

/// An executable graph made with the raw calls, destroyed on drop (CUDA frees it when its
/// pending launches have finished).
struct RawExec {
    exec: sys::cudaGraphExec_t,
    destroy: unsafe extern "C" fn(sys::cudaGraphExec_t) -> Status,
}

impl Drop for RawExec {
    fn drop(&mut self) {
        // SAFETY: the executable graph is owned.
        let _ = unsafe { (self.destroy)(self.exec) };
    }
}

/// An event without timing, for fork/join between streams.
struct SyncEvent(sys::cudaEvent_t);

impl SyncEvent {
    fn new() -> Result<SyncEvent> {
        // SAFETY: destroyed in Drop.
        Ok(SyncEvent(unsafe {
            rt::event_create(sys::cudaEventDisableTiming)?
        }))
    }
}

impl Drop for SyncEvent {
    fn drop(&mut self) {
        // SAFETY: owned; the streams using it are synchronised before the bench ends.
        let _ = unsafe { rt::event_destroy(self.0) };
    }
}

/// The kernel loaded for the raw methods: its own `cudaLibrary_t` from the same cubin.
struct RawKernel {
    library: sys::cudaLibrary_t,
    kernel: sys::cudaKernel_t,
}

impl Drop for RawKernel {
    fn drop(&mut self) {
        // SAFETY: every raw graph using the kernel is gone by now (the bench drops them before
        // returning from each experiment, and `Bench` drops this last).
        let _ = unsafe { rt::library_unload(self.library) };
    }
}

// ---- the benchmark context -----------------------------------------------------------------

const KERNEL_SOURCE: &str = r#"
extern "C" __global__ void tiny(unsigned* c, unsigned v) { if (threadIdx.x == 0) c[0] += v; }
"#;

/// Everything the experiments share.
struct Bench {
    device: Device,
    stream: Stream,
    workers: Vec<Stream>,
    fork: SyncEvent,
    joins: Vec<SyncEvent>,
    start: Event,
    end: Event,
    kernel: Kernel,
    counter: DeviceBuffer<u32>,
    api: Api,
    ns: Vec<usize>,
    reps_scale: f64,
    /// Allocations in `Exec::launch`, counted by the launch experiment.
    launch_allocs: AllocCount,
    /// The arguments of the plain stream launches (CUDA copies them at each launch).
    stream_args: RawArgs,
    // Declared last: dropped after everything that might use the kernel.
    raw: RawKernel,
}

const BLOCK: u32 = 32;
const MAX_WIDTH: usize = 8;

/// How many repetitions (after one warm-up) each kind of measurement gets at `n` nodes.
#[derive(Debug, Clone, Copy)]
struct Reps {
    launch: usize,
    construction: usize,
    update: usize,
    whole: usize,
}

impl Bench {
    fn new(device: Device, ns: Vec<usize>, reps_scale: f64) -> Result<Bench> {
        let compiled = cudagraph::compile(Some(&device), KERNEL_SOURCE, &CompileOptions::default())
            .context("compiling the tiny kernel with NVRTC")?;
        let module = Module::load(&device, &compiled.image, Default::default())?;
        let kernel = module.kernel("tiny")?;
        let name = CString::new("tiny")?;
        // SAFETY: the image is NVRTC's cubin for this device; unloaded by RawKernel's Drop.
        let library = unsafe { rt::library_load_data(&compiled.image)? };
        let mut raw = RawKernel {
            library,
            kernel: ptr::null_mut(),
        };
        // SAFETY: the library is loaded.
        raw.kernel = unsafe { rt::library_get_kernel(raw.library, &name)? };
        let stream = Stream::new(&device)?;
        let workers = (0..MAX_WIDTH)
            .map(|_| Stream::new(&device))
            .collect::<cudagraph::Result<Vec<_>>>()?;
        let joins = (0..MAX_WIDTH)
            .map(|_| SyncEvent::new())
            .collect::<Result<Vec<_>>>()?;
        Ok(Bench {
            start: Event::new(&device)?,
            end: Event::new(&device)?,
            counter: DeviceBuffer::<u32>::zeros(&device, 1)?,
            fork: SyncEvent::new()?,
            joins,
            workers,
            stream,
            kernel,
            api: Api::load()?,
            ns,
            reps_scale,
            launch_allocs: AllocCount::default(),
            stream_args: RawArgs::new(0, 0),
            raw,
            device,
        })
    }

    fn reps(&self, n: usize) -> Reps {
        let (launch, construction, update, whole) = match n {
            0..=10 => (200, 40, 200, 30),
            11..=100 => (100, 30, 100, 20),
            101..=1000 => (40, 12, 40, 12),
            _ => (15, 6, 15, 6),
        };
        let s = |r: usize| ((r as f64 * self.reps_scale).round() as usize).max(3);
        Reps {
            launch: s(launch),
            construction: s(construction),
            update: s(update),
            whole: s(whole),
        }
    }

    fn cfg() -> LaunchConfig {
        LaunchConfig::new(1, BLOCK)
    }

    fn raw_params(&self, args: &RawArgs) -> sys::cudaKernelNodeParams {
        sys::cudaKernelNodeParams {
            func: self.raw.kernel as *mut c_void,
            gridDim: sys::dim3 { x: 1, y: 1, z: 1 },
            blockDim: sys::dim3 {
                x: BLOCK,
                y: 1,
                z: 1,
            },
            sharedMemBytes: 0,
            kernelParams: args.array(),
            extra: ptr::null_mut(),
        }
    }

    // -- method 1: plain stream launches (also what method 2 captures) --

    /// Issues one run of the DAG with stages `stages` as plain launches, every node with
    /// argument `v`: width-1 stages on the main stream, wider ones on the worker streams,
    /// forked and joined with events.
    fn submit_stream(&self, stages: &[usize], v: u32) -> Result<()> {
        let api = &self.api;
        let main = self.stream.raw();
        let args = &self.stream_args;
        // SAFETY: the counter outlives every launch: the bench synchronises before dropping it.
        args.set_ptr(unsafe { self.counter.as_raw_ptr() });
        args.set(v);
        let grid = sys::dim3 { x: 1, y: 1, z: 1 };
        let block = sys::dim3 {
            x: BLOCK,
            y: 1,
            z: 1,
        };
        let func = self.raw.kernel as *const c_void;
        let mut open = 0usize; // worker streams the main stream has not joined yet
        let join = |open: usize| -> Result<()> {
            for j in &self.joins[..open] {
                // SAFETY: live stream and event.
                ck("cudaStreamWaitEvent", unsafe {
                    (api.stream_wait_event)(main, j.0, 0)
                })?;
            }
            Ok(())
        };
        for &w in stages {
            join(open)?;
            open = 0;
            if w == 1 {
                // SAFETY: the kernel is live; `args` matches its two parameters; one block.
                ck("cudaLaunchKernel", unsafe {
                    (api.launch_kernel)(func, grid, block, args.array(), 0, main)
                })?;
            } else {
                // SAFETY: live event and stream.
                ck("cudaEventRecord", unsafe {
                    (api.event_record)(self.fork.0, main)
                })?;
                for (ws, j) in self.workers.iter().zip(&self.joins).take(w) {
                    let s = ws.raw();
                    // SAFETY: live handles; the launch as above.
                    unsafe {
                        ck(
                            "cudaStreamWaitEvent",
                            (api.stream_wait_event)(s, self.fork.0, 0),
                        )?;
                        ck(
                            "cudaLaunchKernel",
                            (api.launch_kernel)(func, grid, block, args.array(), 0, s),
                        )?;
                        ck("cudaEventRecord", (api.event_record)(j.0, s))?;
                    }
                }
                open = w;
            }
        }
        join(open)
    }

    // -- method 2: stream capture --

    /// Captures [`Bench::submit_stream`] into a new graph.
    fn capture(&self, stages: &[usize], v: u32) -> Result<RawGraph> {
        let main = self.stream.raw();
        // SAFETY: the stream is live and not capturing.
        ck("cudaStreamBeginCapture", unsafe {
            (self.api.begin_capture)(
                main,
                sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal,
            )
        })?;
        let issued = self.submit_stream(stages, v);
        let mut graph = ptr::null_mut();
        // SAFETY: the stream is capturing (ended even when issuing failed).
        let ended = unsafe { (self.api.end_capture)(main, &mut graph) };
        let g = RawGraph {
            graph,
            nodes: Vec::new(),
            destroy: self.api.graph_destroy,
        };
        issued?;
        ck("cudaStreamEndCapture", ended)?;
        if g.graph.is_null() {
            bail!("cudaStreamEndCapture returned no graph");
        }
        Ok(g)
    }

    // -- method 3: raw explicit graph --

    /// Builds the DAG with `cudaGraphCreate` and one `cudaGraphAddKernelNode` per node.
    fn build_raw(&self, topology: Topology, n: usize, v: u32) -> Result<RawGraph> {
        let api = &self.api;
        let mut graph = ptr::null_mut();
        // SAFETY: out-pointer; the graph is owned by the RawGraph below.
        ck("cudaGraphCreate", unsafe {
            (api.graph_create)(&mut graph, 0)
        })?;
        let mut g = RawGraph {
            graph,
            nodes: Vec::with_capacity(n),
            destroy: api.graph_destroy,
        };
        // SAFETY: as above, the counter outlives the raw graph's launches.
        let args = RawArgs::new(unsafe { self.counter.as_raw_ptr() }, v);
        let params = self.raw_params(&args);
        g.nodes = build_shape(topology, n, |deps: &[sys::cudaGraphNode_t]| {
            let mut node = ptr::null_mut();
            // SAFETY: `deps` are nodes of this graph; CUDA copies the argument values.
            ck("cudaGraphAddKernelNode", unsafe {
                (api.graph_add_kernel_node)(&mut node, graph, deps.as_ptr(), deps.len(), &params)
            })?;
            Ok::<_, anyhow::Error>(node)
        })?;
        Ok(g)
    }

    fn instantiate_raw(&self, g: &RawGraph) -> Result<RawExec> {
        let mut exec = ptr::null_mut();
        // SAFETY: the graph is live and complete.
        ck("cudaGraphInstantiate", unsafe {
            (self.api.graph_instantiate)(&mut exec, g.graph, 0)
        })?;
        Ok(RawExec {
            exec,
            destroy: self.api.exec_destroy,
        })
    }

    fn launch_raw(&self, e: &RawExec) -> Result<()> {
        // SAFETY: live exec and stream; the counter outlives every launch.
        ck("cudaGraphLaunch", unsafe {
            (self.api.graph_launch)(e.exec, self.stream.raw())
        })
    }

    fn exec_update_raw(&self, e: &RawExec, g: &RawGraph) -> Result<()> {
        // SAFETY: zeroed is a valid value of this plain C struct (result 0 = success).
        let mut info: sys::cudaGraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: both are live.
        let status = unsafe { (self.api.exec_update)(e.exec, g.graph, &mut info) };
        if status != sys::cudaError::cudaSuccess {
            bail!(
                "cudaGraphExecUpdate refused the graph: {:?} ({})",
                info.result,
                rt::error("cudaGraphExecUpdate", status)
            );
        }
        Ok(())
    }

    // -- method 4: the crate --

    fn build_dag(&self, topology: Topology, n: usize, v: u32) -> Result<(Dag, Vec<NodeId>)> {
        let cfg = Self::cfg();
        let mut dag = Dag::new();
        let ids = build_shape(topology, n, |deps: &[NodeId]| {
            let id = dag.add_kernel(&self.kernel, cfg, &args![&self.counter, v])?;
            for &d in deps {
                dag.add_dependency(d, id)?;
            }
            Ok::<_, anyhow::Error>(id)
        })?;
        Ok((dag, ids))
    }

    // -- helpers --

    fn sync(&self) -> Result<()> {
        self.stream.synchronize()?;
        for w in &self.workers {
            w.synchronize()?;
        }
        Ok(())
    }

    /// Zeroes the counter (and waits for it).
    fn reset_counter(&self) -> Result<()> {
        self.sync()?;
        self.counter.memset_bytes(0)?;
        self.device.synchronize()?;
        Ok(())
    }

    fn read_counter(&self) -> Result<u32> {
        self.sync()?;
        Ok(self.counter.to_vec()?[0])
    }
}

// ---- tables and the report -----------------------------------------------------------------

/// One row of a table: a method (or a phase of one), its value per N in µs per node, and the
/// row its ratio is taken against.
#[derive(Debug, Clone)]
struct Row {
    label: String,
    vs: Option<String>,
    values: Vec<Option<f64>>,
}

/// One measurement: rows of methods, columns of N, µs per node (or, for a table made with
/// [`Table::configs`], columns of named configurations and µs per `unit`).
#[derive(Debug, Clone)]
struct Table {
    /// Stable key, used in the CSV and by the targets.
    key: String,
    /// Heading.
    title: String,
    /// What exactly was timed.
    note: String,
    /// The N of each column (the column's index for a [`Table::configs`] table).
    ns: Vec<usize>,
    rows: Vec<Row>,
    /// Column names instead of `N=...` (a categorical x axis in the plot).
    columns: Option<Vec<String>>,
    /// What one value is the time of: "node", or e.g. "iteration".
    unit: &'static str,
}

impl Table {
    fn new(key: &str, title: &str, note: &str, ns: &[usize]) -> Table {
        Table {
            key: key.into(),
            title: title.into(),
            note: note.into(),
            ns: ns.to_vec(),
            rows: Vec::new(),
            columns: None,
            unit: "node",
        }
    }

    /// A table whose columns are named configurations (`columns`) rather than node counts;
    /// values are µs per `unit`.
    fn configs(
        key: &str,
        title: &str,
        note: &str,
        columns: Vec<String>,
        unit: &'static str,
    ) -> Table {
        let mut t = Table::new(key, title, note, &(0..columns.len()).collect::<Vec<_>>());
        t.columns = Some(columns);
        t.unit = unit;
        t
    }

    /// The heading of column `ni`.
    fn column(&self, ni: usize) -> String {
        match &self.columns {
            Some(c) => c[ni].clone(),
            None => format!("N={}", self.ns[ni]),
        }
    }

    /// Declares a row; `vs` names the row its ratio column compares with.
    fn row(&mut self, label: &str, vs: Option<&str>) -> usize {
        self.rows.push(Row {
            label: label.into(),
            vs: vs.map(Into::into),
            values: vec![None; self.ns.len()],
        });
        self.rows.len() - 1
    }

    fn set(&mut self, row: usize, ni: usize, us_per_node: f64) {
        self.rows[row].values[ni] = Some(us_per_node);
    }

    fn ratio(&self, row: usize, ni: usize) -> Option<f64> {
        let r = &self.rows[row];
        let base = self.rows.iter().find(|b| Some(&b.label) == r.vs.as_ref())?;
        Some(r.values[ni]? / base.values[ni]?)
    }

    fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### {}\n\n{}\n", self.title, self.note);
        let mut head = String::from("| method |");
        let mut rule = String::from("| --- |");
        for ni in 0..self.ns.len() {
            let _ = write!(head, " {} |", self.column(ni));
            rule.push_str(" ---: |");
        }
        let has_ratio = self.rows.iter().any(|r| r.vs.is_some());
        if has_ratio {
            head.push_str(if self.columns.is_some() {
                " ratio (per column) |"
            } else {
                " ratio (per N) |"
            });
            rule.push_str(" --- |");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for (i, r) in self.rows.iter().enumerate() {
            let mut line = format!("| {} |", r.label);
            for v in &r.values {
                match v {
                    Some(v) => {
                        let _ = write!(line, " {} |", fmt_us(*v));
                    }
                    None => line.push_str(" — |"),
                }
            }
            if has_ratio {
                match &r.vs {
                    Some(vs) => {
                        let ratios: Vec<String> = (0..self.ns.len())
                            .map(|ni| self.ratio(i, ni).map_or("—".into(), |x| format!("{x:.2}")))
                            .collect();
                        let _ = write!(line, " {} vs {vs} |", ratios.join(" · "));
                    }
                    None => line.push_str(" |"),
                }
            }
            let _ = writeln!(s, "{line}");
        }
        s
    }
}

/// A value in µs with about three significant digits.
fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A target of the project and how the measurement compares with it.
#[derive(Debug, Clone)]
struct Target {
    name: String,
    measured: String,
    /// `None` when it could not be measured.
    met: Option<bool>,
}

/// Everything the run produced.
struct Report {
    header: Vec<String>,
    tables: Vec<Table>,
    targets: Vec<Target>,
    errors: Vec<String>,
}

impl Report {
    /// Adds a finished table and prints it.
    fn table(&mut self, t: Table) {
        println!("{}", t.markdown());
        self.tables.push(t);
    }

    /// Records a target: `worst` is the deciding measured ratio (or value), `limit` the
    /// largest one that meets it.
    fn target(&mut self, name: String, detail: String, worst: Option<f64>, limit: f64) {
        let met = worst.map(|w| w <= limit);
        self.targets.push(Target {
            name,
            measured: detail,
            met,
        });
    }

    fn find(&self, key: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.key == key)
    }

    fn targets_markdown(&self) -> String {
        let mut s =
            String::from("## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |\n");
        for t in &self.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "not measured",
            };
            let _ = writeln!(s, "| {} | {} | {} |", t.name, t.measured, verdict);
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = String::from("# cudagraph GPU benchmark\n\n");
        for h in &self.header {
            let _ = writeln!(s, "- {h}");
        }
        s.push_str(
            "\nMethods: **stream launches** (`cudaLaunchKernel` per node; fan-out through 8 \
             worker streams and events), **stream capture** (the same stream work captured, \
             then `cudaGraphInstantiate` + `cudaGraphLaunch`), **raw graph** (explicit graph \
             with the raw runtime calls: the floor for any wrapper), **cudagraph** (`Dag` → \
             `Exec`). Every node is `tiny(unsigned*, unsigned)`, one block of 32 threads. \
             Values are medians, in µs **per node** (the time of the whole operation divided \
             by N); ratios are per N, in N order. The FFT tables are in µs **per iteration** \
             (one batch of transforms), one column per points × batch configuration.\n\n",
        );
        for t in &self.tables {
            s.push_str(&t.markdown());
            s.push('\n');
        }
        s.push_str(&self.targets_markdown());
        if !self.errors.is_empty() {
            s.push_str("\n## Errors\n\n");
            for e in &self.errors {
                let _ = writeln!(s, "- {e}");
            }
        }
        s
    }

    fn csv(&self) -> String {
        let mut s = String::from("table,title,method,n,us_per_node,ratio_vs,ratio\n");
        for t in &self.tables {
            for (i, r) in t.rows.iter().enumerate() {
                for (ni, n) in t.ns.iter().enumerate() {
                    let Some(v) = r.values[ni] else { continue };
                    let ratio = t.ratio(i, ni).map_or(String::new(), |x| format!("{x:.4}"));
                    // A configuration table names its column here (e.g. `4096×16`).
                    let n = match &t.columns {
                        Some(c) => csv_field(&c[ni]),
                        None => n.to_string(),
                    };
                    let _ = writeln!(
                        s,
                        "{},{},{},{n},{v:.4},{},{ratio}",
                        csv_field(&t.key),
                        csv_field(&t.title),
                        csv_field(&r.label),
                        csv_field(r.vs.as_deref().unwrap_or(""))
                    );
                }
            }
        }
        s
    }

    fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("graphs.csv"), self.csv())?;
        std::fs::write(dir.join("graphs.md"), self.markdown())?;
        plot(self, &dir.join("graphs.svg"))?;
        Ok(())
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Line colours (Tableau 10: distinct, and readable on white).
const PALETTE: [plotters::style::RGBColor; 10] = {
    use plotters::style::RGBColor as C;
    [
        C(31, 119, 180),
        C(255, 127, 14),
        C(44, 160, 44),
        C(214, 39, 40),
        C(148, 103, 189),
        C(140, 86, 75),
        C(227, 119, 194),
        C(127, 127, 127),
        C(188, 189, 34),
        C(23, 190, 207),
    ]
};

/// One panel per table: µs per node against N, log-log, a line per method (for a
/// configuration table: µs per its unit against the named columns, log y).
fn plot(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let tables: Vec<&Table> = report
        .tables
        .iter()
        .filter(|t| {
            t.rows
                .iter()
                .flat_map(|r| r.values.iter().flatten())
                .any(|&v| v > 0.0)
        })
        .collect();
    if tables.is_empty() {
        return Ok(());
    }
    let cols = tables.len().min(3);
    let rows = tables.len().div_ceil(cols);
    let root = SVGBackend::new(path, (cols as u32 * 640, rows as u32 * 440)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((rows, cols));
    for (t, area) in tables.iter().zip(panels.iter()) {
        let values: Vec<f64> = t
            .rows
            .iter()
            .flat_map(|r| r.values.iter().flatten().copied())
            .filter(|&v| v > 0.0)
            .collect();
        let ymin = values.iter().copied().fold(f64::INFINITY, f64::min) / 1.5;
        let ymax = values.iter().copied().fold(0.0, f64::max) * 2.5;
        let y_desc = format!("µs per {}", t.unit);
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&t.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56);
        match &t.columns {
            None => {
                let nmin = t.ns.iter().copied().min().unwrap_or(1).max(1) as f64 / 1.5;
                let nmax = t.ns.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.5;
                let mut chart = builder
                    .build_cartesian_2d((nmin..nmax).log_scale(), (ymin..ymax).log_scale())
                    .map_err(|e| err(&e))?;
                chart
                    .configure_mesh()
                    .light_line_style(RGBColor(238, 238, 238))
                    .x_desc("N (nodes)")
                    .y_desc(&y_desc)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .y_label_formatter(&|y| fmt_us(*y))
                    .draw()
                    .map_err(|e| err(&e))?;
                let xs: Vec<f64> = t.ns.iter().map(|&n| n as f64).collect();
                draw_rows(&mut chart, t, &xs).map_err(|e| err(&e))?;
            }
            Some(columns) => {
                // Categorical x axis: column i at x = i.
                let k = columns.len() as f64;
                let mut chart = builder
                    .build_cartesian_2d(-0.5..k - 0.5, (ymin..ymax).log_scale())
                    .map_err(|e| err(&e))?;
                let name = |x: &f64| {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 {
                        columns.get(i as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                };
                chart
                    .configure_mesh()
                    .light_line_style(RGBColor(238, 238, 238))
                    .x_labels(columns.len())
                    .x_label_formatter(&name)
                    .x_desc("configuration")
                    .y_desc(&y_desc)
                    .y_label_formatter(&|y| fmt_us(*y))
                    .draw()
                    .map_err(|e| err(&e))?;
                let xs: Vec<f64> = (0..columns.len()).map(|i| i as f64).collect();
                draw_rows(&mut chart, t, &xs).map_err(|e| err(&e))?;
            }
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws one line per row of `t` (column `i` at x = `xs[i]`) and the legend.
fn draw_rows<'a, DB, X>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        DB,
        plotters::coord::cartesian::Cartesian2d<X, plotters::coord::combinators::LogCoord<f64>>,
    >,
    t: &Table,
    xs: &[f64],
) -> std::result::Result<(), String>
where
    DB: plotters::prelude::DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    use plotters::prelude::*;
    for (i, r) in t.rows.iter().enumerate() {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(&r.values)
            .filter_map(|(&x, v)| v.filter(|&v| v > 0.0).map(|v| (x, v)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)).point_size(3))
            .map_err(|e| e.to_string())?
            .label(r.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(|e| e.to_string())
}

// ---- experiments ---------------------------------------------------------------------------

/// One experiment: it measures, then adds its tables (and targets) to the report.
struct Experiment {
    name: &'static str,
    run: fn(&mut Bench, &mut Report) -> Result<()>,
}

/// Every experiment, in the order they run.
fn experiments() -> Vec<Experiment> {
    vec![
        Experiment {
            name: "launch",
            run: launch_experiment,
        },
        Experiment {
            name: "construction",
            run: construction_experiment,
        },
        Experiment {
            name: "update",
            run: update_experiment,
        },
        Experiment {
            name: "host",
            run: host_experiment,
        },
        Experiment {
            name: "fft",
            run: fft_experiment,
        },
    ]
}

const STREAM: &str = "stream launches";
const CAPTURE: &str = "stream capture";
const RAW: &str = "raw graph";
const CRATE: &str = "cudagraph";

fn us_per_node(d: std::time::Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

fn progress(what: &str, t0: Instant) {
    eprintln!("[{:>7.1} s] {what}", t0.elapsed().as_secs_f64());
}

/// Launches: CPU time to submit one run and GPU time of one run, per node.
fn launch_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let ns = b.ns.clone();
    for topology in [Topology::Chain, Topology::FAN8] {
        let name = topology.name();
        let mut cpu = Table::new(
            &format!("launch-{}-cpu", topology.key()),
            &format!("Launch, {name}: CPU time of the launch calls, per node"),
            "Wall time of the calls that submit one run (N `cudaLaunchKernel` plus the event \
             calls for stream launches; one `cudaGraphLaunch` / `Exec::launch` for graphs), \
             started on an idle stream.",
            &ns,
        );
        let mut gpu = Table::new(
            &format!("launch-{}-gpu", topology.key()),
            &format!("Launch, {name}: GPU time, per node"),
            "CUDA events recorded on the stream before and after one run. For stream launches \
             it includes the gaps when the host issues slower than the GPU runs.",
            &ns,
        );
        let rows: Vec<(usize, usize)> = [
            (STREAM, Some(RAW)),
            (CAPTURE, Some(RAW)),
            (RAW, None),
            (CRATE, Some(RAW)),
        ]
        .iter()
        .map(|&(l, vs)| (cpu.row(l, vs), gpu.row(l, vs)))
        .collect();
        for (ni, &n) in ns.iter().enumerate() {
            let st = stages(topology, n);
            let reps = b.reps(n).launch;
            let raw_graph = b.build_raw(topology, n, 1)?;
            let raw_exec = b.instantiate_raw(&raw_graph)?;
            let cap_graph = b.capture(&st, 1)?;
            let cap_exec = b.instantiate_raw(&cap_graph)?;
            let (dag, _) = b.build_dag(topology, n, 1)?;
            let mut exec = dag.instantiate(&b.device)?;
            // Warm-up (the first launch of a graph uploads it), and a check that every method
            // runs all N nodes (the chain serialises its increments; fan-out nodes race).
            for m in 0..4 {
                if topology == Topology::Chain {
                    b.reset_counter()?;
                }
                submit(b, m, &st, &raw_exec, &cap_exec, &mut exec)?;
                if topology == Topology::Chain {
                    let got = b.read_counter()?;
                    if got != n as u32 {
                        bail!(
                            "{}: a chain of {n} increments counted {got}",
                            cpu.rows[m].label
                        );
                    }
                }
                submit(b, m, &st, &raw_exec, &cap_exec, &mut exec)?;
            }
            b.sync()?;
            let mut cpu_s = vec![Vec::new(); 4];
            let mut gpu_s = vec![Vec::new(); 4];
            for rep in 0..reps {
                // Rotate which method goes first, so none always runs right after another.
                for m in (0..4).map(|k| (k + rep) % 4) {
                    b.sync()?;
                    b.start.record(&b.stream)?;
                    let a0 = allocs();
                    let t0 = Instant::now();
                    submit(b, m, &st, &raw_exec, &cap_exec, &mut exec)?;
                    let t = t0.elapsed();
                    let a = allocs() - a0;
                    b.end.record(&b.stream)?;
                    b.end.synchronize()?;
                    if m == 3 {
                        b.launch_allocs.add(a, 1);
                    }
                    cpu_s[m].push(us_per_node(t, n));
                    gpu_s[m].push(b.start.elapsed_ms(&b.end)? as f64 * 1e3 / n as f64);
                }
            }
            for (m, &(rc, rg)) in rows.iter().enumerate() {
                cpu.set(rc, ni, median(&mut cpu_s[m]));
                gpu.set(rg, ni, median(&mut gpu_s[m]));
            }
            b.sync()?;
            drop(exec);
            drop((cap_exec, cap_graph, raw_exec, raw_graph));
            progress(&format!("launch, {name}, N={n} ({reps} reps)"), t_start);
        }
        for (t, what) in [(&cpu, "CPU"), (&gpu, "GPU")] {
            let (detail, worst) = ratio_summary(t, CRATE, &ns);
            report.target(
                format!("launch {what} time, {name}: cudagraph within 5% of the raw graph"),
                detail,
                worst,
                1.05,
            );
        }
        report.table(cpu);
        report.table(gpu);
    }
    Ok(())
}

/// Submits one run with method `m` (0 stream, 1 capture, 2 raw, 3 crate).
fn submit(
    b: &Bench,
    m: usize,
    st: &[usize],
    raw: &RawExec,
    cap: &RawExec,
    exec: &mut Exec,
) -> Result<()> {
    match m {
        0 => b.submit_stream(st, 1),
        1 => b.launch_raw(cap),
        2 => b.launch_raw(raw),
        _ => Ok(exec.launch(&b.stream)?),
    }
}

/// The ratios of row `label` against its `vs` row at the node counts `ns` (those the table
/// has), as text, and the worst (largest) of them.
fn ratio_summary(t: &Table, label: &str, ns: &[usize]) -> (String, Option<f64>) {
    let Some(row) = t.rows.iter().position(|r| r.label == label) else {
        return ("no such row".into(), None);
    };
    let mut parts = Vec::new();
    let mut worst: Option<f64> = None;
    for n in ns {
        let Some(ni) = t.ns.iter().position(|m| m == n) else {
            continue;
        };
        if let Some(r) = t.ratio(row, ni) {
            parts.push(format!("{r:.2} (N={n})"));
            worst = Some(worst.map_or(r, |w: f64| w.max(r)));
        }
    }
    match worst {
        Some(w) => (format!("{}; worst {w:.2}", parts.join(", ")), worst),
        None => ("no data".into(), None),
    }
}

/// Construction: build, validate + lower, instantiate, and the total, per node.
fn construction_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let ns = b.ns.clone();
    const CAP_T: &str = "stream capture: capture + instantiate";
    const RAW_T: &str = "raw graph: build + instantiate";
    const CRATE_T: &str = "cudagraph: build + Dag::into_exec";
    const CRATE_T_COPY: &str = "cudagraph: build + Dag::instantiate (keeps the DAG: copies it)";
    for topology in [Topology::Chain, Topology::FAN8] {
        let name = topology.name();
        let key = topology.key();
        let mut build = Table::new(
            &format!("construction-{key}-build"),
            &format!("Construction, {name}: build (nodes added), per node"),
            "Stream capture: `cudaStreamBeginCapture` + the launches + `cudaStreamEndCapture`. \
             Raw graph: `cudaGraphCreate` + `cudaGraphAddKernelNode` per node. cudagraph: \
             `Dag::add_kernel` + `Dag::add_dependency` (host only; the CUDA graph is made when \
             lowering).",
            &ns,
        );
        let bc = build.row(CAPTURE, None);
        let br = build.row(RAW, None);
        let bk = build.row(CRATE, None);
        let mut lower = Table::new(
            &format!("construction-{key}-lower"),
            &format!("Construction, {name}: validation + lowering, per node"),
            "cudagraph: `Dag::lower` into a `CudaBackend` (validation, then one \
             `cudaGraphAddKernelNode` per node), compared with the raw graph's build, which \
             makes the same CUDA calls.",
            &ns,
        );
        let lr = lower.row("raw graph: build (same CUDA calls)", None);
        let lk = lower.row(
            "cudagraph: validate + lower",
            Some("raw graph: build (same CUDA calls)"),
        );
        let mut inst = Table::new(
            &format!("construction-{key}-instantiate"),
            &format!("Construction, {name}: instantiation, per node"),
            "`cudaGraphInstantiate` of each method's graph; for cudagraph also all of \
             `Dag::into_exec` (validation + lowering + instantiation; `Dag::instantiate` also copies \
             the DAG).",
            &ns,
        );
        let ic = inst.row(CAPTURE, Some(RAW));
        let ir = inst.row(RAW, None);
        let ik = inst.row("cudagraph: cudaGraphInstantiate", Some(RAW));
        let ia = inst.row("cudagraph: Dag::into_exec (all)", None);
        let mut total = Table::new(
            &format!("construction-{key}-total"),
            &format!("Construction, {name}: from nothing to a launchable graph, per node"),
            "Build + (validation + lowering +) instantiation, timed in one go.",
            &ns,
        );
        let tc = total.row(CAP_T, Some(RAW_T));
        let tr = total.row(RAW_T, None);
        let tk = total.row(CRATE_T, Some(RAW_T));
        let tkc = total.row(CRATE_T_COPY, Some(RAW_T));
        for (ni, &n) in ns.iter().enumerate() {
            let st = stages(topology, n);
            let reps = b.reps(n).construction;
            let mut s: Vec<Vec<f64>> = vec![Vec::new(); 12];
            for rep in 0..=reps {
                b.sync()?;
                let mut v = [0f64; 12];
                // raw
                let t0 = Instant::now();
                let g = b.build_raw(topology, n, 1)?;
                let t1 = Instant::now();
                let e = b.instantiate_raw(&g)?;
                let t2 = Instant::now();
                drop((e, g));
                v[0] = us_per_node(t1 - t0, n);
                v[1] = us_per_node(t2 - t1, n);
                v[2] = us_per_node(t2 - t0, n);
                // capture
                let t0 = Instant::now();
                let g = b.capture(&st, 1)?;
                let t1 = Instant::now();
                let e = b.instantiate_raw(&g)?;
                let t2 = Instant::now();
                drop((e, g));
                v[3] = us_per_node(t1 - t0, n);
                v[4] = us_per_node(t2 - t1, n);
                v[5] = us_per_node(t2 - t0, n);
                // cudagraph, end to end, the DAG consumed
                let t0 = Instant::now();
                let (dag, _) = b.build_dag(topology, n, 1)?;
                let t1 = Instant::now();
                let exec = dag.into_exec(&b.device)?;
                let t2 = Instant::now();
                drop(exec);
                v[6] = us_per_node(t1 - t0, n);
                v[7] = us_per_node(t2 - t1, n);
                v[8] = us_per_node(t2 - t0, n);
                // cudagraph, end to end, the DAG kept (copied into the Exec)
                let t0 = Instant::now();
                let (dag, _) = b.build_dag(topology, n, 1)?;
                let exec = dag.instantiate(&b.device)?;
                let t1 = Instant::now();
                drop(exec);
                v[11] = us_per_node(t1 - t0, n);
                // cudagraph, by phase: validate + lower, then CUDA's instantiation alone
                let t0 = Instant::now();
                let mut backend = cudagraph::CudaBackend::new(&b.device)?;
                let handles = dag.lower(&mut backend)?;
                let t1 = Instant::now();
                // SAFETY: the backend's graph is live and complete.
                let e = unsafe { rt::graph_instantiate(backend.raw_graph(), 0)? };
                let t2 = Instant::now();
                // SAFETY: never launched.
                unsafe { rt::graph_exec_destroy(e)? };
                drop((handles, backend, dag));
                v[9] = us_per_node(t1 - t0, n);
                v[10] = us_per_node(t2 - t1, n);
                if rep > 0 {
                    for (k, x) in v.iter().enumerate() {
                        s[k].push(*x);
                    }
                }
            }
            let mut m = |k: usize| median(&mut s[k]);
            let (rb, ri, rt_) = (m(0), m(1), m(2));
            let (cb, ci, ct) = (m(3), m(4), m(5));
            let (kb, ka, kt) = (m(6), m(7), m(8));
            let (kl, ki) = (m(9), m(10));
            let ktc = m(11);
            total.set(tkc, ni, ktc);
            build.set(bc, ni, cb);
            build.set(br, ni, rb);
            build.set(bk, ni, kb);
            lower.set(lr, ni, rb);
            lower.set(lk, ni, kl);
            inst.set(ic, ni, ci);
            inst.set(ir, ni, ri);
            inst.set(ik, ni, ki);
            inst.set(ia, ni, ka);
            total.set(tc, ni, ct);
            total.set(tr, ni, rt_);
            total.set(tk, ni, kt);
            progress(
                &format!("construction, {name}, N={n} ({reps} reps)"),
                t_start,
            );
        }
        let (all, _) = ratio_summary(&total, CRATE_T, &ns);
        let (at_big, worst_big) = ratio_summary(&total, CRATE_T, &[1_000, 10_000]);
        report.target(
            format!(
                "build + validate + lower + instantiate, {name}: within 15% of raw build + \
                 instantiate at N = 1,000 and 10,000"
            ),
            format!("{at_big} (all N: {all})"),
            worst_big,
            1.15,
        );
        report.table(build);
        report.table(lower);
        report.table(inst);
        report.table(total);
    }
    Ok(())
}

/// Updates: one kernel argument of every node between launches, and whole-graph updates.
fn update_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let ns = b.ns.clone();
    let topology = Topology::Chain;
    const RAW_SET: &str = "raw graph: cudaGraphExecKernelNodeSetParams";
    const ARG: &str = "cudagraph: Exec::set_kernel_arg";
    const ARGS: &str = "cudagraph: Exec::set_kernel_args";
    let mut per = Table::new(
        "update-per-node",
        "Update one argument of every node (chain), CPU time per update, no launch",
        "N calls, one per node, changing argument `v`. Raw: the filled-in \
         `cudaKernelNodeParams` with its argument value rewritten, then \
         `cudaGraphExecKernelNodeSetParams`. cudagraph: typed, checked updates.",
        &ns,
    );
    let pr = per.row(RAW_SET, None);
    let pa = per.row(ARG, Some(RAW_SET));
    let pas = per.row(ARGS, Some(RAW_SET));
    let mut upl = Table::new(
        "update-and-launch",
        "Update every node's argument, then launch (chain), CPU time per node",
        "Stream launches take the new value in each launch. Graphs: N per-node updates, then \
         one launch; timed from the first update to the return of the launch call.",
        &ns,
    );
    let ls = upl.row(STREAM, Some(RAW));
    let lr = upl.row(RAW, None);
    let la = upl.row(ARG, Some(RAW));
    let las = upl.row(ARGS, Some(RAW));
    const R_UPD: &str = "raw graph: cudaGraphExecUpdate only";
    const R_INST: &str = "raw graph: cudaGraphInstantiate only";
    const R_BU: &str = "raw graph: rebuild + cudaGraphExecUpdate";
    const R_BI: &str = "raw graph: rebuild + re-instantiate";
    let mut whole = Table::new(
        "update-whole-graph",
        "Whole-graph update vs re-instantiation (chain), CPU time per node",
        "Every node gets a new argument. Raw: a new graph built with the raw calls, then \
         `cudaGraphExecUpdate` into the executable graph, or `cudaGraphInstantiate` of it. \
         Stream capture: the work captured again, then the same. cudagraph: \
         `Dag::set_kernel_args` on every node, then `Exec::update(&dag)` (validation, \
         lowering, `cudaGraphExecUpdate`), or `Dag::instantiate`.",
        &ns,
    );
    let wu = whole.row(R_UPD, None);
    let wi = whole.row(R_INST, None);
    let wbu = whole.row(R_BU, None);
    let wbi = whole.row(R_BI, None);
    let wcu = whole.row(
        "stream capture: re-capture + cudaGraphExecUpdate",
        Some(R_BU),
    );
    let wci = whole.row("stream capture: re-capture + re-instantiate", Some(R_BI));
    let wku = whole.row("cudagraph: Dag::set_kernel_args + Exec::update", Some(R_BU));
    let wki = whole.row(
        "cudagraph: Dag::set_kernel_args + Dag::instantiate",
        Some(R_BI),
    );
    let mut arg_allocs = AllocCount::default();
    let mut args_allocs = AllocCount::default();

    for (ni, &n) in ns.iter().enumerate() {
        let st = stages(topology, n);
        let reps = b.reps(n);
        let raw_graph = b.build_raw(topology, n, 1)?;
        let raw_exec = b.instantiate_raw(&raw_graph)?;
        let cap_graph = b.capture(&st, 1)?;
        let cap_exec = b.instantiate_raw(&cap_graph)?;
        let (mut dag, ids) = b.build_dag(topology, n, 1)?;
        let mut exec = dag.instantiate(&b.device)?;
        // SAFETY: as above.
        let args = RawArgs::new(unsafe { b.counter.as_raw_ptr() }, 1);
        let params = b.raw_params(&args);
        let c = &b.counter;

        let raw_updates = |v: u32| -> Result<()> {
            for (i, &node) in raw_graph.nodes.iter().enumerate() {
                args.set(v.wrapping_add(i as u32));
                // SAFETY: `node` is a kernel node of the graph `raw_exec` came from; same
                // kernel; CUDA copies the argument values.
                ck("cudaGraphExecKernelNodeSetParams", unsafe {
                    (b.api.exec_kernel_node_set_params)(raw_exec.exec, node, &params)
                })?;
            }
            Ok(())
        };

        // Warm-up: every update path and launch once (the first buffer update of an Exec may
        // grow its list of replaced buffers; later ones reuse it).
        raw_updates(1)?;
        b.launch_raw(&raw_exec)?;
        for &id in &ids {
            exec.set_kernel_arg(id, 1, 1u32)?;
            exec.set_kernel_args(id, &args![c, 1u32])?;
        }
        exec.launch(&b.stream)?;
        exec.synchronize()?;
        b.sync()?;

        // Per-node updates, no launch.
        let mut s: Vec<Vec<f64>> = vec![Vec::new(); 3];
        for rep in 0..reps.update {
            let v = rep as u32 * 7 + 2;
            let t0 = Instant::now();
            raw_updates(v)?;
            s[0].push(us_per_node(t0.elapsed(), n));

            let a0 = allocs();
            let t0 = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                exec.set_kernel_arg(id, 1, v.wrapping_add(i as u32))?;
            }
            let t = t0.elapsed();
            arg_allocs.add(allocs() - a0, n as u64);
            s[1].push(us_per_node(t, n));

            let a0 = allocs();
            let t0 = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                exec.set_kernel_args(id, &args![c, v.wrapping_add(i as u32)])?;
            }
            let t = t0.elapsed();
            args_allocs.add(allocs() - a0, n as u64);
            s[2].push(us_per_node(t, n));
        }
        exec.synchronize()?;
        per.set(pr, ni, median(&mut s[0]));
        per.set(pa, ni, median(&mut s[1]));
        per.set(pas, ni, median(&mut s[2]));

        // Update + launch.
        let mut s: Vec<Vec<f64>> = vec![Vec::new(); 4];
        for rep in 0..reps.update {
            let v = rep as u32 * 5 + 3;
            b.sync()?;
            let t0 = Instant::now();
            b.submit_stream(&st, v)?;
            s[0].push(us_per_node(t0.elapsed(), n));

            b.sync()?;
            let t0 = Instant::now();
            raw_updates(v)?;
            b.launch_raw(&raw_exec)?;
            s[1].push(us_per_node(t0.elapsed(), n));

            exec.synchronize()?;
            let t0 = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                exec.set_kernel_arg(id, 1, v.wrapping_add(i as u32))?;
            }
            exec.launch(&b.stream)?;
            s[2].push(us_per_node(t0.elapsed(), n));

            exec.synchronize()?;
            let t0 = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                exec.set_kernel_args(id, &args![c, v.wrapping_add(i as u32)])?;
            }
            exec.launch(&b.stream)?;
            s[3].push(us_per_node(t0.elapsed(), n));
        }
        exec.synchronize()?;
        b.sync()?;
        for (row, k) in [(ls, 0), (lr, 1), (la, 2), (las, 3)] {
            upl.set(row, ni, median(&mut s[k]));
        }

        // Whole-graph update vs re-instantiation.
        let mut s: Vec<Vec<f64>> = vec![Vec::new(); 8];
        for rep in 0..=reps.whole {
            let v = rep as u32 * 3 + 4;
            let mut x = [0f64; 8];
            // raw
            let t0 = Instant::now();
            let g = b.build_raw(topology, n, v)?;
            let tb = t0.elapsed();
            let t0 = Instant::now();
            b.exec_update_raw(&raw_exec, &g)?;
            let tu = t0.elapsed();
            let t0 = Instant::now();
            let e = b.instantiate_raw(&g)?;
            let ti = t0.elapsed();
            drop((e, g));
            x[0] = us_per_node(tu, n);
            x[1] = us_per_node(ti, n);
            x[2] = us_per_node(tb + tu, n);
            x[3] = us_per_node(tb + ti, n);
            // capture
            let t0 = Instant::now();
            let g = b.capture(&st, v)?;
            let tc = t0.elapsed();
            let t0 = Instant::now();
            b.exec_update_raw(&cap_exec, &g)?;
            let tu = t0.elapsed();
            let t0 = Instant::now();
            let e = b.instantiate_raw(&g)?;
            let ti = t0.elapsed();
            drop((e, g));
            x[4] = us_per_node(tc + tu, n);
            x[5] = us_per_node(tc + ti, n);
            // cudagraph
            let t0 = Instant::now();
            for &id in &ids {
                dag.set_kernel_args(id, &args![c, v])?;
            }
            let ts = t0.elapsed();
            let t0 = Instant::now();
            exec.update(&dag)?;
            let tu = t0.elapsed();
            let t0 = Instant::now();
            let fresh = dag.instantiate(&b.device)?;
            let ti = t0.elapsed();
            drop(fresh);
            exec.synchronize()?; // releases the DAG copy the update replaced
            x[6] = us_per_node(ts + tu, n);
            x[7] = us_per_node(ts + ti, n);
            if rep > 0 {
                for (k, val) in x.iter().enumerate() {
                    s[k].push(*val);
                }
            }
        }
        for (row, k) in [
            (wu, 0),
            (wi, 1),
            (wbu, 2),
            (wbi, 3),
            (wcu, 4),
            (wci, 5),
            (wku, 6),
            (wki, 7),
        ] {
            whole.set(row, ni, median(&mut s[k]));
        }

        // The updates took effect: one launch of each graph with the last value.
        if n <= 1000 {
            let v = 11u32;
            b.reset_counter()?;
            for &id in &ids {
                exec.set_kernel_arg(id, 1, v)?;
            }
            exec.launch(&b.stream)?;
            exec.synchronize()?;
            let got = b.read_counter()?;
            if got != v * n as u32 {
                bail!(
                    "after updates, cudagraph counted {got}, expected {}",
                    v * n as u32
                );
            }
        }
        b.sync()?;
        drop(exec);
        drop(args);
        drop((cap_exec, cap_graph, raw_exec, raw_graph));
        progress(&format!("update, N={n}"), t_start);
    }

    for label in [ARG, ARGS] {
        let (detail, worst) = ratio_summary(&per, label, &ns);
        report.target(
            format!(
                "typed argument update (`{}`): within 20% of raw \
                 cudaGraphExecKernelNodeSetParams",
                label.trim_start_matches("cudagraph: ")
            ),
            detail,
            worst,
            1.20,
        );
    }
    let mut allocs_detail = Vec::new();
    let mut worst = 0f64;
    for (what, a) in [
        ("Exec::launch", b.launch_allocs),
        ("Exec::set_kernel_arg", arg_allocs),
        ("Exec::set_kernel_args", args_allocs),
    ] {
        if a.calls > 0 {
            let per_call = a.allocations as f64 / a.calls as f64;
            worst = worst.max(per_call);
            allocs_detail.push(format!(
                "{what}: {} allocations in {} calls",
                a.allocations, a.calls
            ));
        }
    }
    report.target(
        "no heap allocation per update or per launch (after warm-up; also tests/no_alloc.rs)"
            .into(),
        allocs_detail.join("; "),
        (!allocs_detail.is_empty()).then_some(worst),
        0.0,
    );
    report.table(per);
    report.table(upl);
    report.table(whole);
    Ok(())
}

/// Host only: building, validating and lowering to the `RecordingBackend` (as
/// `benches/host.rs`), for the host-only target.
fn host_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let ns = b.ns.clone();
    let mut t = Table::new(
        "host-recording",
        "Host only: build, validate + lower to RecordingBackend, per node",
        "The DAG of the GPU experiments with placeholder kernel and buffer, lowered to \
         `RecordingBackend::new(DeviceLimits::hopper())`; no CUDA call.",
        &ns,
    );
    let mut rows = Vec::new();
    for topology in [Topology::Chain, Topology::FAN8] {
        let name = topology.key();
        rows.push((
            topology,
            t.row(&format!("{name}: build"), None),
            t.row(&format!("{name}: validate + lower"), None),
            t.row(&format!("{name}: total"), None),
        ));
    }
    let mut details = Vec::new();
    let mut worst: Option<f64> = None;
    for (topology, rb, rl, rt_) in rows {
        for (ni, &n) in ns.iter().enumerate() {
            let f = host::measure(topology, n, host::runs_for(n))?;
            t.set(rb, ni, f.build_us);
            t.set(rl, ni, f.validate_lower_us);
            t.set(rt_, ni, f.total_us);
            if n == 10_000 {
                details.push(format!("{}: {:.3} µs/node", topology.name(), f.total_us));
                worst = Some(worst.map_or(f.total_us, |w: f64| w.max(f.total_us)));
            }
        }
    }
    report.target(
        "host-only build + validate + lower (RecordingBackend, 10,000 nodes) ≤ 1 µs per node"
            .into(),
        if details.is_empty() {
            "N=10,000 not in CUDAGRAPH_BENCH_NS".into()
        } else {
            details.join("; ")
        },
        worst,
        host::TARGET_US_PER_NODE,
    );
    report.table(t);
    Ok(())
}

// ---- FFT experiment --------------------------------------------------------------------------

/// Transform sizes of the FFT experiment.
const FFT_POINTS: [usize; 2] = [256, 4096];
/// Batch sizes of the FFT experiment.
const FFT_BATCHES: [usize; 4] = [1, 16, 256, 1024];
/// Back-to-back iterations per timed repetition.
const FFT_ITERS: usize = 200;
/// Timed repetitions per method and configuration (scaled by `CUDAGRAPH_BENCH_REPS_SCALE`).
const FFT_REPS: usize = 7;
/// The load callback's (and the conversion kernel's) scale.
const FFT_SCALE: f32 = 1.0 / 128.0;
/// Correctness check: largest absolute error ≤ `FFT_TOL` × largest reference magnitude.
const FFT_TOL: f64 = 1e-4;

const FFT_GRAPH: &str = "cudagraph: FFT node, Exec::launch";
const FFT_GRAPH_UPD: &str = "cudagraph: Exec::set_fft_params + Exec::launch";
const FFT_STREAM: &str = "stream: StreamFft::exec";
const FFT_UNFUSED: &str = "unfused: int8→float kernel + plain StreamFft::exec";

/// The unfused method's conversion: complex int8 → complex float, times `scale` (the same
/// arithmetic as the built-in `ComplexI8` load callback).
const FFT_CONVERT_SOURCE: &str = r#"
extern "C" __global__ void ci8_to_cf32(float2* out, const char2* in, float scale, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        char2 v = in[i];
        out[i] = make_float2(v.x * scale, v.y * scale);
    }
}
"#;

type FftC32 = rustfft::num_complex::Complex<f32>;
type FftC64 = rustfft::num_complex::Complex<f64>;

/// One (points, batch) configuration: its buffers, plans and executable graph, made once.
struct FftCase {
    points: usize,
    batch: usize,
    input: DeviceBuffer<[i8; 2]>,
    /// The unfused method's converted input.
    converted: DeviceBuffer<FftC32>,
    /// Outputs of the graph, the stream and the unfused methods.
    outs: [DeviceBuffer<FftC32>; 3],
    exec: Exec,
    node: NodeId,
    /// The LTO-callback plan (load `ComplexI8`) on a stream.
    fused: StreamFft,
    /// The callback-free plan on a stream.
    plain: StreamFft,
    /// The load parameters (scale `FFT_SCALE`), and another set for the update method.
    params: FftParams,
    other_params: FftParams,
    convert_cfg: LaunchConfig,
}

impl FftCase {
    fn new(b: &Bench, points: usize, batch: usize) -> Result<FftCase> {
        let d = &b.device;
        let elems = points * batch;
        let desc = FftPlanDesc::new(FftType::C2C, &[points as i64], batch as i64);
        let fused_plan = FftPlan::new(desc.clone().with_load(LoadCallback::ComplexI8))?;
        let plain_plan = FftPlan::new(desc)?;
        let input = DeviceBuffer::from_slice(d, &fft_signal(elems, (points + batch) as u32))?;
        let outs = [
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
        ];
        let load = |scale: f32| FftParams {
            load: Some(CallbackParams::load(scale)),
            store: None,
        };
        let params = load(FFT_SCALE);
        let mut dag = Dag::new();
        let node = dag.add_fft(FftSpec {
            plan: fused_plan.clone(),
            direction: Direction::Forward,
            input: (&input).into(),
            output: (&outs[0]).into(),
            params: params.clone(),
        })?;
        let exec = dag.instantiate(d).context("instantiating the FFT graph")?;
        Ok(FftCase {
            points,
            batch,
            converted: DeviceBuffer::zeros(d, elems)?,
            input,
            outs,
            exec,
            node,
            fused: StreamFft::new(d, &fused_plan).context("the LTO-callback StreamFft")?,
            plain: StreamFft::new(d, &plain_plan).context("the plain StreamFft")?,
            params,
            other_params: load(2.0 * FFT_SCALE),
            convert_cfg: LaunchConfig::for_elements(elems as u32, 256),
        })
    }

    /// Queues iteration `k` of method `m` (0 graph, 1 graph with an update, 2 stream,
    /// 3 unfused) on the bench's stream.
    fn submit(&mut self, b: &Bench, convert: &Kernel, m: usize, k: usize) -> Result<()> {
        let s = &b.stream;
        match m {
            0 => self.exec.launch(s)?,
            1 => {
                let p = if k.is_multiple_of(2) {
                    &self.params
                } else {
                    &self.other_params
                };
                self.exec.set_fft_params(self.node, p.clone())?;
                self.exec.launch(s)?;
            }
            2 => self.fused.exec(
                s,
                Direction::Forward,
                &(&self.input).into(),
                &(&self.outs[1]).into(),
                &self.params,
            )?,
            _ => {
                let n = (self.points * self.batch) as u32;
                convert.launch(
                    s,
                    self.convert_cfg,
                    &args![&self.converted, &self.input, FFT_SCALE, n],
                )?;
                self.plain.exec(
                    s,
                    Direction::Forward,
                    &(&self.converted).into(),
                    &(&self.outs[2]).into(),
                    &FftParams::none(),
                )?;
            }
        }
        Ok(())
    }

    /// Runs the graph, the stream and the unfused methods once each (scale `FFT_SCALE`) into
    /// zeroed outputs and compares all three with rustfft (f64). Returns the worst relative
    /// error.
    fn check(&mut self, b: &Bench, convert: &Kernel) -> Result<f64> {
        b.sync()?;
        self.exec.synchronize()?;
        for o in &self.outs {
            o.memset_bytes(0)?;
        }
        b.device.synchronize()?;
        self.exec.set_fft_params(self.node, self.params.clone())?;
        for m in [0, 2, 3] {
            self.submit(b, convert, m, 0)?;
        }
        b.sync()?;
        self.exec.synchronize()?;
        let x: Vec<FftC64> = self
            .input
            .to_vec()?
            .iter()
            .map(|v| FftC64::new(v[0] as f64, v[1] as f64) * FFT_SCALE as f64)
            .collect();
        let mut want = x;
        let fft = rustfft::FftPlanner::<f64>::new().plan_fft_forward(self.points);
        for chunk in want.chunks_mut(self.points) {
            fft.process(chunk);
        }
        let mag = want
            .iter()
            .map(|c| c.norm())
            .fold(f64::MIN_POSITIVE, f64::max);
        let mut worst = 0f64;
        for (o, name) in self.outs.iter().zip([FFT_GRAPH, FFT_STREAM, FFT_UNFUSED]) {
            let got = o.to_vec()?;
            let err = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (FftC64::new(g.re as f64, g.im as f64) - w).norm())
                .fold(0.0, f64::max);
            let rel = err / mag;
            if rel > FFT_TOL || rel.is_nan() {
                bail!(
                    "FFT {}x{}: {name} is wrong: max error {err:e} = {rel:e} x max |reference| \
                     (tolerance {FFT_TOL:e})",
                    self.points,
                    self.batch
                );
            }
            worst = worst.max(rel);
        }
        Ok(worst)
    }
}

/// Pseudo-random complex 8-bit samples (xorshift).
fn fft_signal(len: usize, seed: u32) -> Vec<[i8; 2]> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s >> 24) as u8 as i8
    };
    (0..len).map(|_| [next(), next()]).collect()
}

/// FFT: batched small transforms of 8-bit complex input, as an FFT node in a graph, as the
/// same cuFFT plan called on a stream, and unfused (conversion kernel + plain cuFFT).
fn fft_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    cudagraph::fft::nvjitlink_available()
        .context("the FFT experiment's load callback is an LTO callback (needs libnvJitLink)")?;
    let convert = Module::from_source(&b.device, FFT_CONVERT_SOURCE)
        .context("compiling the conversion kernel with NVRTC")?
        .kernel("ci8_to_cf32")?;
    let configs: Vec<(usize, usize)> = FFT_POINTS
        .iter()
        .flat_map(|&p| FFT_BATCHES.iter().map(move |&bt| (p, bt)))
        .collect();
    let columns: Vec<String> = configs.iter().map(|(p, bt)| format!("{p}×{bt}")).collect();
    let reps = ((FFT_REPS as f64 * b.reps_scale).round() as usize).max(3);
    let what = "C2C forward transforms, columns points×batch; the input is complex 8-bit \
                integers scaled by 1/128 on load. Methods: the crate's FFT node (plan with an LTO \
                load callback `ComplexI8`; the graph also holds the node's parameter-setting \
                kernel), launched as is or after `Exec::set_fft_params` each time; the same plan \
                called on a stream with `StreamFft::exec` (a parameter-setting kernel + \
                `cufftExecC2C`; same LTO-callback plan); unfused: an NVRTC kernel converting int8 → complex float, then \
                a callback-free plan with `StreamFft::exec`.";
    let mut gpu = Table::configs(
        "fft-gpu",
        "FFT, 8-bit complex input: GPU time per iteration",
        &format!(
            "{what} {FFT_ITERS} iterations back to back between two CUDA events, divided by \
             {FFT_ITERS}; median of {reps} repetitions. When the host issues slower than the \
             GPU runs (small transforms), this is the issue rate."
        ),
        columns.clone(),
        "iteration",
    );
    let mut cpu = Table::configs(
        "fft-cpu",
        "FFT, 8-bit complex input: CPU time per iteration",
        &format!(
            "{what} Wall time of the calls that queue {FFT_ITERS} iterations, divided by \
             {FFT_ITERS}; median of {reps} repetitions."
        ),
        columns,
        "iteration",
    );
    let rows: Vec<(usize, usize)> = [
        (FFT_GRAPH, Some(FFT_STREAM)),
        (FFT_GRAPH_UPD, Some(FFT_STREAM)),
        (FFT_STREAM, None),
        (FFT_UNFUSED, Some(FFT_STREAM)),
    ]
    .iter()
    .map(|&(l, vs)| (gpu.row(l, vs), cpu.row(l, vs)))
    .collect();
    let mut worst_err = 0f64;
    for (ci, &(points, batch)) in configs.iter().enumerate() {
        let t0 = Instant::now();
        let mut case = FftCase::new(b, points, batch)?;
        let made = t0.elapsed().as_secs_f64();
        // Warm-up: every method a few times (the first graph launch uploads the graph).
        for m in 0..4 {
            for k in 0..4 {
                case.submit(b, &convert, m, k)?;
            }
        }
        b.sync()?;
        case.exec.synchronize()?;
        // Before measuring: all three compute the right transform.
        worst_err = worst_err.max(case.check(b, &convert)?);
        let mut gpu_s = vec![Vec::new(); 4];
        let mut cpu_s = vec![Vec::new(); 4];
        for rep in 0..reps {
            // Rotate which method goes first.
            for m in (0..4).map(|k| (k + rep) % 4) {
                b.sync()?;
                b.start.record(&b.stream)?;
                let t0 = Instant::now();
                for k in 0..FFT_ITERS {
                    case.submit(b, &convert, m, k)?;
                }
                let t = t0.elapsed();
                b.end.record(&b.stream)?;
                b.end.synchronize()?;
                cpu_s[m].push(t.as_secs_f64() * 1e6 / FFT_ITERS as f64);
                gpu_s[m].push(b.start.elapsed_ms(&b.end)? as f64 * 1e3 / FFT_ITERS as f64);
            }
        }
        b.sync()?;
        case.exec.synchronize()?;
        for (m, &(rg, rc)) in rows.iter().enumerate() {
            gpu.set(rg, ci, median(&mut gpu_s[m]));
            cpu.set(rc, ci, median(&mut cpu_s[m]));
        }
        drop(case);
        progress(
            &format!("fft, {points}×{batch} (plans and graph made in {made:.2} s, {reps} reps)"),
            t_start,
        );
    }
    println!(
        "FFT correctness: the graph, stream and unfused outputs match rustfft (f64) in every \
         configuration; worst error {worst_err:.1e} × max |reference| (tolerance {FFT_TOL:e})\n"
    );
    for (t, what) in [(&gpu, "GPU"), (&cpu, "CPU")] {
        let (detail, worst) = column_ratios(t, FFT_GRAPH, FFT_STREAM);
        report.target(
            format!(
                "FFT nodes in a graph no slower than the same cuFFT calls on a stream ({what} \
                 time, FFT node / StreamFft; ratio ≤ 1.02, 2% for noise)"
            ),
            detail,
            worst,
            1.02,
        );
    }
    let (detail, worst) = column_ratios(&gpu, FFT_GRAPH, FFT_UNFUSED);
    report.target(
        "FFT nodes faster than the unfused version for the 8-bit input case (GPU time, FFT \
         node / unfused; ratio < 1)"
            .into(),
        detail,
        worst,
        1.0 - 1e-9,
    );
    report.table(gpu);
    report.table(cpu);
    Ok(())
}

/// The ratios of row `label` to row `base` in every column of a configuration table, as
/// text, and the worst (largest).
fn column_ratios(t: &Table, label: &str, base: &str) -> (String, Option<f64>) {
    let find = |l: &str| t.rows.iter().find(|r| r.label == l);
    let (Some(r), Some(b)) = (find(label), find(base)) else {
        return ("no such row".into(), None);
    };
    let mut parts = Vec::new();
    let mut worst: Option<f64> = None;
    for ni in 0..t.ns.len() {
        if let (Some(x), Some(y)) = (r.values[ni], b.values[ni]) {
            let q = x / y;
            parts.push(format!("{q:.2} ({})", t.column(ni)));
            worst = Some(worst.map_or(q, |w: f64| w.max(q)));
        }
    }
    match worst {
        Some(w) => (format!("{}; worst {w:.2}", parts.join(", ")), worst),
        None => ("no data".into(), None),
    }
}

// ---- main ----------------------------------------------------------------------------------

/// The current UTC date and time, `YYYY-MM-DD hh:mm:ss UTC`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn env_list(name: &str) -> Option<Vec<String>> {
    std::env::var(name).ok().map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

fn main() {
    let device = match Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU: {e}");
            if std::env::var("CUDAGRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                eprintln!("CUDAGRAPH_REQUIRE_GPU=1 but the GPU cannot be used");
                std::process::exit(1);
            }
            return;
        }
    };
    if let Err(e) = run(device) {
        eprintln!("benchmark failed: {e:#}");
        std::process::exit(1);
    }
}

fn run(device: Device) -> Result<()> {
    let ns: Vec<usize> = match env_list("CUDAGRAPH_BENCH_NS") {
        Some(v) => v
            .iter()
            .map(|s| {
                s.parse::<usize>()
                    .map_err(|e| anyhow!("CUDAGRAPH_BENCH_NS: {s}: {e}"))
            })
            .collect::<Result<_>>()?,
        None => vec![1, 10, 100, 1_000, 10_000],
    };
    if ns.is_empty() || ns.contains(&0) {
        bail!("CUDAGRAPH_BENCH_NS needs positive node counts");
    }
    let reps_scale: f64 = match std::env::var("CUDAGRAPH_BENCH_REPS_SCALE") {
        Ok(s) => s
            .parse()
            .map_err(|e| anyhow!("CUDAGRAPH_BENCH_REPS_SCALE: {s}: {e}"))?,
        Err(_) => 1.0,
    };
    let only = env_list("CUDAGRAPH_BENCH_ONLY");
    let out = std::env::var_os("CUDAGRAPH_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("bench-results"));

    let p = device.properties();
    let nvrtc = cudagraph::nvrtc_version()
        .map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let header = vec![
        format!("date: {}", utc_now()),
        format!(
            "GPU: {} (compute capability {}.{}, {} SMs, {:.1} GiB)",
            p.name,
            p.limits.compute_capability.0,
            p.limits.compute_capability.1,
            p.multiprocessor_count,
            p.total_memory as f64 / (1u64 << 30) as f64
        ),
        format!(
            "CUDA runtime {}, driver supports CUDA {}, NVRTC {nvrtc}",
            p.runtime_version, p.driver_version
        ),
        format!(
            "cudagraph {}, N = {:?}, repetitions scaled by {reps_scale}",
            env!("CARGO_PKG_VERSION"),
            ns
        ),
    ];
    println!("# cudagraph GPU benchmark\n");
    for h in &header {
        println!("- {h}");
    }
    println!();

    let mut bench = Bench::new(device, ns, reps_scale)?;
    let mut report = Report {
        header,
        tables: Vec::new(),
        targets: Vec::new(),
        errors: Vec::new(),
    };
    let t0 = Instant::now();
    for e in experiments() {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == e.name))
        {
            continue;
        }
        progress(&format!("experiment `{}`", e.name), t0);
        if let Err(err) = (e.run)(&mut bench, &mut report) {
            let msg = format!("experiment `{}` failed: {err:#}", e.name);
            eprintln!("{msg}");
            report.errors.push(msg);
            // Leave the GPU idle and the streams out of capture for the next experiment.
            let _ = bench.device.synchronize();
        }
    }
    bench.sync()?;
    drop(bench);

    println!("{}", report.targets_markdown());
    report.write(&out)?;
    println!(
        "Wrote {0}/graphs.csv, {0}/graphs.md and {0}/graphs.svg ({1:.0} s).",
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    if report.find("launch-chain-cpu").is_none() && !report.errors.is_empty() {
        bail!("no launch results");
    }
    if !report.errors.is_empty() {
        bail!("{} experiment(s) failed", report.errors.len());
    }
    Ok(())
}
