//! What every subcommand prints on stdout: text, or pretty JSON with a
//! final newline. A closed pipe (e.g. `| head`) is the reader's choice, not
//! a failure.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

/// Write `text` to stdout.
pub fn print_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(err).context("writing to stdout")
        }
        _ => Ok(()),
    }
}

/// Write `value` to stdout as pretty JSON and a newline.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    print_out(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

/// A failure already reported on stderr, each cause where it arose (a SQL
/// script's failing statements): the command exits non-zero without
/// printing it again.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failures reported above")
    }
}

impl std::error::Error for Reported {}
