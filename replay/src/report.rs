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

/// Steps of at most this many rises are drawn per CDF; more jobs are
/// drawn at evenly spaced quantiles, which keeps the SVG small.
const CDF_STEPS: usize = 500;

/// The empirical CDF of ascending `sorted` values as a staircase.
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let steps = n.min(CDF_STEPS);
    let mut points = Vec::with_capacity(2 * steps);
    for k in 0..steps {
        // The last value of the k-th of `steps` equal shares of the jobs.
        let rank = (k + 1) * n / steps;
        let x = sorted[rank - 1];
        points.push((x, points.last().map_or(0.0, |&(_, y)| y)));
        points.push((x, rank as f64 / n as f64));
    }
    points
}

/// `series` with those of the same values (in any order) merged into one
/// named `a = b`, each name followed by its number of values (`slearn =
/// slearn-dag (N=57)`), and the values ascending: the lines of a CDF plot,
/// where identical series would hide one another.
fn legend_series(series: &[(String, Vec<f64>)]) -> Vec<(String, Vec<f64>)> {
    let mut merged: Vec<(Vec<&str>, Vec<f64>)> = Vec::new();
    for (name, values) in series {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        match merged.iter_mut().find(|(_, v)| *v == sorted) {
            Some((names, _)) => names.push(name.as_str()),
            None => merged.push((vec![name.as_str()], sorted)),
        }
    }
    merged
        .into_iter()
        .map(|(names, v)| (format!("{} (N={})", names.join(" = "), v.len()), v))
        .collect()
}

/// Empirical CDFs of several series on a log x axis, written to `path`, one line per
/// distinct series ([`legend_series`]). Values below `floor` (e.g. the
/// Oracle's zero errors) are drawn at `floor`.
pub fn cdf_plot(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<f64>)],
    floor: f64,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let series = legend_series(series);
    let finite = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|x| x.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, 0f64), |(lo, hi), x| {
        (lo.min(x.max(floor)), hi.max(x))
    });
    // Whole decades around the data, at least one wide.
    let lo = if lo.is_finite() {
        10f64.powf(lo.log10().floor())
    } else {
        floor
    };
    let hi = 10f64.powf(hi.max(lo * 10.0).log10().ceil());
    let root = canvas(path, (900, 560)).map_err(|e| err(&e))?;
    let mut chart = frame(&root, title, 56)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(|e| err(&e))?;
    axes(&mut chart.configure_mesh(), x_desc, y_desc)
        .x_label_formatter(&|x| format!("{}", (x * 1e6).round() / 1e6))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, values)) in series.iter().enumerate() {
        // Still ascending: clamping keeps the order.
        let v: Vec<f64> = values.iter().map(|x| x.clamp(lo, hi)).collect();
        let color = PALETTE[i % PALETTE.len()].to_rgba();
        chart
            .draw_series(LineSeries::new(cdf_points(&v), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(legend_line(color.stroke_width(2)));
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight).map_err(|e| err(&e))
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

    #[test]
    fn cdf_points_are_a_staircase() {
        assert_eq!(
            cdf_points(&[1.0, 2.0]),
            vec![(1.0, 0.0), (1.0, 0.5), (2.0, 0.5), (2.0, 1.0)]
        );
        let many: Vec<f64> = (0..2000).map(f64::from).collect();
        let points = cdf_points(&many);
        assert_eq!(points.len(), 2 * CDF_STEPS);
        assert_eq!(points[1], (3.0, 4.0 / 2000.0));
        assert_eq!(points.last(), Some(&(1999.0, 1.0)));
    }

    #[test]
    fn identical_series_share_one_line_named_with_its_n() {
        let series = [
            ("slearn".to_owned(), vec![10.0, 30.0]),
            ("3sigma".to_owned(), vec![20.0, 30.0, 50.0]),
            ("slearn-dag".to_owned(), vec![30.0, 10.0]),
        ];
        assert_eq!(
            legend_series(&series),
            [
                ("slearn = slearn-dag (N=2)".to_owned(), vec![10.0, 30.0]),
                ("3sigma (N=3)".to_owned(), vec![20.0, 30.0, 50.0]),
            ]
        );
    }
}
