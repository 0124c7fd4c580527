//! Preemption models for transient cloud VMs.
//!
//! [`Bathtub`] is the lifetime distribution of temporally constrained
//! preemptible VMs (Google Preemptible VMs, maximum lifetime 24 h) from
//! Kadupitiya, Jadhao and Sharma, "Modeling the Temporally Constrained
//! Preemptions of Transient Cloud VMs" (HPDC '20).
//!
//! [`fit`] fits it and the baselines of [`models`] to measured, censored
//! lifetimes (via [`kaplan_meier`]), per VM group; [`online`] keeps those
//! fits fresh from the stream of machine events; [`scoring`] scores the
//! failure probabilities published from them against measured outcomes.

pub mod bathtub;
pub mod checkpoint;
pub mod fit;
pub mod hints;
pub mod kaplan_meier;
pub mod lifetime;
pub mod models;
pub mod online;
pub mod recalibration;
pub mod risk;
pub mod running_time;
pub mod scoring;

pub use bathtub::{Bathtub, BathtubError, BathtubParam};
pub use lifetime::Lifetime;
