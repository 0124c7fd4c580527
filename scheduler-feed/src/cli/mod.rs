//! One module per subcommand: its clap `Args` and its `run`.

pub mod bench;
pub mod convert;
pub mod demo;
pub mod evaluate;
pub mod generate;
pub mod kafka_args;
pub mod replay;
pub mod risk;
pub mod serve;
pub mod simulate;
pub mod sql;
