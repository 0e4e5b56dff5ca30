//! Where a call's time goes: with [`Plan::trace`](super::Plan::trace) set, block 0's thread 0
//! of every rank writes the global time (`%globaltimer`, ns, one clock for every SM of a GPU)
//! as the call passes each [`Point`], into the words at
//! [`LocalState::TRACE`](crate::context::LocalState::TRACE). Each traced call overwrites the
//! last one's; a point the call does not pass (the throughput regime has no
//! [`Point::Sent`] nor [`Point::Received`], the fixed-size forms no [`Point::Loaded`] nor
//! [`Point::Counted`]) reads 0. The host reads them with
//! `purlin::Context::last_call_trace`.
//!
//! ```
//! use purlin_device::snac::trace::{Point, POINTS};
//! assert_eq!(Point::ALL.len(), POINTS);
//! assert_eq!(Point::End as usize, POINTS - 1);
//! ```

use crate::arch;
use crate::context::{Context, LocalState};

wire_enum! {
    /// A phase boundary of one call, in the order a call passes them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Point {
        /// The collective's start: its arguments checked from the launch's parameters and the
        /// work before it on its stream finished (a launch that started early waited for it).
        Entry = 0,
        /// The V forms only: the caller's counts loaded into the block's shared memory (one
        /// load each, a barrier).
        Loaded = 1,
        /// The V forms only: the counts validated, summed and hashed (a barrier).
        Counted = 2,
        /// The call named in its digest (the V counts read and validated): about to begin.
        Checked = 3,
        /// The call began: the block's epoch read and shared (a barrier).
        Begun = 4,
        /// The arrival packets (the call digest) posted to every peer.
        Announced = 5,
        /// This rank's data sent (latency regime: every packet stored); in a one pass over the
        /// peers' buffers, the entry meeting over (every peer here, the addresses collected).
        Sent = 6,
        /// The peers' packets for this thread's units here and stored (latency regime); in a
        /// one pass, block 0's moves done, before the exit meeting.
        Received = 7,
        /// The data part of the call done (every awaited packet or chunk here and used).
        Moved = 8,
        /// Every peer's digest checked (block 0's last wait).
        Digests = 9,
        /// The epoch advanced: the call's end.
        End = 10,
    }
}

/// Number of points (words of the trace).
pub const POINTS: usize = Point::ALL.len();

/// Writes the time of `point` when `on`, from block 0's thread 0 only; at
/// [`Point::Entry`], zeroes the later points first.
#[inline(always)]
pub(crate) fn mark(ctx: &Context, on: bool, block: u32, point: Point) {
    if on && block == 0 && arch::thread_index() == 0 && ctx.state != 0 {
        let word = |p: usize| (ctx.state + (LocalState::TRACE + p * 8) as u64) as *mut u64;
        // SAFETY: the trace words lie in this rank's local state, accessed only atomically.
        unsafe {
            if point == Point::Entry {
                for p in 1..POINTS {
                    arch::st_relaxed_gpu_u64(word(p), 0);
                }
            }
            arch::st_relaxed_gpu_u64(word(point as usize), arch::global_timer_ns());
        }
    }
}
