//! Shared presentation of reports (`jobcast evaluate`, `jobcast risk fit`):
//! plain-text tables and plot colours.

use plotters::style::RGBColor;

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
