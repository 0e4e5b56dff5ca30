//! PTX entry points of the host-launched collectives (`extern "ptx-kernel"` functions, see
//! `collectives`). Built to PTX by `purlin-builder` for sm_70, sm_80, sm_90 and sm_100; on the
//! host this crate is empty (the host target rejects the kernel ABI). The grid-wide Atom
//! kernels of the tests and benchmarks live in `purlin-atom-kernels`, a module of their own.

#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

#[cfg(target_arch = "nvptx64")]
mod collectives;
