//! HPC workloads (the Parallel Workloads Archive's logs, a site's Slurm
//! accounting): single parallel jobs, each with its requested time.
//!
//! - [`predictions`]: every job's runtime predicted at its submission from
//!   the jobs that ended before, by jobcast, Last-2 and the user's own
//!   request, scored as the field scores them.
//! - [`predictor`]: those three predictors behind one type.
//! - [`backfill`]: the site's scheduler, FCFS with EASY backfilling, run
//!   on the log's jobs with each predictor.

pub mod backfill;
pub mod predictions;
pub mod predictor;
