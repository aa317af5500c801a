//! No import circles between the crate's source files (issue #9).
//!
//! Reads every `src/**/*.rs` except the generated `src/sys/`, collects the crate-internal
//! paths each file names, maps each to the file that defines the item, and fails, printing the
//! circle with the path behind each step, if the file graph has a cycle. No GPU needed.
//!
//! # The rule
//!
//! - **Nodes are files.** A file's module path comes from its place under `src/` (`lib.rs` is
//!   the root, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`); inline modules
//!   (`mod sealed { … }`) belong to their file.
//! - **What counts as a use.** Every `use` item (groups expanded, `as` renames followed) and
//!   every path in code that starts with `crate::`, `$crate::`, `super::`, `self::` or with the
//!   name of a child module of the current module. Comments, doc comments, string and character
//!   literals are skipped, and so is test code: an item under `#[cfg(test)]` (inline test
//!   modules) and a file declared as `#[cfg(test)] mod x;`. Tests may reach anything.
//! - **Which file a path names.** The longest prefix of the path that is a file's module. When
//!   the next segment is a name that file imports with `use` at its top level (a re-export such
//!   as `pub use args::KernelArg` in `kernel/mod.rs`, or a plain `use` a child reaches through
//!   `super::`), the path is followed through that `use` to the file that defines the item,
//!   repeatedly. So `super::KernelArg` in `kernel/launch.rs` names `kernel/args.rs`, and
//!   `crate::Stream` names `stream.rs`, not the module that re-exports them.
//! - **Parents and children.** An edge between a file and one of its ancestors' files (in
//!   either direction) is not counted. A parent module is the facade of its children: it
//!   declares them, re-exports their items and may use them; a child sees its ancestors' items
//!   (`impl Dag` in a node kind's file). What this test forbids is a circle between files
//!   that are not nested in each other: siblings (`stream.rs` and `track.rs`), or cousins
//!   (`dag/exec.rs` and `dag/nodes/host.rs`). A use of a parent's *re-export* still counts as
//!   a use of the file that defines the item (see above), so a circle hidden behind a facade
//!   is found.
//! - **One merged unit.** `dag/exec.rs` (with `dag/exec/`), `dag/lower.rs` (with its backends in `dag/lower/`)
//!   and `dag/nodes/**` count as one node,
//!   `dag engine` ([`MERGED`]): every node kind keeps its own `impl Exec` per-node updates in its
//!   file (adding a kind is one file and one line), and `Exec` instantiates and updates by
//!   lowering through the kinds, so at file granularity they form one tangle by design. What
//!   the architecture promises inside it is checked as a direction instead
//!   ([`FORBIDDEN`]: the node kinds never import `dag/lower.rs` or `dag/lower/`).
//!   The kinds share their checks through `dag/nodes/mod.rs` (`check_owner`, `wrong_device`,
//!   `out_of_bounds`), not through each other's files: what ties the unit together is only
//!   `exec.rs` ↔ the kinds (their `impl Exec` updates) and `lower.rs` → the kinds.
//! - **Directions.** Besides having no circle, the files in [`FORBIDDEN`] never name the files
//!   listed with them (`error` names nothing of the crate; `fft` never names `dag`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

mod parse;

use parse::{parse, File};

type ModPath = Vec<String>;

/// Files (by path prefix under the crate root) that count as one node of the file graph, with
/// the unit's name and why.
const MERGED: &[(&str, &[&str], &str)] = &[(
    "dag engine",
    &[
        "src/dag/exec.rs",
        "src/dag/exec/",
        "src/dag/lower.rs",
        "src/dag/lower/",
        "src/dag/nodes/",
    ],
    "node kinds implement their Exec updates; Exec lowers through the kinds",
)];

/// (files by path prefix, files by path prefix they must never name, why).
const FORBIDDEN: &[(&str, &str, &str)] = &[
    (
        "src/dag/nodes/",
        "src/dag/lower.rs",
        "lower imports nodes, never the reverse",
    ),
    (
        "src/dag/nodes/",
        "src/dag/lower/",
        "lower (and its backends) import nodes, never the reverse",
    ),
    (
        "src/fft/",
        "src/dag/",
        "fft never imports dag (FFT nodes live in dag/nodes/fft)",
    ),
    (
        "src/error.rs",
        "src/",
        "error depends on nothing of the crate",
    ),
];

fn module_of(rel: &Path) -> ModPath {
    let mut segs: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = segs.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        segs.push(stem.to_string());
    }
    segs
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p != root.join("sys") {
                collect(&p, root, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The crate's files (without test-only ones), by module path.
fn read_crate(src: &Path) -> BTreeMap<ModPath, File> {
    let mut paths = Vec::new();
    collect(src, src, &mut paths);
    let mut files = BTreeMap::new();
    for p in paths {
        let rel = p.strip_prefix(src).expect("under src");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let f = parse(&format!("src/{}", rel.display()), module_of(rel), &text);
        files.insert(f.module.clone(), f);
    }
    // Files declared `#[cfg(test)] mod x;` are test code.
    let tests: Vec<ModPath> = files
        .values()
        .flat_map(|f| {
            f.test_children.iter().map(|c| {
                let mut m = f.module.clone();
                m.push(c.clone());
                m
            })
        })
        .collect();
    for t in tests {
        files.remove(&t);
    }
    files
}

/// The file `path` names: its longest prefix that is a file module, followed through that
/// file's top-level `use` bindings.
fn resolve(files: &BTreeMap<ModPath, File>, path: &[String]) -> Option<ModPath> {
    let mut path: ModPath = path.to_vec();
    for _ in 0..16 {
        let k = (0..=path.len())
            .rev()
            .find(|&k| files.contains_key(&path[..k]))?;
        let file = &files[&path[..k]];
        match path.get(k).and_then(|next| file.bindings.get(next)) {
            // `use x as x`-style self references would loop; stop at the file.
            Some(target) if target.as_slice() != path.as_slice() => {
                let mut next = target.clone();
                next.extend(path[k + 1..].iter().cloned());
                path = next;
            }
            _ => return Some(path[..k].to_vec()),
        }
    }
    None
}

fn nested(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Edges between files that are not nested in each other, each with one path behind it.
fn file_edges(files: &BTreeMap<ModPath, File>) -> BTreeMap<ModPath, BTreeMap<ModPath, String>> {
    let mut g: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for f in files.values() {
        let out = g.entry(f.module.clone()).or_default();
        for (written, abs) in &f.uses {
            let Some(to) = resolve(files, abs) else {
                continue;
            };
            if nested(&to, &f.module) {
                continue;
            }
            out.entry(to).or_insert_with(|| written.clone());
        }
    }
    g
}

/// The node a file counts as: its merged unit's, or its own.
fn unit_of(rel: &str) -> Option<&'static str> {
    MERGED
        .iter()
        .find(|(_, prefixes, _)| prefixes.iter().any(|p| rel.starts_with(p)))
        .map(|(name, _, _)| *name)
}

/// The file graph with [`MERGED`] units as single nodes (named by a module path of one
/// segment, the unit's name; edges inside a unit dropped). The names and paths of the merged
/// files go into `files` as a pseudo file per unit.
fn edges(files: &mut BTreeMap<ModPath, File>) -> BTreeMap<ModPath, BTreeMap<ModPath, String>> {
    let fine = file_edges(files);
    let node = |m: &ModPath, files: &BTreeMap<ModPath, File>| -> ModPath {
        match unit_of(&files[m].rel) {
            Some(u) => vec![format!("<{u}>")],
            None => m.clone(),
        }
    };
    let mut g: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for (a, outs) in &fine {
        let na = node(a, files);
        g.entry(na.clone()).or_default();
        for (b, written) in outs {
            let nb = node(b, files);
            if na != nb {
                let how = if unit_of(&files[a].rel).is_some() {
                    format!("{written}` in `{}", files[a].rel)
                } else {
                    written.clone()
                };
                g.entry(na.clone()).or_default().entry(nb).or_insert(how);
            }
        }
    }
    for (name, prefixes, _) in MERGED {
        let m = vec![format!("<{name}>")];
        files.insert(
            m.clone(),
            File {
                rel: format!("{} ({name})", prefixes.join(" + ")),
                module: m,
                uses: Vec::new(),
                bindings: HashMap::new(),
                test_children: BTreeSet::new(),
            },
        );
    }
    g
}

/// Uses that break [`FORBIDDEN`], as lines of text.
fn forbidden(files: &BTreeMap<ModPath, File>) -> Vec<String> {
    let g = file_edges(files);
    let mut out = Vec::new();
    for (a, outs) in &g {
        for (b, written) in outs {
            let (ra, rb) = (&files[a].rel, &files[b].rel);
            for (from, to, why) in FORBIDDEN {
                if ra.starts_with(from) && rb.starts_with(to) && !rb.starts_with(from) {
                    out.push(format!("{ra} names {rb} (`{written}`): {why}"));
                }
            }
        }
    }
    out
}

/// The strongly connected components with more than one file (Tarjan), each as its files.
fn tangles(g: &BTreeMap<ModPath, BTreeMap<ModPath, String>>) -> Vec<BTreeSet<ModPath>> {
    struct T<'g> {
        g: &'g BTreeMap<ModPath, BTreeMap<ModPath, String>>,
        index: HashMap<&'g ModPath, usize>,
        low: HashMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on: BTreeSet<&'g ModPath>,
        out: Vec<BTreeSet<ModPath>>,
    }
    impl<'g> T<'g> {
        fn visit(&mut self, n: &'g ModPath) {
            let i = self.index.len();
            self.index.insert(n, i);
            self.low.insert(n, i);
            self.stack.push(n);
            self.on.insert(n);
            for m in self.g.get(n).into_iter().flat_map(|e| e.keys()) {
                if !self.index.contains_key(m) {
                    self.visit(m);
                    let l = self.low[m].min(self.low[n]);
                    self.low.insert(n, l);
                } else if self.on.contains(m) {
                    let l = self.index[m].min(self.low[n]);
                    self.low.insert(n, l);
                }
            }
            if self.low[n] == self.index[n] {
                let mut c = BTreeSet::new();
                loop {
                    let m = self.stack.pop().expect("n is on the stack");
                    self.on.remove(m);
                    c.insert(m.clone());
                    if m == n {
                        break;
                    }
                }
                if c.len() > 1 {
                    self.out.push(c);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for n in g.keys() {
        if !t.index.contains_key(n) {
            t.visit(n);
        }
    }
    t.out
}

/// One cycle through the files of `tangle` (breadth-first from its first file back to it).
fn cycle_in(
    tangle: &BTreeSet<ModPath>,
    g: &BTreeMap<ModPath, BTreeMap<ModPath, String>>,
) -> Vec<ModPath> {
    let start = tangle.iter().next().expect("a tangle has files");
    let mut prev: HashMap<&ModPath, &ModPath> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for m in g[n].keys().filter(|m| tangle.contains(*m)) {
            if m == start {
                let mut path = vec![start.clone(), n.clone()];
                let mut cur = n;
                while cur != start {
                    cur = prev[cur];
                    path.push(cur.clone());
                }
                path.reverse();
                return path;
            }
            if !prev.contains_key(m) {
                prev.insert(m, n);
                queue.push_back(m);
            }
        }
    }
    unreachable!("a strongly connected component has a cycle through each file")
}

fn describe(
    cycle: &[ModPath],
    files: &BTreeMap<ModPath, File>,
    g: &BTreeMap<ModPath, BTreeMap<ModPath, String>>,
) -> String {
    let mut s = String::new();
    for w in cycle.windows(2) {
        s.push_str(&format!(
            "  {} -> {}   (names `{}`)\n",
            files[&w[0]].rel, files[&w[1]].rel, g[&w[0]][&w[1]]
        ));
    }
    s
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_import_circles_between_files() {
    let mut files = read_crate(&src_dir());
    assert!(files.len() > 20, "read only {} files", files.len());
    let g = edges(&mut files);
    let tangles = tangles(&g);
    if !tangles.is_empty() {
        let mut msg = String::from(
            "import circles between files (see tests/imports/main.rs for the rule):\n",
        );
        for t in &tangles {
            let names: Vec<&str> = t.iter().map(|m| files[m].rel.as_str()).collect();
            msg.push_str(&format!("files {names:?}, for example:\n"));
            msg.push_str(&describe(&cycle_in(t, &g), &files, &g));
        }
        panic!("{msg}");
    }
}

#[test]
fn architecture_directions_hold() {
    let bad = forbidden(&read_crate(&src_dir()));
    assert!(bad.is_empty(), "forbidden imports:\n{}", bad.join("\n"));
}

// ---- the checker itself --------------------------------------------------------------------

fn fake_crate(sources: &[(&str, &str)]) -> BTreeMap<ModPath, File> {
    let mut files = BTreeMap::new();
    for (rel, text) in sources {
        let f = parse(&format!("src/{rel}"), module_of(Path::new(rel)), text);
        files.insert(f.module.clone(), f);
    }
    files
}

fn cycle_of(sources: &[(&str, &str)]) -> Option<Vec<String>> {
    let mut files = fake_crate(sources);
    let g = edges(&mut files);
    tangles(&g).first().map(|t| {
        cycle_in(t, &g)
            .iter()
            .map(|m| files[m].rel.clone())
            .collect()
    })
}

#[test]
fn finds_a_circle_between_siblings() {
    let c = cycle_of(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B; fn f() -> crate::a::A { todo!() }"),
    ]);
    assert_eq!(c.map(|c| c.len()), Some(3));
}

#[test]
fn follows_a_parents_re_export_to_the_defining_file() {
    // `launch` reaches `args` through the facade `k`; `args` names `launch` directly.
    let c = cycle_of(&[
        ("lib.rs", "mod k;"),
        (
            "k/mod.rs",
            "mod args; mod launch; pub use args::Arg; pub use launch::Kernel;",
        ),
        ("k/args.rs", "use super::launch::Kernel; pub struct Arg;"),
        (
            "k/launch.rs",
            "pub struct Kernel; fn f(_: &[super::Arg]) {}",
        ),
    ]);
    assert!(c.is_some(), "the circle behind the re-export is found");
    // Renamed imports and groups are followed too.
    let c = cycle_of(&[
        ("lib.rs", "mod k; pub use k::{Arg as A};"),
        (
            "k/mod.rs",
            "mod args; mod launch; pub use self::args::{Arg};",
        ),
        (
            "k/args.rs",
            "use super::launch::{self as l}; pub struct Arg;",
        ),
        ("k/launch.rs", "pub struct Kernel; fn f(_: crate::A) {}"),
    ]);
    assert!(c.is_some());
}

#[test]
fn parents_and_children_may_use_each_other() {
    let c = cycle_of(&[
        ("lib.rs", "mod d; pub use d::Dag;"),
        (
            "d/mod.rs",
            "mod nodes; pub use nodes::Op; pub struct Dag { op: nodes::Op }",
        ),
        ("d/nodes/mod.rs", "mod kernel; pub enum Op { K(kernel::K) }"),
        (
            "d/nodes/kernel.rs",
            "use crate::d::Dag; pub struct K; impl Dag {}",
        ),
    ]);
    assert_eq!(c, None);
}

#[test]
fn skips_comments_strings_and_test_code() {
    let c = cycle_of(&[
        ("lib.rs", "mod a; mod b; #[cfg(test)] mod tests;"),
        ("a.rs", "use crate::b::B;"),
        (
            "b.rs",
            r##"pub struct B;
            // crate::a::A
            /* crate::a::A /* nested */ crate::a::A */
            /// [`A`](crate::a::A)
            const S: &str = "crate::a::A"; const R: &str = r#"crate::a::A"#;
            fn f<'a>(x: &'a str) -> char { '"' }
            #[cfg(test)]
            mod tests { use crate::a::A; }"##,
        ),
        ("tests.rs", "use crate::a::A; use crate::b::B;"),
    ]);
    assert_eq!(c, None);
}

#[test]
fn inline_modules_resolve_super_to_their_file() {
    // `super::` inside `mod sealed { }` of `b.rs` is `b` itself: no edge to the root's items.
    let c = cycle_of(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B;"),
        ("b.rs", "pub struct B; mod sealed { use super::B; }"),
    ]);
    assert_eq!(c, None);
}

#[test]
fn merged_units_hide_their_inner_circles_but_not_the_directions() {
    let sources = [
        ("lib.rs", "mod dag;"),
        ("dag/mod.rs", "mod exec; mod lower; mod nodes;"),
        ("dag/exec.rs", "use super::lower::L; pub struct Exec;"),
        ("dag/lower.rs", "use super::nodes::kernel::K; pub struct L;"),
        ("dag/nodes/mod.rs", "mod kernel;"),
        (
            "dag/nodes/kernel.rs",
            "use crate::dag::exec::Exec; pub struct K; impl Exec {}",
        ),
    ];
    assert_eq!(
        cycle_of(&sources),
        None,
        "exec, lower and nodes are one unit"
    );
    let files = fake_crate(&sources);
    assert!(forbidden(&files).is_empty());
    let mut bad = sources.to_vec();
    bad[5] = (
        "dag/nodes/kernel.rs",
        "use crate::dag::lower::L; pub struct K;",
    );
    let files = fake_crate(&bad);
    assert_eq!(
        forbidden(&files).len(),
        1,
        "a node kind naming lower is reported"
    );
}
