//! # Purlin
//!
//! Single-kernel collectives (AllReduce, AllGather, ReduceScatter, AllToAll and their V forms)
//! and per-architecture copy / N-to-1 reduce primitives for the GPUs of one NVLink server, for
//! Rust programs. Collectives launch from the host, or are called from inside your own Rust GPU
//! kernels through [`purlin_device`] (build your kernel crate with [`builder`]).
//!
//! This crate is the host side: it embeds Purlin's PTX for sm_70, sm_80, sm_90 and sm_100 and
//! loads the one the device runs ([`Gpu`]), checks every argument the host can see before
//! anything is launched ([`Error`]; the V collectives' counts, which live in device memory, are
//! checked by the kernel before anything moves), and launches kernels on `cudarc` streams. The driver is loaded at run time, so
//! the crate builds on machines without CUDA.
//!
//! ```no_run
//! use purlin::{Gpu, atom::{self, AtomKind, GridLayout, Launch}};
//! let gpu = Gpu::open(0)?;
//! let stream = gpu.new_stream()?;
//! let src = stream.clone_htod(&vec![1.0f32; 1 << 20])?;
//! let mut dst = stream.alloc_zeros::<f32>(1 << 20)?;
//! use cudarc::driver::{DevicePtr, DevicePtrMut};
//! let (s, _g1) = src.device_ptr(&stream);
//! let (d, _g2) = dst.device_ptr_mut(&stream);
//! // SAFETY: both buffers hold 4 MiB and live until the stream is synchronised below.
//! let launch = Launch { atom: AtomKind::Sm90, blocks: gpu.sm_count(), layout: GridLayout::Interleaved };
//! unsafe { atom::copy(&gpu, &stream, launch, d, s, 4 << 20)? };
//! stream.synchronize()?;
//! # Ok::<(), purlin::Error>(())
//! ```

#![warn(missing_docs)]

mod allocation;
pub mod atom;
mod atom_kind;
pub mod bootstrap;
pub mod collective;
pub mod context;
mod cuda;
pub mod error;
pub mod fault;
pub mod gpu;
mod kernels;
pub mod launch;
pub mod memory;
pub mod module;
pub mod p2p;
pub mod ptx;
pub mod symmetric;
pub mod trace;
pub mod validate;
pub mod workspace;

#[cfg(feature = "mpi")]
pub use bootstrap::Mpi;
pub use bootstrap::{Bootstrap, InProcess};
pub use collective::{all_gather, all_reduce, all_to_all, reduce_scatter};
pub use context::{Context, DeviceContext};
pub use error::{Error, Result};
pub use gpu::Gpu;
pub use purlin_device;
pub use purlin_device::element::{DataType, E4m3, E5m2, Element};
pub use purlin_device::op::ReduceOpKind;
pub use symmetric::SymmetricBuffer;
pub use workspace::{Workspace, WorkspaceRequirements};

/// Compile your own kernel crate to PTX from a `build.rs` (see [`purlin_builder`]).
pub mod builder {
    pub use purlin_builder::*;
}

/// The README's Rust examples, compiled as doc tests so they cannot rot.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
