//! Per-node profiling: [`Exec::profile`] times each node of an instantiated graph on a
//! sequential copy of it (the method and what the times mean: [`Profile`]'s docs), and
//! [`Profile`] holds the result: a table sorted by time, a DOT coloured by share.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use petgraph::visit::NodeIndexable;

use super::dot::DotStyle;
use super::{Dag, Exec, InstantiateFlags, NodeId, NodeKind};
use crate::error::{Error, Result};
use crate::fft::FusionDecision;
use crate::stream::{Event, Stream};

/// One node's times in a [`Profile`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NodeTime {
    /// The node.
    pub node: NodeId,
    /// Its name ([`Node::name`](super::Node::name)).
    pub name: String,
    /// Its kind.
    pub kind: NodeKind,
    /// Its mean time over the launches.
    pub mean: Duration,
    /// Its shortest time.
    pub min: Duration,
    /// Its longest time.
    pub max: Duration,
    /// Its mean time as a fraction of [`Profile::total`] (0 to 1; 0 when the total is 0).
    pub share: f64,
}

/// What [`Exec::profile`] measured: each node's time, the nodes sorted by mean time (slowest
/// first), and a DOT of the DAG with each node coloured by its share of the total.
///
/// `Display` prints the table (name, kind, mean, min, max, share; then the total and the
/// whole launch).
///
/// # Method
///
/// The nodes are timed one at a time. From the DAG as instantiated ([`Exec::dag`]) a second,
/// *sequential* graph is made: the same nodes (copies, with their current parameters and
/// enabled flags), without their edges, one after another in the canonical topological order
/// ([`Dag::topological_order`]), with an event record node before the first, between every two
/// and after the last:
///
/// ```text
/// record e0 -> node 0 -> record e1 -> node 1 -> … -> node n-1 -> record en
/// ```
///
/// It is instantiated apart from the `Exec` (which is not touched), launched once to warm up
/// (upload, lazy module loading, caches) and then `launches` times, each launch waited for and
/// `cudaEventElapsedTime(e[i], e[i+1])` read for every node `i`. A topological order keeps
/// every ordering of the DAG (a node still runs after everything it depends on), so each node
/// sees the data it would see in the graph. Programmatic edges become plain ones.
///
/// # What a node is
///
/// A node of the DAG at the top level. A child graph and a conditional node are one entry each
/// (their whole body; a conditional node whose body does not run costs only its check); an
/// FFT node and a captured node are one entry each (every CUDA node their capture made); a
/// disabled node stays disabled (it costs the step from one node to the next).
///
/// # What the times mean
///
/// Each is the time from the end of the node before to the end of the node, so it includes
/// the GPU's step from one graph node to the next (of the order of a microsecond), and CUDA's
/// events resolve about half a microsecond: nodes shorter than a few microseconds are
/// dominated by both. Nodes that would run side by side in the graph run one at a time here,
/// so the sum of the times ([`Profile::total`]) is the sequential graph's time, not the
/// parallel graph's. [`Profile::launch_time`] is the sequential graph's time measured by
/// stream events around each launch; it exceeds the total by the graph's launch latency.
///
/// # Side effects
///
/// The nodes really run, `launches + 1` times: kernels write their outputs, copies copy, host
/// nodes call their closures, graph allocations are made and freed. Buffers the graph
/// accumulates into hold the result of those runs afterwards. Collective nodes cannot be
/// profiled: they are captured only by
/// [`Communicators::instantiate`](crate::Communicators::instantiate)
/// ([`Error::CollectiveOutsideInstantiate`]).
#[derive(Debug, Clone)]
pub struct Profile {
    /// Slowest first; nodes of equal mean time in topological order.
    nodes: Vec<NodeTime>,
    total: Duration,
    launches: u32,
    /// Mean, min, max of the sequential graph's launches (stream events around each).
    launch: Option<[Duration; 3]>,
    dot: String,
}

impl Exec {
    /// Measures how long each node of the graph takes, over `launches` launches (at least 1)
    /// of a sequential copy of the graph on `stream` (of the graph's device): the nodes one at
    /// a time in topological order, with event record nodes between them (see [`Profile`] for
    /// the method, what a node is and what its time means).
    ///
    /// The `Exec` is not touched: its launches are waited for first, then a separate graph is
    /// instantiated from its DAG (with its current parameters and enabled flags) and dropped
    /// at the end. But the nodes really run, `launches + 1` times (one warm-up launch): the
    /// buffers they write hold what those runs wrote, host nodes are called, and collective
    /// nodes cannot be profiled ([`Error::CollectiveOutsideInstantiate`]). Each launch is
    /// waited for, so `profile` blocks for about `launches + 1` times the sequential graph's
    /// time.
    ///
    /// ```no_run
    /// # fn main() -> cudagraph::Result<()> {
    /// use cudagraph::{Dag, Device, Stream};
    /// let device = Device::get(0)?;
    /// let stream = Stream::new(&device)?;
    /// let dag = Dag::new();
    /// // … nodes and dependencies …
    /// let exec = dag.instantiate(&device)?;
    /// let profile = exec.profile(&stream, 100)?;
    /// println!("{profile}");
    /// if let Some(slowest) = profile.nodes().first() {
    ///     println!("slowest: {} ({:?})", slowest.name, slowest.mean);
    /// }
    /// std::fs::write("profile.dot", profile.to_dot()).unwrap();
    /// # Ok(()) }
    /// ```
    pub fn profile(&self, stream: &Stream, launches: u32) -> Result<Profile> {
        if launches == 0 {
            return Err(Error::BadOptions {
                what: "Exec::profile",
                problem: "`launches` is 0: at least one launch is needed to time the nodes".into(),
            });
        }
        #[cfg(feature = "cudarc")]
        if let Some(a) = self.lent().next() {
            // Its launches would need the slices bound, which `profile` has no way to take.
            return Err(Error::Cudarc {
                what: "Exec::profile",
                problem: format!(
                    "the graph uses memory lent by cudarc (a Lent of {:#x}, {} bytes), which \
                     the profiled copy could not bind: profile a DAG over DeviceBuffers \
                     (DeviceBuffer::from_cudarc)",
                    a.ptr, a.bytes
                ),
            });
        }
        stream.check_device(&self.device, "the graph")?;
        crate::stream::check_not_in_host_node()?;
        // The sequential graph runs the same nodes on the same buffers: after this graph's
        // launches, not beside them.
        self.wait_for_launches()?;
        let order = self.dag.topological_order();
        let events = (0..=order.len())
            .map(|_| Event::new(&self.device))
            .collect::<Result<Vec<_>>>()?;
        let seq = sequential(&self.dag, &order, &events)?;
        // The flag lets an allocation the DAG never frees (accepted when this `Exec` was
        // instantiated with it) be instantiated again; it changes nothing else.
        let flags = InstantiateFlags {
            auto_free_on_launch: true,
            ..InstantiateFlags::default()
        };
        let mut exec = seq.instantiate_with(&self.device, flags, None)?;
        let (start, end) = (Event::new(&self.device)?, Event::new(&self.device)?);
        let mut times = vec![Vec::with_capacity(launches as usize); order.len()];
        let mut whole = Vec::with_capacity(launches as usize);
        exec.launch(stream)?;
        exec.synchronize()?;
        for _ in 0..launches {
            start.record(stream)?;
            exec.launch(stream)?;
            end.record(stream)?;
            end.synchronize()?;
            for (t, e) in times.iter_mut().zip(events.windows(2)) {
                t.push(ms(e[0].elapsed_ms(&e[1])?));
            }
            whole.push(ms(start.elapsed_ms(&end)?));
        }
        // Reports a host node's panic; the drop waits for nothing more.
        exec.synchronize()?;
        drop(exec);
        Ok(Profile::from_times(
            &self.dag,
            &order,
            &times,
            &whole,
            &|uid| self.fft_capture.decision(uid),
        ))
    }
}

/// Milliseconds from `cudaEventElapsedTime` as a duration (never negative).
fn ms(ms: f32) -> Duration {
    Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)
}

/// The sequential graph of `dag`: its nodes (copies), without their edges, one after another
/// in `order` (a topological order of `dag`), with an event record node of `events[i]` before
/// node `order[i]` and one of `events[n]` after the last:
/// `record(events[0]) -> order[0] -> record(events[1]) -> … -> order[n-1] -> record(events[n])`.
/// The nodes keep their ids; the record nodes come after them (serials from `dag`'s next).
pub(crate) fn sequential(dag: &Dag, order: &[NodeId], events: &[Event]) -> Result<Dag> {
    assert_eq!(
        events.len(),
        order.len() + 1,
        "one event before each node and one after the last"
    );
    let mut seq = dag.clone();
    seq.graph.clear_edges();
    seq.backward_edges = 0;
    let mut before = seq.add_event_record(&events[0]);
    for (&id, event) in order.iter().zip(&events[1..]) {
        let after = seq.add_event_record(event);
        // Neither edge can close a cycle: `id` has no successor yet, `after` none at all.
        seq.add_dependency(before, id)?;
        seq.add_dependency(id, after)?;
        before = after;
    }
    Ok(seq)
}

impl Profile {
    /// The profile of `dag` from its nodes' times: `times[i]` holds one time per launch of
    /// node `order[i]` (every node of `dag` once, in topological order), `whole` the
    /// sequential graph's launches (empty: not measured). FFT node labels in the DOT show the
    /// form `fft` gives. Also the constructor of the host tests (synthetic times).
    pub(crate) fn from_times(
        dag: &Dag,
        order: &[NodeId],
        times: &[Vec<Duration>],
        whole: &[Duration],
        fft: &dyn Fn(u64) -> Option<FusionDecision>,
    ) -> Profile {
        assert_eq!(order.len(), times.len(), "one list of times per node");
        let mut nodes: Vec<NodeTime> = order
            .iter()
            .zip(times)
            .map(|(&id, t)| {
                let node = dag.node(id).expect("the order names nodes of the DAG");
                let [mean, min, max] = stats(t);
                NodeTime {
                    node: id,
                    name: node.name().to_string(),
                    kind: node.kind(),
                    mean,
                    min,
                    max,
                    share: 0.0,
                }
            })
            .collect();
        let total: Duration = nodes.iter().map(|n| n.mean).sum();
        for n in &mut nodes {
            if !total.is_zero() {
                n.share = n.mean.as_secs_f64() / total.as_secs_f64();
            }
        }
        // Stable: nodes of equal time stay in topological order.
        nodes.sort_by_key(|n| std::cmp::Reverse(n.mean));
        let largest = nodes.first().map_or(0.0, |n| n.share);
        let mut style: Vec<Option<DotStyle>> = vec![None; dag.graph.node_bound()];
        for n in &nodes {
            style[n.node.index()] = Some(DotStyle {
                fill: share_colour(if largest > 0.0 {
                    n.share / largest
                } else {
                    0.0
                }),
                extra: vec![
                    format!("{}, {:.1}%", time_words(n.mean), n.share * 100.0),
                    format!("min {}, max {}", time_words(n.min), time_words(n.max)),
                ],
            });
        }
        let dot = dag.to_dot_styled(fft, &|i| style.get(i).cloned().flatten());
        Profile {
            launches: times.first().map_or(whole.len(), Vec::len) as u32,
            nodes,
            total,
            launch: (!whole.is_empty()).then(|| stats(whole)),
            dot,
        }
    }

    /// The nodes' times, slowest first (nodes of equal mean time in topological order).
    pub fn nodes(&self) -> &[NodeTime] {
        &self.nodes
    }

    /// The times of node `id`, if it was profiled.
    pub fn node(&self, id: NodeId) -> Option<&NodeTime> {
        self.nodes.iter().find(|n| n.node == id)
    }

    /// The sum of the nodes' mean times: the sequential graph's time, from the start of its
    /// first node to the end of its last.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// How many launches were timed (the warm-up launch not counted).
    pub fn launches(&self) -> u32 {
        self.launches
    }

    /// The sequential graph's mean time per launch, measured by events recorded on the stream
    /// before and after each launch: [`Profile::total`] plus the graph's launch latency.
    pub fn launch_time(&self) -> Option<Duration> {
        self.launch.map(|[mean, _, _]| mean)
    }

    /// The DAG in Graphviz DOT form (as [`Exec::to_dot`]), each node filled from white to red
    /// by its share of the total (relative to the slowest node's: that one is red) and
    /// labelled with its mean time, share, and shortest and longest times.
    pub fn to_dot(&self) -> String {
        self.dot.clone()
    }

    /// Renders [`Profile::to_dot`] to an SVG file at `path` with Graphviz `dot` (found on the
    /// `PATH`): [`Error::GraphvizNotFound`] where it is not installed, [`Error::Graphviz`] when
    /// it fails (e.g. it cannot write `path`).
    pub fn write_svg(&self, path: impl AsRef<Path>) -> Result<()> {
        render_svg("dot".as_ref(), &self.dot, path.as_ref())
    }
}

/// Mean, shortest and longest of `times` (zeros for none).
fn stats(times: &[Duration]) -> [Duration; 3] {
    if times.is_empty() {
        return [Duration::ZERO; 3];
    }
    let sum: Duration = times.iter().sum();
    let min = times.iter().min().copied().unwrap_or_default();
    let max = times.iter().max().copied().unwrap_or_default();
    [sum / times.len() as u32, min, max]
}

/// White (`t` = 0) to red (`t` = 1), as `#rrggbb`.
fn share_colour(t: f64) -> String {
    let other = (255.0 * (1.0 - t.clamp(0.0, 1.0))).round() as u8;
    format!("#ff{other:02x}{other:02x}")
}

/// A duration in words: `1.234 s`, `5.012 ms`, `12.5 µs`.
fn time_words(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// Runs Graphviz `program` (`dot`) to render `dot` as SVG into `path`.
pub(super) fn render_svg(program: &std::ffi::OsStr, dot: &str, path: &Path) -> Result<()> {
    let spawned = std::process::Command::new(program)
        .arg("-Tsvg")
        .arg("-o")
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::GraphvizNotFound {
                program: program.to_string_lossy().into_owned(),
            })
        }
        Err(e) => return Err(Error::io("running Graphviz `dot`", &e)),
    };
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(dot.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io("waiting for Graphviz `dot`", &e))?;
    if !out.status.success() {
        return Err(Error::Graphviz {
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    if let Some(Err(e)) = written {
        return Err(Error::io("writing the DOT text to Graphviz `dot`", &e));
    }
    Ok(())
}

impl std::fmt::Display for Profile {
    /// The table: one row per node, slowest first (name, kind, mean, min, max, share), then the
    /// total and the sequential graph's whole launch, aligned in columns.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = ["node", "kind", "mean", "min", "max", "share"];
        let mut rows: Vec<[String; 6]> = self
            .nodes
            .iter()
            .map(|n| {
                [
                    n.name.replace('\n', " "),
                    n.kind.as_str().to_string(),
                    time_words(n.mean),
                    time_words(n.min),
                    time_words(n.max),
                    format!("{:.1}%", n.share * 100.0),
                ]
            })
            .collect();
        let shares = if self.total.is_zero() {
            "0.0%"
        } else {
            "100.0%"
        };
        rows.push([
            "total (sum of the means)".into(),
            String::new(),
            time_words(self.total),
            String::new(),
            String::new(),
            shares.into(),
        ]);
        if let Some([mean, min, max]) = self.launch {
            rows.push([
                "whole launch (stream events)".into(),
                String::new(),
                time_words(mean),
                time_words(min),
                time_words(max),
                String::new(),
            ]);
        }
        let mut width = head.map(|h| h.chars().count());
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        writeln!(
            f,
            "per-node profile: {} node{}, one at a time, {} launch{} (mean, min, max per launch)",
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" },
            self.launches,
            if self.launches == 1 { "" } else { "es" },
        )?;
        let line = |f: &mut std::fmt::Formatter<'_>, cells: [&str; 6]| {
            let mut s = String::new();
            // Name and kind to the left, numbers to the right.
            let _ = write!(
                s,
                "{:<w0$}  {:<w1$}",
                cells[0],
                cells[1],
                w0 = width[0],
                w1 = width[1]
            );
            for (c, w) in cells[2..].iter().zip(&width[2..]) {
                let _ = write!(s, "  {c:>w$}");
            }
            writeln!(f, "{}", s.trim_end())
        };
        line(f, head)?;
        let total_rows = 1 + usize::from(self.launch.is_some());
        for (i, r) in rows.iter().enumerate() {
            if i + total_rows == rows.len() && i > 0 {
                let rule: usize = width.iter().sum::<usize>() + 2 * (width.len() - 1);
                writeln!(f, "{}", "-".repeat(rule))?;
            }
            line(f, [&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]])?;
        }
        Ok(())
    }
}
