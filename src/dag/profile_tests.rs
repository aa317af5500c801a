//! Host tests of per-node profiling: the sequential graph (its order, an event record before,
//! between and after the nodes, one entry per top-level node), and the `Profile` made from
//! synthetic times (sorting, shares, totals, the table's text, the DOT's colours and labels,
//! SVG rendering and its errors).

use std::time::Duration;

use super::profile::sequential;
use super::*;
use crate::device::DeviceLimits;
use crate::{args, LaunchConfig};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x / 1e3)
}

/// A diamond `fill -> {left, right} -> out`, a node with no edge (`alone`) and a child graph
/// after `out`: the order `dag.topological_order()` gives is fill, left, right, out, alone,
/// child (ready nodes by serial).
fn diamond(r: &mut RecordingBackend) -> (Dag, [NodeId; 6]) {
    let x = r.device_buffer::<f32>(256);
    let y = r.device_buffer::<f32>(256);
    let k = r.kernel("scale", &[8, 4]);
    let mut dag = Dag::new();
    let fill = dag.add_memset(&x, 0u32).unwrap();
    let left = dag
        .add_kernel(&k, LaunchConfig::new(1, 256), &args![&x, 2.0f32])
        .unwrap();
    let right = dag
        .add_kernel(&k, LaunchConfig::new(1, 256), &args![&x, 3.0f32])
        .unwrap();
    let out = dag.add_copy(dst(&y), src(&x)).unwrap();
    let alone = dag.add_empty();
    let mut body = Dag::new();
    let b1 = body
        .add_kernel(&k, LaunchConfig::new(1, 256), &args![&y, 4.0f32])
        .unwrap();
    let b2 = body
        .add_kernel(&k, LaunchConfig::new(1, 256), &args![&y, 5.0f32])
        .unwrap();
    body.add_dependency(b1, b2).unwrap();
    let child = dag.add_child(&body);
    for (id, name) in [
        (fill, "fill"),
        (left, "left"),
        (right, "right"),
        (out, "out"),
        (alone, "alone"),
        (child, "child"),
    ] {
        dag.set_name(id, name);
    }
    dag.fan_out(fill, &[left, right]).unwrap();
    dag.fan_in(&[left, right], out).unwrap();
    dag.add_dependency(out, child).unwrap();
    (dag, [fill, left, right, out, alone, child])
}

/// `(call index, kind word, name, deps)` of each line of a recording transcript.
fn calls(transcript: &str) -> Vec<(usize, String, String, Vec<usize>)> {
    transcript
        .lines()
        .map(|l| {
            let mut words = l.split(' ');
            let index = words.next().unwrap().parse().unwrap();
            let kind = words.nth(1).unwrap().to_string();
            let name = l.split('`').nth(1).unwrap().to_string();
            let deps = l.split("deps=[").nth(1).unwrap().split(']').next().unwrap();
            let deps = deps
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.trim().parse().unwrap())
                .collect();
            (index, kind, name, deps)
        })
        .collect()
}

#[test]
fn the_profiling_graph_runs_the_nodes_one_at_a_time_between_event_records() {
    let mut r = rec();
    let (dag, ids) = diamond(&mut r);
    let order = dag.topological_order();
    assert_eq!(order, ids, "ready nodes by serial");
    let events: Vec<crate::Event> = (0..=order.len()).map(|_| r.event()).collect();
    let seq = sequential(&dag, &order, &events).unwrap();
    // The original is untouched; the copy has its nodes and one record node more than nodes.
    assert_eq!((dag.node_count(), dag.edge_count()), (6, 5));
    assert_eq!(seq.node_count(), 2 * order.len() + 1);
    assert_eq!(seq.edge_count(), 2 * order.len());
    for &id in &order {
        assert_eq!(seq.node(id).unwrap().name(), dag.node(id).unwrap().name());
    }
    seq.lower(&mut r).unwrap();
    let t = r.transcript();
    let calls = calls(&t);
    assert_eq!(calls.len(), 2 * order.len() + 1, "{t}");
    let names = ["fill", "left", "right", "out", "alone", "child"];
    let kinds = ["memset", "kernel", "kernel", "memcpy", "empty", "graph"];
    for (i, (index, kind, name, deps)) in calls.iter().enumerate() {
        // Each call waits for the one before it, and for nothing else.
        let want: Vec<usize> = if i == 0 { vec![] } else { vec![calls[i - 1].0] };
        assert_eq!(deps, &want, "call {index}: {t}");
        if i % 2 == 0 {
            assert_eq!(kind, "event_record", "{t}");
            let raw = format!("{:#x}", events[i / 2].raw() as usize);
            assert!(
                t.lines().nth(i).unwrap().ends_with(&raw),
                "record {} records event {}: {t}",
                i / 2,
                i / 2
            );
        } else {
            assert_eq!(
                (kind.as_str(), name.as_str()),
                (kinds[i / 2], names[i / 2]),
                "{t}"
            );
        }
    }
    // The child graph is one node (its body lowered inside it), not two.
    assert!(
        t.contains("cudaGraphAddNode graph `child` deps=[10] child=[cudaGraphAddKernelNode"),
        "{t}"
    );
}

#[test]
fn every_top_level_node_is_one_entry_and_a_child_graph_or_conditional_node_is_one() {
    let mut r = rec();
    let (mut dag, _) = diamond(&mut r);
    let x = r.device_buffer::<f32>(16);
    let k = r.kernel("step", &[8, 8]);
    let h = dag.conditional_handle(1);
    let mut body = Dag::new();
    body.add_kernel(&k, LaunchConfig::new(1, 16), &args![&x, &h])
        .unwrap();
    let w = dag.add_while(&h, &body).unwrap();
    dag.set_name(w, "loop");
    let order = dag.topological_order();
    let events: Vec<crate::Event> = (0..=order.len()).map(|_| r.event()).collect();
    let seq = sequential(&dag, &order, &events).unwrap();
    seq.lower(&mut r).unwrap();
    let t = r.transcript();
    let adds = t.lines().filter(|l| l.contains("cudaGraphAdd")).count();
    assert_eq!(adds, 2 * dag.node_count() + 1, "{t}");
    let times: Vec<Vec<Duration>> = order.iter().map(|_| vec![ms(1.0)]).collect();
    let p = Profile::from_times(&dag, &order, &times, &[], &|_| None);
    assert_eq!(p.nodes().len(), dag.node_count());
    let kinds: Vec<NodeKind> = p.nodes().iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds.iter().filter(|&&k| k == NodeKind::Child).count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(p.node(w).unwrap().kind, NodeKind::Conditional);
    assert_eq!(p.node(w).unwrap().name, "loop");
}

/// Four nodes with synthetic times over three launches: `b` 6 ms, `a` 2 ms (1 to 3), `d` 2 ms
/// (tied with `a`, after it in the order), `c` 0.5 ms; the whole launches 10.6 to 10.8 ms.
fn four(r: &mut RecordingBackend) -> (Dag, Profile) {
    let x = r.device_buffer::<f32>(64);
    let k = r.kernel("scale", &[8, 4]);
    let mut dag = Dag::new();
    let ids: Vec<NodeId> = ["a", "b", "c", "d"]
        .iter()
        .map(|name| {
            let n = dag
                .add_kernel(&k, LaunchConfig::new(1, 64), &args![&x, 1.0f32])
                .unwrap();
            dag.set_name(n, *name)
        })
        .collect();
    dag.chain(&ids).unwrap();
    let order = dag.topological_order();
    let times = vec![
        vec![ms(1.0), ms(2.0), ms(3.0)],
        vec![ms(6.0); 3],
        vec![ms(0.5); 3],
        vec![ms(2.0); 3],
    ];
    let whole = [ms(10.6), ms(10.7), ms(10.8)];
    let p = Profile::from_times(&dag, &order, &times, &whole, &|_| None);
    (dag, p)
}

/// Whether two durations agree to a nanosecond (the means are whole nanoseconds).
fn close(a: Duration, b: Duration) -> bool {
    a.abs_diff(b) <= Duration::from_nanos(1)
}

#[test]
fn the_table_is_sorted_by_mean_time_with_shares_of_the_total() {
    let (_, p) = four(&mut rec());
    let names: Vec<&str> = p.nodes().iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["b", "a", "d", "c"], "slowest first, ties in order");
    let a = &p.nodes()[1];
    assert!(close(a.mean, ms(2.0)) && close(a.min, ms(1.0)) && close(a.max, ms(3.0)));
    assert_eq!(a.kind, NodeKind::Kernel);
    assert!(close(p.total(), ms(10.5)), "{:?}", p.total());
    let shares: Vec<f64> = p.nodes().iter().map(|n| n.share).collect();
    for (got, want) in shares.iter().zip([6.0, 2.0, 2.0, 0.5]) {
        assert!((got - want / 10.5).abs() < 1e-9, "{shares:?}");
    }
    assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    assert_eq!(p.launches(), 3);
    assert!(close(p.launch_time().unwrap(), ms(10.7)));
    // No time at all: shares are 0, not NaN.
    let mut dag = Dag::new();
    let e = dag.add_empty();
    let p = Profile::from_times(&dag, &[e], &[vec![Duration::ZERO]], &[], &|_| None);
    assert_eq!(p.nodes()[0].share, 0.0);
    assert_eq!(p.launch_time(), None);
}

#[test]
fn the_table_prints_aligned_with_units_and_totals() {
    let (_, p) = four(&mut rec());
    let expect = "\
per-node profile: 4 nodes, one at a time, 3 launches (mean, min, max per launch)
node                          kind         mean        min        max   share
b                             kernel   6.000 ms   6.000 ms   6.000 ms   57.1%
a                             kernel   2.000 ms   1.000 ms   3.000 ms   19.0%
d                             kernel   2.000 ms   2.000 ms   2.000 ms   19.0%
c                             kernel   500.0 µs   500.0 µs   500.0 µs    4.8%
-----------------------------------------------------------------------------
total (sum of the means)              10.500 ms                        100.0%
whole launch (stream events)          10.700 ms  10.600 ms  10.800 ms
";
    assert_eq!(p.to_string(), expect, "\n{p}");
    // Names of several lines are printed on one.
    let mut dag = Dag::new();
    let e = dag.add_empty();
    dag.set_name(e, "two\nlines");
    let p = Profile::from_times(&dag, &[e], &[vec![ms(2e3)]], &[], &|_| None);
    let text = p.to_string();
    assert!(
        text.contains("\ntwo lines                 empty  2.000 s"),
        "{text}"
    );
    assert!(text.starts_with("per-node profile: 1 node, one at a time, 1 launch "));
}

#[test]
fn the_dot_colours_each_node_by_its_share_and_labels_it_with_its_time() {
    let (dag, p) = four(&mut rec());
    let dot = p.to_dot();
    let line = |name: &str| {
        dot.lines()
            .find(|l| l.contains(&format!("label=\"{name}\\n")))
            .unwrap_or_else(|| panic!("no node {name}: {dot}"))
            .to_string()
    };
    // The slowest is red; the others whiter by their share relative to it (2/6: 170 of 255
    // off red, 0.5/6: 234).
    assert!(line("b").contains("fillcolor=\"#ff0000\""), "{dot}");
    assert!(line("a").contains("fillcolor=\"#ffaaaa\""), "{dot}");
    assert!(line("c").contains("fillcolor=\"#ffeaea\""), "{dot}");
    assert!(
        line("b").contains("\\n6.000 ms, 57.1%\\nmin 6.000 ms, max 6.000 ms\""),
        "{}",
        line("b")
    );
    assert!(line("c").contains("500.0 µs, 4.8%"), "{}", line("c"));
    // Everything else is the DAG's own DOT: the kinds' shapes, the edges.
    let plain = dag.to_dot();
    assert_eq!(dot.lines().count(), plain.lines().count());
    assert!(
        dot.contains("n0 -> n1;") && line("a").contains("shape=box"),
        "{dot}"
    );
    // A node that took no time is white.
    let mut d2 = Dag::new();
    let e = d2.add_empty();
    let f = d2.add_empty();
    let p = Profile::from_times(
        &d2,
        &[e, f],
        &[vec![ms(1.0)], vec![Duration::ZERO]],
        &[],
        &|_| None,
    );
    assert!(
        p.to_dot().contains("fillcolor=\"#ffffff\""),
        "{}",
        p.to_dot()
    );
    // Graphviz accepts it.
    if let Some((svg, _)) = super::tests::graphviz_svg(&dot) {
        assert_eq!(svg.matches("class=\"node\"").count(), dag.node_count());
        assert!(svg.contains("57.1%"), "labels reach the SVG");
    }
}

#[test]
#[cfg_attr(miri, ignore = "spawns Graphviz `dot`: Miri cannot run a process")]
fn write_svg_renders_with_graphviz_or_says_it_is_missing() {
    let (_, p) = four(&mut rec());
    let dir = std::env::temp_dir().join(format!("cudagraph-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("profile.svg");
    if super::tests::graphviz_svg("digraph { a }").is_some() {
        p.write_svg(&path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("<svg") && svg.contains("57.1%"), "{svg}");
        // A path Graphviz cannot write: its failure, with what it said.
        let err = p.write_svg(dir.join("no/such/dir/p.svg")).unwrap_err();
        assert!(
            matches!(&err, Error::Graphviz { stderr, .. } if !stderr.is_empty()),
            "{err}"
        );
    }
    let missing =
        super::profile::render_svg("cudagraph-no-such-graphviz".as_ref(), &p.to_dot(), &path)
            .unwrap_err();
    assert!(
        matches!(&missing, Error::GraphvizNotFound { program } if program == "cudagraph-no-such-graphviz"),
        "{missing}"
    );
    assert!(
        missing.to_string().contains("install Graphviz"),
        "{missing}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
