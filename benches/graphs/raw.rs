//! The raw runtime calls of the "stream", "capture" and "raw graph" methods (and the one driver
//! call the crate's kernel updates make): function pointers taken once from the crate's `sys`
//! tables, and owning wrappers of raw handles.

use std::ffi::c_void;
use std::ptr;

use anyhow::{anyhow, Result};
use cudagraph::result::runtime as rt;
use cudagraph::sys;

// ---- the raw runtime calls -----------------------------------------------------------------

pub type Status = sys::cudaError_t;
pub type Uint = std::os::raw::c_uint;

/// The runtime functions the raw methods call, taken once from the crate's `sys` function
/// table (`cudagraph::load::cudart()`), so the raw paths pay nothing per call beyond CUDA.
#[derive(Clone, Copy)]
pub struct Api {
    pub launch_kernel: unsafe extern "C" fn(
        *const c_void,
        sys::dim3,
        sys::dim3,
        *mut *mut c_void,
        usize,
        sys::cudaStream_t,
    ) -> Status,
    pub event_record: unsafe extern "C" fn(sys::cudaEvent_t, sys::cudaStream_t) -> Status,
    pub stream_wait_event:
        unsafe extern "C" fn(sys::cudaStream_t, sys::cudaEvent_t, Uint) -> Status,
    pub begin_capture:
        unsafe extern "C" fn(sys::cudaStream_t, sys::cudaStreamCaptureMode) -> Status,
    pub end_capture: unsafe extern "C" fn(sys::cudaStream_t, *mut sys::cudaGraph_t) -> Status,
    pub graph_create: unsafe extern "C" fn(*mut sys::cudaGraph_t, Uint) -> Status,
    pub graph_add_kernel_node: unsafe extern "C" fn(
        *mut sys::cudaGraphNode_t,
        sys::cudaGraph_t,
        *const sys::cudaGraphNode_t,
        usize,
        *const sys::cudaKernelNodeParams,
    ) -> Status,
    /// The generic call the crate adds nodes with (no edge data: plain dependencies).
    pub graph_add_node: unsafe extern "C" fn(
        *mut sys::cudaGraphNode_t,
        sys::cudaGraph_t,
        *const sys::cudaGraphNode_t,
        *const sys::cudaGraphEdgeData,
        usize,
        *mut sys::cudaGraphNodeParams,
    ) -> Status,
    pub graph_instantiate: unsafe extern "C" fn(
        *mut sys::cudaGraphExec_t,
        sys::cudaGraph_t,
        std::os::raw::c_ulonglong,
    ) -> Status,
    pub graph_launch: unsafe extern "C" fn(sys::cudaGraphExec_t, sys::cudaStream_t) -> Status,
    pub exec_kernel_node_set_params: unsafe extern "C" fn(
        sys::cudaGraphExec_t,
        sys::cudaGraphNode_t,
        *const sys::cudaKernelNodeParams,
    ) -> Status,
    /// The generic call the crate updates nodes with.
    pub exec_node_set_params: unsafe extern "C" fn(
        sys::cudaGraphExec_t,
        sys::cudaGraphNode_t,
        *mut sys::cudaGraphNodeParams,
    ) -> Status,
    /// The driver's kernel-node update, which the crate's per-node kernel updates call.
    pub drv_exec_kernel_node_set_params: unsafe extern "C" fn(
        sys::CUgraphExec,
        sys::CUgraphNode,
        *const sys::CUDA_KERNEL_NODE_PARAMS,
    ) -> sys::CUresult,
    pub exec_update: unsafe extern "C" fn(
        sys::cudaGraphExec_t,
        sys::cudaGraph_t,
        *mut sys::cudaGraphExecUpdateResultInfo,
    ) -> Status,
    pub exec_destroy: unsafe extern "C" fn(sys::cudaGraphExec_t) -> Status,
    pub graph_destroy: unsafe extern "C" fn(sys::cudaGraph_t) -> Status,
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
    pub fn load() -> Result<Api> {
        let lib = cudagraph::load::cudart()?;
        let drv = cudagraph::load::driver()?;
        Ok(Api {
            drv_exec_kernel_node_set_params: *drv
                .cuGraphExecKernelNodeSetParams_v2
                .as_ref()
                .map_err(|e| {
                    anyhow!("the CUDA driver lacks cuGraphExecKernelNodeSetParams: {e}")
                })?,
            launch_kernel: sym!(lib, cudaLaunchKernel),
            event_record: sym!(lib, cudaEventRecord),
            stream_wait_event: sym!(lib, cudaStreamWaitEvent),
            begin_capture: sym!(lib, cudaStreamBeginCapture),
            end_capture: sym!(lib, cudaStreamEndCapture),
            graph_create: sym!(lib, cudaGraphCreate),
            graph_add_kernel_node: sym!(lib, cudaGraphAddKernelNode),
            graph_add_node: sym!(lib, cudaGraphAddNode),
            graph_instantiate: sym!(lib, cudaGraphInstantiate),
            graph_launch: sym!(lib, cudaGraphLaunch),
            exec_kernel_node_set_params: sym!(lib, cudaGraphExecKernelNodeSetParams),
            exec_node_set_params: sym!(lib, cudaGraphExecNodeSetParams),
            exec_update: sym!(lib, cudaGraphExecUpdate),
            exec_destroy: sym!(lib, cudaGraphExecDestroy),
            graph_destroy: sym!(lib, cudaGraphDestroy),
        })
    }
}

/// A driver status as a `Result`, with the driver's name for the error.
pub fn ck_drv(call: &'static str, status: sys::CUresult) -> Result<()> {
    cudagraph::result::driver::check(call, status).map_err(Into::into)
}

/// A CUDA status as a `Result`, with CUDA's name for the error.
pub fn ck(call: &'static str, status: Status) -> Result<()> {
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

pub struct RawArgs(*mut Slots);

impl RawArgs {
    pub fn new(ptr: u64, val: u32) -> RawArgs {
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

    pub fn set(&self, val: u32) {
        // SAFETY: the allocation lives as long as `self`; CUDA reads it only during calls.
        unsafe { (*self.0).val = val };
    }

    pub fn set_ptr(&self, ptr: u64) {
        // SAFETY: as above.
        unsafe { (*self.0).ptr = ptr };
    }

    /// The `kernelParams` / `args` array.
    pub fn array(&self) -> *mut *mut c_void {
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
pub struct RawGraph {
    pub graph: sys::cudaGraph_t,
    /// The kernel nodes in creation order (empty for a captured graph).
    pub nodes: Vec<sys::cudaGraphNode_t>,
    pub destroy: unsafe extern "C" fn(sys::cudaGraph_t) -> Status,
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
pub struct RawExec {
    pub exec: sys::cudaGraphExec_t,
    pub destroy: unsafe extern "C" fn(sys::cudaGraphExec_t) -> Status,
}

impl Drop for RawExec {
    fn drop(&mut self) {
        // SAFETY: the executable graph is owned.
        let _ = unsafe { (self.destroy)(self.exec) };
    }
}

/// An event without timing, for fork/join between streams.
pub struct SyncEvent(pub sys::cudaEvent_t);

impl SyncEvent {
    pub fn new() -> Result<SyncEvent> {
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
pub struct RawKernel {
    pub library: sys::cudaLibrary_t,
    pub kernel: sys::cudaKernel_t,
}

impl Drop for RawKernel {
    fn drop(&mut self) {
        // SAFETY: every raw graph using the kernel is gone by now (the bench drops them before
        // returning from each experiment, and `Bench` drops this last).
        let _ = unsafe { rt::library_unload(self.library) };
    }
}
