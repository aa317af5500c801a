//! Host tests of dependencies inferred from data access and of the race check (issue 31):
//! hand-worked cases for each hazard, and a property test against a brute-force oracle.

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::tests::rec;
use super::*;
use crate::kernel::Access;
use crate::{args, dst, src, In, InOut, KernelArg, LaunchConfig, Out, Region};

fn one() -> LaunchConfig {
    LaunchConfig::new(1, 1)
}

/// The inferred edges as (before, after, hazard kind, range).
fn inferred(dag: &Dag) -> Vec<(NodeId, NodeId, HazardKind, std::ops::Range<usize>)> {
    let mut v: Vec<_> = dag
        .graph
        .edge_references()
        .filter_map(|e| {
            let h = e.weight().inferred()?;
            Some((
                dag.id_at(e.source()),
                dag.id_at(e.target()),
                h.kind,
                h.range.clone(),
            ))
        })
        .collect();
    v.sort_by_key(|e| (e.0.serial, e.1.serial));
    v
}

#[test]
fn read_after_write_write_after_read_and_write_after_write() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(16);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let w = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let rd = dag.add_kernel(&k, one(), &args![In(&x)]).unwrap();
    let w2 = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let w3 = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let added = dag.infer_dependencies();
    use HazardKind::*;
    assert_eq!(
        inferred(&dag),
        vec![
            (w, rd, ReadAfterWrite, 0..64),
            (rd, w2, WriteAfterRead, 0..64),
            (w2, w3, WriteAfterWrite, 0..64),
        ],
        "no w -> w2: w -> rd -> w2 implies it"
    );
    assert_eq!(added.len(), 3);
    assert_eq!(added[0].before, w);
    assert!(dag.races().is_empty());
    assert!(
        dag.infer_dependencies().is_empty(),
        "a second call adds nothing"
    );
}

#[test]
fn reads_stay_parallel_and_disjoint_ranges_need_no_edge() {
    let mut r = rec();
    let x = r.device_buffer::<u8>(64);
    let (lo, hi) = (x.region(0..32), x.region(32..64));
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let w = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let r1 = dag.add_kernel(&k, one(), &args![In(&x)]).unwrap();
    let r2 = dag.add_kernel(&k, one(), &args![In(&x)]).unwrap();
    let a = dag.add_kernel(&k, one(), &args![Out(&lo)]).unwrap();
    let b = dag.add_kernel(&k, one(), &args![InOut(&hi)]).unwrap();
    dag.infer_dependencies();
    use HazardKind::*;
    assert_eq!(
        inferred(&dag),
        vec![
            (w, r1, ReadAfterWrite, 0..64),
            (w, r2, ReadAfterWrite, 0..64),
            (r1, a, WriteAfterRead, 0..32),
            (r1, b, WriteAfterRead, 32..64),
            (r2, a, WriteAfterRead, 0..32),
            (r2, b, WriteAfterRead, 32..64),
        ],
        "r1 and r2 are parallel, a and b too"
    );
}

#[test]
fn partial_overlaps_are_hazards_on_the_shared_bytes() {
    let mut r = rec();
    let x = r.device_buffer::<u8>(100);
    let (a_r, b_r, c_r) = (x.region(0..40), x.region(30..70), x.region(70..100));
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, one(), &args![Out(&a_r)]).unwrap();
    let b = dag.add_kernel(&k, one(), &args![In(&b_r)]).unwrap();
    let c = dag.add_kernel(&k, one(), &args![Out(&c_r)]).unwrap();
    dag.infer_dependencies();
    assert_eq!(
        inferred(&dag),
        vec![(a, b, HazardKind::ReadAfterWrite, 30..40)],
        "c only touches the end: b's range stops where c's starts"
    );
    assert!(
        dag.to_dot().contains("[style=dashed, label=\"RAW "),
        "{}",
        dag.to_dot()
    );
    let _ = c;
}

#[test]
fn chains_are_reduced_and_explicit_edges_count() {
    let mut r = rec();
    let x = r.device_buffer::<u32>(8);
    let y = r.device_buffer::<u32>(8);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    // a -> b -> c all write x: no a -> c.
    let a = dag.add_kernel(&k, one(), &args![InOut(&x)]).unwrap();
    let b = dag.add_kernel(&k, one(), &args![InOut(&x)]).unwrap();
    let c = dag.add_kernel(&k, one(), &args![InOut(&x)]).unwrap();
    // d writes y, e reads it, but an explicit d -> m -> e path orders them already.
    let d = dag.add_kernel(&k, one(), &args![Out(&y)]).unwrap();
    let m = dag.add_empty();
    let e = dag.add_kernel(&k, one(), &args![In(&y)]).unwrap();
    dag.chain(&[d, m, e]).unwrap();
    let explicit = dag.edge_count();
    dag.infer_dependencies();
    use HazardKind::*;
    assert_eq!(
        inferred(&dag),
        vec![(a, b, ReadAfterWrite, 0..32), (b, c, ReadAfterWrite, 0..32)]
    );
    assert_eq!(dag.edge_count(), explicit + 2);
    assert!(
        dag.graph
            .edge_references()
            .filter(|e| e.weight().inferred().is_none())
            .count()
            == 2
    );
}

#[test]
fn explicit_backward_edges_win_over_insertion_order() {
    let mut r = rec();
    let x = r.device_buffer::<u32>(8);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let b = dag.add_kernel(&k, one(), &args![In(&x)]).unwrap();
    let c = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    dag.add_dependency(c, a).unwrap(); // c runs first
    dag.infer_dependencies();
    // Program order is now c, a, b: c -> a is explicit (WAW covered), a -> b RAW.
    assert_eq!(
        inferred(&dag),
        vec![(a, b, HazardKind::ReadAfterWrite, 0..32)]
    );
    assert!(dag.races().is_empty());
}

#[test]
fn copies_memsets_and_unmarked_arguments() {
    let mut r = rec();
    let x = r.device_buffer::<u8>(64);
    let y = r.device_buffer::<u8>(64);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let fill = dag.add_memset(x.region(0..16), 1u8).unwrap();
    let copy = dag
        .add_copy(dst(y.region(0..16)), src(x.region(0..16)))
        .unwrap();
    let read_y = dag.add_kernel(&k, one(), &args![In(&y)]).unwrap();
    let unmarked = dag.add_kernel(&k, one(), &args![&x]).unwrap();
    let host = dag.add_host(|| {});
    let later = dag.add_kernel(&k, one(), &args![In(&y)]).unwrap();
    dag.infer_dependencies();
    use HazardKind::*;
    let got: Vec<_> = inferred(&dag)
        .into_iter()
        .map(|e| (e.0, e.1, e.2))
        .collect();
    assert_eq!(
        got,
        vec![
            (fill, copy, ReadAfterWrite),
            (copy, read_y, ReadAfterWrite),
            (copy, unmarked, WriteAfterRead), // an unmarked argument writes
            (read_y, host, WriteAfterRead),   // a host node touches everything
            (unmarked, host, ReadAfterWrite),
            (host, later, ReadAfterWrite),
        ]
    );
}

#[test]
fn child_graphs_and_captured_nodes_touch_what_they_hold() {
    let mut r = rec();
    let x = r.device_buffer::<u8>(64);
    let y = r.device_buffer::<u8>(64);
    let k = r.kernel("k", &[8]);
    let mut child = Dag::new();
    child.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    child.add_empty();
    let mut dag = Dag::new();
    let c = dag.add_child(&child);
    let empty = dag.add_empty(); // touches nothing
                                 // SAFETY: the work enqueues nothing.
    let cap = unsafe { dag.add_captured("lib", [y.region(0..8)], |_| Ok(())) };
    let read_x = dag.add_kernel(&k, one(), &args![In(&x)]).unwrap();
    let read_y = dag
        .add_kernel(&k, one(), &args![In(&y.region(4..12))])
        .unwrap();
    dag.infer_dependencies();
    use HazardKind::*;
    assert_eq!(
        inferred(&dag),
        vec![
            (c, read_x, ReadAfterWrite, 0..64),
            (cap, read_y, ReadAfterWrite, 4..8), // a captured region is read and written
        ]
    );
    assert_eq!(dag.dependencies(empty).count(), 0);
}

#[test]
fn races_name_both_nodes_and_the_range() {
    let mut r = rec();
    let x = r.device_buffer::<u8>(64);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let w = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let rd = dag
        .add_kernel(&k, one(), &args![In(&x.region(8..16))])
        .unwrap();
    dag.set_name(w, "writer");
    dag.set_name(rd, "reader");
    let races = dag.races();
    assert_eq!(races.len(), 1);
    assert_eq!((races[0].first, races[0].second), (w, rd));
    assert_eq!(races[0].hazard.range, 8..16);
    let text = races[0].to_string();
    assert!(
        text.starts_with("race between `writer` and `reader`: RAW 0x") && text.contains("[8..16]"),
        "{text}"
    );
    dag.add_dependency(w, rd).unwrap();
    assert!(dag.races().is_empty());
}

/// A node of a random case: a host node, or a kernel with up to two marked arguments
/// `(buffer, start, end, access)` over two 32-byte buffers.
#[derive(Debug, Clone)]
enum Spec {
    Host,
    Kernel(Vec<(usize, usize, usize, Access)>),
}

fn spec() -> impl Strategy<Value = Spec> {
    let access = prop_oneof![
        Just(Access::Read),
        Just(Access::Write),
        Just(Access::ReadWrite)
    ];
    let arg = (0..2usize, 0..32usize, 1..33usize, access)
        .prop_map(|(b, s, l, a)| (b, s, (s + l).min(32), a));
    prop_oneof![
        1 => Just(Spec::Host),
        8 => prop::collection::vec(arg, 0..3).prop_map(Spec::Kernel),
    ]
}

fn conflicts(a: &Spec, b: &Spec) -> bool {
    match (a, b) {
        (Spec::Host, Spec::Kernel(v)) | (Spec::Kernel(v), Spec::Host) => !v.is_empty(),
        (Spec::Host, Spec::Host) => true,
        (Spec::Kernel(x), Spec::Kernel(y)) => x.iter().any(|p| {
            y.iter().any(|q| {
                p.0 == q.0 && p.1.max(q.1) < p.2.min(q.2) && (p.3.writes() || q.3.writes())
            })
        }),
    }
}

/// Whether `to` is reachable from `from` over `edges`, leaving out edge `skip`.
fn reaches(
    n: usize,
    edges: &[(usize, usize)],
    skip: Option<usize>,
    from: usize,
    to: usize,
) -> bool {
    let mut seen = vec![false; n];
    let mut stack = vec![from];
    while let Some(v) = stack.pop() {
        for (k, &(a, b)) in edges.iter().enumerate() {
            if a == v && Some(k) != skip && !seen[b] {
                if b == to {
                    return true;
                }
                seen[b] = true;
                stack.push(b);
            }
        }
    }
    false
}

#[test]
fn inference_orders_every_conflict_with_no_implied_edge() {
    let case = (
        prop::collection::vec(spec(), 1..14),
        prop::collection::vec((0..14usize, 0..14usize), 0..12),
    );
    let mut runner = TestRunner::new(Config::with_cases(256));
    runner
        .run(&case, |(specs, explicit)| {
            let mut r = rec();
            let bufs = [r.device_buffer::<u8>(32), r.device_buffer::<u8>(32)];
            let k = r.kernel("k", &[8, 8]);
            let k1 = r.kernel("k", &[8]);
            let k0 = r.kernel("k", &[]);
            let mut dag = Dag::new();
            let mut ids = Vec::new();
            for s in &specs {
                let id = match s {
                    Spec::Host => dag.add_host(|| {}),
                    Spec::Kernel(v) => {
                        let regions: Vec<Region> =
                            v.iter().map(|a| bufs[a.0].region(a.1..a.2)).collect();
                        let a: Vec<KernelArg> = v
                            .iter()
                            .zip(&regions)
                            .map(|(a, r)| match a.3 {
                                Access::Read => In(r).into(),
                                Access::Write => Out(r).into(),
                                Access::ReadWrite => InOut(r).into(),
                            })
                            .collect();
                        let kern = [&k0, &k1, &k][a.len()];
                        dag.add_kernel(kern, one(), &a).unwrap()
                    }
                };
                ids.push(id);
            }
            let n = ids.len();
            for &(a, b) in &explicit {
                let _ = dag.add_dependency(ids[a % n], ids[b % n]); // cycles refused
            }
            let index = |id: NodeId| ids.iter().position(|&x| x == id).unwrap();
            let edges_of = |dag: &Dag| -> Vec<(usize, usize)> {
                dag.edges().map(|(a, b)| (index(a), index(b))).collect()
            };
            let before = edges_of(&dag);
            // The race check before inference: exactly the unordered conflicting pairs.
            let races: HashSet<(usize, usize)> = dag
                .races()
                .iter()
                .map(|r| {
                    let (a, b) = (index(r.first), index(r.second));
                    (a.min(b), a.max(b))
                })
                .collect();
            let mut expect = HashSet::new();
            for a in 0..n {
                for b in a + 1..n {
                    if conflicts(&specs[a], &specs[b])
                        && !reaches(n, &before, None, a, b)
                        && !reaches(n, &before, None, b, a)
                    {
                        expect.insert((a, b));
                    }
                }
            }
            prop_assert_eq!(&races, &expect, "races before inference");

            let added = dag.infer_dependencies();
            let after = edges_of(&dag);
            prop_assert_eq!(after.len(), before.len() + added.len());
            for a in 0..n {
                for b in a + 1..n {
                    if conflicts(&specs[a], &specs[b]) {
                        prop_assert!(
                            reaches(n, &after, None, a, b) || reaches(n, &after, None, b, a),
                            "conflicting {} and {} unordered",
                            a,
                            b
                        );
                    }
                }
            }
            for (k, &(a, b)) in after.iter().enumerate() {
                let inferred = dag
                    .graph
                    .find_edge(ids[a].idx, ids[b].idx)
                    .map(|e| dag.graph[e].inferred().is_some())
                    .unwrap();
                if inferred {
                    prop_assert!(
                        conflicts(&specs[a], &specs[b]),
                        "edge {}->{} protects nothing",
                        a,
                        b
                    );
                    prop_assert!(
                        !reaches(n, &after, Some(k), a, b),
                        "inferred edge {}->{} is implied by others",
                        a,
                        b
                    );
                }
            }
            prop_assert!(dag.races().is_empty());
            Ok::<(), TestCaseError>(())
        })
        .unwrap();
}
