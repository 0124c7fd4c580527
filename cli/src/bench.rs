//! `jobcast bench`: runs an experiment of `jobcast-bench` and prints its
//! report, as a table or (`--json`) as JSON.

use crate::output::{print_json, print_out};

pub use jobcast_bench::Args;

pub fn run(args: Args) -> anyhow::Result<()> {
    let measured = jobcast_bench::run(&args)?;
    if measured.json {
        print_json(&measured.report)
    } else {
        print_out(&measured.report.to_string())
    }
}
