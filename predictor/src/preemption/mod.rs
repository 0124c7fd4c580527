//! Preemption models for transient cloud VMs.
//!
//! [`Bathtub`] is the lifetime distribution of temporally constrained
//! preemptible VMs (Google Preemptible VMs, maximum lifetime 24 h) from
//! Kadupitiya, Jadhao and Sharma, "Modeling the Temporally Constrained
//! Preemptions of Transient Cloud VMs" (HPDC '20).

pub mod bathtub;

pub use bathtub::{Bathtub, BathtubError, BathtubParam};
