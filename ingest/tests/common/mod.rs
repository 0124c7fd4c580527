//! Helpers shared by the adapter tests (`mod common;`).

use std::collections::BTreeMap;

use jobcast_ingest::Diagnostics;

/// A skipped row as the tests compare it: file name, line, reason class.
pub type Skip = (String, u64, String);

/// The skipped-row examples of `diags`, in the order they were recorded.
pub fn skipped_rows(diags: &Diagnostics) -> Vec<Skip> {
    diags
        .examples()
        .into_iter()
        .map(|s| {
            let file =
                s.at.file
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
            let class = s.reason.split(':').next().unwrap().to_owned();
            (file, s.at.line, class)
        })
        .collect()
}

/// The [`Skip`] for a row of `file` at `line` skipped as `class`.
pub fn skip(file: &str, line: u64, class: &str) -> Skip {
    (file.to_owned(), line, class.to_owned())
}

/// A count map (as `Diagnostics::notes` and `skipped` give) from pairs.
pub fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}
