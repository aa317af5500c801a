//! The benchmark context every experiment shares ([`Bench`]: device, streams, events, the tiny
//! kernel loaded twice, the four methods), the method names and the timing helpers.

use std::ffi::{c_void, CString};
use std::ptr;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudagraph::result::runtime as rt;
use cudagraph::{
    args, sys, CompileOptions, Dag, Device, DeviceBuffer, Event, Kernel, LaunchConfig, Module,
    NodeId, Stream,
};

use crate::host::{build_shape, Topology};
use crate::raw::{ck, Api, RawArgs, RawExec, RawGraph, RawKernel, SyncEvent};

/// Allocations seen on one of the crate's hot paths (after warm-up).
#[derive(Debug, Default, Clone, Copy)]
pub struct AllocCount {
    pub allocations: u64,
    pub calls: u64,
}

impl AllocCount {
    pub fn add(&mut self, allocations: u64, calls: u64) {
        self.allocations += allocations;
        self.calls += calls;
    }
}

pub const KERNEL_SOURCE: &str = r#"
extern "C" __global__ void tiny(unsigned* c, unsigned v) { if (threadIdx.x == 0) c[0] += v; }
"#;

/// Everything the experiments share.
pub struct Bench {
    pub device: Device,
    pub stream: Stream,
    pub workers: Vec<Stream>,
    pub fork: SyncEvent,
    pub joins: Vec<SyncEvent>,
    pub start: Event,
    pub end: Event,
    pub kernel: Kernel,
    pub counter: DeviceBuffer<u32>,
    pub api: Api,
    pub ns: Vec<usize>,
    pub reps_scale: f64,
    /// Allocations in `Exec::launch`, counted by the launch experiment.
    pub launch_allocs: AllocCount,
    /// The arguments of the plain stream launches (CUDA copies them at each launch).
    pub stream_args: RawArgs,
    // Declared last: dropped after everything that might use the kernel.
    pub raw: RawKernel,
}

pub const BLOCK: u32 = 32;
pub const MAX_WIDTH: usize = 8;

/// How many repetitions (after one warm-up) each kind of measurement gets at `n` nodes.
#[derive(Debug, Clone, Copy)]
pub struct Reps {
    pub launch: usize,
    pub construction: usize,
    pub update: usize,
    pub whole: usize,
}

impl Bench {
    pub fn new(device: Device, ns: Vec<usize>, reps_scale: f64) -> Result<Bench> {
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

    pub fn reps(&self, n: usize) -> Reps {
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

    pub fn cfg() -> LaunchConfig {
        LaunchConfig::new(1, BLOCK)
    }

    pub fn raw_params(&self, args: &RawArgs) -> sys::cudaKernelNodeParams {
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

    /// The same launch as [`Bench::raw_params`], as the driver's parameters: given as the
    /// kernel (`cudaKernel_t` is `CUkernel`) and context `ctx`, as the crate gives them.
    pub fn raw_driver_params(
        &self,
        args: &RawArgs,
        ctx: sys::CUcontext,
    ) -> sys::CUDA_KERNEL_NODE_PARAMS {
        cudagraph::result::driver::kernel_node_params(&self.raw_params(args), ctx)
    }

    /// The same launch as [`Bench::raw_params`], as the generic parameters of a kernel node
    /// (`cudaKernelNodeParamsV2` in `cudaGraphNodeParams`, the rest zero), as the crate
    /// makes them.
    pub fn raw_generic_params(&self, args: &RawArgs) -> sys::cudaGraphNodeParams {
        let p = self.raw_params(args);
        // SAFETY: every field is an integer, a pointer or a C enum whose value 0 exists (the
        // type is set below); CUDA wants the reserved fields zero.
        let mut g: sys::cudaGraphNodeParams = unsafe { std::mem::zeroed() };
        g.type_ = sys::cudaGraphNodeType::cudaGraphNodeTypeKernel;
        g.__bindgen_anon_1.kernel = sys::cudaKernelNodeParamsV2 {
            func: p.func,
            gridDim: p.gridDim,
            blockDim: p.blockDim,
            sharedMemBytes: p.sharedMemBytes,
            kernelParams: p.kernelParams,
            extra: p.extra,
        };
        g
    }

    // -- method 1: plain stream launches (also what method 2 captures) --

    /// Issues one run of the DAG with stages `stages` as plain launches, every node with
    /// argument `v`: width-1 stages on the main stream, wider ones on the worker streams,
    /// forked and joined with events.
    pub fn submit_stream(&self, stages: &[usize], v: u32) -> Result<()> {
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
    pub fn capture(&self, stages: &[usize], v: u32) -> Result<RawGraph> {
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

    /// An empty graph made with `cudaGraphCreate`, room for `n` nodes.
    fn new_raw_graph(&self, n: usize) -> Result<RawGraph> {
        let mut graph = ptr::null_mut();
        // SAFETY: out-pointer; the graph is owned by the RawGraph below.
        ck("cudaGraphCreate", unsafe {
            (self.api.graph_create)(&mut graph, 0)
        })?;
        Ok(RawGraph {
            graph,
            nodes: Vec::with_capacity(n),
            destroy: self.api.graph_destroy,
        })
    }

    /// Builds the DAG with `cudaGraphCreate` and one `cudaGraphAddKernelNode` per node.
    pub fn build_raw(&self, topology: Topology, n: usize, v: u32) -> Result<RawGraph> {
        let api = &self.api;
        let mut g = self.new_raw_graph(n)?;
        let graph = g.graph;
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

    /// [`Bench::build_raw`] through the generic API: one `cudaGraphAddNode` per node (the
    /// call the crate lowers kernel nodes with), the same dependencies, no edge data.
    pub fn build_raw_generic(&self, topology: Topology, n: usize, v: u32) -> Result<RawGraph> {
        let api = &self.api;
        let mut g = self.new_raw_graph(n)?;
        let graph = g.graph;
        // SAFETY: the counter outlives the raw graph's launches (the bench synchronises before
        // dropping it).
        let args = RawArgs::new(unsafe { self.counter.as_raw_ptr() }, v);
        let mut params = self.raw_generic_params(&args);
        g.nodes = build_shape(topology, n, |deps: &[sys::cudaGraphNode_t]| {
            let mut node = ptr::null_mut();
            // SAFETY: `deps` are nodes of this graph; `params` is a kernel node's, as in
            // `build_raw`; CUDA copies the argument values.
            ck("cudaGraphAddNode", unsafe {
                (api.graph_add_node)(
                    &mut node,
                    graph,
                    deps.as_ptr(),
                    ptr::null(),
                    deps.len(),
                    &mut params,
                )
            })?;
            Ok::<_, anyhow::Error>(node)
        })?;
        Ok(g)
    }

    pub fn instantiate_raw(&self, g: &RawGraph) -> Result<RawExec> {
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

    pub fn launch_raw(&self, e: &RawExec) -> Result<()> {
        // SAFETY: live exec and stream; the counter outlives every launch.
        ck("cudaGraphLaunch", unsafe {
            (self.api.graph_launch)(e.exec, self.stream.raw())
        })
    }

    pub fn exec_update_raw(&self, e: &RawExec, g: &RawGraph) -> Result<()> {
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

    pub fn build_dag(&self, topology: Topology, n: usize, v: u32) -> Result<(Dag, Vec<NodeId>)> {
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

    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize()?;
        for w in &self.workers {
            w.synchronize()?;
        }
        Ok(())
    }

    /// Zeroes the counter (and waits for it).
    pub fn reset_counter(&self) -> Result<()> {
        self.sync()?;
        self.counter.memset_bytes(0)?;
        self.device.synchronize()?;
        Ok(())
    }

    pub fn read_counter(&self) -> Result<u32> {
        self.sync()?;
        Ok(self.counter.to_vec()?[0])
    }
}

pub const STREAM: &str = "stream launches";
pub const CAPTURE: &str = "stream capture";
pub const RAW: &str = "raw graph";
/// The raw graph made with CUDA's generic node API (what the kernel-specific calls save).
pub const RAW_GENERIC: &str = "raw graph, generic API: cudaGraphAddNode";
pub const CRATE: &str = "cudagraph";

pub fn us_per_node(d: std::time::Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

pub fn progress(what: &str, t0: Instant) {
    eprintln!("[{:>7.1} s] {what}", t0.elapsed().as_secs_f64());
}
