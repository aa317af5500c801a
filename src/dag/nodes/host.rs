//! Host nodes: Rust closures CUDA runs in stream order (`cudaGraphNodeTypeHost`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{Label, NodeOp};
use crate::dag::exec::Exec;
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, NodeId, NodeName, Op};
use crate::error::Result;
use crate::result::runtime as rt;
use crate::sys;

type HostClosure = dyn Fn() + Send + Sync + 'static;

/// A host closure and the record of its last panic.
pub(crate) struct HostFn {
    f: Box<HostClosure>,
    panicked: AtomicBool,
    message: Mutex<Option<String>>,
}

impl HostFn {
    pub(crate) fn new(f: impl Fn() + Send + Sync + 'static) -> Arc<HostFn> {
        Arc::new(HostFn {
            f: Box::new(f),
            panicked: AtomicBool::new(false),
            message: Mutex::new(None),
        })
    }

    /// Runs the closure, catching a panic (which must not unwind into CUDA).
    pub(crate) fn call(&self) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (self.f)())) {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".into());
            *self.message.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg);
            self.panicked.store(true, Ordering::Release);
        }
    }

    /// The message of a panic since the last call, if there was one.
    pub(crate) fn take_panic(&self) -> Option<String> {
        if !self.panicked.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.message
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// The trampoline CUDA calls for host nodes.
///
/// # Safety
/// `data` is `Arc::as_ptr` of a live [`HostFn`] (the executable graph keeps it alive).
pub(crate) unsafe extern "C" fn host_trampoline(data: *mut std::ffi::c_void) {
    // SAFETY: see the function's contract. `call` never unwinds.
    let h = unsafe { &*(data as *const HostFn) };
    crate::stream::track::as_host_node(|| h.call());
}

/// A Rust closure run by CUDA in stream order.
#[derive(Clone)]
pub struct HostNode {
    pub(crate) f: Arc<HostFn>,
}

impl HostNode {
    /// The generic node parameters: the trampoline, called with the closure.
    pub(crate) fn generic(&self) -> sys::cudaGraphNodeParams {
        let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeHost);
        raw.__bindgen_anon_1.host = sys::cudaHostNodeParamsV2 {
            fn_: Some(host_trampoline),
            userData: Arc::as_ptr(&self.f) as *mut std::ffi::c_void,
        };
        raw
    }
}

impl NodeOp for HostNode {
    fn host_fns(&self, prefix: &str, name: &NodeName<'_>, out: &mut Vec<(String, Arc<HostFn>)>) {
        out.push((format!("{prefix}{name}"), self.f.clone()));
    }
    fn label(&self) -> Label {
        Label::new("hexagon", "#f8d7da", vec!["host closure".into()])
    }
    fn params(&self) -> NodeParams<'_> {
        // The trampoline never unwinds; the HostFn is kept alive by the DAG and by any Exec
        // made from it.
        NodeParams::Generic(self.generic())
    }
}

impl Dag {
    /// Adds a host node running `f` in stream order. `f` must not call CUDA. A panic in `f`
    /// is caught and reported by the next [`Exec::launch`] or [`Exec::synchronize`].
    pub fn add_host(&mut self, f: impl Fn() + Send + Sync + 'static) -> NodeId {
        self.push(Op::Host(HostNode { f: HostFn::new(f) }))
    }

    /// Replaces a host node's closure.
    pub fn set_host_fn(&mut self, id: NodeId, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let node = self.node_mut(id)?;
        match &mut node.op {
            Op::Host(h) => {
                h.f = HostFn::new(f);
                Ok(())
            }
            _ => Err(node.wrong_kind("a host node")),
        }
    }
}

impl Exec {
    /// Replaces the closure of host node `id`. The old closure stays alive until the launches
    /// that may call it have completed; a panic of it in one of them is reported by the next
    /// [`Exec::launch`] or [`Exec::synchronize`], as the current closure's would be.
    pub fn set_host_fn(&mut self, id: NodeId, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let h = self.handle(id)?;
        let node = self.dag.node(id)?;
        if !matches!(node.op, Op::Host(_)) {
            return Err(node.wrong_kind("a host node"));
        }
        let new = HostNode { f: HostFn::new(f) };
        let mut raw = new.generic();
        // SAFETY: `h` is this host node; the new HostFn is held by the DAG from now on, the
        // old one until the queued launches are done.
        unsafe { rt::graph_exec_node_set_params(self.raw, h, &mut raw)? };
        let name = node.name().to_string();
        let Op::Host(host) = &mut self.dag.node_mut(id)?.op else {
            unreachable!("checked above")
        };
        let old = std::mem::replace(&mut host.f, new.f.clone());
        for entry in &mut self.hosts {
            if Arc::ptr_eq(&entry.1, &old) {
                *entry = (name.clone(), new.f.clone());
            }
        }
        // Kept with its name: a launch still queued may call it, and its panic is reported.
        self.retire_hosts(vec![(name, old)]);
        Ok(())
    }
}
