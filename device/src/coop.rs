//! Who takes part in a cooperative call.
//!
//! Every Atom call is made by a group of threads that split the work between them: usually
//! the whole block, sometimes a slice of one (a warp, a range of threads), sometimes several
//! whole blocks (the whole grid). The group is explicit so that code fused into a user's kernel
//! can give a warp its own job, and so that a grid-wide copy can interleave its blocks.
//!
//! ```
//! use purlin_device::coop::Coop;
//! let team = Coop::new(3, 8);
//! assert_eq!((team.index, team.size), (3, 8));
//! assert!(!team.leads());
//! // Thread 5 of block 2 in a span of 4 blocks of 128 threads.
//! let span = Coop::span_of(2, 4, 5, 128);
//! assert_eq!((span.index, span.size, span.block_in_group(), span.thread()), (261, 512, 2, 5));
//! ```

use crate::arch;

/// A group of threads cooperating on one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coop {
    /// This thread's index within the group (`block * threads_per_block + thread`).
    pub index: u32,
    /// Threads in the group.
    pub size: u32,
    /// Whether the group is made of whole blocks (so block barriers are allowed).
    pub whole_block: bool,
    /// Blocks the group spans (1 unless the group is several whole blocks).
    pub blocks: u32,
}

impl Coop {
    /// The whole block: `index = threadIdx.x`, `size = blockDim.x` (one thread on the host).
    #[inline(always)]
    pub fn block() -> Self {
        Self {
            index: arch::thread_index(),
            size: arch::block_threads(),
            whole_block: true,
            blocks: 1,
        }
    }

    /// Every thread of the grid, blocks interleaved: one call moves one range with all blocks
    /// marching through it together.
    #[inline(always)]
    pub fn grid() -> Self {
        Self::span_of(
            arch::block_index(),
            arch::grid_blocks(),
            arch::thread_index(),
            arch::block_threads(),
        )
    }

    /// Whole blocks `0..blocks` of which this thread's block is `block`, with `threads` threads
    /// each; this is thread `thread` of its block.
    #[inline(always)]
    pub const fn span_of(block: u32, blocks: u32, thread: u32, threads: u32) -> Self {
        Self {
            index: block * threads + thread,
            size: blocks * threads,
            whole_block: true,
            blocks,
        }
    }

    /// A group of `size` threads (within one block) of which this is `index`; not the whole
    /// block, so Atoms that need block barriers fall back to datapaths that do not.
    #[inline(always)]
    pub const fn new(index: u32, size: u32) -> Self {
        Self {
            index,
            size,
            whole_block: false,
            blocks: 1,
        }
    }

    /// Threads of the group in each of its blocks.
    #[inline(always)]
    pub const fn threads_per_block(&self) -> u32 {
        self.size / self.blocks
    }

    /// This thread's index within its block's part of the group.
    #[inline(always)]
    pub const fn thread(&self) -> u32 {
        self.index % self.threads_per_block()
    }

    /// This thread's block within the group (`0..blocks`).
    #[inline(always)]
    pub const fn block_in_group(&self) -> u32 {
        self.index / self.threads_per_block()
    }

    /// True for the thread that issues group-wide work (index 0).
    #[inline(always)]
    pub const fn leads(&self) -> bool {
        self.index == 0
    }

    /// True for the first thread of each block of the group (issues per-block work).
    #[inline(always)]
    pub const fn leads_block(&self) -> bool {
        self.thread() == 0
    }
}
