//! Tables, targets and the report: Markdown on stdout, `graphs.csv`, `graphs.md`, and the plot
//! (`plot.rs`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

/// One row of a table: a method (or a phase of one), its value per N in µs per node, and the
/// row its ratio is taken against.
#[derive(Debug, Clone)]
pub struct Row {
    pub label: String,
    pub vs: Option<String>,
    pub values: Vec<Option<f64>>,
}

/// One measurement: rows of methods, columns of N, µs per node (or, for a table made with
/// [`Table::configs`], columns of named configurations and µs per `unit`).
#[derive(Debug, Clone)]
pub struct Table {
    /// Stable key, used in the CSV and by the targets.
    pub key: String,
    /// Heading.
    pub title: String,
    /// What exactly was timed.
    pub note: String,
    /// The N of each column (the column's index for a [`Table::configs`] table).
    pub ns: Vec<usize>,
    pub rows: Vec<Row>,
    /// Column names instead of `N=...` (a categorical x axis in the plot).
    pub columns: Option<Vec<String>>,
    /// What one value is the time of: "node", or e.g. "iteration".
    pub unit: &'static str,
}

impl Table {
    pub fn new(key: &str, title: &str, note: &str, ns: &[usize]) -> Table {
        Table {
            key: key.into(),
            title: title.into(),
            note: note.into(),
            ns: ns.to_vec(),
            rows: Vec::new(),
            columns: None,
            unit: "node",
        }
    }

    /// A table whose columns are named configurations (`columns`) rather than node counts;
    /// values are µs per `unit`.
    pub fn configs(
        key: &str,
        title: &str,
        note: &str,
        columns: Vec<String>,
        unit: &'static str,
    ) -> Table {
        let mut t = Table::new(key, title, note, &(0..columns.len()).collect::<Vec<_>>());
        t.columns = Some(columns);
        t.unit = unit;
        t
    }

    /// The heading of column `ni`.
    pub fn column(&self, ni: usize) -> String {
        match &self.columns {
            Some(c) => c[ni].clone(),
            None => format!("N={}", self.ns[ni]),
        }
    }

    /// Declares a row; `vs` names the row its ratio column compares with.
    pub fn row(&mut self, label: &str, vs: Option<&str>) -> usize {
        self.rows.push(Row {
            label: label.into(),
            vs: vs.map(Into::into),
            values: vec![None; self.ns.len()],
        });
        self.rows.len() - 1
    }

    pub fn set(&mut self, row: usize, ni: usize, us_per_node: f64) {
        self.rows[row].values[ni] = Some(us_per_node);
    }

    pub fn ratio(&self, row: usize, ni: usize) -> Option<f64> {
        let r = &self.rows[row];
        let base = self.rows.iter().find(|b| Some(&b.label) == r.vs.as_ref())?;
        Some(r.values[ni]? / base.values[ni]?)
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### {}\n\n{}\n", self.title, self.note);
        let mut head = String::from("| method |");
        let mut rule = String::from("| --- |");
        for ni in 0..self.ns.len() {
            let _ = write!(head, " {} |", self.column(ni));
            rule.push_str(" ---: |");
        }
        let has_ratio = self.rows.iter().any(|r| r.vs.is_some());
        if has_ratio {
            head.push_str(if self.columns.is_some() {
                " ratio (per column) |"
            } else {
                " ratio (per N) |"
            });
            rule.push_str(" --- |");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for (i, r) in self.rows.iter().enumerate() {
            let mut line = format!("| {} |", r.label);
            for v in &r.values {
                match v {
                    Some(v) => {
                        let _ = write!(line, " {} |", fmt_us(*v));
                    }
                    None => line.push_str(" — |"),
                }
            }
            if has_ratio {
                match &r.vs {
                    Some(vs) => {
                        let ratios: Vec<String> = (0..self.ns.len())
                            .map(|ni| self.ratio(i, ni).map_or("—".into(), |x| format!("{x:.2}")))
                            .collect();
                        let _ = write!(line, " {} vs {vs} |", ratios.join(" · "));
                    }
                    None => line.push_str(" |"),
                }
            }
            let _ = writeln!(s, "{line}");
        }
        s
    }
}

/// A value in µs with about three significant digits.
pub fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A target of the project and how the measurement compares with it.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub measured: String,
    /// `None` when it could not be measured (or is informational).
    pub met: Option<bool>,
    /// A measurement shown with the targets for context, without a verdict.
    pub info: bool,
}

/// Everything the run produced.
pub struct Report {
    pub header: Vec<String>,
    pub tables: Vec<Table>,
    pub targets: Vec<Target>,
    pub errors: Vec<String>,
}

impl Report {
    /// Adds a finished table and prints it.
    pub fn table(&mut self, t: Table) {
        println!("{}", t.markdown());
        self.tables.push(t);
    }

    /// Records a target: `worst` is the deciding measured ratio (or value), `limit` the
    /// largest one that meets it.
    pub fn target(&mut self, name: String, detail: String, worst: Option<f64>, limit: f64) {
        let met = worst.map(|w| w <= limit);
        self.targets.push(Target {
            name,
            measured: detail,
            met,
            info: false,
        });
    }

    /// Records an informational line among the targets (no verdict).
    pub fn info(&mut self, name: String, detail: String) {
        self.targets.push(Target {
            name,
            measured: detail,
            met: None,
            info: true,
        });
    }

    pub fn find(&self, key: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.key == key)
    }

    pub fn targets_markdown(&self) -> String {
        let mut s =
            String::from("## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |\n");
        for t in &self.targets {
            let verdict = match t.met {
                _ if t.info => "informational",
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "not measured",
            };
            let _ = writeln!(s, "| {} | {} | {} |", t.name, t.measured, verdict);
        }
        s
    }

    pub fn markdown(&self) -> String {
        let mut s = String::from("# cudagraph GPU benchmark\n\n");
        for h in &self.header {
            let _ = writeln!(s, "- {h}");
        }
        s.push_str(
            "\nMethods: **stream launches** (`cudaLaunchKernel` per node; fan-out through 8 \
             worker streams and events), **stream capture** (the same stream work captured, \
             then `cudaGraphInstantiate` + `cudaGraphLaunch`), **raw graph** (explicit graph \
             with the raw runtime calls, the kernel-specific ones: the floor for any wrapper; in \
             the construction and update tables also made through CUDA's generic node API, \
             `cudaGraphAddNode` / `cudaGraphExecNodeSetParams`, and in the per-node update table \
             through the driver's `cuGraphExecKernelNodeSetParams`, the call the crate's \
             kernel-node updates make), **cudagraph** (`Dag` → \
             `Exec`). Every node is `tiny(unsigned*, unsigned)`, one block of 32 threads. \
             Values are medians, in µs **per node** (the time of the whole operation divided \
             by N); ratios are per N, in N order. The FFT tables are in µs **per iteration** \
             (one batch of transforms), one column per points × batch configuration.\n\n",
        );
        for t in &self.tables {
            s.push_str(&t.markdown());
            s.push('\n');
        }
        s.push_str(&self.targets_markdown());
        if !self.errors.is_empty() {
            s.push_str("\n## Errors\n\n");
            for e in &self.errors {
                let _ = writeln!(s, "- {e}");
            }
        }
        s
    }

    pub fn csv(&self) -> String {
        let mut s = String::from("table,title,method,n,us_per_node,ratio_vs,ratio\n");
        for t in &self.tables {
            for (i, r) in t.rows.iter().enumerate() {
                for (ni, n) in t.ns.iter().enumerate() {
                    let Some(v) = r.values[ni] else { continue };
                    let ratio = t.ratio(i, ni).map_or(String::new(), |x| format!("{x:.4}"));
                    // A configuration table names its column here (e.g. `4096×16`).
                    let n = match &t.columns {
                        Some(c) => csv_field(&c[ni]),
                        None => n.to_string(),
                    };
                    let _ = writeln!(
                        s,
                        "{},{},{},{n},{v:.4},{},{ratio}",
                        csv_field(&t.key),
                        csv_field(&t.title),
                        csv_field(&r.label),
                        csv_field(r.vs.as_deref().unwrap_or(""))
                    );
                }
            }
        }
        s
    }

    /// Writes `graphs.csv` and `graphs.md` into `dir` (the plot is `plot.rs`'s, drawn from
    /// the report: the report knows nothing of the plot).
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("graphs.csv"), self.csv())?;
        std::fs::write(dir.join("graphs.md"), self.markdown())?;
        Ok(())
    }
}

pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The ratios of row `label` against its `vs` row at the node counts `ns` (those the table
/// has), as text, and the worst (largest) of them.
pub fn ratio_summary(t: &Table, label: &str, ns: &[usize]) -> (String, Option<f64>) {
    let Some(row) = t.rows.iter().find(|r| r.label == label) else {
        return ("no such row".into(), None);
    };
    match &row.vs {
        Some(vs) => ratio_between(t, label, vs, ns),
        None => ("no data".into(), None),
    }
}

/// As [`ratio_summary`], against row `base` instead of the row's `vs`.
pub fn ratio_between(t: &Table, label: &str, base: &str, ns: &[usize]) -> (String, Option<f64>) {
    let find = |l: &str| t.rows.iter().find(|r| r.label == l);
    let (Some(row), Some(base)) = (find(label), find(base)) else {
        return ("no such row".into(), None);
    };
    let mut parts = Vec::new();
    let mut worst: Option<f64> = None;
    for n in ns {
        let Some(ni) = t.ns.iter().position(|m| m == n) else {
            continue;
        };
        if let (Some(x), Some(y)) = (row.values[ni], base.values[ni]) {
            let r = x / y;
            parts.push(format!("{r:.2} (N={n})"));
            worst = Some(worst.map_or(r, |w: f64| w.max(r)));
        }
    }
    match worst {
        Some(w) => (format!("{}; worst {w:.2}", parts.join(", ")), worst),
        None => ("no data".into(), None),
    }
}

/// The ratios of row `label` to row `base` in every column of a configuration table, as
/// text, and the worst (largest).
pub fn column_ratios(t: &Table, label: &str, base: &str) -> (String, Option<f64>) {
    let find = |l: &str| t.rows.iter().find(|r| r.label == l);
    let (Some(r), Some(b)) = (find(label), find(base)) else {
        return ("no such row".into(), None);
    };
    let mut parts = Vec::new();
    let mut worst: Option<f64> = None;
    for ni in 0..t.ns.len() {
        if let (Some(x), Some(y)) = (r.values[ni], b.values[ni]) {
            let q = x / y;
            parts.push(format!("{q:.2} ({})", t.column(ni)));
            worst = Some(worst.map_or(q, |w: f64| w.max(q)));
        }
    }
    match worst {
        Some(w) => (format!("{}; worst {w:.2}", parts.join(", ")), worst),
        None => ("no data".into(), None),
    }
}
