//! The seven collectives, callable from any kernel (yours, fused with your own work, or
//! Purlin's host-launched ones in `purlin-kernels`).
//!
//! | collective | layouts | datapath |
//! | --- | --- | --- |
//! | [`all_gather`] / [`all_gather_v`] | packed → scattered | copy (packets when [`lean`]) |
//! | [`reduce_scatter`] / [`reduce_scatter_v`] | scattered → packed | reduce (packets when [`lean`]) |
//! | [`all_to_all`] / [`all_to_all_v`] | scattered → transposed | copy (packets when [`lean`]) |
//! | [`all_reduce`] | packed → packed | packets (one-/two-shot) or RS head + AG tail (direct at world 2) |
//!
//! Each lives in its own file with its [`Semantics`]; [`for_each_collective!`] is the one list
//! of them, from which [`CollectiveKind`] and every per-collective table is generated.
//! `entry` holds what they share: the argument check, the call digest, V counts, and the
//! world-1, empty, packet, one-pass and staged paths over a collective's streams.
//!
//! The reductions take their operator as a type (`O: ReduceOp`, one datapath compiled) or, in
//! their `_op` forms ([`all_reduce_op`], [`reduce_scatter_op`], [`reduce_scatter_v_op`]), as a
//! run-time [`ReduceOpKind`](crate::op::ReduceOpKind): the collective is then compiled once for its element type and
//! each reduce step `match`es the operator to one of four static datapaths. No form calls
//! through a function pointer.
//!
//! Every entry point takes the call's [`SnacArgs`](crate::snac::SnacArgs) and the
//! communicator's [`Context`](crate::context::Context) by
//! reference, wherever the kernel can read them: a kernel parameter read in place
//! ([`kernel_param!`](crate::kernel_param)), shared or global memory. (A reference to a local
//! value also works, but then every thread keeps its own copy in local memory: hundreds of
//! bytes of stores per thread before the call starts.)
//! Exactly `args.blocks` blocks enter, each with its `args.block`, all with the same number of
//! threads and [`smem_bytes::<A>()`](crate::snac::smem_bytes) bytes of shared memory at
//! `args.smem` (or, for a call [`lean`] says needs none of the Atom's, only
//! [`SNAC_SMEM_BYTES`](crate::snac::SNAC_SMEM_BYTES), with `args.smem_bytes` saying so).
//! Every rank of the communicator must make the same call (same collective, plan, block count
//! and sizes). If a wait runs out of time or the arguments cannot be run, the
//! block records a [`Fault`] in the rank's local state and leaves; the
//! communicator must then be rebuilt.
//!
//! Calls on one context must be ordered: host launches on one stream are. A fused kernel may
//! make one call per context per launch (blocks of one launch are not synchronised between two
//! calls, and the second call's producers could overwrite staging a peer still reads).
//!
//! Reductions accumulate every element in `f32` over ranks `0..world` in order and round to
//! `T` once, on every path: results are bitwise identical across block counts, chunk sizes,
//! algorithms and fused or host-launched calls ([`ReductionMode::Deterministic`]).
//!
//! [`ReductionMode::Deterministic`]: crate::snac::ReductionMode::Deterministic
//! [`for_each_collective!`]: crate::for_each_collective
//!
//! ```
//! use purlin_device::atom::Host;
//! use purlin_device::collective::all_gather;
//! use purlin_device::emulation::{Buffer, Communicator};
//! use purlin_device::snac::{Runtime, SnacArgs};
//! // Two ranks on CPU threads, two blocks each.
//! let comm = Communicator::builder(2).build().unwrap();
//! let src: Vec<Buffer> = (0..2).map(|r| Buffer::from_slice(&[r as u8 + 1; 5])).collect();
//! let dst: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(10)).collect();
//! comm.launch(2, None, |rank, block, ctx, smem| {
//!     let mut args = SnacArgs::new(dst[rank as usize].as_mut_ptr(), src[rank as usize].as_ptr(), 5, 2);
//!     (args.block, args.smem) = (block, smem);
//!     // SAFETY: buffers hold 5 and 10 bytes; every rank makes the same call.
//!     unsafe { all_gather::<Host, Runtime>(&args, &ctx) };
//! }).unwrap();
//! assert_eq!(dst[1].bytes(), &[1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
//! ```

/// Declares a reduction collective's two entry points (in the collective's own file), both
/// running `$with` (with `$form`, if given, as its last generic argument: which collective):
/// `$typed`, specialised for the operator type `O`, and `$op`, for an operator chosen at run
/// time.
macro_rules! reduction_entry_points {
    (
        $(#[$typed_doc:meta])*
        pub unsafe fn $typed:ident;

        $(#[$op_doc:meta])*
        pub unsafe fn $op:ident;

        => $with:ident $(, $form:block)?
    ) => {
        $(#[$typed_doc])*
        #[inline(always)]
        pub unsafe fn $typed<A: Atom, C: Config, T: Element, O: ReduceOp>(
            args: &SnacArgs,
            ctx: &Context,
        ) {
            // SAFETY: forwarded contract.
            unsafe { $with::<A, C, T, _ $(, $form)?>(args, ctx, Static::<O>::NEW) }
        }

        $(#[$op_doc])*
        #[inline(always)]
        pub unsafe fn $op<A: Atom, C: Config, T: Element>(
            args: &SnacArgs,
            ctx: &Context,
            op: ReduceOpKind,
        ) {
            // SAFETY: forwarded contract.
            unsafe { $with::<A, C, T, _ $(, $form)?>(args, ctx, op) }
        }
    };
}

mod all_gather;
mod all_reduce;
mod all_to_all;
mod entry;
mod fault;
mod kind;
mod reduce_scatter;
mod regime;
mod streams;

pub use all_gather::{all_gather, all_gather_v};
pub use all_reduce::{all_reduce, all_reduce_algorithm, all_reduce_op};
pub use all_to_all::{all_to_all, all_to_all_v};
pub use fault::Fault;
pub use kind::{CollectiveKind, Extent, InPlace, Semantics};
pub use reduce_scatter::{
    reduce_scatter, reduce_scatter_op, reduce_scatter_v, reduce_scatter_v_op,
};
pub use regime::{Algorithm, LEAN_LOCAL_MAX_BYTES, lean, lean_blocks, stream_bound};
