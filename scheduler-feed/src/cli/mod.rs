//! One module per subcommand: its clap `Args` and its `run`.

pub mod convert;
pub mod evaluate;
pub mod generate;
pub mod simulate;
pub mod sql;
