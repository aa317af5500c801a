//! Fuzz target `dag`: random DAGs built, validated, lowered and drawn without a GPU.
//!
//! The input is decoded into a list of operations on a [`Dag`] (see [`Op`]): nodes of every
//! kind the public API offers on a [`RecordingBackend`] (empty, host closures, captured work,
//! 1D/2D memsets and copies, kernels of placeholder kernels, event record and wait, child DAGs
//! built from their own operations, FFTs), edges between any ids (self-loops, edges that close
//! cycles, removed nodes, nodes of another DAG), programmatic edges on either port between any
//! ids, chains and fans, removals, names, placement on
//! one of two recording devices (peer access on or off) or on another backend's, and the
//! setters (launch shapes, empty or oversized; priorities and launch attributes; arguments;
//! memset values; copy ends, out of bounds too; events; host closures; FFT parameters).
//! Buffers, kernels and events come from the backend, from its second device, or from another
//! backend.
//!
//! Properties checked:
//! - nothing panics: every refusal is an `Err` (whose message is made);
//! - a self-loop is refused; an accepted edge is a dependency; a removed node is unknown;
//! - the DAG stays acyclic (petgraph's `toposort` agrees), and [`Dag::topological_order`]
//!   holds every node once, after all its dependencies;
//! - when lowering accepts the DAG, every node has its own call, named as the node, after the
//!   calls it depends on (each call's dependencies come before it; every edge of the DAG is a
//!   path of recorded dependencies), one call per node unless the DAG has FFT nodes (a setter
//!   and a conversion kernel before the transform);
//! - a programmatic edge is accepted only between two distinct kernel nodes, orders them, and
//!   is lowered as a direct dependency carrying its edge data (port, programmatic type);
//! - the DOT text has one node line per node and one edge line per edge, and balanced quotes;
//! - whole-graph update pairing: the same operations with the edges left out, then the first
//!   DAG's edges added in reverse order (each of its kind), give a DAG with the same node ids,
//!   edges, edge kinds and canonical order, which lowers to the same calls (what
//!   `Exec::update` relies on to pair nodes).
//!
//! Enabling and disabling nodes is not reached: only an `Exec` (a GPU) disables nodes.
//!
//! Memory: bounded by the input (at most 64 operations per DAG, buffers of at most 4 KiB,
//! FFT plans over at most 64 × 64 × 64 elements, at most 4 child DAGs of at most 16
//! operations); run with `-rss_limit_mb=2048 -malloc_limit_mb=64`.

#![no_main]

use std::collections::{HashMap, HashSet};

use cudagraph::{
    dst, src, AccessPolicy, AccessProperty, CallbackParams, Copy2d, CustomCallback, Dag,
    DeviceBuffer, DeviceLimits, Direction, Error, Event, FftParams, FftPlan, FftPlanDesc, FftSpec,
    FftType, Fusion, HostBuffer, Kernel, KernelArg, LaunchAttributes, Layout, LoadCallback,
    MemSyncDomain, Memset2d, MemsetValue, NodeId, NodeKind, ProgrammaticPort, RecordingBackend,
    Region, StoreCallback,
};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use petgraph::visit::IntoEdgeReferences;

mod dag_input;
use dag_input::*;

fn port(launch_completion: bool) -> ProgrammaticPort {
    if launch_completion {
        ProgrammaticPort::LaunchCompletion
    } else {
        ProgrammaticPort::Programmatic
    }
}

/// CUDA's `from_port` of a programmatic edge (`cudaGraphKernelNodePort…`).
fn port_number(port: ProgrammaticPort) -> u8 {
    match port {
        ProgrammaticPort::Programmatic => 1,
        ProgrammaticPort::LaunchCompletion => 2,
    }
}

/// Every edge as (before, after, its programmatic port if it is one).
fn edges_with_kinds(dag: &Dag) -> Vec<(NodeId, NodeId, Option<ProgrammaticPort>)> {
    dag.edges()
        .zip(dag.graph().edge_references())
        .map(|((a, b), e)| (a, b, e.weight().programmatic()))
        .collect()
}

/// What the operations use: a recording backend of two devices, and buffers, kernels and
/// events of its devices and of another backend.
struct Env {
    rec: RecordingBackend,
    d0: DeviceBuffer<u8>,
    d0_words: DeviceBuffer<u32>,
    d1: DeviceBuffer<u8>,
    pinned: HostBuffer<u8>,
    foreign_buffer: DeviceBuffer<u8>,
    empty: DeviceBuffer<u8>,
    kernels: Vec<Kernel>,
    events: Vec<Event>,
    /// Ids of another DAG.
    foreign_ids: Vec<NodeId>,
    foreign_key: cudagraph::RecordingBackend,
}

impl Env {
    fn new(u: &mut Unstructured) -> Result<Env> {
        let mut rec = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
        rec.set_peer_access(0, 1, u.arbitrary()?);
        rec.set_peer_access(1, 0, u.arbitrary()?);
        let mut foreign = RecordingBackend::new(DeviceLimits::hopper());
        let len = |u: &mut Unstructured| u.int_in_range(1..=4096usize);
        let (d0, d0_words, d1, pinned) = (
            rec.device_buffer::<u8>(len(u)?),
            rec.device_buffer::<u32>(len(u)? / 4 + 1),
            rec.device_buffer_on::<u8>(1, len(u)?),
            rec.host_buffer::<u8>(len(u)?),
        );
        let foreign_buffer = foreign.device_buffer::<u8>(256);
        let empty = rec.device_buffer::<u8>(0);
        let param_sizes = |u: &mut Unstructured| -> Result<Vec<usize>> {
            let n = u.int_in_range(0..=4)?;
            (0..n)
                .map(|_| Ok(*u.choose(&[0usize, 1, 2, 3, 4, 8, 8, 8, 16, 24])?))
                .collect()
        };
        let kernels = vec![
            rec.kernel("k0", &param_sizes(u)?),
            rec.kernel("k0b", &param_sizes(u)?),
            rec.kernel_on(1, "k1", &param_sizes(u)?),
            foreign.kernel("foreign", &param_sizes(u)?),
        ];
        let events = vec![rec.event(), rec.event_on(1), foreign.event()];
        let mut other = Dag::new();
        let foreign_ids = vec![other.add_empty(), other.add_empty(), other.add_empty()];
        Ok(Env {
            rec,
            d0,
            d0_words,
            d1,
            pinned,
            foreign_buffer,
            empty,
            kernels,
            events,
            foreign_ids,
            foreign_key: foreign,
        })
    }

    fn region(&self, r: &Reg) -> Region {
        let range = (
            std::ops::Bound::Included(r.start),
            match r.end {
                Some(e) => std::ops::Bound::Excluded(e),
                None => std::ops::Bound::Unbounded,
            },
        );
        match r.buffer {
            0 => self.d0.region(range),
            1 => self.d0_words.region(range),
            2 => self.d1.region(range),
            3 => self.pinned.region(range),
            4 => self.foreign_buffer.region(range),
            _ => self.empty.region(range),
        }
    }
}

/// Applies operations to a DAG and checks what each one promises.
struct Builder<'e> {
    env: &'e Env,
    dag: Dag,
    /// Every id handed out, removed nodes included.
    ids: Vec<NodeId>,
    /// Leave edge operations out (for the pairing check).
    defer_edges: bool,
}

fn typed(e: &Error) {
    // Every error can be put into words.
    let _ = e.to_string();
}

fn ok_or_typed<T>(r: cudagraph::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            typed(&e);
            None
        }
    }
}

impl<'e> Builder<'e> {
    fn id(&self, i: Id) -> NodeId {
        let i = i.0 as usize;
        match self.ids.get(i) {
            Some(&id) => id,
            None => self.env.foreign_ids[i % self.env.foreign_ids.len()],
        }
    }

    fn ids(&self, list: &[Id]) -> Vec<NodeId> {
        list.iter().map(|&i| self.id(i)).collect()
    }

    fn added(&mut self, r: cudagraph::Result<NodeId>) {
        if let Some(id) = ok_or_typed(r) {
            self.ids.push(id);
        }
    }

    fn value(v: &Val) -> MemsetValue {
        match *v {
            Val::U8(x) => x.into(),
            Val::U16(x) => x.into(),
            Val::U32(x) => x.into(),
        }
    }

    /// Calls `f` with the kernel arguments `args` describe.
    fn args_call<T>(env: &Env, args: &[Arg], f: impl FnOnce(&[KernelArg]) -> T) -> T {
        let regions: Vec<Option<Region>> = args
            .iter()
            .map(|a| match a {
                Arg::Buffer(r) => Some(env.region(r)),
                Arg::Bytes(_) => None,
            })
            .collect();
        let list: Vec<KernelArg> = args
            .iter()
            .zip(&regions)
            .map(|(a, r)| match (a, r) {
                (_, Some(r)) => KernelArg::region(r),
                (Arg::Bytes(b), None) => match b.len() {
                    0 => KernelArg::value(()),
                    1 => KernelArg::value(b[0]),
                    2 => KernelArg::value([b[0], b[1]]),
                    3 => KernelArg::value([b[0], b[1], b[2]]),
                    4 => KernelArg::value(<[u8; 4]>::try_from(&b[..]).unwrap()),
                    8 => KernelArg::value(<[u8; 8]>::try_from(&b[..]).unwrap()),
                    _ => KernelArg::value(<[u8; 16]>::try_from(&b[..]).unwrap()),
                },
                (Arg::Buffer(_), None) => unreachable!("a buffer argument has its region"),
            })
            .collect();
        f(&list)
    }

    fn fft_params(&self, p: &Params) -> FftParams {
        let region = || Some(self.env.region(&p.region));
        let pick = |which: u8, load: bool| match which {
            0 => None,
            1 if load => Some(CallbackParams::Load {
                scale: p.scale,
                input: region(),
            }),
            1 => Some(CallbackParams::Store {
                scale: p.scale,
                output: region(),
                accumulate: p.scale.is_sign_negative(),
            }),
            2 => Some(CallbackParams::Custom(p.custom.clone())),
            _ if load => Some(CallbackParams::load(p.scale)),
            _ => Some(CallbackParams::store(p.scale)),
        };
        FftParams {
            load: pick(p.load, true),
            store: pick(p.store, false),
        }
    }

    fn add_fft(&mut self, f: &Fft) {
        let kind = [
            FftType::C2C,
            FftType::R2C,
            FftType::C2R,
            FftType::Z2Z,
            FftType::D2Z,
            FftType::Z2D,
        ][f.kind as usize % 6];
        let custom = |source: &str| CustomCallback {
            source: format!("/* {source} */"),
            function: source.to_string(),
            params_size: f.custom_params,
            elem_bytes: f.custom_elem,
        };
        let mut desc = FftPlanDesc::new(kind, &f.sizes, f.batch);
        desc = match f.load {
            0 | 1 => desc,
            2 => desc.with_load(LoadCallback::ComplexI8),
            3 => desc.with_load(LoadCallback::RealI8),
            4 => desc.with_load(LoadCallback::ComplexF32),
            _ => desc.with_load(LoadCallback::Custom(custom("load"))),
        };
        desc = match f.store {
            0 => desc,
            1 => desc.with_store(StoreCallback::Scale),
            2 => desc.with_store(StoreCallback::Power),
            _ => desc.with_store(StoreCallback::Custom(custom("store"))),
        };
        desc =
            desc.with_fusion([Fusion::Auto, Fusion::Fused, Fusion::Unfused][f.fusion as usize % 3]);
        if let Some((inembed, istride, idist, onembed, ostride, odist)) = &f.layout {
            desc = desc.with_layout(Layout {
                inembed: inembed.clone(),
                istride: *istride,
                idist: *idist,
                onembed: onembed.clone(),
                ostride: *ostride,
                odist: *odist,
            });
        }
        let Some(plan) = ok_or_typed(FftPlan::new(desc)) else {
            return;
        };
        let _ = (
            plan.input_bytes(),
            plan.output_bytes(),
            plan.has_unfused_form(),
        );
        let spec = FftSpec {
            plan,
            direction: if f.inverse {
                Direction::Inverse
            } else {
                Direction::Forward
            },
            input: self.env.region(&f.input),
            output: self.env.region(&f.output),
            params: self.fft_params(&f.params),
        };
        let r = self.dag.add_fft(spec);
        self.added(r);
    }

    fn apply(&mut self, op: &Op) {
        if self.defer_edges && op.is_edge() {
            return;
        }
        let env = self.env;
        match op {
            Op::Empty => {
                let id = self.dag.add_empty();
                self.ids.push(id);
            }
            Op::Host => {
                let id = self.dag.add_host(|| {});
                self.ids.push(id);
            }
            Op::Captured(uses) => {
                let uses: Vec<Region> = uses.iter().map(|r| env.region(r)).collect();
                // SAFETY: the work enqueues nothing (and a recording backend never calls it).
                let id = unsafe { self.dag.add_captured("fuzz", uses, |_| Ok(())) };
                self.ids.push(id);
            }
            Op::Memset(r, v) => {
                let r = self.dag.add_memset(env.region(r), Self::value(v));
                self.added(r);
            }
            Op::Memset2d(r, pitch, width, height, v) => {
                let r = self.dag.add_memset_2d(Memset2d {
                    dst: env.region(r),
                    pitch: *pitch,
                    width: *width,
                    height: *height,
                    value: Self::value(v),
                });
                self.added(r);
            }
            Op::Copy(d, s) => {
                let r = self.dag.add_copy(dst(env.region(d)), src(env.region(s)));
                self.added(r);
            }
            Op::Copy2d(d, dp, s, sp, w, h) => {
                let r = self.dag.add_memcpy_2d(Copy2d {
                    dst: env.region(d),
                    dst_pitch: *dp,
                    src: env.region(s),
                    src_pitch: *sp,
                    width: *w,
                    height: *h,
                });
                self.added(r);
            }
            Op::Kernel(k, cfg, args) => {
                let kernel = &env.kernels[*k as usize];
                let before = self.dag.node_count();
                let dag = &mut self.dag;
                let r = Self::args_call(env, args, |a| dag.add_kernel(kernel, *cfg, a));
                if r.is_err() {
                    assert_eq!(self.dag.node_count(), before, "a refused node is not added");
                }
                self.added(r);
            }
            Op::EventRecord(e) => {
                let id = self.dag.add_event_record(&env.events[*e as usize]);
                self.ids.push(id);
            }
            Op::EventWait(e) => {
                let id = self.dag.add_event_wait(&env.events[*e as usize]);
                self.ids.push(id);
            }
            Op::Child(ops) => {
                let child = build(env, ops, false);
                let id = self.dag.add_child(&child);
                self.ids.push(id);
            }
            Op::Fft(f) => self.add_fft(f),
            Op::Dependency(a, b) => {
                let (a, b) = (self.id(*a), self.id(*b));
                let known = self.dag.node(a).is_ok() && self.dag.node(b).is_ok();
                match self.dag.add_dependency(a, b) {
                    Ok(()) => {
                        assert!(known && a != b, "an edge between known, distinct nodes");
                        assert!(self.dag.dependencies(b).any(|d| d == a), "the edge is kept");
                    }
                    Err(e) => {
                        typed(&e);
                        if known && a == b {
                            assert!(
                                matches!(e, Error::Dag(cudagraph::DagError::Cycle { .. })),
                                "a self-loop is a cycle: {e}"
                            );
                        }
                    }
                }
            }
            Op::Programmatic(a, b, launch) => {
                let (a, b) = (self.id(*a), self.id(*b));
                let kernels = [a, b]
                    .iter()
                    .all(|&n| self.dag.node(n).is_ok_and(|n| n.kind() == NodeKind::Kernel));
                match self.dag.add_programmatic_dependency(a, b, port(*launch)) {
                    Ok(()) => {
                        assert!(kernels && a != b, "a programmatic edge joins two kernels");
                        assert!(
                            self.dag.dependencies(b).any(|d| d == a),
                            "the edge orders them"
                        );
                    }
                    Err(e) => typed(&e),
                }
            }
            Op::Chain(list) => {
                let list = self.ids(list);
                ok_or_typed(self.dag.chain(&list));
            }
            Op::FanOut(a, list) => {
                let (a, list) = (self.id(*a), self.ids(list));
                ok_or_typed(self.dag.fan_out(a, &list));
            }
            Op::FanIn(list, a) => {
                let (a, list) = (self.id(*a), self.ids(list));
                ok_or_typed(self.dag.fan_in(&list, a));
            }
            Op::Remove(i) => {
                let id = self.id(*i);
                if ok_or_typed(self.dag.remove(id)).is_some() {
                    assert!(self.dag.node(id).is_err(), "a removed node is unknown");
                }
            }
            Op::Name(i, n) => {
                let id = self.id(*i);
                assert_eq!(self.dag.set_name(id, n.clone()), id);
                if self.dag.node(id).is_ok() {
                    assert_eq!(self.dag.node(id).unwrap().name().to_string(), *n);
                }
            }
            Op::Find(n) => {
                if let Some(id) = self.dag.find(n) {
                    assert_eq!(self.dag.node(id).unwrap().name().to_string(), *n);
                }
            }
            Op::Place(i, which) => {
                let id = self.id(*i);
                let key = match which {
                    0 => env.rec.device_key(0),
                    1 => env.rec.device_key(1),
                    _ => env.foreign_key.device_key(0),
                };
                ok_or_typed(self.dag.place_on(id, key));
            }
            Op::Unplace(i) => {
                ok_or_typed(self.dag.unplace(self.id(*i)));
            }
            Op::SetConfig(i, cfg) => {
                ok_or_typed(self.dag.set_launch_config(self.id(*i), *cfg));
            }
            Op::SetPriority(i, p) => {
                ok_or_typed(self.dag.set_priority(self.id(*i), *p));
            }
            Op::SetAttributes(i, a) => {
                let attrs = LaunchAttributes {
                    priority: a.priority,
                    cluster: a.cluster,
                    cooperative: a.cooperative,
                    shared_mem_carveout: a.carveout,
                    access_policy: a.window.as_ref().map(|(r, ratio, props)| AccessPolicy {
                        window: env.region(r),
                        hit_ratio: *ratio,
                        hit: [
                            AccessProperty::Normal,
                            AccessProperty::Streaming,
                            AccessProperty::Persisting,
                        ][*props as usize % 3],
                        miss: [
                            AccessProperty::Normal,
                            AccessProperty::Streaming,
                            AccessProperty::Persisting,
                        ][(*props / 3) as usize % 3],
                    }),
                    mem_sync_domain: a.domain.map(|remote| {
                        if remote {
                            MemSyncDomain::Remote
                        } else {
                            MemSyncDomain::Default
                        }
                    }),
                };
                ok_or_typed(self.dag.set_launch_attributes(self.id(*i), attrs));
            }
            Op::SetArgs(i, args) => {
                let id = self.id(*i);
                let dag = &mut self.dag;
                let r = Self::args_call(env, args, |a| dag.set_kernel_args(id, a));
                ok_or_typed(r);
            }
            Op::SetMemsetValue(i, v) => {
                ok_or_typed(self.dag.set_memset_value(self.id(*i), Self::value(v)));
            }
            Op::SetCopy(i, d, s) => {
                let r = self
                    .dag
                    .set_copy(self.id(*i), dst(env.region(d)), src(env.region(s)));
                ok_or_typed(r);
            }
            Op::SetEvent(i, e) => {
                ok_or_typed(self.dag.set_event(self.id(*i), &env.events[*e as usize]));
            }
            Op::SetHostFn(i) => {
                ok_or_typed(self.dag.set_host_fn(self.id(*i), || {}));
            }
            Op::SetFftParams(i, p) => {
                let params = self.fft_params(p);
                ok_or_typed(self.dag.set_fft_params(self.id(*i), params));
            }
        }
    }
}

fn build(env: &Env, ops: &[Op], defer_edges: bool) -> Dag {
    let mut b = Builder {
        env,
        dag: Dag::new(),
        ids: Vec::new(),
        defer_edges,
    };
    for op in ops {
        b.apply(op);
    }
    b.dag
}

/// The checks on a built DAG: acyclic, canonical order, lowering, DOT.
fn check(dag: &Dag, rec: &mut RecordingBackend) -> Option<Vec<Option<usize>>> {
    let live: Vec<NodeId> = dag.node_ids().collect();
    assert_eq!(live.len(), dag.node_count());
    let edges: Vec<(NodeId, NodeId)> = dag.edges().collect();
    assert_eq!(edges.len(), dag.edge_count());

    // Acyclic, and the canonical order holds every node once, after its dependencies.
    assert!(
        petgraph::algo::toposort(dag.graph(), None).is_ok(),
        "a Dag has no cycle"
    );
    let order = dag.topological_order();
    let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    assert_eq!(order.len(), live.len(), "every node once in the order");
    assert_eq!(position.len(), live.len(), "no node twice in the order");
    for &(a, b) in &edges {
        assert!(
            position[&a] < position[&b],
            "the order respects {a:?} -> {b:?}"
        );
    }

    // DOT: one node line per node, one edge line per edge, balanced quotes.
    let dot = dag.to_dot();
    assert!(dot.starts_with("digraph cudagraph {\n") && dot.ends_with("}\n"));
    // `  n<i> [label="…` and `  n<i> -> n<j>;` (a name may hold ` -> `, inside its label).
    let numbered = |l: &str| -> Option<usize> {
        let rest = l.strip_prefix("  n")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0).then_some(digits + 3)
    };
    let node_lines = dot
        .lines()
        .filter(|l| numbered(l).is_some_and(|at| l[at..].starts_with(" [label=\"")))
        .count();
    let edge_lines = dot
        .lines()
        .filter(|l| {
            numbered(l).is_some_and(|at| {
                // `-> n<j>;`, or `-> n<j> [attributes];` (a programmatic edge).
                l[at..].strip_prefix(" -> n").is_some_and(|r| {
                    let digits = r.bytes().take_while(u8::is_ascii_digit).count();
                    let rest = &r[digits..];
                    digits > 0 && (rest == ";" || (rest.starts_with(" [") && rest.ends_with("];")))
                })
            })
        })
        .count();
    assert_eq!(node_lines, live.len(), "{dot}");
    assert_eq!(edge_lines, edges.len(), "{dot}");
    for l in dot.lines() {
        let mut quotes = 0;
        let mut escaped = false;
        for c in l.chars() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => quotes += 1,
                _ => escaped = false,
            }
        }
        assert!(quotes % 2 == 0, "unbalanced quotes in {l:?}");
    }

    // Lowering: every node its own call, after the calls it depends on.
    rec.clear();
    let handles = ok_or_typed(dag.lower(rec))?;
    let calls = rec.calls();
    for (i, c) in calls.iter().enumerate() {
        assert!(
            c.deps.iter().all(|&d| d < i),
            "call {i} after its dependencies: {c:?}"
        );
    }
    let mut seen = HashSet::new();
    let mut ffts = 0;
    for &n in &live {
        let h = handles[n.index()].expect("every node lowered");
        assert!(h < calls.len());
        assert!(seen.insert(h), "two nodes share call {h}");
        let node = dag.node(n).unwrap();
        assert_eq!(
            calls[h].name,
            node.name().to_string(),
            "the call is named as the node"
        );
        ffts += usize::from(node.kind() == NodeKind::Fft);
    }
    assert_eq!(
        handles.iter().filter(|h| h.is_some()).count(),
        live.len(),
        "holes for removed nodes only"
    );
    if ffts == 0 {
        assert_eq!(calls.len(), live.len(), "one call per node");
    } else {
        assert!(
            calls.len() <= live.len() + 2 * ffts,
            "at most a setter and a conversion per FFT"
        );
    }
    for &(a, b) in &edges {
        let (ha, hb) = (handles[a.index()].unwrap(), handles[b.index()].unwrap());
        // `ha` must be among the calls `hb` waits for, directly or through an FFT's setter
        // and conversion calls.
        let mut stack = vec![hb];
        let mut reached = false;
        let mut visited = HashSet::new();
        while let Some(c) = stack.pop() {
            for &d in &calls[c].deps {
                reached |= d == ha;
                if visited.insert(d) {
                    stack.push(d);
                }
            }
        }
        assert!(
            reached,
            "edge {a:?} -> {b:?} is a recorded dependency:\n{}",
            rec.transcript()
        );
    }
    // A programmatic edge is a direct dependency of the kernel after it, with its edge data.
    for (a, b, p) in edges_with_kinds(dag) {
        let Some(p) = p else { continue };
        let (ha, hb) = (handles[a.index()].unwrap(), handles[b.index()].unwrap());
        assert!(
            calls[hb].deps.contains(&ha),
            "a programmatic edge is direct"
        );
        let data = format!(" edge(from_port={} to_port=0 type=1)", port_number(p));
        assert!(
            calls[hb].params.contains(&data),
            "the programmatic edge's data {data} in {:?}",
            calls[hb].params
        );
    }
    Some(handles)
}

/// A call without the FFT handle numbers and placeholder addresses of FFT calls (a new
/// lowering gives new ones).
fn comparable(c: &cudagraph::dag::RecordedCall) -> (String, String, String, Vec<usize>, String) {
    let params = if c.params.contains("handle=#") {
        String::new()
    } else {
        c.params.clone()
    };
    (
        c.function.to_string(),
        c.kind.to_string(),
        c.name.clone(),
        c.deps.clone(),
        params,
    )
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(mut env) = Env::new(&mut u) else {
        return;
    };
    let mut children = 0;
    let ops = ops(&mut u, MAX_OPS, 0, &mut children);

    let dag = build(&env, &ops, false);
    let mut rec = std::mem::replace(&mut env.rec, RecordingBackend::new(DeviceLimits::hopper()));
    let lowered = check(&dag, &mut rec);
    let first: Vec<_> = rec.calls().iter().map(comparable).collect();
    env.rec = rec;

    // Pairing: the same nodes, the edges added afterwards in reverse order.
    let mut again = build(&env, &ops, true);
    let mut edges = edges_with_kinds(&dag);
    edges.reverse();
    for &(a, b, p) in &edges {
        match p {
            None => again
                .add_dependency(a, b)
                .expect("the edges of a DAG, in any order, close no cycle"),
            Some(p) => {
                if let Err(e) = again.add_programmatic_dependency(a, b, p) {
                    // The builder refuses, with every node placed, a programmatic edge it took
                    // before a kernel was placed elsewhere: validation refuses that DAG too.
                    typed(&e);
                    assert!(
                        lowered.is_none(),
                        "a programmatic edge the builder refuses ({e}) was lowered"
                    );
                    return;
                }
            }
        }
    }
    let ids: Vec<(usize, u64)> = dag.node_ids().map(|n| (n.index(), n.serial())).collect();
    let ids_again: Vec<(usize, u64)> = again.node_ids().map(|n| (n.index(), n.serial())).collect();
    assert_eq!(ids, ids_again, "the same node ids");
    let serials = |d: &Dag| {
        let mut e: Vec<(u64, u64, Option<ProgrammaticPort>)> = edges_with_kinds(d)
            .into_iter()
            .map(|(a, b, p)| (a.serial(), b.serial(), p))
            .collect();
        e.sort_unstable();
        e
    };
    assert_eq!(serials(&dag), serials(&again), "the same edges");
    assert_eq!(
        dag.topological_order(),
        again.topological_order(),
        "the same canonical order"
    );
    let mut rec = std::mem::replace(&mut env.rec, RecordingBackend::new(DeviceLimits::hopper()));
    let lowered_again = check(&again, &mut rec);
    assert_eq!(
        lowered.is_some(),
        lowered_again.is_some(),
        "both lower or neither"
    );
    if lowered.is_some() {
        let second: Vec<_> = rec.calls().iter().map(comparable).collect();
        assert_eq!(first, second, "the same calls, in the same order");
    }
});
