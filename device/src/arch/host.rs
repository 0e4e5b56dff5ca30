//! Host implementation of the `arch` surface on `core` atomics.
//!
//! A block is one CPU thread unless the CPU emulation runs it as several: inside
//! [`as_block_thread`] a CPU thread is thread `thread` of a block of `threads` (one OS thread
//! each), `sync_block` is a barrier shared by the block's threads, and `block_index`,
//! `grid_blocks` and `dynamic_shared` answer for that block. Outside it, `thread_index` is 0,
//! `block_threads` is 1 and the barrier does nothing. Scoped loads and stores map to the C++
//! memory model orders they name (`relaxed`, `acquire`, `release`); every scope is the whole
//! process. Asynchronous copies complete before they return. The latency-packet pair keeps the
//! packet guarantee (a reader that sees the flag word sees the payload word written with it) by
//! writing the payload before the flag with release and reading the flag with acquire before
//! the payload.

use core::cell::{RefCell, UnsafeCell};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------- emulated blocks

/// How long an emulated block barrier waits for the block's other threads before it panics: a
/// thread that never reaches the barrier is a bug in the code under test, and the test must
/// end rather than hang.
const BARRIER_BOUND: Duration = Duration::from_secs(120);

/// The barrier of one emulated block: `threads` CPU threads meet at every `sync_block`.
///
/// ```
/// use purlin_device::arch::{self, BlockBarrier, BlockThread};
/// let barrier = BlockBarrier::new(2);
/// std::thread::scope(|s| {
///     for thread in 0..2 {
///         let barrier = barrier.clone();
///         s.spawn(move || {
///             let me = BlockThread { thread, threads: 2, block: 0, blocks: 1, barrier, smem: core::ptr::null_mut() };
///             arch::as_block_thread(me, || {
///                 assert_eq!(arch::thread_index(), thread);
///                 arch::sync_block();
///             });
///         });
///     }
/// });
/// ```
#[derive(Clone, Debug)]
pub struct BlockBarrier(Arc<Meeting>);

/// The shared part of a [`BlockBarrier`].
#[derive(Debug)]
struct Meeting {
    /// Threads arrived in this generation, the generation, and the OR of the predicates of
    /// `sync_block_or` per generation parity (a slot is cleared when the generation after
    /// its next use completes: every thread has read it by then).
    state: Mutex<(u32, u64, [bool; 2])>,
    all_arrived: Condvar,
    threads: u32,
    /// The block's static scratch ([`block_scratch`]).
    scratch: Scratch,
}

/// [`BLOCK_SCRATCH_BYTES`] of memory the threads of one emulated block share.
#[derive(Debug, Default)]
struct Scratch(UnsafeCell<[u128; BLOCK_SCRATCH_BYTES / 16]>);

// SAFETY: the block's threads share the scratch as a GPU block shares shared memory: the
// code that uses it orders its accesses with `sync_block`.
unsafe impl Sync for Scratch {}

impl BlockBarrier {
    /// A barrier for `threads` threads.
    pub fn new(threads: u32) -> Self {
        Self(Arc::new(Meeting {
            state: Mutex::new((0, 0, [false; 2])),
            all_arrived: Condvar::new(),
            threads: threads.max(1),
            scratch: Scratch::default(),
        }))
    }

    /// Waits until every thread of the block arrived (bounded: panics after two minutes).
    fn wait(&self) {
        self.wait_or(false);
    }

    /// [`wait`](Self::wait), returning whether any thread's `pred` was true.
    fn wait_or(&self, pred: bool) -> bool {
        let m = &*self.0;
        let mut state = m.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = state.1;
        let slot = (generation % 2) as usize;
        state.2[slot] |= pred;
        state.0 += 1;
        if state.0 == m.threads {
            let any = state.2[slot];
            state.0 = 0;
            state.1 += 1;
            // Every thread arrived here, so every one has read the other slot's last value.
            state.2[1 - slot] = false;
            m.all_arrived.notify_all();
            return any;
        }
        let (state, timeout) = m
            .all_arrived
            .wait_timeout_while(state, BARRIER_BOUND, |s| s.1 == generation)
            .unwrap_or_else(|e| e.into_inner());
        let any = state.2[slot];
        drop(state);
        assert!(
            !timeout.timed_out(),
            "an emulated block's barrier waited {BARRIER_BOUND:?} for its other threads"
        );
        any
    }
}

/// Who the calling CPU thread is inside an emulated block (see [`as_block_thread`]).
#[derive(Clone, Debug)]
pub struct BlockThread {
    /// This thread's index in the block (`%tid.x`).
    pub thread: u32,
    /// Threads in the block (`%ntid.x`).
    pub threads: u32,
    /// The block's index in the launch (`%ctaid.x`).
    pub block: u32,
    /// Blocks in the launch (`%nctaid.x`).
    pub blocks: u32,
    /// The barrier the block's threads share.
    pub barrier: BlockBarrier,
    /// The block's shared memory (what `dynamic_shared` returns).
    pub smem: *mut u8,
}

std::thread_local! {
    static BLOCK: RefCell<Option<BlockThread>> = const { RefCell::new(None) };
    /// The scratch of a thread outside an emulated block (a block of one).
    static ALONE_SCRATCH: Scratch = Scratch::default();
}

/// Runs `f` as thread `me.thread` of an emulated block: the index, barrier and shared-memory
/// functions of this module answer for that block until `f` returns.
pub fn as_block_thread<R>(me: BlockThread, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<BlockThread>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            BLOCK.with(|b| *b.borrow_mut() = previous);
        }
    }
    let previous = BLOCK.with(|b| b.borrow_mut().replace(me));
    let _reset = Reset(previous);
    f()
}

fn with_block<R>(f: impl FnOnce(&BlockThread) -> R, alone: R) -> R {
    BLOCK.with(|b| match &*b.borrow() {
        Some(me) => f(me),
        None => alone,
    })
}

// ---------------------------------------------------------------- indices and barriers

/// Host: this thread's index in its emulated block (0 outside one).
#[inline(always)]
pub fn thread_index() -> u32 {
    with_block(|b| b.thread, 0)
}

/// Host: threads of the emulated block (1 outside one).
#[inline(always)]
pub fn block_threads() -> u32 {
    with_block(|b| b.threads, 1)
}

/// Host: the emulated block's index (0 outside one; `SnacArgs::block` says it too).
#[inline(always)]
pub fn block_index() -> u32 {
    with_block(|b| b.block, 0)
}

/// Host: blocks of the emulated launch (1 outside one).
#[inline(always)]
pub fn grid_blocks() -> u32 {
    with_block(|b| b.blocks, 1)
}

/// Host `bar.sync 0`: the emulated block's threads meet (nothing to do for one thread).
#[inline(always)]
pub fn sync_block() {
    let barrier = with_block(|b| (b.threads > 1).then(|| b.barrier.clone()), None);
    if let Some(barrier) = barrier {
        barrier.wait();
    }
}

/// Host: the emulated block's barrier, also telling every thread whether any thread's `pred`
/// was true (outside a block: `pred`).
#[inline(always)]
pub fn sync_block_or(pred: bool) -> bool {
    let barrier = with_block(|b| (b.threads > 1).then(|| b.barrier.clone()), None);
    match barrier {
        Some(barrier) => barrier.wait_or(pred),
        None => pred,
    }
}

/// Host: aborts the process (the device `trap`).
#[inline(always)]
pub fn trap() -> ! {
    std::process::abort()
}

// ---------------------------------------------------------------- launch dependencies

/// Host `griddepcontrol.wait`: nothing (an emulated call starts after the work before it).
#[inline(always)]
pub fn await_prior_grids() {}

/// Host `griddepcontrol.launch_dependents`: nothing (nothing is launched early).
#[inline(always)]
pub fn launch_dependents() {}

// ---------------------------------------------------------------- fences

/// Host `fence.acq_rel.cta`: an acquire-release fence.
#[inline(always)]
pub fn fence_cta() {
    fence(Ordering::AcqRel)
}

/// Host `fence.acq_rel.gpu`: an acquire-release fence.
#[inline(always)]
pub fn fence_gpu() {
    fence(Ordering::AcqRel)
}

/// Host `fence.acq_rel.sys`: an acquire-release fence.
#[inline(always)]
pub fn fence_sys() {
    fence(Ordering::AcqRel)
}

/// Host `fence.proxy.async`: a sequentially consistent fence.
#[inline(always)]
pub fn fence_proxy_async() {
    fence(Ordering::SeqCst)
}

/// Host `fence.mbarrier_init.release.cluster`: a release fence.
#[inline(always)]
pub fn fence_mbarrier_init() {
    fence(Ordering::Release)
}

// ---------------------------------------------------------------- scoped loads and stores

macro_rules! scoped_load {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $atomic:ty, $order:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is a valid, aligned pointer that is only accessed atomically meanwhile.
        #[inline(always)]
        pub unsafe fn $name(p: *const $ty) -> $ty {
            // SAFETY: the caller guarantees `p` is valid, aligned and accessed atomically.
            unsafe { <$atomic>::from_ptr(p as *mut $ty) }.load($order)
        }
    };
}

macro_rules! scoped_store {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $atomic:ty, $order:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is a valid, aligned pointer that is only accessed atomically meanwhile.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $ty, v: $ty) {
            // SAFETY: the caller guarantees `p` is valid, aligned and accessed atomically.
            unsafe { <$atomic>::from_ptr(p) }.store(v, $order)
        }
    };
}

scoped_load!(
    /// Host `ld.relaxed.gpu.global.u64`
    ld_relaxed_gpu_u64,
    u64,
    AtomicU64,
    Ordering::Relaxed
);
scoped_load!(
    /// Host `ld.relaxed.sys.global.u64`
    ld_relaxed_sys_u64,
    u64,
    AtomicU64,
    Ordering::Relaxed
);
scoped_load!(
    /// Host `ld.acquire.gpu.global.u64`
    ld_acquire_gpu_u64,
    u64,
    AtomicU64,
    Ordering::Acquire
);
scoped_load!(
    /// Host `ld.acquire.sys.global.u64`
    ld_acquire_sys_u64,
    u64,
    AtomicU64,
    Ordering::Acquire
);
scoped_load!(
    /// Host `ld.relaxed.gpu.global.u32`
    ld_relaxed_gpu_u32,
    u32,
    AtomicU32,
    Ordering::Relaxed
);
scoped_load!(
    /// Host `ld.acquire.gpu.global.u32`
    ld_acquire_gpu_u32,
    u32,
    AtomicU32,
    Ordering::Acquire
);
scoped_store!(
    /// Host `st.relaxed.gpu.global.u64`
    st_relaxed_gpu_u64,
    u64,
    AtomicU64,
    Ordering::Relaxed
);
scoped_store!(
    /// Host `st.relaxed.sys.global.u64`
    st_relaxed_sys_u64,
    u64,
    AtomicU64,
    Ordering::Relaxed
);
scoped_store!(
    /// Host `st.release.gpu.global.u64`
    st_release_gpu_u64,
    u64,
    AtomicU64,
    Ordering::Release
);
scoped_store!(
    /// Host `st.release.sys.global.u64`
    st_release_sys_u64,
    u64,
    AtomicU64,
    Ordering::Release
);
scoped_store!(
    /// Host `st.relaxed.gpu.global.u32`
    st_relaxed_gpu_u32,
    u32,
    AtomicU32,
    Ordering::Relaxed
);
scoped_store!(
    /// Host `st.release.gpu.global.u32`
    st_release_gpu_u32,
    u32,
    AtomicU32,
    Ordering::Release
);

// ---------------------------------------------------------------- atomics

/// Host `atom.acq_rel.gpu.global.add.u32`
///
/// # Safety
/// `p` is a valid, aligned pointer that is only accessed atomically meanwhile.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_gpu_u32(p: *mut u32, v: u32) -> u32 {
    // SAFETY: the caller guarantees `p`.
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::AcqRel)
}

/// Host `atom.acq_rel.sys.global.add.u32`
///
/// # Safety
/// `p` is a valid, aligned pointer that is only accessed atomically meanwhile.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_sys_u32(p: *mut u32, v: u32) -> u32 {
    // SAFETY: the caller guarantees `p`.
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, Ordering::AcqRel)
}

/// Host `red.release.sys.global.add.u64`
///
/// # Safety
/// `p` is a valid, aligned pointer that is only accessed atomically meanwhile.
#[inline(always)]
pub unsafe fn red_add_release_sys_u64(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p`.
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, Ordering::Release);
}

/// Host `red.relaxed.gpu.global.add.u64`
///
/// # Safety
/// `p` is a valid, aligned pointer that is only accessed atomically meanwhile.
#[inline(always)]
pub unsafe fn red_add_relaxed_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p`.
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
}

// ---------------------------------------------------------------- 16-byte vector access

/// Host `ld.global.v2.u64`
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer.
#[inline(always)]
pub unsafe fn ld_v128(p: *const u128) -> u128 {
    // SAFETY: the caller guarantees `p`.
    unsafe { p.read() }
}

/// Host `st.global.v2.u64`
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer.
#[inline(always)]
pub unsafe fn st_v128(p: *mut u128, v: u128) {
    // SAFETY: the caller guarantees `p`.
    unsafe { p.write(v) }
}

/// Host `ld.volatile.global.v2.u64`: word 1 (the flag) with acquire, then word 0.
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer only accessed through this pair meanwhile.
#[inline(always)]
pub unsafe fn ld_volatile_v2_u64(p: *const [u64; 2]) -> [u64; 2] {
    let words = p as *mut u64;
    // SAFETY: the caller guarantees `p`; both words are in bounds.
    unsafe {
        let flag = AtomicU64::from_ptr(words.add(1)).load(Ordering::Acquire);
        let payload = AtomicU64::from_ptr(words).load(Ordering::Relaxed);
        [payload, flag]
    }
}

/// Host `st.volatile.global.v2.u64`: word 0, then word 1 (the flag) with release.
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer only accessed through this pair meanwhile.
#[inline(always)]
pub unsafe fn st_volatile_v2_u64(p: *mut [u64; 2], v: [u64; 2]) {
    let words = p as *mut u64;
    // SAFETY: the caller guarantees `p`; both words are in bounds.
    unsafe {
        AtomicU64::from_ptr(words).store(v[0], Ordering::Relaxed);
        AtomicU64::from_ptr(words.add(1)).store(v[1], Ordering::Release);
    }
}

/// Host `ld.shared.v2.u64`
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer.
#[inline(always)]
pub unsafe fn ld_shared_v128(p: *const u128) -> u128 {
    // SAFETY: the caller guarantees `p`.
    unsafe { p.read() }
}

// ---------------------------------------------------------------- sleeping

/// Host `nanosleep.u32`: yields the thread (sleeping would only slow the emulation).
#[inline(always)]
pub fn nanosleep(_ns: u32) {
    std::thread::yield_now()
}

/// Host `%globaltimer`: nanoseconds since the first call in this process.
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

// ---------------------------------------------------------------- dynamic shared memory

/// Host: the emulated block's shared memory (null outside one: callers pass their own).
#[inline(always)]
pub fn dynamic_shared() -> *mut u8 {
    with_block(|b| b.smem, core::ptr::null_mut())
}

/// Bytes at [`block_scratch`].
pub const BLOCK_SCRATCH_BYTES: usize = 512;

/// Host: the emulated block's scratch, shared by its threads (outside a block, this thread's).
#[inline(always)]
pub fn block_scratch() -> *mut u8 {
    with_block(
        |b| b.barrier.0.scratch.0.get() as *mut u8,
        ALONE_SCRATCH.with(|s| s.0.get() as *mut u8),
    )
}

/// Host: 0, "as the contract says" (the emulation fills `SnacArgs::smem_bytes` itself).
#[inline(always)]
pub fn dynamic_shared_bytes() -> u32 {
    0
}

// ---------------------------------------------------------------- cp.async

/// Host `cp.async.cg.shared.global [smem], [gmem], 16`: copies at once.
///
/// # Safety
/// Both pointers are valid for 16 bytes.
#[inline(always)]
pub unsafe fn cp_async_16(smem: *mut u8, src: *const u8) {
    // SAFETY: the caller guarantees both pointers.
    unsafe { core::ptr::copy_nonoverlapping(src, smem, 16) }
}

/// Host `cp.async.commit_group`: nothing is pending.
#[inline(always)]
pub fn cp_async_commit() {}

/// Host `cp.async.wait_group N`: nothing is pending.
#[inline(always)]
pub fn cp_async_wait<const PENDING: u32>() {}

// ---------------------------------------------------------------- mbarrier + bulk copies

/// Host `mbarrier.init.shared::cta.b64`: stores 0.
///
/// # Safety
/// `bar` is a valid, aligned u64.
#[inline(always)]
pub unsafe fn mbarrier_init(bar: *mut u64, _arrivals: u32) {
    // SAFETY: the caller guarantees `bar`.
    unsafe { bar.write(0) }
}

/// Host `mbarrier.inval.shared::cta.b64`: nothing to do.
///
/// # Safety
/// Always safe on the host; kept unsafe for the same surface.
#[inline(always)]
pub unsafe fn mbarrier_inval(_bar: *mut u64) {}

/// Host `mbarrier.arrive.expect_tx.shared::cta.b64`: bulk loads complete at once.
///
/// # Safety
/// Always safe on the host; kept unsafe for the same surface.
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx(_bar: *mut u64, _bytes: u32) {}

/// Host `mbarrier.try_wait.parity.shared::cta.b64`: always complete.
///
/// # Safety
/// Always safe on the host; kept unsafe for the same surface.
#[inline(always)]
pub unsafe fn mbarrier_try_wait_parity(_bar: *mut u64, _parity: u32) -> bool {
    true
}

/// Host `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: copies at once.
///
/// # Safety
/// Both pointers are valid for `bytes` bytes.
#[inline(always)]
pub unsafe fn bulk_load(smem: *mut u8, src: *const u8, bytes: u32, _bar: *mut u64) {
    // SAFETY: the caller guarantees both pointers.
    unsafe { core::ptr::copy_nonoverlapping(src, smem, bytes as usize) }
}

/// Host `cp.async.bulk.global.shared::cta.bulk_group`: copies at once.
///
/// # Safety
/// Both pointers are valid for `bytes` bytes.
#[inline(always)]
pub unsafe fn bulk_store(dst: *mut u8, smem: *const u8, bytes: u32) {
    // SAFETY: the caller guarantees both pointers.
    unsafe { core::ptr::copy_nonoverlapping(smem, dst, bytes as usize) }
}

/// Host `cp.async.bulk.commit_group`: nothing is pending.
#[inline(always)]
pub fn bulk_commit() {}

/// Host `cp.async.bulk.wait_group.read N`: nothing is pending.
#[inline(always)]
pub fn bulk_wait_read<const PENDING: u32>() {}

/// Host `cp.async.bulk.wait_group N`: nothing is pending.
#[inline(always)]
pub fn bulk_wait<const PENDING: u32>() {}

// ---------------------------------------------------------------- conversions

/// Host `cvt.f32.f16`
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// Host `cvt.rn.f16.f32`
#[inline(always)]
pub fn f32_to_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// Host `cvt.rn.bf16.f32`
#[inline(always)]
pub fn f32_to_bf16(v: f32) -> u16 {
    half::bf16::from_f32(v).to_bits()
}
