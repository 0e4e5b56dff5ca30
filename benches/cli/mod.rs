//! The parts of Purlin's collective benchmark CLI (`purlin-bench`) and tuner (`purlin-tune`),
//! one concern per module: arguments, size sweeps, running and timing on the virtual node,
//! nccl-tests style reports, plots, all ranks in one graph, and the original's
//! `testAR`-style binaries.

pub mod args;
pub mod classic;
pub mod one_graph;
pub mod plot;
pub mod report;
pub mod run;
pub mod sizes;
