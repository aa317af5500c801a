//! Event record and event wait nodes (`cudaGraphNodeTypeEventRecord`,
//! `cudaGraphNodeTypeWaitEvent`): ordering a graph's work with work outside it, on streams or
//! in other graphs.
//!
//! A record node records its event when its dependencies have completed; a wait node makes
//! its dependents wait for the work before the event's last record (made by a stream, another
//! graph's record node, or this graph's). The node holds a clone of the [`Event`], so the event
//! lives as long as the DAG and any `Exec` made from it; [`Exec::set_event`] changes it on the
//! instantiated graph.

use super::{wrong_device, Label, NodeOp, RunsOn};
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, Exec, Node, NodeId, NodeName, Op};
use crate::error::Result;
use crate::result::runtime as rt;
use crate::stream::Event;
use crate::sys;

/// Which way an event node uses its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum EventAction {
    Record,
    Wait,
}

/// A node that records an event when its dependencies have completed
/// ([`Dag::add_event_record`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecordNode {
    /// The event (the node keeps it alive).
    pub event: Event,
}

/// A node after which the graph's work waits for an event ([`Dag::add_event_wait`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventWaitNode {
    /// The event (the node keeps it alive).
    pub event: Event,
}

/// CUDA's generic parameters for an event node.
fn generic(action: EventAction, event: &Event) -> sys::cudaGraphNodeParams {
    use sys::cudaGraphNodeType as T;
    match action {
        EventAction::Record => {
            let mut p = NodeParams::zeroed(T::cudaGraphNodeTypeEventRecord);
            p.__bindgen_anon_1.eventRecord = sys::cudaEventRecordNodeParams { event: event.raw() };
            p
        }
        EventAction::Wait => {
            let mut p = NodeParams::zeroed(T::cudaGraphNodeTypeWaitEvent);
            p.__bindgen_anon_1.eventWait = sys::cudaEventWaitNodeParams { event: event.raw() };
            p
        }
    }
}

/// A record node records an event of its own device; a wait node may wait for an event of any
/// device of the backend (CUDA orders across devices).
fn validate(
    action: EventAction,
    event: &Event,
    name: &NodeName<'_>,
    on: &RunsOn<'_>,
) -> Result<()> {
    let owner = event.key();
    let ok = match action {
        EventAction::Record => owner == on.key,
        EventAction::Wait => on.target.devices.has_device(owner),
    };
    if ok {
        return Ok(());
    }
    Err(wrong_device(
        name,
        format!(
            "the event belongs to {owner}, but {}{}",
            on.runs_on(),
            match action {
                EventAction::Record => " (a record node records an event of its own device)",
                EventAction::Wait => "",
            }
        ),
    ))
}

fn label(action: EventAction, event: &Event) -> Label {
    let (shape, verb) = match action {
        EventAction::Record => ("cds", "record event"),
        EventAction::Wait => ("invhouse", "wait for event"),
    };
    Label::new(
        shape,
        "#ffe8cc",
        vec![format!("{verb} {:#x}", event.raw() as usize)],
    )
}

impl NodeOp for EventRecordNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        validate(EventAction::Record, &self.event, name, on)
    }
    fn label(&self) -> Label {
        label(EventAction::Record, &self.event)
    }
    fn params(&self) -> NodeParams<'_> {
        NodeParams::Generic(generic(EventAction::Record, &self.event))
    }
}

impl NodeOp for EventWaitNode {
    fn validate(&self, name: &NodeName<'_>, on: &RunsOn<'_>) -> Result<()> {
        validate(EventAction::Wait, &self.event, name, on)
    }
    fn label(&self) -> Label {
        label(EventAction::Wait, &self.event)
    }
    fn params(&self) -> NodeParams<'_> {
        NodeParams::Generic(generic(EventAction::Wait, &self.event))
    }
}

impl Dag {
    /// Adds a node that records `event` when its dependencies have completed: work outside
    /// the graph (a stream's [`Stream::wait_event`](crate::Stream::wait_event), another
    /// graph's [`Dag::add_event_wait`] node) can wait for it. The node keeps `event` alive.
    pub fn add_event_record(&mut self, event: &Event) -> NodeId {
        self.push(Op::EventRecord(EventRecordNode {
            event: event.clone(),
        }))
    }

    /// Adds a node after which the graph's work waits for `event`: for the work before its
    /// last record (on a stream, or by another graph's [`Dag::add_event_record`] node). The
    /// node keeps `event` alive.
    pub fn add_event_wait(&mut self, event: &Event) -> NodeId {
        self.push(Op::EventWait(EventWaitNode {
            event: event.clone(),
        }))
    }

    /// Replaces the event of event node `id`.
    pub fn set_event(&mut self, id: NodeId, event: &Event) -> Result<()> {
        let node = self.node_mut(id)?;
        node.op = node.event_with(event)?.0;
        Ok(())
    }
}

impl Node {
    /// The event node with `event` instead of its event, and the event it had.
    fn event_with(&self, event: &Event) -> Result<(Op, &Event)> {
        let event = event.clone();
        match &self.op {
            Op::EventRecord(n) => Ok((Op::EventRecord(EventRecordNode { event }), &n.event)),
            Op::EventWait(n) => Ok((Op::EventWait(EventWaitNode { event }), &n.event)),
            _ => Err(self.wrong_kind("an event record or wait node")),
        }
    }
}

impl Exec {
    /// Replaces the event of event node `id` for later launches
    /// (`cudaGraphExecNodeSetParams`). The new event must belong to the device of the event it
    /// replaces. The event replaced lives until the launches that may use it have completed.
    /// When CUDA refuses, nothing changes.
    pub fn set_event(&mut self, id: NodeId, event: &Event) -> Result<()> {
        let node = self.dag.node(id)?;
        let (new, old) = node.event_with(event)?;
        if event.key() != old.key() {
            return Err(wrong_device(
                &node.name(),
                format!(
                    "the new event belongs to {}, the event it replaces to {}: an instantiated \
                     graph's event node keeps its device",
                    event.key(),
                    old.key()
                ),
            ));
        }
        let (action, raw_event) = match &new {
            Op::EventRecord(n) => (EventAction::Record, &n.event),
            Op::EventWait(n) => (EventAction::Wait, &n.event),
            _ => unreachable!("event_with makes event nodes"),
        };
        let mut raw = generic(action, raw_event);
        let h = self.handle(id)?;
        // SAFETY: `h` is this event node, of the same type; only its event changes, and the
        // new event is kept alive by the DAG from here on.
        unsafe { rt::graph_exec_node_set_params(self.raw, h, &mut raw)? };
        let old = match std::mem::replace(&mut self.dag.node_mut(id)?.op, new) {
            Op::EventRecord(n) => n.event,
            Op::EventWait(n) => n.event,
            _ => unreachable!("checked to be an event node above"),
        };
        self.retire_event(old);
        Ok(())
    }
}
