//! Kernel nodes: a kernel, its launch shape and packed arguments (`cudaGraphNodeTypeKernel`).

use std::sync::Arc;

use super::{wrong_device, Label, NodeOp, RunsOn};
use crate::dag::exec::Exec;
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, Node, NodeId, NodeName, Op};
use crate::device::DeviceLimits;
use crate::error::{Error, Result};
use crate::kernel::{Access, Kernel, KernelArg, LaunchAttributes, LaunchConfig, PackedArgs};
use crate::memory::Allocation;
use crate::result::driver as dr;
use crate::result::runtime as rt;
use crate::sys;

/// A kernel node's launch: its shape, and its attributes when it has any (boxed with the
/// shape, so that a node without attributes is no larger than its shape and the enum's tag
/// leaves [`Op`] room for its own).
#[derive(Clone)]
pub(crate) enum Launch {
    /// A shape without attributes.
    Plain(LaunchConfig),
    /// A shape with attributes.
    Attributed(Box<(LaunchConfig, LaunchAttributes)>),
}

impl Launch {
    /// The launch for `config` with `attrs` (plain when none is set).
    pub(crate) fn new(config: LaunchConfig, attrs: LaunchAttributes) -> Launch {
        if attrs.is_empty() {
            Launch::Plain(config)
        } else {
            Launch::Attributed(Box::new((config, attrs)))
        }
    }
}

/// A kernel launch: kernel, launch shape and packed arguments.
#[derive(Clone)]
pub struct KernelNode {
    /// The shape and launch attributes ([`Dag::set_launch_attributes`], [`Dag::set_priority`]).
    pub(crate) launch: Launch,
    /// The arguments, packed for the node's kernel (which they hold).
    pub(crate) args: PackedArgs,
    /// The arguments marked [`In`](crate::In), [`Out`](crate::Out) or
    /// [`InOut`](crate::InOut): `(index, access, offset, len)`; `None` when none is (so an
    /// unmarked launch allocates nothing for them; a thin pointer, so every node stays as
    /// small). Kept by [`Dag::add_kernel`] and [`Dag::set_kernel_args`]; an `Exec`'s per-node
    /// updates leave them as they were.
    pub(crate) marks: Option<Box<ArgMarks>>,
}

/// One marked kernel argument: its index, access and byte range `(offset, len)`.
pub(crate) type ArgMark = (u32, Access, usize, usize);

/// A kernel node's marked arguments, boxed as one thin pointer ([`KernelNode::marks`]).
#[derive(Clone, Debug)]
pub(crate) struct ArgMarks(pub(crate) Vec<ArgMark>);

/// The marks of `args` (see [`KernelNode::marks`]).
fn marks_of(args: &[KernelArg]) -> Option<Box<ArgMarks>> {
    if args.iter().all(|a| a.access.is_none()) {
        return None;
    }
    Some(Box::new(ArgMarks(
        args.iter()
            .enumerate()
            .filter_map(|(i, a)| a.access.map(|(m, o, l)| (i as u32, m, o, l)))
            .collect(),
    )))
}

impl KernelNode {
    /// A node of `config` with `args` and no launch attributes.
    pub(crate) fn new(config: LaunchConfig, args: PackedArgs) -> KernelNode {
        KernelNode {
            launch: Launch::Plain(config),
            args,
            marks: None,
        }
    }
    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        self.args.kernel()
    }
    /// The launch shape.
    #[inline]
    pub fn config(&self) -> LaunchConfig {
        match &self.launch {
            Launch::Plain(c) => *c,
            Launch::Attributed(b) => b.0,
        }
    }
    /// Replaces the launch shape (the attributes stay).
    pub(crate) fn set_config(&mut self, config: LaunchConfig) {
        match &mut self.launch {
            Launch::Plain(c) => *c = config,
            Launch::Attributed(b) => b.0 = config,
        }
    }
    /// The bytes of argument `i`.
    pub fn arg_bytes(&self, i: usize) -> &[u8] {
        self.args.param_bytes(i)
    }
    /// Number of arguments.
    pub fn arg_count(&self) -> usize {
        self.args.len()
    }
    /// The launch priority, if one was set.
    pub fn priority(&self) -> Option<i32> {
        self.attributes().and_then(|a| a.priority)
    }
    /// The launch attributes, if any are set.
    pub fn attributes(&self) -> Option<&LaunchAttributes> {
        match &self.launch {
            Launch::Plain(_) => None,
            Launch::Attributed(b) => Some(&b.1),
        }
    }

    /// What is wrong with the node's attributes for a launch of shape `config` on the device
    /// of `limits` (and, for a CUDA kernel, with its occupancy for a cooperative launch), if
    /// anything.
    fn attributes_problem(
        &self,
        config: &LaunchConfig,
        limits: &DeviceLimits,
    ) -> Result<Option<String>> {
        let Some(a) = self.attributes() else {
            return Ok(None);
        };
        if let Some(p) = a.problem(config).or_else(|| a.device_problem(limits)) {
            return Ok(Some(p));
        }
        if a.cooperative {
            let (g, b) = (config.grid, config.block);
            let threads = b.x.saturating_mul(b.y).saturating_mul(b.z);
            let per_sm = self
                .kernel()
                .max_active_blocks_per_multiprocessor(threads, config.shared_mem_bytes as usize)?;
            if let Some(per_sm) = per_sm {
                let fit = per_sm as u64 * limits.multiprocessors as u64;
                let blocks = g.count();
                if blocks > fit {
                    return Ok(Some(format!(
                        "a cooperative launch of {blocks} blocks does not fit at once: {per_sm} \
                         per multiprocessor × {} multiprocessors = {fit}",
                        limits.multiprocessors
                    )));
                }
            }
        }
        Ok(None)
    }

    /// The kernel parameters CUDA takes (the kernel's address is null for a recording
    /// kernel, which has no code).
    pub(crate) fn cuda_params(&self) -> sys::cudaKernelNodeParams {
        sys::cudaKernelNodeParams {
            func: self
                .kernel()
                .raw()
                .map_or(std::ptr::null_mut(), |k| k.as_ptr()),
            gridDim: self.config().grid.into(),
            blockDim: self.config().block.into(),
            sharedMemBytes: self.config().shared_mem_bytes,
            kernelParams: self.args.kernel_params(),
            extra: std::ptr::null_mut(),
        }
    }

    /// The generic node parameters of a launch with kernel parameters `p`.
    pub(crate) fn generic(p: sys::cudaKernelNodeParams) -> sys::cudaGraphNodeParams {
        let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeKernel);
        raw.__bindgen_anon_1.kernel = sys::cudaKernelNodeParamsV2 {
            func: p.func,
            gridDim: p.gridDim,
            blockDim: p.blockDim,
            sharedMemBytes: p.sharedMemBytes,
            kernelParams: p.kernelParams,
            extra: p.extra,
        };
        raw
    }

    /// Why buffer argument `i` cannot be set in an [`Exec`], if it cannot: an update is not
    /// validated again, so the buffer must be of the kernel's device or of the device of the
    /// buffer it replaces (whose peer access, if needed, lowering enabled).
    pub(crate) fn exec_arg_device_problem(&self, i: usize, a: &KernelArg) -> Option<String> {
        let b = a.buffer.as_ref()?;
        if self.kernel().owns(b) {
            return None;
        }
        let key = b.owner.key();
        if self.args.buffers()[i]
            .as_ref()
            .is_some_and(|old| old.owner.key() == key)
        {
            return None;
        }
        Some(format!(
            "argument {i} is a buffer of {key}, neither the kernel's device ({}) nor that of \
             the buffer it replaces; update the DAG and the Exec with Exec::update instead",
            self.kernel().key()
        ))
    }

    /// The context CUDA runs this node in, which the driver's update call names: its kernel's
    /// device's primary context. Kernel nodes of an [`Exec`] update through the driver
    /// (`cuGraphExecKernelNodeSetParams`): the runtime's call costs about 0.29 µs on the H200
    /// against 0.18 µs (see `result::driver`), and a per-node update is the path streaming
    /// pipelines take between launches.
    #[inline]
    pub(crate) fn context(&self) -> Result<sys::CUcontext> {
        match self.kernel().home() {
            // A context's function runs in that context: the driver is given it as `func`.
            Ok(_) if self.kernel().raw().is_some_and(|c| c.is_function()) => {
                Ok(std::ptr::null_mut())
            }
            Ok(device) => device.primary_context(),
            Err(_) => Err(Error::Placeholder {
                what: format!("kernel `{}`", self.kernel().name()),
                problem: "it has no CUDA context",
            }),
        }
    }

    /// Sets argument `i` in CUDA's node `h` of `exec` (made from this node) and here, if it
    /// fits in place (see [`PackedArgs::update_one_in_place`]: a value for a value, or an
    /// address in the buffer the parameter has); whether it did. CUDA is given the new value
    /// where it is, and the node keeps it once CUDA has accepted it, so a refused update leaves
    /// the node as CUDA has it.
    fn update_value(
        &mut self,
        exec: sys::cudaGraphExec_t,
        h: sys::cudaGraphNode_t,
        i: usize,
        a: &KernelArg,
    ) -> Result<bool> {
        // Without a context the general path reports it, after checking the argument.
        let Ok(ctx) = self.context() else {
            return Ok(false);
        };
        self.update_value_with(i, a, |params| {
            // The driver's kernel-specific call, as in `Exec::push_kernel_params`.
            // SAFETY: `h` is this node's kernel node in `exec`; the arguments pointed at match
            // the layout (`update_one_in_place` checked), live through the call, which copies
            // them; an address is in a buffer the node already holds. `func` is the kernel's
            // `cudaKernel_t` and `ctx` its device's primary context, held by the device.
            unsafe { dr::graph_exec_kernel_node_set_params(exec, h, params, ctx) }
        })
    }

    /// Replaces all arguments in CUDA's node `h` of `exec` (made from this node) and here, if
    /// they fit in place (see [`PackedArgs::fits_in_place`]); whether they did. CUDA is given
    /// the new values where they are, and the node keeps them once CUDA has accepted them
    /// ([`PackedArgs::update_in_place`]), so a refused update leaves the node as CUDA has it.
    fn update_values(
        &mut self,
        exec: sys::cudaGraphExec_t,
        h: sys::cudaGraphNode_t,
        args: &[KernelArg<'_>],
    ) -> Result<bool> {
        // As in `update_value`.
        let Ok(ctx) = self.context() else {
            return Ok(false);
        };
        self.update_values_with(args, |params| {
            // The driver's kernel-specific call, as in `Exec::push_kernel_params`.
            // SAFETY: `h` is this node's kernel node in `exec`; the arguments pointed at match
            // the layout (`update_in_place` checked), live through the call, which copies them;
            // their addresses are of buffers the node already holds. `func` and `ctx`: as in
            // `update_value`.
            unsafe { dr::graph_exec_kernel_node_set_params(exec, h, params, ctx) }
        })
    }

    /// [`KernelNode::update_values`] with `set` as CUDA's update call (tests give their own).
    pub(crate) fn update_values_with(
        &mut self,
        args: &[KernelArg<'_>],
        set: impl FnOnce(&sys::cudaKernelNodeParams) -> Result<()>,
    ) -> Result<bool> {
        let mut params = self.cuda_params();
        // Checked, not assumed (in `update_in_place`): with another buffer the node would hand
        // CUDA an address it does not hold.
        let done = self.args.update_in_place(args, |ptrs| {
            params.kernelParams = ptrs;
            set(&params)
        });
        done.map_or(Ok(false), |r| r.map(|()| true))
    }

    /// [`KernelNode::update_value`] with `set` as CUDA's update call (tests give their own).
    pub(crate) fn update_value_with(
        &mut self,
        i: usize,
        a: &KernelArg,
        set: impl FnOnce(&sys::cudaKernelNodeParams) -> Result<()>,
    ) -> Result<bool> {
        let mut params = self.cuda_params();
        // Checked, not assumed (in `update_one_in_place`): with another buffer the node would
        // hand CUDA an address it does not hold.
        let done = self.args.update_one_in_place(i, a, |ptrs| {
            params.kernelParams = ptrs;
            set(&params)
        });
        done.map_or(Ok(false), |r| r.map(|()| true))
    }

    /// The node as lowering hands it to a backend.
    pub(crate) fn node_params(&self) -> NodeParams<'_> {
        NodeParams::Kernel(self)
    }
}

impl NodeOp for KernelNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        let home = self.kernel().key();
        if home != on.key {
            return Err(wrong_device(
                name,
                format!(
                    "kernel `{}` belongs to {home}, but {}",
                    self.kernel().name(),
                    on.runs_on()
                ),
            ));
        }
        for (i, b) in self.args.buffers().iter().enumerate() {
            if let Some(b) = b {
                on.check_reach(name, &format_args!("argument {i}'s"), b)?;
            }
        }
        // A CUDA kernel is checked against its own device's limits (the node's device, as
        // checked above); a recording kernel against the backend's.
        // The dynamic shared memory limit is in the key: it can be raised between nodes.
        let launch = (
            Arc::as_ptr(&self.kernel().inner) as usize,
            self.kernel().max_dynamic_shared_mem(),
            self.config(),
        );
        let limits = self
            .kernel()
            .home()
            .map_or(on.target.limits, |d| d.limits());
        if let Some(a) = self.attributes() {
            if let Some(w) = a.window_allocation() {
                on.check_reach(name, &"access-policy window's", w)?;
            }
            if let Some(problem) = self.attributes_problem(&self.config(), limits)? {
                return Err(Error::LaunchShape {
                    node: Some(name.to_string()),
                    kernel: self.kernel().name().to_string(),
                    problem,
                });
            }
        }
        if on.target.accepted_launch.get() == Some(launch) {
            return Ok(());
        }
        if let Some(problem) = self.kernel().launch_problem(limits, &self.config()) {
            return Err(Error::LaunchShape {
                node: Some(name.to_string()),
                kernel: self.kernel().name().to_string(),
                problem,
            });
        }
        on.target.accepted_launch.set(Some(launch));
        Ok(())
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        self.args.buffers().iter().flatten().for_each(&mut *f);
        if let Some(w) = self.attributes().and_then(|a| a.window_allocation()) {
            f(w);
        }
    }
    fn label(&self) -> Label {
        let c = self.config();
        let mut lines = vec![
            format!("kernel {}", self.kernel().name()),
            format!("grid {} block {}", c.grid, c.block),
        ];
        if c.shared_mem_bytes > 0 {
            lines.push(format!(
                "smem {}",
                super::byte_count(c.shared_mem_bytes as usize)
            ));
        }
        if let Some(a) = self.attributes() {
            lines.extend(a.describe());
        }
        Label {
            lines,
            shape: "box",
            color: "#cfe2ff",
        }
    }
    fn params(&self) -> NodeParams<'_> {
        self.node_params()
    }
}

impl Dag {
    /// Adds a kernel launch. The arguments are checked against the kernel's parameter layout
    /// now; the launch shape when the DAG is validated for a device.
    pub fn add_kernel(
        &mut self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<NodeId> {
        // Buffers of other devices are checked at validation (peer access).
        if !kernel.args_fit_layout(args) {
            let problem = kernel
                .args_layout_problem(args)
                .unwrap_or_else(|| "the arguments do not fit the kernel's parameters".into());
            let node = format!("kernel#{}", self.next_serial);
            return Err(Error::KernelArgs {
                node: Some(node),
                kernel: kernel.name().to_string(),
                problem,
            });
        }
        let packed = PackedArgs::new_in(&mut self.arg_arena, kernel, args);
        let mut node = KernelNode::new(config, packed);
        node.marks = marks_of(args);
        let id = self.push(Op::Kernel(node));
        self.conditionals.note_args(id, args);
        self.graph_memory.note_args(id, args);
        self.device_nodes.note_args(id, args);
        self.device_graphs.note_args(id, args);
        Ok(id)
    }

    /// Sets the launch priority of kernel node `id` (`cudaLaunchAttributePriority`; a lower
    /// number is a higher priority, as for stream priorities). CUDA honours it only when the
    /// graph is instantiated with [`InstantiateFlags::use_node_priority`](crate::InstantiateFlags::use_node_priority).
    pub fn set_priority(&mut self, id: NodeId, priority: i32) -> Result<()> {
        let k = self.node_mut(id)?.kernel_mut()?;
        let mut attrs = k.attributes().cloned().unwrap_or_default();
        attrs.priority = Some(priority);
        k.launch = Launch::new(k.config(), attrs);
        Ok(())
    }

    /// Sets the launch attributes of kernel node `id` (replacing any set before, the priority
    /// included): cluster dimensions, cooperative launch, shared-memory carve-out, an L2
    /// access-policy window, the memory-sync domain. What does not depend on the device is
    /// checked now against the node's launch shape (an error names the node and the kernel);
    /// the rest when the DAG is validated. The node keeps the window's buffer alive.
    pub fn set_launch_attributes(&mut self, id: NodeId, attrs: LaunchAttributes) -> Result<()> {
        let node = self.node_mut(id)?;
        let name = node.name().to_string();
        let k = node.kernel_mut()?;
        if let Some(problem) = attrs.problem(&k.config()) {
            return Err(Error::LaunchShape {
                node: Some(name),
                kernel: k.kernel().name().to_string(),
                problem,
            });
        }
        k.launch = Launch::new(k.config(), attrs);
        Ok(())
    }

    /// Replaces a kernel node's arguments (checked like [`Dag::add_kernel`]).
    pub fn set_kernel_args(&mut self, id: NodeId, args: &[KernelArg]) -> Result<()> {
        let node = self.node_mut(id)?;
        node.check_kernel_args(args, false)?;
        let k = node.kernel_mut()?;
        for (i, a) in args.iter().enumerate() {
            k.args.set(i, a);
        }
        k.marks = marks_of(args);
        self.conditionals.note_args(id, args);
        self.graph_memory.note_args(id, args);
        self.device_nodes.note_args(id, args);
        self.device_graphs.note_args(id, args);
        Ok(())
    }

    /// Replaces a kernel node's launch shape (checked at validation).
    pub fn set_launch_config(&mut self, id: NodeId, config: LaunchConfig) -> Result<()> {
        let node = self.node_mut(id)?;
        node.kernel_mut()?.set_config(config);
        Ok(())
    }
}

impl Node {
    pub(crate) fn kernel_mut(&mut self) -> Result<&mut KernelNode> {
        if !matches!(self.op, Op::Kernel(_)) {
            return Err(self.wrong_kind("a kernel node"));
        }
        match &mut self.op {
            Op::Kernel(k) => Ok(k),
            _ => unreachable!(),
        }
    }

    fn kernel(&self) -> Result<&KernelNode> {
        match &self.op {
            Op::Kernel(k) => Ok(k),
            _ => Err(self.wrong_kind("a kernel node")),
        }
    }

    /// What is wrong with `args` for this kernel node, as an error naming it. For the DAG
    /// (`in_exec` false), buffers of any device pass (validation checks them); for an
    /// [`Exec`]'s update, see [`KernelNode::exec_arg_device_problem`].
    pub(crate) fn check_kernel_args(&self, args: &[KernelArg], in_exec: bool) -> Result<()> {
        let k = self.kernel()?;
        // The common update, checked inline: values of their parameters' sizes and the
        // buffers the node already has (checked when they were given). Anything else, errors
        // included, goes through the full checks below.
        if k.args.fits_in_place(args) {
            return Ok(());
        }
        let problem = k.kernel().args_layout_problem(args).or_else(|| {
            if !in_exec {
                return None;
            }
            args.iter()
                .enumerate()
                .find_map(|(i, a)| k.exec_arg_device_problem(i, a))
        });
        match problem {
            None => Ok(()),
            Some(problem) => Err(self.kernel_args_error(k, problem)),
        }
    }

    /// What is wrong with `arg` as argument `index` of this kernel node, in an [`Exec`].
    pub(crate) fn check_kernel_arg(&self, index: usize, arg: &KernelArg) -> Result<()> {
        let k = self.kernel()?;
        // The common update, checked inline: a value (no buffer to check) of its parameter's
        // size. Anything else, errors included, goes through the full checks below.
        let params = k.kernel().params();
        if arg.buffer.is_none() && params.get(index).is_some_and(|p| p.size == arg.size()) {
            return Ok(());
        }
        let problem = k
            .kernel()
            .arg_layout_problem(index, arg)
            .or_else(|| k.exec_arg_device_problem(index, arg));
        match problem {
            None => Ok(()),
            Some(problem) => Err(self.kernel_args_error(k, problem)),
        }
    }

    fn kernel_args_error(&self, k: &KernelNode, problem: String) -> Error {
        Error::KernelArgs {
            node: Some(self.name().to_string()),
            kernel: k.kernel().name().to_string(),
            problem,
        }
    }
}

impl Exec {
    /// The launch priority CUDA has for kernel node `id` (`cudaGraphKernelNodeGetAttribute`).
    pub fn cuda_priority(&self, id: NodeId) -> Result<i32> {
        let h = self.handle(id)?;
        self.dag.node(id)?.kernel()?;
        // SAFETY: `h` is a kernel node of the graph the exec was made from (alive with it).
        unsafe { rt::graph_kernel_node_priority(h) }
    }

    /// Sets kernel node `id`'s parameters in the executable graph (`h` is its CUDA node): its
    /// current arguments with `args` (checked by the caller) instead of theirs, and `config`.
    /// Nothing of the node changes here. One lookup of the node; inline values (every buffer
    /// and scalar) are pointed to where they are, so no argument byte is copied (see
    /// [`PackedArgs::with_inline_args`]).
    ///
    /// This is one of the places the generic node API is not used, and one of the two where the
    /// runtime is not (FFT nodes' parameter updates are the other): the driver's kernel-specific
    /// `cuGraphExecKernelNodeSetParams` (see [`KernelNode::context`]) does the job in about 0.6
    /// of the runtime's `cudaGraphExecKernelNodeSetParams`, which the runtime's generic
    /// `cudaGraphExecNodeSetParams` takes 1.05–1.12× of (H200, CUDA 13.0; the raw rows of the
    /// bench's `update-per-node` table).
    fn push_kernel_params<'a>(
        &mut self,
        id: NodeId,
        h: sys::cudaGraphNode_t,
        config: Option<LaunchConfig>,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)> + Clone,
    ) -> Result<()> {
        let exec = self.raw;
        let Op::Kernel(k) = &mut self.dag.graph[id.idx].op else {
            unreachable!("checked by the caller")
        };
        let mut params = k.cuda_params();
        if let Some(c) = config {
            params.gridDim = c.grid.into();
            params.blockDim = c.block.into();
            params.sharedMemBytes = c.shared_mem_bytes;
        }
        let ctx = k.context()?;
        let set = |params: &sys::cudaKernelNodeParams| {
            // SAFETY: `h` is this DAG node's kernel node; the parameters match the layout (the
            // caller checked), point into live node, scratch or caller memory (CUDA copies);
            // their buffers are held by the DAG or, once committed, by this update. `func` is
            // the kernel's `cudaKernel_t` (`cuda_params`) and `ctx` its device's primary
            // context, held by the device.
            unsafe { dr::graph_exec_kernel_node_set_params(exec, h, params, ctx) }
        };
        if args.clone().all(|(_, a)| a.is_inline()) {
            k.args.with_inline_args(args, |ptrs| {
                params.kernelParams = ptrs;
                set(&params)
            })
        } else {
            params.kernelParams = k.args.staged(&mut self.scratch, &|i| {
                args.clone()
                    .find(|&(j, _)| j == i)
                    .map(|(_, a)| a.as_bytes())
            });
            set(&params)
        }
    }

    /// Writes accepted arguments into the node, holding new buffers (all first, so a buffer
    /// that only moves between arguments is never released) and releasing replaced ones.
    fn commit_kernel_args<'a>(
        &mut self,
        id: NodeId,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)> + Clone,
    ) {
        // Hold every new buffer first (so a buffer that only moves between arguments never
        // drops to no reference), skipping those already in their argument.
        for (i, a) in args.clone() {
            let Some(b) = &a.buffer else { continue };
            let Op::Kernel(k) = &self.dag.graph[id.idx].op else {
                unreachable!("checked by the caller")
            };
            let unchanged = k.args.buffers()[i]
                .as_ref()
                .is_some_and(|cur| Arc::ptr_eq(cur, b));
            if !unchanged {
                self.hold(b);
            }
        }
        for (i, a) in args {
            let Op::Kernel(k) = &mut self.dag.graph[id.idx].op else {
                unreachable!("checked by the caller")
            };
            // `set` gives back the old buffer when the argument's buffer changed (to another
            // buffer or to a plain value); a new buffer was held above.
            if let Some(old) = k.args.set(i, a) {
                self.release(old);
            }
        }
    }

    /// Replaces all arguments of kernel node `id` (checked against the kernel's layout).
    /// When CUDA refuses, nothing changes.
    ///
    /// A kernel node passing a conditional handle or a graph buffer
    /// ([`GraphBuffer`](crate::GraphBuffer)) keeps it: an update passing one, or replacing the
    /// argument that passes one, is refused (update its other arguments with
    /// [`Exec::set_kernel_arg`]).
    pub fn set_kernel_args(&mut self, id: NodeId, args: &[KernelArg]) -> Result<()> {
        self.note_host_update(id);
        if self.dag.conditionals.has_uses()
            || self.dag.graph_memory.has_uses()
            || self.dag.device_nodes.has_uses()
            || !self.dag.device_graphs.is_empty()
            || args.iter().any(|a| {
                a.conditional.is_some()
                    || a.graph_buffer.is_some()
                    || a.device_node.is_some()
                    || a.device_graph.is_some()
            })
        {
            self.check_handle_update(id, args.iter().enumerate())?;
        }
        // One lookup of the node (the fields are borrowed apart).
        let node = self.dag.node_mut(id)?;
        let h = Self::handle_in(&self.handles, id)?;
        // New values, the same buffers (the common update), written in place: no buffer is
        // held or released. Fitting in place implies passing the checks below.
        if let Op::Kernel(k) = &mut node.op {
            if k.update_values(self.raw, h, args)? {
                return Ok(());
            }
        }
        node.check_kernel_args(args, true)?;
        self.push_kernel_params(id, h, None, args.iter().enumerate())?;
        self.commit_kernel_args(id, args.iter().enumerate());
        Ok(())
    }

    /// Refuses an update of kernel node `id` that passes a conditional handle or a graph
    /// buffer, or replaces one (see [`Exec::set_kernel_args`]), naming the node. Allocates
    /// nothing (it runs on the update path of every such DAG).
    #[cold]
    fn check_handle_update<'a>(
        &self,
        id: NodeId,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)> + Clone,
    ) -> Result<()> {
        let node = self.dag.node(id)?;
        let k = node.kernel()?;
        let problem = self
            .dag
            .conditionals
            .exec_update_problem(id, args.clone())
            .or_else(|| self.dag.graph_memory.exec_update_problem(id, args.clone()))
            .or_else(|| self.dag.device_nodes.exec_update_problem(id, args.clone()))
            .or_else(|| self.dag.device_graphs.exec_update_problem(id, args));
        match problem {
            None => Ok(()),
            Some(problem) => Err(node.kernel_args_error(k, problem)),
        }
    }

    /// Replaces argument `index` of kernel node `id`. When CUDA refuses, nothing changes.
    /// An argument passing a conditional handle is not replaced (see
    /// [`Exec::set_kernel_args`]).
    pub fn set_kernel_arg<'a>(
        &mut self,
        id: NodeId,
        index: usize,
        arg: impl Into<KernelArg<'a>>,
    ) -> Result<()> {
        let arg = arg.into();
        self.note_host_update(id);
        if self.dag.conditionals.has_uses()
            || self.dag.graph_memory.has_uses()
            || self.dag.device_nodes.has_uses()
            || !self.dag.device_graphs.is_empty()
            || arg.conditional.is_some()
            || arg.graph_buffer.is_some()
            || arg.device_node.is_some()
            || arg.device_graph.is_some()
        {
            self.check_handle_update(id, std::iter::once((index, &arg)))?;
        }
        // One lookup of the node (the fields are borrowed apart).
        let node = self.dag.node_mut(id)?;
        let h = Self::handle_in(&self.handles, id)?;
        // A value for a value, or an address in the buffer the parameter has (the common
        // updates), in place: no buffer is held or released. Such an argument passes the
        // checks below (the buffer is one the node was checked with).
        if let Op::Kernel(k) = &mut node.op {
            if k.update_value(self.raw, h, index, &arg)? {
                return Ok(());
            }
        }
        node.check_kernel_arg(index, &arg)?;
        self.push_kernel_params(id, h, None, std::iter::once((index, &arg)))?;
        self.commit_kernel_args(id, std::iter::once((index, &arg)));
        Ok(())
    }

    /// Replaces the launch shape of kernel node `id` (checked against the device, and against
    /// the node's launch attributes: a cluster must still divide the grid, a cooperative grid
    /// still fit).
    pub fn set_launch_config(&mut self, id: NodeId, config: LaunchConfig) -> Result<()> {
        self.note_host_update(id);
        let node = self.dag.node(id)?;
        let k = node.kernel()?;
        // The limits of the kernel's device (the node's).
        let limits = k
            .kernel()
            .home()
            .map_or(self.device.limits(), |d| d.limits());
        let problem = match k.kernel().launch_problem(limits, &config) {
            Some(p) => Some(p),
            None => k.attributes_problem(&config, limits)?,
        };
        if let Some(problem) = problem {
            return Err(Error::LaunchShape {
                node: Some(node.name().to_string()),
                kernel: k.kernel().name().to_string(),
                problem,
            });
        }
        let h = self.handle(id)?;
        self.push_kernel_params(id, h, Some(config), std::iter::empty())?;
        self.dag.node_mut(id)?.kernel_mut()?.set_config(config);
        Ok(())
    }
}
