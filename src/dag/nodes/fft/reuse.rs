//! What FFT lowering state is kept, handed on and given back across lowerings of the same
//! nodes, whatever the state is made of: [`FftStates`] is shared by the CUDA backend (cuFFT
//! plans, device work areas, a capture stream: `context.rs`) and the recording backend
//! (numbered stand-ins it counts), so the pairing is tested without a GPU.
//!
//! A lowering made for a whole-graph update starts from the context of the graph it updates
//! ([`FftStates::set_reuse`]): an FFT node takes the state of the node with the same serial
//! and the same plan description, at the top level and in child graphs (nested too, paired
//! by the serials of the child nodes on the way), and each slot takes the old work area when
//! it is large enough; the capture stream is the old one. Nothing is shared between two
//! nodes of one graph: each old state is taken at most once. When CUDA refuses the update,
//! [`FftStates::reclaim`] gives the taken states back, and what the refused lowering made is
//! kept for the fresh instantiation that may follow ([`FftStates::into_states_only`]).

use std::collections::HashMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use super::FftNode;
use crate::dag::{Dag, Op};
use crate::error::Result;
use crate::fft::{FftPlanDesc, WorkShare};

/// The types one backend's FFT state is made of.
pub(crate) trait FftKit {
    /// One node's state (its plan made).
    type State;
    /// A work area.
    type Area: Clone;
    /// The capture stream.
    type Stream: Clone;
    /// What lowering a node keeps besides its state (CUDA: its kernel nodes and form).
    type Extra;
    /// The size of `area` in bytes.
    fn area_bytes(area: &Self::Area) -> usize;
}

/// Makes what a context of kit `K` holds.
pub(crate) trait FftMaker<K: FftKit> {
    /// Makes node `f`'s state; returns it and the work-area bytes its plan needs.
    fn state(&mut self, f: &FftNode) -> Result<(K::State, usize)>;
    /// Allocates a work area of `bytes`.
    fn area(&mut self, bytes: usize) -> Result<K::Area>;
    /// Gives `state`'s plan `area` as its work area.
    fn attach(&mut self, state: &K::State, area: &K::Area) -> Result<()>;
    /// Makes a capture stream.
    fn stream(&mut self) -> Result<K::Stream>;
}

/// One node's state with what pairing needs to know.
pub(crate) struct Kept<S> {
    /// The node's serial in its DAG.
    pub(crate) uid: u64,
    desc: FftPlanDesc,
    /// Work-area bytes the plan needs.
    need: usize,
    /// Whether it came from the context being reused (so a failed update gives it back).
    reused: bool,
    /// The kit's state.
    pub(crate) inner: S,
}

/// One lowered FFT node.
struct Lowered<K: FftKit> {
    uid: u64,
    /// `None` once a later lowering took it over.
    state: Option<Kept<K::State>>,
    extra: K::Extra,
}

/// The FFT states one lowering of one DAG made or took over (see the module's docs), with the
/// contexts of its child graphs by child-node serial.
pub(crate) struct FftStates<K: FftKit> {
    stream: Option<K::Stream>,
    nodes: Vec<Lowered<K>>,
    /// The contexts of child graphs with FFT or captured nodes, by the child node's serial.
    children: Vec<(u64, FftStates<K>)>,
    work: HashMap<usize, K::Area>,
    /// States made by [`FftStates::prepare`], taken by their node's lowering.
    prepared: Vec<Kept<K::State>>,
    /// An earlier lowering's context, whose unchanged states this one takes over.
    reuse: Option<Box<FftStates<K>>>,
}

impl<K: FftKit> Default for FftStates<K> {
    fn default() -> Self {
        FftStates {
            stream: None,
            nodes: Vec::new(),
            children: Vec::new(),
            work: HashMap::new(),
            prepared: Vec::new(),
            reuse: None,
        }
    }
}

impl<K: FftKit> FftStates<K> {
    /// Lowers with the unchanged states of `old` (an earlier lowering of the same nodes).
    pub(crate) fn set_reuse(&mut self, old: FftStates<K>) {
        self.reuse = Some(Box::new(old));
    }

    /// The reused context, with the states this lowering did not take.
    pub(crate) fn take_reuse(&mut self) -> Option<FftStates<K>> {
        self.reuse.take().map(|b| *b)
    }

    /// Gives back to this (older) context the states `newer` took from it, in child graphs
    /// too; `newer` keeps the states it made.
    pub(crate) fn reclaim(&mut self, newer: &mut FftStates<K>) {
        let taken = newer
            .nodes
            .iter_mut()
            .filter_map(|n| n.state.take_if(|s| s.reused))
            .chain(newer.prepared.extract_if(.., |s| s.reused));
        for mut st in taken.collect::<Vec<_>>() {
            st.reused = false;
            if let Some(n) = self.nodes.iter_mut().find(|n| n.uid == st.uid) {
                n.state = Some(st);
            }
        }
        for (serial, child) in &mut newer.children {
            if let Some((_, old)) = self.children.iter_mut().find(|(s, _)| s == serial) {
                old.reclaim(child);
            }
        }
    }

    /// What a refused update leaves: `self` (its lowering, already reclaimed from) with the
    /// states it made and its capture stream, for a fresh instantiation to take over. Its
    /// work areas are dropped: some may be the live graph's, which a fresh graph must not
    /// share (its launches are not ordered after the live graph's).
    pub(crate) fn into_states_only(mut self) -> FftStates<K> {
        self.work.clear();
        self.prepared.clear();
        self.reuse = None;
        self.children = std::mem::take(&mut self.children)
            .into_iter()
            .map(|(s, c)| (s, c.into_states_only()))
            .collect();
        self
    }

    /// Takes the state of FFT node `f` from the reused context: the node with its serial and
    /// plan description, which no node of this lowering took yet.
    fn take_reused(&mut self, f: &FftNode) -> Option<Kept<K::State>> {
        let desc = &f.plan.inner.desc;
        let r = self.reuse.as_mut()?;
        r.nodes
            .iter_mut()
            .filter(|n| n.uid == f.uid)
            .find_map(|n| n.state.take_if(|s| s.desc == *desc))
    }

    /// Makes (or takes over from the reused context) the state of every FFT node of `dag`,
    /// then gives each work-area slot the reused context's area for it when that is large
    /// enough for the plans of the slot (else a new one), and attaches it.
    pub(crate) fn prepare(
        &mut self,
        maker: &mut impl FftMaker<K>,
        dag: &Dag,
        shares: &[Option<WorkShare>],
    ) -> Result<()> {
        let mut slot_need: HashMap<usize, usize> = HashMap::new();
        let mut slots = Vec::new();
        for (i, share) in shares.iter().enumerate() {
            let Some(share) = share else { continue };
            let Op::Fft(f) = &dag.graph[petgraph::graph::NodeIndex::new(i)].op else {
                unreachable!("shares are given to FFT nodes only")
            };
            let state = match self.take_reused(f) {
                Some(mut s) => {
                    s.reused = true;
                    s
                }
                None => {
                    let (inner, need) = maker.state(f)?;
                    Kept {
                        uid: f.uid,
                        desc: f.plan.inner.desc.clone(),
                        need,
                        reused: false,
                        inner,
                    }
                }
            };
            let need = slot_need.entry(share.slot).or_insert(0);
            *need = (*need).max(state.need);
            slots.push(share.slot);
            self.prepared.push(state);
        }
        for (at, slot) in slots.into_iter().enumerate() {
            let area = match self.work.get(&slot) {
                Some(a) => a.clone(),
                None => {
                    let need = slot_need[&slot].max(16);
                    let old = self
                        .reuse
                        .as_ref()
                        .and_then(|r| r.work.get(&slot))
                        .filter(|a| K::area_bytes(a) >= need);
                    let a = match old {
                        Some(a) => a.clone(),
                        None => maker.area(need)?,
                    };
                    self.work.insert(slot, a.clone());
                    a
                }
            };
            maker.attach(&self.prepared[at].inner, &area)?;
        }
        Ok(())
    }

    /// The stream captures are made on (FFT nodes bind their plans to it; other captured
    /// nodes use it too): the reused context's, else made on first use; kept with the state.
    pub(crate) fn capture_stream(&mut self, maker: &mut impl FftMaker<K>) -> Result<K::Stream> {
        if self.stream.is_none() {
            self.stream = match self.reuse.as_ref().and_then(|r| r.stream.clone()) {
                Some(s) => Some(s),
                None => Some(maker.stream()?),
            };
        }
        Ok(self.stream.clone().expect("just set"))
    }

    /// Takes FFT node `uid`'s prepared state for its lowering.
    pub(crate) fn take_prepared(&mut self, uid: u64) -> Kept<K::State> {
        let at = self
            .prepared
            .iter()
            .position(|s| s.uid == uid)
            .expect("every FFT node is prepared before lowering");
        self.prepared.swap_remove(at)
    }

    /// Puts back a prepared state whose lowering failed, where [`FftStates::reclaim`] finds
    /// it: a reused state's plan and buffers are still used by the graph being updated.
    pub(crate) fn put_back(&mut self, state: Kept<K::State>) {
        self.prepared.push(state);
    }

    /// Notes FFT node `state.uid` as lowered.
    pub(crate) fn push_lowered(&mut self, state: Kept<K::State>, extra: K::Extra) {
        self.nodes.push(Lowered {
            uid: state.uid,
            state: Some(state),
            extra,
        });
    }

    /// The lowered nodes' uids and extras.
    pub(crate) fn extras_mut(&mut self) -> impl Iterator<Item = (u64, &mut K::Extra)> {
        self.nodes.iter_mut().map(|n| (n.uid, &mut n.extra))
    }

    /// The extra of lowered node `uid`.
    pub(crate) fn extra(&self, uid: u64) -> Option<&K::Extra> {
        self.nodes.iter().find(|n| n.uid == uid).map(|n| &n.extra)
    }

    /// The extra of lowered node `uid`, to change.
    pub(crate) fn extra_mut(&mut self, uid: u64) -> Option<&mut K::Extra> {
        self.nodes
            .iter_mut()
            .find(|n| n.uid == uid)
            .map(|n| &mut n.extra)
    }

    /// Lowers the DAG of child node `serial` into `sub` with `lower`: `sub`'s context
    /// (reached through `states`) reuses the reused context's child of that serial and
    /// shares this context's capture stream. Afterwards the child's context is kept with this
    /// one and the old child context goes back into the reused context (where `reclaim` and
    /// the retirement of what an update replaced find it); when `lower` fails or panics, the
    /// states the child's lowering took are given back first.
    pub(crate) fn lower_child<B>(
        &mut self,
        serial: u64,
        sub: &mut B,
        states: fn(&mut B) -> &mut FftStates<K>,
        lower: impl FnOnce(&mut B) -> Result<()>,
    ) -> Result<()> {
        let old = self.reuse.as_mut().and_then(|r| {
            let at = r.children.iter().position(|(s, _)| *s == serial)?;
            Some(r.children.swap_remove(at).1)
        });
        {
            let ctx = states(sub);
            *ctx = FftStates::default();
            ctx.stream = self
                .stream
                .clone()
                .or_else(|| self.reuse.as_ref().and_then(|r| r.stream.clone()));
            if let Some(old) = old {
                ctx.set_reuse(old);
            }
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| lower(sub)));
        let mut child = std::mem::take(states(sub));
        let old = child.take_reuse();
        let failed = !matches!(outcome, Ok(Ok(())));
        if let Some(mut old) = old {
            if failed {
                old.reclaim(&mut child);
            }
            if let Some(r) = self.reuse.as_mut() {
                r.children.push((serial, old));
            }
        }
        match outcome {
            Ok(Ok(())) => {
                if self.stream.is_none() {
                    self.stream = child.stream.clone();
                }
                if !child.nodes.is_empty() || !child.children.is_empty() {
                    self.children.push((serial, child));
                }
                Ok(())
            }
            Ok(Err(e)) => Err(e),
            Err(panic) => resume_unwind(panic),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The pairing on the recording backend, which makes (and counts) stand-ins where the CUDA
    //! backend makes cuFFT plans, work areas and a capture stream, through the same
    //! `FftStates`. An update is lowered into the same backend, as `Exec::update` lowers into
    //! a new graph: the earlier lowering's states are taken and handed on.
    use crate::fft::{CallbackParams, FftParams, FftPlan, FftPlanDesc, FftType, StoreCallback};
    use crate::{Dag, DeviceBuffer, DeviceLimits, Direction, FftSpec, RecordingBackend};

    type C = [f32; 2];

    fn plan(n: i64) -> FftPlan {
        FftPlan::new(FftPlanDesc::new(FftType::C2C, &[n], 1).with_store(StoreCallback::Scale))
            .unwrap()
    }

    fn add(dag: &mut Dag, plan: &FftPlan, x: &DeviceBuffer<C>, y: &DeviceBuffer<C>, k: f32) {
        dag.add_fft(FftSpec {
            plan: plan.clone(),
            direction: Direction::Forward,
            input: x.into(),
            output: y.into(),
            params: FftParams {
                load: None,
                store: Some(CallbackParams::store(k)),
            },
        })
        .unwrap();
    }

    /// A top-level FFT node, a child graph with two ordered FFT nodes (one work area) and a
    /// child holding a child with one FFT node (of `n` points: the others have 256), with store
    /// scale `k` everywhere.
    fn build(r: &mut RecordingBackend, n: i64, k: f32) -> Dag {
        let x = r.device_buffer::<C>(1024);
        let y = r.device_buffer::<C>(1024);
        let p = plan(256);
        let mut child = Dag::new();
        add(&mut child, &p, &x, &y, k);
        add(&mut child, &p, &y, &x, k);
        let (a, b) = (
            child.node_ids().next().unwrap(),
            child.node_ids().nth(1).unwrap(),
        );
        child.add_dependency(a, b).unwrap();
        let mut inner = Dag::new();
        add(&mut inner, &plan(n), &x, &y, k);
        let mut middle = Dag::new();
        middle.add_empty();
        middle.add_child(&inner);
        let mut dag = Dag::new();
        add(&mut dag, &p, &x, &y, k);
        dag.add_child(&child);
        dag.add_child(&middle);
        dag
    }

    /// Plans, work areas and streams made by `lower` on `r`.
    fn made(r: &mut RecordingBackend, lower: impl FnOnce(&mut RecordingBackend)) -> [usize; 3] {
        let before = r.fft_made();
        lower(r);
        let after = r.fft_made();
        [
            after.plans - before.plans,
            after.areas - before.areas,
            after.streams - before.streams,
        ]
    }

    /// Lowers `dag` into `r` as an update of the lowering whose states are `old` (as
    /// `Exec::update` does); gives what it made.
    macro_rules! update {
        ($r:expr, $dag:expr, $old:expr) => {{
            $r.clear();
            $r.reuse_fft_states($old);
            made($r, |r| {
                $dag.lower(r).unwrap();
            })
        }};
    }

    /// The handle numbers of the states `s` holds, child graphs' included, in lowering order.
    fn handles<K: super::FftKit<State = u64>>(s: &super::FftStates<K>) -> Vec<u64> {
        let mut out: Vec<u64> = s
            .nodes
            .iter()
            .filter_map(|n| n.state.as_ref())
            .map(|k| k.inner)
            .collect();
        for (_, c) in &s.children {
            out.extend(handles(c));
        }
        out
    }

    #[test]
    fn an_update_keeps_the_plans_of_fft_nodes_in_child_graphs() {
        let mut r = RecordingBackend::new(DeviceLimits::hopper());
        let first = build(&mut r, 512, 1.0);
        let m = made(&mut r, |r| {
            first.lower(r).unwrap();
        });
        assert_eq!(
            m,
            [4, 3, 1],
            "plans, work areas, streams of the first lowering"
        );
        let (old, _) = r.take_fft_states();
        let before = handles(&old);
        assert_eq!(before.len(), 4);
        // New parameters everywhere, the same plans: nothing is made, and every node (in
        // the child graphs and the nested child too) has the same handle.
        let second = build(&mut r, 512, 2.0);
        assert_eq!(update!(&mut r, &second, old), [0, 0, 0]);
        let (old, leftover) = r.take_fft_states();
        assert_eq!(handles(&old), before);
        assert!(
            handles(&leftover.expect("reused")).is_empty(),
            "all taken over"
        );
        // The nested child's plan changes (and needs more work area): only it is made again,
        // with a larger area for its slot; everything else is kept.
        let third = build(&mut r, 1024, 2.0);
        assert_eq!(update!(&mut r, &third, old), [1, 1, 0]);
        let (new, leftover) = r.take_fft_states();
        let after = handles(&new);
        assert_eq!(after[..3], before[..3]);
        assert!(!before.contains(&after[3]), "{before:?} -> {after:?}");
        // The old plan of the changed node is left for the update to retire.
        assert_eq!(handles(&leftover.expect("reused")), [before[3]]);
    }

    #[test]
    fn a_refused_update_gives_back_what_it_took_and_keeps_what_it_made() {
        let mut r = RecordingBackend::new(DeviceLimits::hopper());
        let first = build(&mut r, 512, 1.0);
        first.lower(&mut r).unwrap();
        let (old, _) = r.take_fft_states();
        // The update changes the nested child's plan: three states taken over, one made.
        let changed = build(&mut r, 1024, 2.0);
        assert_eq!(update!(&mut r, &changed, old), [1, 1, 0]);
        // CUDA refuses it (as `Exec::update` handles a refusal): the live graph's context
        // gets its states back, child graphs' included...
        let (mut refused, leftover) = r.take_fft_states();
        let mut live = leftover.expect("the update reused a context");
        live.reclaim(&mut refused);
        let again = build(&mut r, 512, 3.0);
        r.clear();
        r.reuse_fft_states(live);
        let m = made(&mut r, |r| {
            again.lower(r).unwrap();
        });
        assert_eq!(m, [0, 0, 0], "the live graph's plans are all back");
        r.take_fft_states();
        // ... and the fresh instantiation that follows (`update_or_reinstantiate`) takes over
        // the plan the refused update made: only the three the live graph keeps are made.
        r.clear();
        r.reuse_fft_states(refused.into_states_only());
        let m = made(&mut r, |r| {
            changed.lower(r).unwrap();
        });
        assert_eq!(m[0], 3, "plans made again: {m:?}");
        assert_eq!(
            m[1], 3,
            "work areas are not taken from a refused update: {m:?}"
        );
    }
}
