//! DOT export: node names, kinds (a shape and colour per kind), launch shapes, bytes copied,
//! and dependencies. The text is deterministic (nodes in index order, edges in insertion
//! order) and meant for inspection with Graphviz; its exact form may change between versions.

use std::fmt::Write;

use petgraph::visit::{EdgeRef, IntoEdgeReferences};

use super::{Dag, Node, Op};

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

fn bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// (detail lines, shape, fill colour)
fn describe(node: &Node) -> (Vec<String>, &'static str, &'static str) {
    match &node.op {
        Op::Kernel(k) => {
            let c = k.config;
            let mut lines = vec![
                format!("kernel {}", k.kernel.name()),
                format!("grid {} block {}", c.grid, c.block),
            ];
            if c.shared_mem_bytes > 0 {
                lines.push(format!("smem {}", bytes(c.shared_mem_bytes as usize)));
            }
            (lines, "box", "#cfe2ff")
        }
        Op::Memcpy(m) => {
            let mut l = format!("memcpy {:?} {}", m.kind(), bytes(m.bytes()));
            if m.height > 1 {
                let _ = write!(l, " ({} rows)", m.height);
            }
            (vec![l], "parallelogram", "#d1e7dd")
        }
        Op::Memset(m) => (
            vec![format!(
                "memset {} of {:#x} ({}-byte)",
                bytes(m.bytes()),
                m.value.bits(),
                m.value.size()
            )],
            "parallelogram",
            "#fff3cd",
        ),
        Op::Host(_) => (vec!["host closure".into()], "hexagon", "#f8d7da"),
        Op::Empty => (vec!["empty".into()], "circle", "#e9ecef"),
        Op::Child(c) => (
            vec![format!(
                "child graph: {} nodes, {} edges",
                c.dag.node_count(),
                c.dag.edge_count()
            )],
            "box3d",
            "#e2d9f3",
        ),
        Op::Fft(f) => (f.dot_lines(), "component", "#ffe5d0"),
    }
}

impl Dag {
    /// The DAG in Graphviz DOT form.
    pub fn to_dot(&self) -> String {
        let mut s = String::new();
        s.push_str("digraph cudagraph {\n");
        s.push_str("  rankdir=TB;\n");
        s.push_str("  node [fontname=\"Helvetica\", fontsize=10, style=filled];\n");
        for idx in self.graph.node_indices() {
            let node = &self.graph[idx];
            let (lines, shape, color) = describe(node);
            let mut label = esc(&node.name);
            for l in &lines {
                label.push_str("\\n");
                label.push_str(&esc(l));
            }
            let style = if node.enabled {
                "filled"
            } else {
                "filled,dashed"
            };
            let _ = writeln!(
                s,
                "  n{} [label=\"{label}\", shape={shape}, fillcolor=\"{color}\", style=\"{style}\"];",
                idx.index()
            );
        }
        for e in self.graph.edge_references() {
            let _ = writeln!(s, "  n{} -> n{};", e.source().index(), e.target().index());
        }
        s.push_str("}\n");
        s
    }
}
