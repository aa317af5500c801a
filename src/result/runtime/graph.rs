//! CUDA graph calls: construction (graphs and their nodes), then instantiation, launch and
//! updates of executable graphs.

use std::ffi::{c_void, CStr};
use std::ptr;

use super::{check, error, LIB};
use crate::error::Result;
use crate::load::{self, ffi};
use crate::sys;

// ---- graphs: construction ------------------------------------------------------------------

/// `cudaGraphCreate`.
///
/// # Safety
/// The graph must be destroyed with [`graph_destroy`].
pub unsafe fn graph_create() -> Result<sys::cudaGraph_t> {
    let mut g = ptr::null_mut();
    rt!(cudaGraphCreate(&mut g, 0))?;
    Ok(g)
}

/// `cudaGraphDestroy`.
///
/// # Safety
/// `graph` is live and not used afterwards.
pub unsafe fn graph_destroy(graph: sys::cudaGraph_t) -> Result<()> {
    rt!(cudaGraphDestroy(graph))
}

/// `cudaGraphAddKernelNode`: a kernel node without edge data (see `NodeParams::Kernel` for why
/// not the generic call).
///
/// # Safety
/// `graph` is live, `deps` are its nodes; `params.func` is a live kernel of the current
/// device, `params.kernelParams` points to one pointer per kernel parameter, each to a value
/// of that parameter's size, readable during the call (CUDA copies them); the device
/// addresses among the values stay valid while any executable graph made from `graph` can
/// run.
pub unsafe fn graph_add_kernel_node(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    params: &sys::cudaKernelNodeParams,
) -> Result<sys::cudaGraphNode_t> {
    let mut n = ptr::null_mut();
    rt!(cudaGraphAddKernelNode(
        &mut n,
        graph,
        deps.as_ptr(),
        deps.len(),
        params
    ))?;
    Ok(n)
}

/// `cudaGraphAddNode`: the generic call every node kind but 1D copies and kernels without
/// edge data is added with.
///
/// # Safety
/// `graph` is live, `deps` are its nodes, `edges` is empty or has one entry per dependency;
/// `params` names in `type_` the union member that is set, and what it points to is valid for
/// the call (CUDA copies kernel arguments), and — buffers, kernels, host functions and their
/// data — stays valid while any executable graph made from `graph` can run.
pub unsafe fn graph_add_node(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    edges: &[sys::cudaGraphEdgeData],
    params: &mut sys::cudaGraphNodeParams,
) -> Result<sys::cudaGraphNode_t> {
    debug_assert!(edges.is_empty() || edges.len() == deps.len());
    let mut n = ptr::null_mut();
    let edge_ptr = if edges.is_empty() {
        ptr::null()
    } else {
        edges.as_ptr()
    };
    rt!(cudaGraphAddNode(
        &mut n,
        graph,
        deps.as_ptr(),
        edge_ptr,
        deps.len(),
        params
    ))?;
    Ok(n)
}

/// `cudaGraphConditionalHandleCreate`: a conditional handle of `graph`, reset to `default`
/// at the start of every launch when `flags` is `cudaGraphCondAssignDefault`.
///
/// # Safety
/// `graph` is live; the handle is used only by one conditional node of `graph` (or of a body
/// inside it) and by kernels of those graphs.
pub unsafe fn graph_conditional_handle_create(
    graph: sys::cudaGraph_t,
    default: u32,
    flags: u32,
) -> Result<sys::cudaGraphConditionalHandle> {
    let mut h: sys::cudaGraphConditionalHandle = 0;
    rt!(cudaGraphConditionalHandleCreate(
        &mut h, graph, default, flags
    ))?;
    Ok(h)
}

/// `cudaGraphAddMemcpyNode1D`.
///
/// # Safety
/// `graph` is live, `deps` are its nodes; `dst` and `src` stay valid for `bytes` bytes while any
/// executable graph made from this one can run.
pub unsafe fn graph_add_memcpy_node_1d(
    graph: sys::cudaGraph_t,
    deps: &[sys::cudaGraphNode_t],
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<sys::cudaGraphNode_t> {
    let mut n = ptr::null_mut();
    rt!(cudaGraphAddMemcpyNode1D(
        &mut n,
        graph,
        deps.as_ptr(),
        deps.len(),
        dst,
        src,
        bytes,
        kind
    ))?;
    Ok(n)
}

/// `cudaGraphGetNodes`: every node of `graph`.
///
/// # Safety
/// `graph` is live.
pub unsafe fn graph_nodes(graph: sys::cudaGraph_t) -> Result<Vec<sys::cudaGraphNode_t>> {
    let mut n = 0usize;
    rt!(cudaGraphGetNodes(graph, ptr::null_mut(), &mut n))?;
    let mut nodes = vec![ptr::null_mut(); n];
    rt!(cudaGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n))?;
    nodes.truncate(n);
    Ok(nodes)
}

/// `cudaGraphNodeGetDependencies`: the nodes `node` depends on, copied out.
///
/// # Safety
/// `node` is a node of a live graph.
pub unsafe fn graph_node_dependencies(
    node: sys::cudaGraphNode_t,
) -> Result<Vec<sys::cudaGraphNode_t>> {
    let mut n = 0usize;
    rt!(cudaGraphNodeGetDependencies(
        node,
        ptr::null_mut(),
        ptr::null_mut(),
        &mut n
    ))?;
    let mut deps = vec![ptr::null_mut(); n];
    if n > 0 {
        rt!(cudaGraphNodeGetDependencies(
            node,
            deps.as_mut_ptr(),
            ptr::null_mut(),
            &mut n
        ))?;
    }
    deps.truncate(n);
    Ok(deps)
}

/// `cudaGraphNodeGetType`, read as the raw integer (a type newer than these bindings must
/// not be read as their Rust enum).
///
/// # Safety
/// `node` is a node of a live graph.
pub unsafe fn graph_node_type(node: sys::cudaGraphNode_t) -> Result<u32> {
    let mut t = 0u32;
    rt!(cudaGraphNodeGetType(node, (&mut t as *mut u32).cast()))?;
    Ok(t)
}

/// `cudaGraphDebugDotPrint`.
///
/// # Safety
/// `graph` is live.
pub unsafe fn graph_debug_dot_print(
    graph: sys::cudaGraph_t,
    path: &CStr,
    flags: u32,
) -> Result<()> {
    rt!(cudaGraphDebugDotPrint(graph, path.as_ptr(), flags))
}

// ---- graphs: execution and update ----------------------------------------------------------

/// `cudaGraphInstantiate`.
///
/// # Safety
/// `graph` is live; the result must be destroyed with [`graph_exec_destroy`].
pub unsafe fn graph_instantiate(
    graph: sys::cudaGraph_t,
    flags: u64,
) -> Result<sys::cudaGraphExec_t> {
    let mut e = ptr::null_mut();
    rt!(cudaGraphInstantiate(&mut e, graph, flags as _))?;
    Ok(e)
}

/// `cudaGraphExecGetFlags`: the flags `exec` was instantiated with (CUDA 13.0 was seen to
/// answer 0 for `UseNodePriority` and `Upload`).
///
/// # Safety
/// `exec` is live.
pub unsafe fn graph_exec_flags(exec: sys::cudaGraphExec_t) -> Result<u64> {
    let mut f: std::os::raw::c_ulonglong = 0;
    rt!(cudaGraphExecGetFlags(exec, &mut f))?;
    Ok(f as u64)
}

/// `cudaGraphKernelNodeSetAttribute` with `cudaLaunchAttributePriority`.
///
/// # Safety
/// `node` is a live kernel node.
pub unsafe fn graph_kernel_node_set_priority(
    node: sys::cudaGraphNode_t,
    priority: i32,
) -> Result<()> {
    let v = sys::cudaLaunchAttributeValue { priority };
    // SAFETY: as this function's contract; `priority` is the member this attribute reads.
    unsafe {
        graph_kernel_node_set_attribute(
            node,
            sys::cudaLaunchAttributeID::cudaLaunchAttributePriority,
            &v,
        )
    }
}

/// `cudaGraphKernelNodeSetAttribute`: sets launch attribute `id` of a kernel node to `value`.
///
/// # Safety
/// `node` is a live kernel node; `value`'s member for `id` is the one written, and any memory
/// it points to (an access-policy window) stays valid while the graph may run.
pub unsafe fn graph_kernel_node_set_attribute(
    node: sys::cudaGraphNode_t,
    id: sys::cudaLaunchAttributeID,
    value: &sys::cudaLaunchAttributeValue,
) -> Result<()> {
    rt!(cudaGraphKernelNodeSetAttribute(node, id, value))
}

/// `cudaGraphKernelNodeGetAttribute` with `cudaLaunchAttributePriority`.
///
/// # Safety
/// `node` is a live kernel node.
pub unsafe fn graph_kernel_node_priority(node: sys::cudaGraphNode_t) -> Result<i32> {
    // SAFETY: an all-zero union is a valid value of every member.
    let mut v: sys::cudaLaunchAttributeValue = unsafe { std::mem::zeroed() };
    rt!(cudaGraphKernelNodeGetAttribute(
        node,
        sys::cudaLaunchAttributeID::cudaLaunchAttributePriority,
        &mut v
    ))?;
    // SAFETY: CUDA wrote the `priority` member for this attribute.
    Ok(unsafe { v.priority })
}

/// Makes kernel node `node` device-updatable (`cudaGraphKernelNodeSetAttribute` with
/// `cudaLaunchAttributeDeviceUpdatableKernelNode`, CUDA 12.4+) and returns the handle device
/// code updates it with (`cudaGraphDeviceNode_t`). CUDA writes the handle into the value it is
/// given (`devNode`, as for a launch attribute of `cudaLaunchKernelEx`); should it leave it
/// null, the handle is read back with `cudaGraphKernelNodeGetAttribute`.
///
/// # Safety
/// `node` is a live kernel node of a graph that is not instantiated yet.
pub unsafe fn graph_kernel_node_make_device_updatable(
    node: sys::cudaGraphNode_t,
) -> Result<sys::cudaGraphDeviceNode_t> {
    let id = sys::cudaLaunchAttributeID::cudaLaunchAttributeDeviceUpdatableKernelNode;
    // SAFETY: an all-zero union is a valid value of every member.
    let mut v: sys::cudaLaunchAttributeValue = unsafe { std::mem::zeroed() };
    // Writing a plain-data field of the zeroed union's member for `id` (safe: a union field
    // of `Copy` type is written without `unsafe`).
    v.deviceUpdatableKernelNode.deviceUpdatable = 1;
    // Passed through a pointer made from `&mut v`: CUDA may write the handle into it.
    let value: *mut sys::cudaLaunchAttributeValue = &mut v;
    rt!(cudaGraphKernelNodeSetAttribute(
        node,
        id,
        value.cast_const()
    ))?;
    // SAFETY: `v` is this member for `id`, written by us or by CUDA (plain data).
    let written = unsafe { v.deviceUpdatableKernelNode.devNode };
    if !written.is_null() {
        return Ok(written);
    }
    rt!(cudaGraphKernelNodeGetAttribute(node, id, &mut v))?;
    // SAFETY: CUDA wrote the `deviceUpdatableKernelNode` member for this attribute.
    Ok(unsafe { v.deviceUpdatableKernelNode.devNode })
}

/// `cudaGraphKernelNodeSetParams`: replaces the parameters of a kernel node of a graph being
/// built (not instantiated yet).
///
/// # Safety
/// As [`graph_add_kernel_node`]'s `params`; `node` is a live kernel node.
pub unsafe fn graph_kernel_node_set_params(
    node: sys::cudaGraphNode_t,
    params: &sys::cudaKernelNodeParams,
) -> Result<()> {
    rt!(cudaGraphKernelNodeSetParams(node, params))
}

/// Why `cudaGraphInstantiateWithParams` refused a graph: the error, CUDA's
/// `cudaGraphInstantiateResult` (read as an integer: a value a newer CUDA adds must not become
/// an invalid Rust enum) and the node CUDA blames, if it names one.
pub struct InstantiateRefusal {
    /// The call's error.
    pub error: crate::error::Error,
    /// `cudaGraphInstantiateResult` as CUDA wrote it.
    pub result: u32,
    /// The node CUDA blames (null when it names none).
    pub node: sys::cudaGraphNode_t,
}

impl InstantiateRefusal {
    /// What `result` means, in words (CUDA 13.0's values).
    pub fn result_words(&self) -> &'static str {
        match self.result {
            1 => "instantiation failed",
            2 => "invalid graph structure",
            3 => "a node operation is not supported (for this instantiation)",
            4 => "nodes on several devices are not supported here",
            5 => "a conditional handle is not used by any conditional node",
            _ => "refused",
        }
    }
}

/// `cudaGraphInstantiateWithParams` with `flags`, uploading on `upload_stream` when given
/// (`cudaGraphInstantiateFlagUpload` is then added); a refusal keeps the node CUDA blames.
///
/// # Safety
/// `graph` and `upload_stream` are live; the result must be destroyed with
/// [`graph_exec_destroy`].
pub unsafe fn graph_instantiate_with_params(
    graph: sys::cudaGraph_t,
    flags: u64,
    upload_stream: Option<sys::cudaStream_t>,
) -> std::result::Result<sys::cudaGraphExec_t, InstantiateRefusal> {
    // `cudaGraphInstantiateParams` with the result CUDA writes back read as an integer.
    #[repr(C)]
    struct Params {
        flags: u64,
        upload_stream: sys::cudaStream_t,
        err_node: sys::cudaGraphNode_t,
        result: u32,
    }
    const _: () = assert!(
        std::mem::size_of::<Params>() == std::mem::size_of::<sys::cudaGraphInstantiateParams>()
    );
    let mut params = Params {
        flags: match upload_stream {
            Some(_) => flags | sys::cudaGraphInstantiateFlagUpload as u64,
            None => flags,
        },
        upload_stream: upload_stream.unwrap_or(ptr::null_mut()),
        err_node: ptr::null_mut(),
        result: 0,
    };
    let mut e = ptr::null_mut();
    let mut call = || -> Result<()> {
        rt!(cudaGraphInstantiateWithParams(
            &mut e,
            graph,
            (&mut params as *mut Params).cast::<sys::cudaGraphInstantiateParams>()
        ))
    };
    match call() {
        Ok(()) => Ok(e),
        Err(error) => Err(InstantiateRefusal {
            error,
            result: params.result,
            node: params.err_node,
        }),
    }
}

/// `cudaGraphExecDestroy`.
///
/// # Safety
/// `exec` is live and not used afterwards.
pub unsafe fn graph_exec_destroy(exec: sys::cudaGraphExec_t) -> Result<()> {
    rt!(cudaGraphExecDestroy(exec))
}

/// `cudaGraphLaunch`.
///
/// # Safety
/// `exec` and `stream` are live, and everything the graph refers to stays valid until it ran.
pub unsafe fn graph_launch(exec: sys::cudaGraphExec_t, stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaGraphLaunch(exec, stream))
}

/// `cudaGraphUpload`.
///
/// # Safety
/// `exec` and `stream` are live.
pub unsafe fn graph_upload(exec: sys::cudaGraphExec_t, stream: sys::cudaStream_t) -> Result<()> {
    rt!(cudaGraphUpload(exec, stream))
}

/// `cudaGraphExecKernelNodeSetParams`: a kernel node's update through the runtime's
/// kernel-specific call. The crate's own kernel nodes (FFT nodes' included) update through the
/// driver instead (`result::driver::graph_exec_kernel_node_set_params`, which says why); this
/// is the runtime's form, for a node whose context is the calling thread's current one.
///
/// # Safety
/// `node` is a kernel node of the graph `exec` was instantiated from, made with the kernel
/// `params.func`; `params.kernelParams` points to one pointer per kernel parameter, each to a
/// value of that parameter's size, all readable during the call (CUDA copies them); the device
/// addresses among the values stay valid while the graph may run.
pub unsafe fn graph_exec_kernel_node_set_params(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    params: &sys::cudaKernelNodeParams,
) -> Result<()> {
    rt!(cudaGraphExecKernelNodeSetParams(exec, node, params))
}

/// `cudaGraphExecNodeSetParams`: the generic per-node update.
///
/// # Safety
/// `node` is a node of the graph `exec` was instantiated from, of the type `params` names;
/// `params` is valid as for [`graph_add_node`].
pub unsafe fn graph_exec_node_set_params(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    params: &mut sys::cudaGraphNodeParams,
) -> Result<()> {
    rt!(cudaGraphExecNodeSetParams(exec, node, params))
}

/// `cudaGraphExecMemcpyNodeSetParams1D`.
///
/// # Safety
/// As [`graph_add_memcpy_node_1d`]; `node` is a 1D memcpy node of `exec`'s graph.
pub unsafe fn graph_exec_memcpy_node_set_params_1d(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
) -> Result<()> {
    rt!(cudaGraphExecMemcpyNodeSetParams1D(
        exec, node, dst, src, bytes, kind
    ))
}

/// `cudaGraphNodeSetEnabled`.
///
/// # Safety
/// `node` is a kernel, memcpy or memset node of `exec`'s graph.
pub unsafe fn graph_node_set_enabled(
    exec: sys::cudaGraphExec_t,
    node: sys::cudaGraphNode_t,
    enabled: bool,
) -> Result<()> {
    rt!(cudaGraphNodeSetEnabled(exec, node, enabled as u32))
}

/// What `cudaGraphExecUpdate` said when it refused: `cudaGraphExecUpdateResult`'s name (or its
/// number, for a value newer than these bindings) and the node it blamed (may be null).
#[derive(Debug, Clone, Copy)]
pub struct UpdateRefusal {
    /// The raw `cudaGraphExecUpdateResult` value.
    pub code: u32,
    /// The node CUDA blamed (in the graph passed to the update), or null.
    pub node: sys::cudaGraphNode_t,
}

impl UpdateRefusal {
    /// The result's name.
    pub fn name(&self) -> String {
        use sys::cudaGraphExecUpdateResult as R;
        let known = [
            R::cudaGraphExecUpdateSuccess,
            R::cudaGraphExecUpdateError,
            R::cudaGraphExecUpdateErrorTopologyChanged,
            R::cudaGraphExecUpdateErrorNodeTypeChanged,
            R::cudaGraphExecUpdateErrorFunctionChanged,
            R::cudaGraphExecUpdateErrorParametersChanged,
            R::cudaGraphExecUpdateErrorNotSupported,
            R::cudaGraphExecUpdateErrorUnsupportedFunctionChange,
            R::cudaGraphExecUpdateErrorAttributesChanged,
        ];
        known.iter().find(|r| **r as u32 == self.code).map_or_else(
            || format!("cudaGraphExecUpdateResult({})", self.code),
            |r| format!("{r:?}"),
        )
    }
}

/// The layout of `cudaGraphExecUpdateResultInfo` with the result read as a plain integer: a
/// value newer than the bindings' Rust enum must not be read as that enum.
#[repr(C)]
struct RawUpdateInfo {
    result: u32,
    error_node: sys::cudaGraphNode_t,
    error_from_node: sys::cudaGraphNode_t,
}

const _: () = assert!(
    std::mem::size_of::<RawUpdateInfo>()
        == std::mem::size_of::<sys::cudaGraphExecUpdateResultInfo>()
);

/// `cudaGraphExecUpdate`. A refusal (`cudaErrorGraphExecUpdateFailure`) is `Ok(Err(..))`; other
/// failures are `Err`.
///
/// # Safety
/// `exec` and `graph` are live.
pub unsafe fn graph_exec_update(
    exec: sys::cudaGraphExec_t,
    graph: sys::cudaGraph_t,
) -> Result<std::result::Result<(), UpdateRefusal>> {
    let lib = load::cudart()?;
    let mut info = RawUpdateInfo {
        result: 0,
        error_node: ptr::null_mut(),
        error_from_node: ptr::null_mut(),
    };
    let status = ffi!(
        lib,
        LIB,
        cudaGraphExecUpdate(exec, graph, (&mut info as *mut RawUpdateInfo).cast())
    );
    if status == sys::cudaError::cudaSuccess {
        return Ok(Ok(()));
    }
    if status == sys::cudaError::cudaErrorGraphExecUpdateFailure {
        return Ok(Err(UpdateRefusal {
            code: info.result,
            node: info.error_node,
        }));
    }
    Err(error("cudaGraphExecUpdate", status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_refusals_are_named_even_when_unknown() {
        let r = |code| UpdateRefusal {
            code,
            node: ptr::null_mut(),
        };
        assert_eq!(r(2).name(), "cudaGraphExecUpdateErrorTopologyChanged");
        assert_eq!(r(99).name(), "cudaGraphExecUpdateResult(99)");
    }
}
