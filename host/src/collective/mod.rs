//! Host-launched collectives: AllReduce, AllGather, ReduceScatter, AllToAll and their V forms,
//! each one kernel on the context's stream. Nothing is synchronised and no host state changes,
//! so a sequence of calls can be captured into a CUDA graph and replayed; the V collectives read
//! their counts from device memory, so a replay can use new counts.
//!
//! Every rank of the communicator makes the same calls in the same order (same collective,
//! type, operator, counts and options). Arguments are checked before anything is launched.
//! The launch shape and plan come from the codesign table of `purlin-tuning` (the compiled-in
//! one, or the file named by `PURLIN_TUNING`), unless [`Options`] fixes them.
//!
//! # In place and overlap
//!
//! | collective | input and output may |
//! | --- | --- |
//! | AllReduce | be the same buffer (`src == dst`) |
//! | AllGather, AllGatherV | be in place: the input is this rank's part of the output |
//! | ReduceScatter, ReduceScatterV | be in place: the output is this rank's part of the input |
//! | AllToAll, AllToAllV | not overlap at all |
//!
//! Any other overlap is refused: by the host for the fixed-size collectives
//! ([`Error::InvalidArgument`]), and for the V forms, whose part offsets live on the device, by
//! the kernel ([`Error::Refused`]) before anything moves.
//!
//! # Host calls that wait for the GPU
//!
//! Collectives may be queued back to back on every rank's stream, sizes, kinds and options
//! changing from call to call, with one synchronise at the end (`tests/gpu/queued.rs` checks
//! random mixed sequences so on the virtual node). What a rank's *host thread* does between
//! its launches matters when ranks share a process ([`InProcess`](crate::bootstrap::InProcess)):
//! a collective kernel waits for its peers' kernels of the same call, so a host call that
//! blocks until the GPU has made progress, made before this rank launched its part of a
//! queued call, can end up waiting for itself. Measured on an H200 with ranks as threads on one
//! GPU: pageable host-to-device copies (cudarc's `clone_htod` or `memcpy_htod` of a `Vec` or
//! slice) interleaved with queued collectives blocked every rank's host thread until the
//! peers' kernels gave up ([`Error::Timeout`] after the context's timeout), while the same
//! sequences with the copies from page-locked memory (`CudaContext::alloc_pinned`), or with the
//! inputs uploaded before the first call, ran through. Anything that waits for the device to
//! go idle does the same (`scripts/probe-blocking.py` measures which calls do): a synchronous
//! `cuMemFree` or `cuMemFreeHost`, loading a module, a stream or device synchronisation, and a
//! launch that needs more per-thread local memory than the context holds (which is why
//! [`Gpu::open`](crate::Gpu::open) and module loads reserve what their kernels need);
//! stream-ordered allocation (`cuMemAllocAsync`), `cuMemAlloc`, `cuMemHostAlloc` and stream or
//! event creation did not wait. Make such calls before or after a queued sequence, or use
//! page-locked memory.
//!
//! ```no_run
//! use purlin::bootstrap::{Bootstrap, InProcess};
//! use purlin::memory::DeviceAllocator;
//! use purlin::workspace::{Workspace, WorkspaceRequirements};
//! use purlin::{Context, ReduceOpKind};
//! // An AllReduce of 1 Mi f32 over four ranks on GPU 0 (the virtual node).
//! let gpu = purlin::Gpu::open(0)?;
//! std::thread::scope(|s| -> purlin::Result<()> {
//!     for b in InProcess::group(4)? {
//!         let gpu = gpu.clone();
//!         s.spawn(move || -> purlin::Result<()> {
//!             let stream = gpu.new_stream()?;
//!             let ws = Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?;
//!             let ctx = Context::new(b.rank(), b.world(), ws, &stream)?;
//!             let src = stream.clone_htod(&vec![1.0f32; 1 << 20])?;
//!             let mut dst = stream.alloc_zeros::<f32>(1 << 20)?;
//!             purlin::all_reduce(&ctx, &src, &mut dst, 1 << 20, ReduceOpKind::Sum)?;
//!             ctx.synchronize()?;
//!             assert!(stream.clone_dtoh(&dst)?.iter().all(|&x| x == 4.0));
//!             ctx.finalize()
//!         });
//!     }
//!     Ok(())
//! })?;
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::context::Context;
use crate::error::{Error, Result};
use crate::kernels::kernel_name;
pub use crate::kernels::{atom_threads, kernel_shape};
pub use crate::launch::check_fused_shape;
use crate::launch::{Kernel, KernelArg, LaunchShape, StreamOrder};
use crate::memory::Span;
use crate::validate;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use purlin_device::context::MAX_BLOCKS;
use purlin_device::element::{DataType, Element};
use purlin_device::op::ReduceOpKind;
use purlin_device::snac::SnacArgs;
use purlin_tuning::Choice;

pub use purlin_device::collective::{Algorithm, CollectiveKind};
pub use purlin_device::snac::{Plan, ReductionMode};

mod all_gather;
mod all_reduce;
mod all_to_all;
mod plan;
mod raw;
mod reduce_scatter;
mod tuning;
mod typed;

pub use all_gather::{all_gather, all_gather_raw, all_gather_v, all_gather_v_raw};
pub use all_reduce::{all_reduce, all_reduce_raw, all_reduce_with};
pub use all_to_all::{all_to_all, all_to_all_raw, all_to_all_v, all_to_all_v_raw};
pub use raw::{Counts, RawCall, Size, launch_raw};
pub use reduce_scatter::{
    reduce_scatter, reduce_scatter_raw, reduce_scatter_v, reduce_scatter_v_raw,
};
use tuning::check_choice;
pub use tuning::table;

// SAFETY: `SnacArgs` is `#[repr(C)]` plain data (addresses, sizes, the plan), laid out
// identically on the 64-bit host and on nvptx64.
unsafe impl KernelArg for SnacArgs {}

/// Per-call choices beyond the arguments. `Default`: the default reduction mode and the
/// codesign table's launch shape and plan.
///
/// ```
/// use purlin::collective::{Algorithm, Options, ReductionMode};
/// let o = Options { mode: ReductionMode::Deterministic, algorithm: Some(Algorithm::TwoShot), ..Default::default() };
/// assert!(o.choice.is_none());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Reduction mode (bitwise repeatable with [`ReductionMode::Deterministic`]).
    pub mode: ReductionMode,
    /// Force an algorithm instead of the plan's: AllReduce's one-shot or two-shot packets
    /// (where they fit), or the throughput regime for any collective. Unset, an AllReduce
    /// whose peers reach its buffers (ordinary ones, see `staged`, or symmetric ones) takes
    /// the throughput regime's one pass from 8 MiB / world, below the plan's latency
    /// threshold too.
    pub algorithm: Option<Algorithm>,
    /// Use this launch shape and plan instead of the table's (the mode and algorithm above still
    /// apply).
    pub choice: Option<Choice>,
    /// Record when the call passes each phase on every rank ([`Plan::trace`]), for
    /// [`Context::last_call_trace`](crate::Context::last_call_trace) to read.
    ///
    /// [`Plan::trace`]: purlin_device::snac::Plan::trace
    pub trace: bool,
    /// Start the call's kernel only once the work before it on the stream has finished, as a
    /// plain launch does. By default (`false`) a small call on an sm_90 or later GPU (one that
    /// runs a latency path, with few enough blocks that two of its rank's calls fit the GPU
    /// beside every other rank's) is a programmatic dependent launch: its kernel may be
    /// scheduled while the call before it finishes and waits for that work before it reads
    /// or writes any memory ([`Plan::launch_dependents`]). The results are the same either
    /// way. Such a call also lets the launch after it start early if that launch asked to
    /// (programmatic stream serialization): when several ranks share a GPU, launch a kernel
    /// of yours that follows a collective plainly, or set this, since one that started early
    /// holds SMs the other ranks' calls may still need.
    ///
    /// [`Plan::launch_dependents`]: purlin_device::snac::Plan::launch_dependents
    pub strict_order: bool,
    /// Stage ordinary buffers through the workspace even where the peers reach them. By
    /// default (`false`), when every rank of the context is a thread of this process on one
    /// GPU (or the context is on host memory), a call large enough for it to pay (the
    /// fixed-size forms from 1 to 8 MiB per rank, AllGatherV from 6 MiB of all ranks' parts,
    /// ReduceScatterV from 768 KiB, AllToAllV above its packet path) exchanges its
    /// `src` and `dst` addresses with the peers at entry and moves the data in one pass
    /// between the ranks' own buffers, as over [`SymmetricBuffer`](crate::SymmetricBuffer)s;
    /// ranks in several processes or on several GPUs always stage. Every rank must pass the
    /// same: a call whose ranks disagree faults, naming the buffers.
    pub staged: bool,
    /// Take that one pass over the peers' ordinary buffers whatever the call's size (above
    /// the packet paths), where the ranks reach them, instead of only where it pays: to
    /// measure where it does. Ignored with `staged`. Every rank must pass the same.
    pub direct: bool,
}

/// One call, checked and ready to launch.
struct Checked {
    kind: CollectiveKind,
    dtype: DataType,
    args: SnacArgs,
    op: Option<ReduceOpKind>,
}

/// What a collective on a host-memory context (the CPU emulation's) gets: it has no GPU.
fn host_context() -> Error {
    Error::Unsupported("collectives on a host-memory context: use the CPU emulation".into())
}
