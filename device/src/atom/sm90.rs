//! Hopper: large copies go through the bulk-copy engine (`cp.async.bulk` global → shared,
//! completing on an `mbarrier`, then shared → global), driven by one thread while the others
//! handle the tail; everything else uses Sm80's `cp.async` ring.

use super::copy_bytes;
use super::sm80::{ring_bytes, ring_copy, ring_reduce};
use crate::arch;
use crate::coop::Coop;

/// Bytes per bulk copy.
const CHUNK: usize = 16 * 1024;
/// Bulk copies in flight (shared-memory stages).
const BULK_STAGES: usize = 4;
/// Below this many bytes per block the ring is at least as fast as the bulk engine.
const BULK_MIN_BYTES: usize = 64 * 1024;
/// Where the stages' mbarriers sit, after the stage buffers.
const BARRIERS_AT: usize = CHUNK * BULK_STAGES;
/// How long a bulk copy may take before the kernel traps (a copy engine that never completes is
/// a hardware or addressing fault: the launch then fails instead of hanging).
const BULK_BOUND_NS: u64 = 10_000_000_000;

/// Waits for phase `parity` of `bar`, at most [`BULK_BOUND_NS`].
///
/// # Safety
/// `bar` is an initialised mbarrier in this block's shared memory.
#[inline(always)]
unsafe fn wait_bounded(bar: *mut u64, parity: u32) {
    let mut tries = 0u32;
    let mut start = 0;
    // SAFETY: the caller guarantees `bar`.
    while !unsafe { arch::mbarrier_try_wait_parity(bar, parity) } {
        tries += 1;
        if tries == 64 {
            start = arch::global_timer_ns();
        } else if tries > 64
            && tries % 64 == 0
            && arch::global_timer_ns().wrapping_sub(start) > BULK_BOUND_NS
        {
            arch::trap();
        }
    }
}

/// Copies this block's chunks of `bytes` (a multiple of 16) with the bulk engine into every
/// destination (each chunk loaded once, stored once per destination): chunks
/// `block, block + blocks, …` when `blocks` blocks share the range. Run by one thread per block.
///
/// # Safety
/// `src` and every destination valid and 16-byte aligned for `bytes`; `smem` holds
/// `SMEM_BYTES` of shared memory no other thread touches during the call.
#[inline(always)]
unsafe fn bulk_copy(
    dsts: &[*mut u8],
    src: *const u8,
    bytes: usize,
    smem: *mut u8,
    block: usize,
    blocks: usize,
) {
    let barrier = |stage: usize| smem.wrapping_add(BARRIERS_AT + stage * 8) as *mut u64;
    let all_chunks = bytes.div_ceil(CHUNK);
    // This block's chunks, numbered 0..chunks locally; local chunk c is global chunk `at(c)`.
    let chunks = if block < all_chunks {
        (all_chunks - block).div_ceil(blocks)
    } else {
        0
    };
    let at = |c: usize| (block + c * blocks) * CHUNK;
    let len = |c: usize| (bytes - at(c)).min(CHUNK) as u32;
    // SAFETY (whole function): stage buffers and barriers lie inside `smem`; chunk `c` lies
    // inside both buffers because `c < chunks`.
    unsafe {
        for stage in 0..BULK_STAGES {
            arch::mbarrier_init(barrier(stage), 1);
        }
        arch::fence_mbarrier_init();
        let load = |c: usize| {
            let stage = c % BULK_STAGES;
            arch::mbarrier_arrive_expect_tx(barrier(stage), len(c));
            arch::bulk_load(
                smem.add(stage * CHUNK),
                src.add(at(c)),
                len(c),
                barrier(stage),
            );
        };
        for c in 0..chunks.min(BULK_STAGES) {
            load(c);
        }
        for c in 0..chunks {
            let stage = c % BULK_STAGES;
            let parity = ((c / BULK_STAGES) & 1) as u32;
            wait_bounded(barrier(stage), parity);
            // One bulk group per chunk, however many destinations: the refill below waits for
            // the stores of the chunk before this one to have read their stage.
            for dst in dsts {
                arch::bulk_store(dst.add(at(c)), smem.add(stage * CHUNK), len(c));
            }
            arch::bulk_commit();
            // Once the store before this one has read its stage, refill that stage.
            if c >= 1 && c - 1 + BULK_STAGES < chunks {
                arch::bulk_wait_read::<1>();
                load(c - 1 + BULK_STAGES);
            }
        }
        arch::bulk_wait::<0>();
        arch::fence_proxy_async();
        for stage in 0..BULK_STAGES {
            arch::mbarrier_inval(barrier(stage));
        }
    }
}

/// The Hopper copy into every destination: bulk engine for large whole-block copies, else
/// the ring.
///
/// # Safety
/// As [`Atom::copy_to_all`] with `Sm90::SMEM_BYTES` of shared memory.
#[inline(always)]
pub(crate) unsafe fn hopper_copy(
    coop: Coop,
    dsts: &[*mut u8],
    src: *const u8,
    bytes: usize,
    smem: *mut u8,
) {
    if coop.whole_block && bytes / coop.blocks as usize >= BULK_MIN_BYTES {
        let whole = bytes - bytes % 16;
        // Other threads may still be draining ring slots of an earlier call.
        arch::sync_block();
        if coop.leads_block() {
            // SAFETY: forwarded contract; only this block's leader touches its `smem` until the
            // barrier.
            unsafe {
                bulk_copy(
                    dsts,
                    src,
                    whole,
                    smem,
                    coop.block_in_group() as usize,
                    coop.blocks as usize,
                )
            };
        }
        // The group's last thread (the leader itself in a one-thread block) copies the < 16
        // tail bytes.
        if coop.index + 1 == coop.size {
            // SAFETY: the tail lies within `bytes`.
            unsafe { copy_bytes(Coop::new(0, 1), dsts, src, whole, bytes) };
        }
        arch::sync_block();
    } else {
        // SAFETY: forwarded contract.
        unsafe { ring_copy(coop, dsts, src, bytes, smem) }
    }
}

/// sm_90: bulk-copy engine for large copies, Sm80's ring for small copies and reductions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sm90;

atom! {
    Sm90 {
        name: "sm90",
        threads: 256,
        smem: {
            let ring = ring_bytes(Self::THREADS);
            let bulk = (BARRIERS_AT + BULK_STAGES * 8) as u32;
            if ring > bulk { ring } else { bulk }
        },
        copy_to_all(coop, dsts, src, bytes, smem) => hopper_copy(coop, dsts, src, bytes, smem),
        reduce_to_all<T, O>(coop, dsts, srcs, count, smem) => {
            ring_reduce::<T, O>(coop, dsts, srcs, count, smem)
        },
        // Thread 0 issues the bulk copies (the async proxy): order its acquire before them,
        // and the peers' reads it waited for before its bulk writes into a reused slot.
        after_wait() => crate::arch::fence_proxy_async(),
        // A launch may start while the one before it on its stream runs (programmatic
        // dependent launch, sm_90): wait for it in the kernel instead.
        await_prior_grids() => crate::arch::await_prior_grids(),
        launch_dependents() => crate::arch::launch_dependents(),
    }
}
