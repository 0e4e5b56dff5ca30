//! Who takes part in a cooperative call.
//!
//! Every Atom call is made by a group of threads that split the work between them: usually
//! the whole block, sometimes a slice of it. The group is explicit so that code fused into a
//! user's kernel can give a warp or a range of threads its own job.
//!
//! ```
//! use purlin_device::coop::Coop;
//! let team = Coop::new(3, 8);
//! assert_eq!((team.index, team.size), (3, 8));
//! assert!(team.leads() == false);
//! ```

use crate::arch;

/// A group of threads cooperating on one call: this thread's `index` in `0..size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coop {
    /// This thread's index within the group.
    pub index: u32,
    /// Threads in the group.
    pub size: u32,
    /// Whether the group is the whole block (so block barriers are allowed).
    pub whole_block: bool,
}

impl Coop {
    /// The whole block: `index = threadIdx.x`, `size = blockDim.x` (one thread on the host).
    #[inline(always)]
    pub fn block() -> Self {
        Self {
            index: arch::thread_index(),
            size: arch::block_threads(),
            whole_block: true,
        }
    }

    /// A group of `size` threads of which this is `index`; not the whole block, so Atoms that
    /// need block barriers fall back to their register datapath.
    #[inline(always)]
    pub const fn new(index: u32, size: u32) -> Self {
        Self {
            index,
            size,
            whole_block: false,
        }
    }

    /// True for the thread that issues group-wide work (index 0).
    #[inline(always)]
    pub const fn leads(&self) -> bool {
        self.index == 0
    }
}
