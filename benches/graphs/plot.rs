//! The SVG plot of the report: one panel per table.

use std::path::Path;

use anyhow::{anyhow, Result};

use crate::report::{fmt_us, Report, Table};

/// Line colours (Tableau 10: distinct, and readable on white).
pub const PALETTE: [plotters::style::RGBColor; 10] = {
    use plotters::style::RGBColor as C;
    [
        C(31, 119, 180),
        C(255, 127, 14),
        C(44, 160, 44),
        C(214, 39, 40),
        C(148, 103, 189),
        C(140, 86, 75),
        C(227, 119, 194),
        C(127, 127, 127),
        C(188, 189, 34),
        C(23, 190, 207),
    ]
};

/// One panel per table: µs per node against N, log-log, a line per method (for a
/// configuration table: µs per its unit against the named columns, log y).
pub fn plot(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let tables: Vec<&Table> = report
        .tables
        .iter()
        .filter(|t| {
            t.rows
                .iter()
                .flat_map(|r| r.values.iter().flatten())
                .any(|&v| v > 0.0)
        })
        .collect();
    if tables.is_empty() {
        return Ok(());
    }
    let cols = tables.len().min(3);
    let rows = tables.len().div_ceil(cols);
    let root = SVGBackend::new(path, (cols as u32 * 640, rows as u32 * 440)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((rows, cols));
    for (t, area) in tables.iter().zip(panels.iter()) {
        let values: Vec<f64> = t
            .rows
            .iter()
            .flat_map(|r| r.values.iter().flatten().copied())
            .filter(|&v| v > 0.0)
            .collect();
        let ymin = values.iter().copied().fold(f64::INFINITY, f64::min) / 1.5;
        let ymax = values.iter().copied().fold(0.0, f64::max) * 2.5;
        let y_desc = format!("µs per {}", t.unit);
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&t.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56);
        match &t.columns {
            None => {
                let nmin = t.ns.iter().copied().min().unwrap_or(1).max(1) as f64 / 1.5;
                let nmax = t.ns.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.5;
                let mut chart = builder
                    .build_cartesian_2d((nmin..nmax).log_scale(), (ymin..ymax).log_scale())
                    .map_err(|e| err(&e))?;
                chart
                    .configure_mesh()
                    .light_line_style(RGBColor(238, 238, 238))
                    .x_desc("N (nodes)")
                    .y_desc(&y_desc)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .y_label_formatter(&|y| fmt_us(*y))
                    .draw()
                    .map_err(|e| err(&e))?;
                let xs: Vec<f64> = t.ns.iter().map(|&n| n as f64).collect();
                draw_rows(&mut chart, t, &xs).map_err(|e| err(&e))?;
            }
            Some(columns) => {
                // Categorical x axis: column i at x = i.
                let k = columns.len() as f64;
                let mut chart = builder
                    .build_cartesian_2d(-0.5..k - 0.5, (ymin..ymax).log_scale())
                    .map_err(|e| err(&e))?;
                let name = |x: &f64| {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 {
                        columns.get(i as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                };
                chart
                    .configure_mesh()
                    .light_line_style(RGBColor(238, 238, 238))
                    .x_labels(columns.len())
                    .x_label_formatter(&name)
                    .x_desc("configuration")
                    .y_desc(&y_desc)
                    .y_label_formatter(&|y| fmt_us(*y))
                    .draw()
                    .map_err(|e| err(&e))?;
                let xs: Vec<f64> = (0..columns.len()).map(|i| i as f64).collect();
                draw_rows(&mut chart, t, &xs).map_err(|e| err(&e))?;
            }
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws one line per row of `t` (column `i` at x = `xs[i]`) and the legend.
pub fn draw_rows<'a, DB, X>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        DB,
        plotters::coord::cartesian::Cartesian2d<X, plotters::coord::combinators::LogCoord<f64>>,
    >,
    t: &Table,
    xs: &[f64],
) -> std::result::Result<(), String>
where
    DB: plotters::prelude::DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    use plotters::prelude::*;
    for (i, r) in t.rows.iter().enumerate() {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(&r.values)
            .filter_map(|(&x, v)| v.filter(|&v| v > 0.0).map(|v| (x, v)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)).point_size(3))
            .map_err(|e| e.to_string())?
            .label(r.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(|e| e.to_string())
}
