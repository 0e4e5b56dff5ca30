//! A bounded wait for a point-to-point window's signal, run on the waiting rank's stream by a
//! one-thread kernel (`purlin_window_wait`): the stream-ordered wait of a window
//! (`p2p::Window::wait_on_stream` on the host) without the driver's unbounded stream wait.
//! A wait that runs past the context's timeout leaves a [`WindowFault`] in the local state
//! and ends, so the stream, its synchronise and the context's teardown go on; the host reads
//! the record as a timeout naming the peer.
//!
//! ```
//! use purlin_device::context::{Context, LocalState, MAX_RANKS};
//! use purlin_device::snac::window::{WindowFault, wait_signal};
//! let state = vec![0u64; LocalState::BYTES / 8 + 1];
//! let signal = 7u64;
//! let ctx = Context {
//!     staging: [0; MAX_RANKS], signals: [0; MAX_RANKS], state: state.as_ptr() as u64,
//!     staging_half_bytes: 0, latency_window_bytes: 0, timeout_ns: 1_000_000, rank: 0, world: 2,
//! };
//! // SAFETY: `signal` is a live u64 and `state` holds the local state.
//! unsafe {
//!     assert!(wait_signal(&ctx, &signal, 7, 1));  // already there
//!     assert!(!wait_signal(&ctx, &signal, 8, 1)); // never comes: recorded after 1 ms
//!     let fault = WindowFault::read(ctx.state as *const u8).unwrap();
//!     assert_eq!((fault.from, fault.awaited, fault.observed), (1, 8, 7));
//! }
//! ```

use crate::arch;
use crate::context::{Context, LocalState};

/// Polls before the waiter starts sleeping between polls and watching the clock.
const FAST_POLLS: u32 = 64;
/// Sleep between slow polls.
const SLEEP_NS: u32 = 256;

/// What a window wait that ran out of time records (at [`LocalState::WINDOW_FAULT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct WindowFault {
    /// Waits that ran out (the first one's fields are kept).
    pub count: u32,
    /// The rank whose signal was awaited.
    pub from: u32,
    /// The value awaited.
    pub awaited: u64,
    /// The value last seen.
    pub observed: u64,
    /// Unused (keeps the record 32 bytes).
    pub reserved: u64,
}

impl WindowFault {
    /// The record in the local state at `state`, if a wait ran out.
    ///
    /// # Safety
    /// `state` is a rank's local state (at least [`LocalState::BYTES`] readable bytes) that no
    /// kernel writes while this reads.
    pub unsafe fn read(state: *const u8) -> Option<Self> {
        // SAFETY: the caller's contract; the record is 8-byte aligned inside the state.
        let record = unsafe {
            state
                .add(LocalState::WINDOW_FAULT)
                .cast::<WindowFault>()
                .read_volatile()
        };
        (record.count > 0).then_some(record)
    }

    /// Decodes the record's bytes (as the host copies them from the device).
    ///
    /// ```
    /// use purlin_device::snac::window::WindowFault;
    /// assert_eq!(WindowFault::decode(&[0; 32]), None);
    /// let mut b = [0u8; 32];
    /// b[0] = 1;
    /// b[4] = 3;
    /// b[8] = 5;
    /// let f = WindowFault::decode(&b).unwrap();
    /// assert_eq!((f.from, f.awaited, f.observed), (3, 5, 0));
    /// ```
    pub fn decode(bytes: &[u8; LocalState::WINDOW_FAULT_BYTES]) -> Option<Self> {
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or([0; 8]));
        let record = Self {
            count: u32_at(0),
            from: u32_at(4),
            awaited: u64_at(8),
            observed: u64_at(16),
            reserved: u64_at(24),
        };
        (record.count > 0).then_some(record)
    }
}

const _: () = assert!(core::mem::size_of::<WindowFault>() == LocalState::WINDOW_FAULT_BYTES);

/// Waits (this thread) until the `u64` at `signal` reaches `value`, at most `ctx.timeout_ns`:
/// true when it did (after an acquire load, so the writer's data before its release is
/// visible), false when the time ran out, with a [`WindowFault`] naming `from` recorded in
/// `ctx`'s local state.
///
/// # Safety
/// `signal` is an aligned `u64` that is only accessed atomically while the wait runs;
/// `ctx.state` is this rank's local state.
#[inline(always)]
pub unsafe fn wait_signal(ctx: &Context, signal: *const u64, value: u64, from: u32) -> bool {
    let mut polls = 0u32;
    let mut start = 0u64;
    loop {
        // SAFETY: the caller's contract.
        let observed = unsafe { arch::ld_relaxed_sys_u64(signal) };
        if observed >= value {
            // SAFETY: as above; orders the writer's data before this thread's later reads.
            unsafe { arch::ld_acquire_sys_u64(signal) };
            return true;
        }
        polls += 1;
        if polls == FAST_POLLS {
            start = arch::global_timer_ns();
        } else if polls > FAST_POLLS {
            arch::nanosleep(SLEEP_NS);
            if arch::global_timer_ns().wrapping_sub(start) > ctx.timeout_ns {
                // SAFETY: the caller's contract (the record lies in the local state).
                unsafe { record(ctx, from, value, observed) };
                return false;
            }
        }
    }
}

/// Leaves the first timed-out wait's fields in the record; later ones only count.
///
/// # Safety
/// `ctx.state` is this rank's local state.
#[inline(always)]
unsafe fn record(ctx: &Context, from: u32, awaited: u64, observed: u64) {
    let word = (ctx.state + LocalState::WINDOW_FAULT as u64) as *mut u32;
    // SAFETY: the record lies in the local state; only the wait that moves the count from 0
    // writes the other fields, and the host reads them after the kernel.
    unsafe {
        if arch::atom_add_acq_rel_gpu_u32(word, 1) != 0 {
            return;
        }
        word.add(1).write_volatile(from);
        (word.add(2) as *mut u64).write_volatile(awaited);
        (word.add(4) as *mut u64).write_volatile(observed);
    }
}
