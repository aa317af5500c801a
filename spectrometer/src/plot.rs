//! PNG plots of a product: the integrated spectrum (top) and a waterfall (bottom), frequency
//! increasing to the right in both. Drawn with plotters' bitmap backend; text uses a built-in
//! 5×7 pixel font, so no system font is needed.

use std::path::Path;

use plotters::prelude::*;

use crate::error::{Error, Result};

/// Accumulates what the plot of one (product, output) shows, with bounded memory: at most
/// [`PlotData::MAX_COLS`] frequency bins and [`PlotData::MAX_ROWS`] waterfall rows.
#[derive(Debug, Clone)]
pub struct PlotData {
    nchans: usize,
    /// Channels averaged per column.
    chan_per_col: usize,
    cols: usize,
    /// Integrations averaged per row.
    int_per_row: u64,
    /// Sum over all integrations, per column (IF 0).
    spectrum: Vec<f64>,
    integrations: u64,
    /// Rows of the waterfall (each the mean over `int_per_row` integrations).
    waterfall: Vec<Vec<f32>>,
    row_acc: Vec<f64>,
    row_n: u64,
    /// Frequency of column 0's first and last channel's centres (MHz), in output order.
    fch1: f64,
    foff: f64,
    tsamp: f64,
    title: String,
}

impl PlotData {
    /// Most frequency columns kept.
    pub const MAX_COLS: usize = 1024;
    /// Most waterfall rows kept.
    pub const MAX_ROWS: u64 = 512;

    /// For `nchans` channels (`fch1`, `foff`), `integrations` expected of `tsamp` seconds.
    pub fn new(
        nchans: usize,
        integrations: u64,
        fch1: f64,
        foff: f64,
        tsamp: f64,
        title: String,
    ) -> Self {
        let chan_per_col = nchans.div_ceil(Self::MAX_COLS).max(1);
        let cols = nchans.div_ceil(chan_per_col);
        PlotData {
            nchans,
            chan_per_col,
            cols,
            int_per_row: integrations.div_ceil(Self::MAX_ROWS).max(1),
            spectrum: vec![0.0; cols],
            integrations: 0,
            waterfall: Vec::new(),
            row_acc: vec![0.0; cols],
            row_n: 0,
            fch1,
            foff,
            tsamp,
            title,
        }
    }

    /// Adds one integration (IF 0, the first `nchans` values, are plotted).
    pub fn add(&mut self, data: &[f32]) {
        for (i, &v) in data[..self.nchans].iter().enumerate() {
            let c = i / self.chan_per_col;
            self.spectrum[c] += v as f64;
            self.row_acc[c] += v as f64;
        }
        self.integrations += 1;
        self.row_n += 1;
        if self.row_n == self.int_per_row {
            self.push_row();
        }
    }

    fn push_row(&mut self) {
        let n = (self.row_n * self.chan_per_col as u64) as f64;
        self.waterfall
            .push(self.row_acc.iter().map(|&v| (v / n) as f32).collect());
        self.row_acc.iter_mut().for_each(|v| *v = 0.0);
        self.row_n = 0;
    }

    /// Renders the PNG.
    pub fn render(mut self, path: &Path) -> Result<()> {
        if self.row_n > 0 {
            self.push_row();
        }
        draw(&self, path).map_err(|e| Error::Plot {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn db(v: f64) -> f64 {
    10.0 * v.max(1e-30).log10()
}

fn colormap(x: f64) -> RGBColor {
    // A perceptually ordered dark-blue → green → yellow ramp (viridis-like, 5 stops).
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let x = x.clamp(0.0, 1.0) * 4.0;
    let i = (x.floor() as usize).min(3);
    let f = x - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let m = |p: f64, q: f64| (p + (q - p) * f) as u8;
    RGBColor(m(a.0, b.0), m(a.1, b.1), m(a.2, b.2))
}

fn draw(d: &PlotData, path: &Path) -> DrawResult {
    let (w, h) = (1100u32, 820u32);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let (l, r) = (90i32, w as i32 - 20);
    // Columns in increasing frequency.
    let ascending = d.foff >= 0.0;
    let col_order: Vec<usize> = if ascending {
        (0..d.cols).collect()
    } else {
        (0..d.cols).rev().collect()
    };
    let f_first = d.fch1;
    let f_last = d.fch1 + (d.nchans as f64 - 1.0) * d.foff;
    let (fmin, fmax) = (f_first.min(f_last), f_first.max(f_last));

    // Title.
    text(&root, 10, 8, &d.title, 2, &BLACK)?;

    // Spectrum panel.
    let (st, sb) = (50i32, 330i32);
    let spec_db: Vec<f64> = col_order
        .iter()
        .map(|&c| db(d.spectrum[c] / (d.integrations.max(1) as f64 * d.chan_per_col as f64)))
        .collect();
    let lo = spec_db.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = spec_db.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if hi - lo < 1e-6 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo, hi)
    };
    let area = root
        .clone()
        .shrink((l as u32, st as u32), ((r - l) as u32, (sb - st) as u32));
    let mut chart =
        ChartBuilder::on(&area).build_cartesian_2d(0f64..d.cols.max(2) as f64 - 1.0, lo..hi)?;
    chart.draw_series(LineSeries::new(
        spec_db.iter().enumerate().map(|(i, &v)| (i as f64, v)),
        BLUE.stroke_width(1),
    ))?;
    root.draw(&Rectangle::new([(l, st), (r, sb)], BLACK.stroke_width(1)))?;
    text(&root, 4, st, &format!("{hi:.1} DB"), 1, &BLACK)?;
    text(&root, 4, sb - 8, &format!("{lo:.1} DB"), 1, &BLACK)?;
    text(&root, l, sb + 6, &format!("{fmin:.6} MHZ"), 1, &BLACK)?;
    let right = format!("{fmax:.6} MHZ");
    text(&root, r - 6 * right.len() as i32, sb + 6, &right, 1, &BLACK)?;
    text(
        &root,
        (l + r) / 2 - 100,
        sb + 6,
        "MEAN SPECTRUM, IF 0",
        1,
        &BLACK,
    )?;

    // Waterfall panel.
    let (wt, wb) = (360i32, h as i32 - 40);
    let rows = d.waterfall.len().max(1);
    let all: Vec<f64> = d
        .waterfall
        .iter()
        .flat_map(|row| row.iter().map(|&v| db(v as f64)))
        .collect();
    let (wlo, whi) = colour_range(all);
    let span = whi - wlo;
    let pw = (r - l) as f64 / d.cols as f64;
    let ph = (wb - wt) as f64 / rows as f64;
    for (ri, row) in d.waterfall.iter().enumerate() {
        for (xi, &c) in col_order.iter().enumerate() {
            let v = (db(row[c] as f64) - wlo) / span;
            let x0 = l + (xi as f64 * pw) as i32;
            let x1 = l + ((xi + 1) as f64 * pw).ceil() as i32;
            let y0 = wt + (ri as f64 * ph) as i32;
            let y1 = wt + ((ri + 1) as f64 * ph).ceil() as i32;
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], colormap(v).filled()))?;
        }
    }
    root.draw(&Rectangle::new([(l, wt), (r, wb)], BLACK.stroke_width(1)))?;
    let total_t = d.integrations as f64 * d.tsamp;
    text(&root, 4, wt, "T = 0", 1, &BLACK)?;
    text(&root, 4, wb - 8, &format!("{total_t:.4} S"), 1, &BLACK)?;
    text(&root, l, wb + 6, &format!("{fmin:.6} MHZ"), 1, &BLACK)?;
    text(&root, r - 6 * right.len() as i32, wb + 6, &right, 1, &BLACK)?;
    text(
        &root,
        (l + r) / 2 - 160,
        wb + 6,
        &format!("WATERFALL, IF 0, {wlo:.1} TO {whi:.1} DB"),
        1,
        &BLACK,
    )?;
    root.present()?;
    Ok(())
}

/// The waterfall's colour range (dB): from the 1st to the 99th percentile of the values, so
/// that a few bright channels (a tone; with one integration, the whole waterfall is one row)
/// saturate rather than squeeze the noise floor into one colour. Never empty: constant values
/// get ±1 dB around them.
fn colour_range(mut values: Vec<f64>) -> (f64, f64) {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return (-1.0, 1.0);
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
    let (lo, hi) = (pct(0.01), pct(0.99));
    if hi - lo < 1e-6 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo, hi)
    }
}

/// 5×7 glyphs: each row a 5-bit pattern, most significant bit on the left.
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        '0' => [14, 17, 19, 21, 25, 17, 14],
        '1' => [4, 12, 4, 4, 4, 4, 14],
        '2' => [14, 17, 1, 2, 4, 8, 31],
        '3' => [31, 2, 4, 2, 1, 17, 14],
        '4' => [2, 6, 10, 18, 31, 2, 2],
        '5' => [31, 16, 30, 1, 1, 17, 14],
        '6' => [6, 8, 16, 30, 17, 17, 14],
        '7' => [31, 1, 2, 4, 8, 8, 8],
        '8' => [14, 17, 17, 14, 17, 17, 14],
        '9' => [14, 17, 17, 15, 1, 2, 12],
        'A' => [14, 17, 17, 31, 17, 17, 17],
        'B' => [30, 17, 17, 30, 17, 17, 30],
        'C' => [14, 17, 16, 16, 16, 17, 14],
        'D' => [28, 18, 17, 17, 17, 18, 28],
        'E' => [31, 16, 16, 30, 16, 16, 31],
        'F' => [31, 16, 16, 30, 16, 16, 16],
        'G' => [14, 17, 16, 23, 17, 17, 15],
        'H' => [17, 17, 17, 31, 17, 17, 17],
        'I' => [14, 4, 4, 4, 4, 4, 14],
        'J' => [7, 2, 2, 2, 2, 18, 12],
        'K' => [17, 18, 20, 24, 20, 18, 17],
        'L' => [16, 16, 16, 16, 16, 16, 31],
        'M' => [17, 27, 21, 21, 17, 17, 17],
        'N' => [17, 17, 25, 21, 19, 17, 17],
        'O' => [14, 17, 17, 17, 17, 17, 14],
        'P' => [30, 17, 17, 30, 16, 16, 16],
        'Q' => [14, 17, 17, 17, 21, 18, 13],
        'R' => [30, 17, 17, 30, 20, 18, 17],
        'S' => [15, 16, 16, 14, 1, 1, 30],
        'T' => [31, 4, 4, 4, 4, 4, 4],
        'U' => [17, 17, 17, 17, 17, 17, 14],
        'V' => [17, 17, 17, 17, 17, 10, 4],
        'W' => [17, 17, 17, 21, 21, 21, 10],
        'X' => [17, 17, 10, 4, 10, 17, 17],
        'Y' => [17, 17, 17, 10, 4, 4, 4],
        'Z' => [31, 1, 2, 4, 8, 16, 31],
        '.' => [0, 0, 0, 0, 0, 12, 12],
        ',' => [0, 0, 0, 0, 12, 4, 8],
        '-' => [0, 0, 0, 31, 0, 0, 0],
        '+' => [0, 4, 4, 31, 4, 4, 0],
        ':' => [0, 12, 12, 0, 12, 12, 0],
        '=' => [0, 0, 31, 0, 31, 0, 0],
        '/' => [0, 1, 2, 4, 8, 16, 0],
        '(' => [2, 4, 8, 8, 8, 4, 2],
        ')' => [8, 4, 2, 2, 2, 4, 8],
        '*' => [0, 4, 21, 14, 21, 4, 0],
        '^' => [4, 10, 17, 0, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 31],
        _ => [0; 7],
    }
}

/// Draws `s` with the top-left corner at (x, y), each font pixel `scale` × `scale`.
fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    x: i32,
    y: i32,
    s: &str,
    scale: i32,
    color: &RGBColor,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    for (i, c) in s.chars().enumerate() {
        let g = glyph(c);
        let gx = x + i as i32 * 6 * scale;
        for (row, bits) in g.iter().enumerate() {
            for col in 0..5 {
                if bits & (1 << (4 - col)) != 0 {
                    let px = gx + col * scale;
                    let py = y + row as i32 * scale;
                    if scale == 1 {
                        area.draw_pixel((px, py), color)?;
                    } else {
                        area.draw(&Rectangle::new(
                            [(px, py), (px + scale - 1, py + scale - 1)],
                            color.filled(),
                        ))?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bright_tone_does_not_flatten_the_noise_floor() {
        // One waterfall row: 1,000 noise channels between 1.0 and 2.0, five at 10^6 (a tone).
        let mut v: Vec<f64> = (0..1000)
            .map(|i| db(1.0 + (i % 97) as f64 / 96.0))
            .collect();
        v.extend([db(1e6); 5]);
        let (lo, hi) = colour_range(v);
        assert!(
            lo <= db(1.05) && hi >= db(1.9),
            "the noise spans the range: {lo}..{hi}"
        );
        assert!(hi < db(10.0), "the tone saturates instead: {lo}..{hi}");
    }

    #[test]
    fn constant_values_get_a_range_around_them() {
        assert_eq!(colour_range(vec![3.0; 10]), (2.0, 4.0));
        assert_eq!(colour_range(vec![]), (-1.0, 1.0));
        assert_eq!(colour_range(vec![f64::NAN, 5.0]), (4.0, 6.0));
    }
}
