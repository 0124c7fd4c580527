//! Runtimes of HPC jobs: single parallel jobs, each with the time its user
//! requested, which the batch scheduler kills it at. Sites plan their
//! backfilling on that request, mostly far too long; these are what the
//! field measures requests against, and jobcast's own:
//!
//! - [`last2`]: Tsafrir, Etsion and Feitelson's Last-2 (TPDS 2007), the
//!   mean of the user's last two runtimes, capped by the request.
//! - [`runtimes`]: jobcast's, the user's most similar recent jobs (by
//!   application, processors and requested time), at the level of
//!   similarity that has erred least, with calibrated quantiles; the point
//!   capped by the request.
//!
//! Both learn a job when it ends and predict at submission; neither reads
//! a clock. [`backfill`] is the site's batch scheduler (EASY and
//! conservative backfilling) as a pure function of its queue, which the
//! simulator runs logs through; [`starts`] plays it forward on sampled
//! runtimes to say when a pending job will start, in the simulator and
//! the service.

pub mod backfill;
pub mod last2;
pub mod runtimes;
pub mod starts;
