//! A barrier across the blocks of one launch, for kernels that fuse their own work with a
//! collective: blocks that must all finish a stage (say, scaling the input a collective then
//! sends) before any goes on. Collectives already require every block of a launch to be
//! resident at once, which is what makes a software grid barrier safe here.
//!
//! The barrier lives in two zeroed `u32` words of global memory that the launch owns; it is
//! reusable (a generation counter flips at every completion) and every wait is bounded.
//!
//! ```
//! use purlin_device::grid::GridBarrier;
//! // Three "blocks" on CPU threads meeting twice.
//! let words = [0u32; 2];
//! let barrier = GridBarrier::new(words.as_ptr() as *mut u32);
//! std::thread::scope(|s| {
//!     for _ in 0..3 {
//!         s.spawn(|| {
//!             // SAFETY: the words outlive the threads; all three blocks wait with blocks = 3.
//!             unsafe { barrier.wait(3, 1_000_000_000).unwrap() };
//!             unsafe { barrier.wait(3, 1_000_000_000).unwrap() };
//!         });
//!     }
//! });
//! ```

use crate::arch;

/// A reusable barrier over `blocks` blocks, in two `u32` words (arrivals, generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridBarrier {
    words: *mut u32,
}

// SAFETY: the words are only touched through atomics.
unsafe impl Send for GridBarrier {}
// SAFETY: as above.
unsafe impl Sync for GridBarrier {}

/// A grid barrier wait ran past its bound: not every block arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierTimeout {
    /// Blocks that had arrived when this one gave up.
    pub arrived: u32,
    /// Blocks expected.
    pub blocks: u32,
}

impl GridBarrier {
    /// The barrier in the two zeroed, 8-byte aligned `u32` words at `words` (global memory).
    pub const fn new(words: *mut u32) -> Self {
        Self { words }
    }

    /// Waits until all `blocks` blocks of the launch have called `wait` (every thread of each
    /// block calls it). Gives up after `timeout_ns` nanoseconds; the timeout is reported to
    /// each block's thread 0 (the one that waited), the other threads get `Ok`.
    ///
    /// # Safety
    /// The words are valid and used only by this barrier's launch; exactly `blocks` blocks wait,
    /// all resident at once; every thread of a block makes the call.
    pub unsafe fn wait(&self, blocks: u32, timeout_ns: u64) -> Result<(), BarrierTimeout> {
        let (arrivals, generation) = (self.words, self.words.wrapping_add(1));
        // Everything this block did before the barrier is done before its leader arrives.
        arch::sync_block();
        let mut outcome = Ok(());
        if arch::thread_index() == 0 {
            // SAFETY (all atomics): the caller guarantees the words.
            let seen = unsafe { arch::ld_acquire_gpu_u32(generation) };
            let arrived = unsafe { arch::atom_add_acq_rel_gpu_u32(arrivals, 1) } + 1;
            if arrived == blocks {
                // Last in: reset for the next use, then release everyone.
                unsafe { arch::st_relaxed_gpu_u32(arrivals, 0) };
                unsafe { arch::st_release_gpu_u32(generation, seen.wrapping_add(1)) };
            } else {
                let start = arch::global_timer_ns();
                while unsafe { arch::ld_acquire_gpu_u32(generation) } == seen {
                    if arch::global_timer_ns().wrapping_sub(start) > timeout_ns {
                        let arrived = unsafe { arch::ld_relaxed_gpu_u32(arrivals) };
                        outcome = Err(BarrierTimeout { arrived, blocks });
                        break;
                    }
                    arch::nanosleep(64);
                }
            }
        }
        arch::sync_block();
        outcome
    }
}
