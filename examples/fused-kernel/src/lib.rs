//! A user's kernel crate. [`scale_then_all_gather`] does the user's own work — scale the
//! rank's input into its send buffer — and then, in the same kernel, runs Purlin's AllGather.
//! It is plain Rust over `purlin-device`, so the same function runs on the GPU (through the
//! `extern "ptx-kernel"` entry point below) and on CPU threads (the emulation), where a block is
//! one thread.

#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use purlin_device::arch;
use purlin_device::atom::Atom;
use purlin_device::collective::all_gather;
use purlin_device::context::Context;
use purlin_device::coop::Coop;
use purlin_device::grid::GridBarrier;
use purlin_device::snac::{Runtime, SnacArgs};

/// One block of the fused kernel: `args.src[i] = input[i] × scale` for this rank's `count` f32
/// (blocks interleaved), a grid barrier so the whole send buffer is scaled, then AllGather of
/// `args.src` into `args.dst` (`args.bytes = 4 × count`).
///
/// Returns `false` if the barrier timed out (the AllGather is then skipped on this block, and
/// its peers will record a timeout fault).
///
/// # Safety
/// As `purlin_device::collective::all_gather`; `input` holds `count` f32; `barrier` points to
/// two zeroed `u32` of this launch; `threads` is the block's thread count (1 on the CPU).
pub unsafe fn scale_then_all_gather<A: Atom>(
    args: SnacArgs,
    ctx: &Context,
    input: *const f32,
    count: u64,
    scale: f32,
    barrier: *mut u32,
) -> bool {
    let coop = Coop::span_of(
        args.block,
        args.blocks,
        arch::thread_index(),
        arch::block_threads(),
    );
    let send = args.src as *mut f32;
    let mut i = coop.index as u64;
    while i < count {
        // SAFETY: `i < count`; both buffers hold `count` f32.
        unsafe {
            send.add(i as usize)
                .write(input.add(i as usize).read() * scale)
        };
        i += coop.size as u64;
    }
    // SAFETY: the launch's `args.blocks` blocks all wait, resident at once (as the collective
    // requires anyway).
    if unsafe { GridBarrier::new(barrier).wait(args.blocks, ctx.timeout_ns) }.is_err() {
        return false;
    }
    // SAFETY: forwarded contract.
    unsafe { all_gather::<A, Runtime>(&args, ctx) };
    true
}

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::*;
    use purlin_device::atom::Native;

    /// The GPU entry point: fills in this block's index, the grid and the shared memory, then
    /// runs [`scale_then_all_gather`] with the architecture's native Atom.
    ///
    /// # Safety
    /// As [`scale_then_all_gather`]; launched with `purlin::collective::kernel_shape` threads
    /// and shared memory.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn example_scale_then_all_gather(
        mut args: SnacArgs,
        ctx: Context,
        input: *const f32,
        count: u64,
        scale: f32,
        barrier: *mut u32,
    ) {
        (args.block, args.blocks, args.smem) = (
            arch::block_index(),
            arch::grid_blocks(),
            arch::dynamic_shared(),
        );
        // SAFETY: `ctx` is this kernel's parameter 1 (read in place, not copied per thread);
        // forwarded launch contract.
        unsafe {
            let ctx = purlin_device::kernel_param!(ctx in example_scale_then_all_gather[1]);
            scale_then_all_gather::<Native>(args, ctx, input, count, scale, barrier)
        };
    }
}
