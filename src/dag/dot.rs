//! DOT export: node names, kinds (a shape and colour per kind), launch shapes, bytes copied,
//! and dependencies (inferred ones dashed, labelled with the hazard, buffer and range;
//! programmatic ones bold and violet, labelled with their port); the bodies of conditional nodes as clusters labelled with their
//! condition; an allocation node with the span it allocates (its free node, the nodes using
//! the buffer, a dotted `span` edge to the free). The text is deterministic (nodes in index order, edges in insertion
//! order) and meant for inspection with Graphviz; its exact form may change between versions.

use std::fmt::Write;

use petgraph::visit::{EdgeRef, IntoEdgeReferences};

use super::Dag;

/// DOT string escaping: quotes, backslashes and newlines.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A node's look set by the caller of [`Dag::to_dot_styled`]: its fill colour (instead of its
/// kind's) and lines added to its label.
#[derive(Clone)]
pub(crate) struct DotStyle {
    /// `#rrggbb`.
    pub(crate) fill: String,
    /// Label lines after the node's own.
    pub(crate) extra: Vec<String>,
}

impl Dag {
    /// The DAG in Graphviz DOT form. An FFT node whose plan has an unfused form shows the
    /// form it asks for (`fusion auto (decided when lowered)`, `fused (requested)`, …);
    /// [`Exec::to_dot`](crate::Exec::to_dot) shows the form chosen.
    pub fn to_dot(&self) -> String {
        self.to_dot_with(&|_| None)
    }

    /// The DOT text, FFT node labels showing the form `fft(uid)` gives (when it gives one).
    pub(crate) fn to_dot_with(
        &self,
        fft: &dyn Fn(u64) -> Option<crate::fft::FusionDecision>,
    ) -> String {
        self.to_dot_styled(fft, &|_| None)
    }

    /// [`Dag::to_dot_with`], with the top-level nodes `style` gives a [`DotStyle`] for (by
    /// petgraph index) filled with its colour and labelled with its lines after their own
    /// (a profile's times: `dag/profile.rs`).
    pub(crate) fn to_dot_styled(
        &self,
        fft: &dyn Fn(u64) -> Option<crate::fft::FusionDecision>,
        style: &dyn Fn(usize) -> Option<DotStyle>,
    ) -> String {
        let mut s = String::new();
        s.push_str("digraph cudagraph {\n");
        s.push_str("  rankdir=TB;\n");
        s.push_str("  node [fontname=\"Helvetica\", fontsize=10, style=filled];\n");
        self.write_dot(&mut s, "n", 1, fft, style);
        s.push_str("}\n");
        s
    }

    /// Writes the nodes (ids `{prefix}{index}`) and edges, indented `depth` levels; each body
    /// of a conditional node as a cluster labelled with its condition, with dashed edges
    /// from the node to the body's first nodes.
    fn write_dot(
        &self,
        s: &mut String,
        prefix: &str,
        depth: usize,
        fft: &dyn Fn(u64) -> Option<crate::fft::FusionDecision>,
        style: &dyn Fn(usize) -> Option<DotStyle>,
    ) {
        let indent = "  ".repeat(depth);
        let mut spans = Vec::new();
        for idx in self.graph.node_indices() {
            let node = &self.graph[idx];
            let super::nodes::Label {
                mut lines,
                shape,
                color,
            } = match &node.op {
                super::Op::Fft(f) => f.label_with(fft(f.uid)),
                op => op.label(),
            };
            let styled = style(idx.index()).map(|DotStyle { fill, extra }| {
                lines.extend(extra);
                fill
            });
            // A device-updatable kernel node: its handle and the kernels updating it, in a
            // colour of its own.
            let device_words = match &node.op {
                super::Op::Kernel(_) if !self.device_nodes.is_empty() => {
                    super::nodes::device_update::label_words(self, self.id_at(idx))
                }
                _ => None,
            };
            let mut color = match device_words {
                Some(w) => {
                    lines.push(w);
                    super::nodes::device_update::DOT_COLOR
                }
                None => color,
            };
            // A kernel node launching a device graph.
            if let (super::Op::Kernel(_), Some(w)) = (
                &node.op,
                (!self.device_graphs.is_empty())
                    .then(|| self.device_graphs.label_words(self.id_at(idx)))
                    .flatten(),
            ) {
                lines.push(w);
                color = super::nodes::device_launch::DOT_COLOR;
            }
            let color = styled.as_deref().unwrap_or(color);
            if let super::Op::MemAlloc(_) = &node.op {
                // The span it allocates: its free node and the nodes using the buffer, and a
                // dotted edge to the free.
                let (span, free) = super::nodes::graph_memory::span_words(self, self.id_at(idx));
                lines.extend(span);
                if let Some(f) = free {
                    spans.push((idx.index(), f.index()));
                }
            }
            let mut label = esc(&node.name().to_string());
            for l in &lines {
                label.push_str("\\n");
                label.push_str(&esc(l));
            }
            if let Some(device) = node.device {
                label.push_str("\\n");
                label.push_str(&esc(&format!("on {device}")));
            }
            let style = if node.enabled {
                "filled"
            } else {
                "filled,dashed"
            };
            let _ = writeln!(
                s,
                "{indent}{prefix}{} [label=\"{label}\", shape={shape}, fillcolor=\"{color}\", style=\"{style}\"];",
                idx.index()
            );
            if let super::Op::Conditional(c) = &node.op {
                for (b, body) in c.bodies().iter().enumerate() {
                    let sub = format!("{prefix}{}_{b}_", idx.index());
                    let _ = writeln!(s, "{indent}subgraph cluster_{sub} {{");
                    let _ = writeln!(
                        s,
                        "{indent}  label=\"{}\"; style=\"rounded,dashed\"; color=\"#b08800\"; fontname=\"Helvetica\"; fontsize=10;",
                        esc(&c.cluster_label(b))
                    );
                    let mut entries: Vec<String> = body
                        .graph
                        .node_indices()
                        .filter(|&i| {
                            body.graph
                                .neighbors_directed(i, petgraph::Direction::Incoming)
                                .next()
                                .is_none()
                        })
                        .map(|i| format!("{sub}{}", i.index()))
                        .collect();
                    if entries.is_empty() {
                        let _ = writeln!(
                            s,
                            "{indent}  {sub}empty [label=\"(empty)\", shape=plaintext, style=\"\"];"
                        );
                        entries.push(format!("{sub}empty"));
                    }
                    body.write_dot(s, &sub, depth + 1, fft, &|_| None);
                    let _ = writeln!(s, "{indent}}}");
                    for e in entries {
                        let _ = writeln!(
                            s,
                            "{indent}{prefix}{} -> {e} [style=dashed, arrowhead=empty];",
                            idx.index()
                        );
                    }
                }
            }
        }
        for e in self.graph.edge_references() {
            let (from, to) = (e.source().index(), e.target().index());
            match e.weight().inferred() {
                None => match e.weight().programmatic() {
                    None => {
                        let _ = writeln!(s, "{indent}{prefix}{from} -> {prefix}{to};");
                    }
                    Some(port) => {
                        let _ = writeln!(
                            s,
                            "{indent}{prefix}{from} -> {prefix}{to} [style=bold, color=\"#7048e8\", label=\"{}\"];",
                            port.words()
                        );
                    }
                },
                Some(h) => {
                    let _ = writeln!(
                        s,
                        "{indent}{prefix}{from} -> {prefix}{to} [style=dashed, label=\"{}\"];",
                        esc(&h.to_string())
                    );
                }
            }
        }
        for (alloc, free) in spans {
            let _ = writeln!(
                s,
                "{indent}{prefix}{alloc} -> {prefix}{free} [style=dotted, arrowhead=none, color=\"#1098ad\", constraint=false, label=\"span\"];"
            );
        }
    }
}
