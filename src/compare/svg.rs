//! The heatmap of a comparison: positions (x) by layers (y), one panel per
//! choice, each cell equal, equal as a set, covered by one side only, or
//! different, with the prompt/completion boundary marked and a legend.
//!
//! A small writer of our own rather than a plotting crate: the picture is
//! rectangles, a few lines and some text, which is a page of string
//! formatting, whereas the plotting crates bring a font stack or a dozen
//! dependencies into a library that has two. It is plain SVG 1.1, so any
//! browser opens it.
//!
//! Positions are binned when there are more than the picture is wide
//! ([`PLOT_WIDTH`] pixels): each bin shows the worst cell among its positions
//! (different, then one side only, then equal as a set, then equal), drawn at
//! least three pixels wide, so a single wrong position in 32k still shows.

use std::fmt::Write;

use super::report::{Cell, ChoiceReport, Report};

/// Width of a panel's plot area, in pixels: at most this many bins.
pub const PLOT_WIDTH: u64 = 1200;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const TITLE: f64 = 22.0;
const AXIS: f64 = 34.0;
const LEGEND: f64 = 40.0;
/// The narrowest a cell that is not equal is drawn, in pixels.
const MARK: f64 = 3.0;

fn color(cell: Cell) -> &'static str {
    match cell {
        Cell::Equal => "#cfe8c4",
        Cell::SetEqual => "#f2b134",
        Cell::OnlyA => "#4a86c5",
        Cell::OnlyB => "#8e6cc0",
        Cell::Different => "#d1242f",
    }
}

fn label(cell: Cell) -> &'static str {
    match cell {
        Cell::Equal => "equal",
        Cell::SetEqual => "equal as a set (top-k order differs)",
        Cell::OnlyA => "only in A",
        Cell::OnlyB => "only in B",
        Cell::Different => "different",
    }
}

/// Escapes text for XML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow, even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The height of one layer's row of cells: the panel stays between about 100
/// and 500 pixels high whatever the layer count, but a layer gets at least
/// one pixel.
fn layer_height(layers: usize) -> f64 {
    (400.0 / layers.max(1) as f64).clamp(1.0, 24.0)
}

fn panel_height(choice: &ChoiceReport) -> f64 {
    TITLE + layer_height(choice.cells.layers()) * choice.cells.layers() as f64 + AXIS
}

impl Report {
    /// The heatmap as an SVG document: one panel per choice, one `<g
    /// class="layer">` of cells per layer.
    pub fn to_svg(&self) -> String {
        let width = LEFT + PLOT_WIDTH as f64 + RIGHT;
        let height = TOP + self.choices.iter().map(panel_height).sum::<f64>() + LEGEND;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" shape-rendering="crispEdges">
<rect width="{width}" height="{height}" fill="white"/>
<text x="{LEFT}" y="18" font-size="14">pd-stitch compare: A against B, positions (x) by layers (y)</text>"#
        );
        let mut y = TOP;
        for choice in &self.choices {
            panel(&mut out, choice, y);
            y += panel_height(choice);
        }
        legend(&mut out, y + 10.0);
        out.push_str("</svg>\n");
        out
    }
}

/// The worst cell of each (layer, bin), bins of `span` positions.
fn bins(choice: &ChoiceReport, start: u64, span: u64, count: u64) -> Vec<Option<Cell>> {
    let layers = choice.cells.layers();
    let count = usize::try_from(count).unwrap_or(0);
    let mut grid: Vec<Option<Cell>> = vec![None; layers * count];
    for (position, cells) in choice.cells.iter() {
        // (position - start) * count / span < count, in 128 bits.
        let bin = (u128::from(position - start) * count as u128 / u128::from(span.max(1))) as usize;
        for (layer, &cell) in cells.iter().enumerate() {
            if let Some(slot) = grid.get_mut(layer * count + bin) {
                *slot = Some(slot.map_or(cell, |old| old.max(cell)));
            }
        }
    }
    grid
}

fn panel(out: &mut String, choice: &ChoiceReport, top: f64) {
    let layers = choice.cells.layers();
    let lh = layer_height(layers);
    let plot_top = top + TITLE;
    let plot_height = lh * layers as f64;
    let pw = PLOT_WIDTH as f64;
    let _ = writeln!(
        out,
        r##"<g class="choice" data-choice="{}">
<text x="{LEFT}" y="{}">choice {}, {}: {} of {} compared rows equal, {} equal as sets; {} position(s) on one side only</text>
<rect x="{LEFT}" y="{plot_top}" width="{pw}" height="{plot_height}" fill="#f4f4f4" stroke="#999" stroke-width="0.5"/>"##,
        choice.choice,
        plot_top - 6.0,
        choice.choice,
        escape(&choice.field),
        choice.equal_rows,
        choice.compared,
        choice.equal_sets,
        choice.one_side_only(),
    );
    let Some(span) = choice.positions else {
        let _ = writeln!(out, "</g>");
        return;
    };
    let count = span.len().min(PLOT_WIDTH);
    let grid = bins(choice, span.start(), span.len(), count);
    let bin_width = pw / count.max(1) as f64;
    let count = usize::try_from(count).unwrap_or(0);
    for layer in 0..layers {
        let y = plot_top + lh * layer as f64;
        let _ = writeln!(out, r#"<g class="layer" data-layer="{layer}">"#);
        let row = grid
            .get(layer * count..(layer + 1) * count)
            .unwrap_or_default();
        let mut bin = 0;
        while bin < row.len() {
            let cell = row[bin];
            let run = row[bin..].iter().take_while(|&&c| c == cell).count();
            if let Some(cell) = cell {
                let mut x = LEFT + bin as f64 * bin_width;
                let mut w = run as f64 * bin_width;
                // Anything but equal is drawn at least MARK pixels wide,
                // centred on its bins, so that one cell among 32k shows.
                if cell != Cell::Equal && w < MARK {
                    x -= (MARK - w) / 2.0;
                    w = MARK;
                }
                let _ = writeln!(
                    out,
                    r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{lh:.2}" fill="{}"/>"#,
                    color(cell)
                );
            }
            bin += run;
        }
        let _ = writeln!(out, "</g>");
    }
    // Layer labels: the first and the last.
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{:.2}" text-anchor="end">layer 0</text>"#,
        LEFT - 6.0,
        plot_top + lh.max(10.0) - 1.0
    );
    if layers > 1 {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{:.2}" text-anchor="end">layer {}</text>"#,
            LEFT - 6.0,
            plot_top + plot_height,
            layers - 1
        );
    }
    // The x axis: the span's ends, and the prompt/completion boundary.
    let x_of = |position: u64| {
        LEFT + (u128::from(position - span.start()) as f64 / span.len().max(1) as f64) * pw
    };
    let axis_y = plot_top + plot_height + 14.0;
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{axis_y:.2}">{}</text>
<text x="{}" y="{axis_y:.2}" text-anchor="end">{}</text>
<text x="{}" y="{:.2}" text-anchor="middle" fill="#555">position</text>"##,
        span.start(),
        LEFT + pw,
        span.end() - 1,
        LEFT + pw / 2.0,
        axis_y + 14.0
    );
    if let Some(p) = choice.prompt_len {
        if span.start() < p.len && p.len < span.end() {
            let x = x_of(p.len);
            let _ = writeln!(
                out,
                r##"<line class="boundary" x1="{x:.2}" y1="{:.2}" x2="{x:.2}" y2="{:.2}" stroke="#000" stroke-width="1" stroke-opacity="0.6" stroke-dasharray="4 3"/>
<text x="{:.2}" y="{axis_y:.2}" text-anchor="end">prompt</text>
<text x="{:.2}" y="{axis_y:.2}">completion (from {})</text>"##,
                plot_top - 4.0,
                plot_top + plot_height + 4.0,
                x - 3.0,
                x + 3.0,
                p.len
            );
        }
    }
    let _ = writeln!(out, "</g>");
}

fn legend(out: &mut String, y: f64) {
    let _ = writeln!(out, r#"<g class="legend">"#);
    let mut x = LEFT;
    for cell in [
        Cell::Equal,
        Cell::SetEqual,
        Cell::Different,
        Cell::OnlyA,
        Cell::OnlyB,
    ] {
        let _ = writeln!(
            out,
            r##"<rect x="{x}" y="{y}" width="14" height="14" fill="{}" stroke="#999" stroke-width="0.5"/>
<text x="{}" y="{}">{}</text>"##,
            color(cell),
            x + 18.0,
            y + 11.0,
            label(cell)
        );
        // About 6.5 pixels a character at 12 px sans-serif.
        x += 34.0 + 6.5 * label(cell).len() as f64;
    }
    let _ = writeln!(
        out,
        r##"<line x1="{x}" y1="{y}" x2="{x}" y2="{}" stroke="#000" stroke-width="1.5" stroke-dasharray="4 3"/>
<text x="{}" y="{}">prompt | completion</text>"##,
        y + 14.0,
        x + 6.0,
        y + 11.0
    );
    let _ = writeln!(out, "</g>");
}
