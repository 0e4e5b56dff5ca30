//! PTX entry points that run one Atom over a whole grid: `purlin_atom_copy_<atom>`,
//! `purlin_atom_reduce_<atom>_<type>` for every Atom the target architecture can run, and
//! `purlin_test_*` kernels for tests. Built to PTX by `purlin-builder` for sm_70, sm_80, sm_90
//! and sm_100, in a module of their own: their unrolled datapaths for every type and operator
//! are most of the code, and programs that only run collectives never load them (the driver
//! compiles a module's PTX when it is loaded). On the host this crate is empty.

#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

#[cfg(target_arch = "nvptx64")]
mod atoms;
