//! Host-launched collectives: one kernel per collective (and per element type for the
//! reductions, the operator being a run-time argument), running the architecture's native
//! Atom with the plan the host passes in `SnacArgs::plan`. The reductions run the `_op` forms
//! of the collectives: one instance of the collective per type, whose reduce steps pick the
//! operator's datapath with a `match`; every call is static, so each kernel holds only its
//! own code.
//!
//! Kernel names: `purlin_all_gather`, `purlin_all_gather_v`, `purlin_all_to_all`,
//! `purlin_all_to_all_v`, and `purlin_<collective>_<type>` for `all_reduce`, `reduce_scatter`
//! and `reduce_scatter_v` with the type's nccl-tests name (`float`, `half`, `bfloat16`,
//! `f8e4m3`, `f8e5m2`); each also as `purlin_<collective>_latency[_<type>]`, built with only
//! the latency paths (`snac::Latency`). Parameters: `(SnacArgs, Context)` (both copied once
//! into the block's shared memory, see `launched`), plus `op: u32` (`ReduceOpKind`) for
//! reductions.
//!
//! Launch with `PURLIN_COLLECTIVE_THREADS` threads per block, any number of blocks in
//! `1..=MAX_BLOCKS` (the same on every rank), and `PURLIN_COLLECTIVE_SMEM_BYTES` bytes of
//! dynamic shared memory, or only `SNAC_SMEM_BYTES` for a call that `collective::lean` says
//! needs no Atom shared memory (the latency paths). The kernel fills `args.block`,
//! `args.blocks`, `args.smem` and `args.smem_bytes` itself.
//! Every block of every rank must be resident at once (blocks wait for each other): with one
//! block per SM (see the register note on `PURLIN_COLLECTIVE_THREADS`), the blocks of all ranks
//! sharing a GPU must not exceed its SM count.

use purlin_device::arch;
use purlin_device::atom::{Atom, Native};
use purlin_device::collective;
use purlin_device::context::Context;
use purlin_device::element::{E4m3, E5m2};
use purlin_device::half;
use purlin_device::op::ReduceOpKind;
use purlin_device::snac::{Latency, Runtime, SnacArgs, smem_bytes};

/// Threads per block of every collective kernel in this module: the native Atom's, at most 256.
/// Every call in these kernels is static, but ptxas stacks a callee's registers on top of what
/// its callers keep live, and the reduce datapaths are register-hungry: on sm_90 the copy
/// collectives and the f32 reductions use 116-134 registers, the 16-bit ones up to 147 and the
/// fp8 ones up to 174. 256 threads is therefore what one block per SM can hold (two would need
/// at most 128); the Atoms work with any block size up to their own.
#[unsafe(no_mangle)]
pub static PURLIN_COLLECTIVE_THREADS: u32 = if Native::THREADS < 256 {
    Native::THREADS
} else {
    256
};

/// Dynamic shared memory per block of every collective kernel in this module.
#[unsafe(no_mangle)]
pub static PURLIN_COLLECTIVE_SMEM_BYTES: u32 = smem_bytes::<Native>();

/// The arguments with this launch's block, grid and shared memory filled in, and the
/// communicator's context, kept in the block's static scratch: thread 0 writes them (the
/// context straight from the parameter space, every load in flight at once), then every thread
/// reads them there. Each thread keeping its own copy (a reference to a local value) would cost
/// 17 local-memory stores per thread before the call starts; the context read in place
/// (`kernel_param!`) costs a generic load through the parameter space at each step that reads
/// it.
///
/// # Safety
/// Every thread of the block calls, once per launch; nothing else uses the block's scratch.
#[inline(always)]
unsafe fn launched(mut args: SnacArgs, ctx: Context) -> (&'static SnacArgs, &'static Context) {
    const CONTEXT_AT: usize = core::mem::size_of::<SnacArgs>().div_ceil(16) * 16;
    const _: () =
        assert!(CONTEXT_AT + core::mem::size_of::<Context>() <= arch::BLOCK_SCRATCH_BYTES);
    let at = arch::block_scratch() as *mut SnacArgs;
    // SAFETY: inside the scratch (checked above), 16-byte aligned like it.
    let ctx_at = unsafe { arch::block_scratch().add(CONTEXT_AT) } as *mut Context;
    if arch::thread_index() == 0 {
        args.block = arch::block_index();
        args.blocks = arch::grid_blocks();
        args.smem = arch::dynamic_shared();
        args.smem_bytes = arch::dynamic_shared_bytes();
        // SAFETY: the scratch holds a `SnacArgs` and then a `Context` (checked above) and is
        // 16-byte aligned.
        unsafe {
            at.write(args);
            ctx_at.write(ctx);
        }
    }
    arch::sync_block();
    // SAFETY: written above before the barrier; not written again during this launch.
    unsafe { (&*at, &*ctx_at) }
}

/// The kernels of one collective and one build (`$config`, with `$build` the kernel name's
/// infix: `""` for the whole collective, `"_latency"` for the latency paths only): one per
/// element type for a reduction (the operator an argument), one for a copy.
macro_rules! collective_kernels {
    ($config:ty, $build:literal, reduce($op:ident) $entry:ident) => {
        collective_kernels!(@typed $config, $build, $op, $entry, [
            f32 => float, half::f16 => half, half::bf16 => bfloat16, E4m3 => f8e4m3,
            E5m2 => f8e5m2,
        ]);
    };
    (@typed $config:ty, $build:literal, $op:ident, $entry:ident,
        [$($t:ty => $dtype:ident),* $(,)?]) => {
        $(
            collective_kernels!(@reduce $config, $op, $t, $dtype,
                concat!("purlin_", stringify!($entry), $build, "_", stringify!($dtype)));
        )*
    };
    (@reduce $config:ty, $op:ident, $t:ty, $dtype:ident, $name:expr) => {
        /// A host-launched reduction collective for one element type (see the module docs).
        ///
        /// # Safety
        /// Launched as the module docs say, on every rank with the same arguments but the
        /// buffers; buffers and context valid.
        #[unsafe(export_name = $name)]
        pub unsafe extern "ptx-kernel" fn $dtype(args: SnacArgs, ctx: Context, op: u32) {
            // The host validates the operator before launching.
            let Some(op) = ReduceOpKind::from_u32(op) else {
                arch::trap()
            };
            // SAFETY: every thread calls `launched` once; forwarded launch contract.
            unsafe {
                let (args, ctx) = launched(args, ctx);
                collective::$op::<Native, $config, $t>(args, ctx, op)
            }
        }
    };
    ($config:ty, $build:literal, copy $entry:ident) => {
        collective_kernels!(@copy $config, $entry,
            concat!("purlin_", stringify!($entry), $build));
    };
    (@copy $config:ty, $entry:ident, $name:expr) => {
        /// A host-launched copy collective (see the module docs).
        ///
        /// # Safety
        /// Launched as the module docs say, on every rank with the same arguments but the
        /// buffers; buffers and context valid.
        #[unsafe(export_name = $name)]
        pub unsafe extern "ptx-kernel" fn kernel(args: SnacArgs, ctx: Context) {
            // SAFETY: every thread calls `launched` once; forwarded launch contract.
            unsafe {
                let (args, ctx) = launched(args, ctx);
                collective::$entry::<Native, $config>(args, ctx)
            }
        }
    };
}

/// Every collective's kernels, from the list: a module per collective holding its whole build
/// (`purlin_<collective>[_<type>]`) and, in `latency`, its latency-only build
/// (`purlin_<collective>_latency[_<type>]`, [`Latency`]: what the host launches for a call
/// that `collective::lean` says needs no Atom shared memory, with `SNAC_SMEM_BYTES` of shared
/// memory).
macro_rules! kernels {
    ($($(#[$doc:meta])* $kind:ident = $code:literal, $short:literal,
        $datapath:ident $(($op:ident))? => $file:ident::{$entry:ident, $semantics:ident};)*) => {
        $(
            #[doc = concat!("The kernels of `", stringify!($entry), "`.")]
            pub mod $entry {
                use super::*;
                collective_kernels!(Runtime, "", $datapath $(($op))? $entry);

                /// The latency-only build.
                pub mod latency {
                    use super::*;
                    collective_kernels!(Latency, "_latency", $datapath $(($op))? $entry);
                }
            }
        )*
    };
}

purlin_device::for_each_collective!(kernels);

/// The bounded stream-ordered wait of a point-to-point window (`p2p::Window::wait_on_stream`):
/// launch one block of one thread. Waits until the `u64` signal at `signal` reaches `value`
/// (from rank `from`), at most the context's timeout, after which it leaves a
/// `snac::window::WindowFault` in the local state and ends.
///
/// # Safety
/// `signal` is an aligned `u64` of this rank's window, accessed only atomically.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn purlin_window_wait(
    ctx: Context,
    signal: u64,
    value: u64,
    from: u32,
) {
    if arch::thread_index() == 0 && arch::block_index() == 0 {
        // SAFETY: `ctx` is this kernel's parameter 0; the launch's contract.
        unsafe {
            let ctx = purlin_device::kernel_param!(ctx in purlin_window_wait[0]);
            purlin_device::snac::window::wait_signal(ctx, signal as *const u64, value, from)
        };
    }
}
