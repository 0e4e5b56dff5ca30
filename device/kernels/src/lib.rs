//! PTX entry points: `extern "ptx-kernel"` functions for the host-launched collectives and
//! for the Atom tests and benchmarks. Built to PTX by `purlin-builder` for sm_70, sm_80, sm_90
//! and sm_100; on the host this crate is empty (the host target rejects the kernel ABI).
//!
//! Kernel names: `purlin_atom_copy_<atom>`, `purlin_atom_reduce_<atom>` for every Atom the
//! target architecture can run, and `purlin_test_*` for tests.

#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

#[cfg(target_arch = "nvptx64")]
mod atoms;
#[cfg(target_arch = "nvptx64")]
mod collectives;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    purlin_device::arch::trap()
}
