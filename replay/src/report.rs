//! Shared presentation of reports (`jobcast evaluate`, `jobcast risk fit`):
//! plain-text tables, and the frame, colours, axes and legend every plot
//! is drawn with.

use std::io;
use std::path::Path;

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;

/// A plot's white canvas: an SVG of `size` pixels at `path`.
pub fn canvas(
    path: &Path,
    size: (u32, u32),
) -> Result<DrawingArea<SVGBackend<'_>, Shift>, DrawingAreaErrorKind<io::Error>> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

/// The frame of a plot's chart: `caption` above it, the reports' margins,
/// and `y_label_area` pixels for the y labels.
pub fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    y_label_area: u32,
) -> ChartBuilder<'a, 'static, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(y_label_area);
    builder
}

/// The axes titled `x_desc` and `y_desc`, in the reports' fonts.
pub fn axes<'m, 'a, 'b, X, Y, XT, YT, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
    x_desc: &str,
    y_desc: &str,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
    DB: DrawingBackend,
{
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
}

/// The legend mark of a line series drawn in `style`.
pub fn legend_line(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style)
}

/// Draw the legend of `chart` at `position` and write the file out.
pub fn finish<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<io::Error>> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
}

/// Line colours, distinguishable from each other (Tableau 10).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Pad every column to its widest cell (in characters): columns `c` for
/// which `left(c, columns)` holds are left-aligned (names), the others
/// right-aligned (numbers). Trailing spaces are trimmed.
pub fn align(rows: &[Vec<String>], left: impl Fn(usize, usize) -> bool) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = " ".repeat(widths[c] - s.chars().count());
                if left(c, cols) {
                    format!("{s}{pad}")
                } else {
                    format!("{pad}{s}")
                }
            })
            .collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_go_left_and_numbers_right() {
        let rows = vec![
            vec!["policy".into(), "P50".into()],
            vec!["slearn".into(), "9.1".into()],
            vec!["3sigma-tl".into(), "21.39".into()],
        ];
        assert_eq!(
            align(&rows, |c, _| c == 0),
            "policy       P50\nslearn       9.1\n3sigma-tl  21.39\n"
        );
    }
}
