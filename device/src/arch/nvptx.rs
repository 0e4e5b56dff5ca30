//! PTX implementation of the `arch` surface: one instruction per function.
//!
//! Convergent instructions (the block barrier) go through LLVM intrinsics, not inline asm:
//! LLVM may duplicate an asm `bar.sync` into a deadlock.

use core::arch::asm;
use core::arch::nvptx;

// Shared memory can only be declared at module scope.
core::arch::global_asm!(".extern .shared .align 128 .b8 purlin_dynamic_smem[];");
core::arch::global_asm!(
    ".shared .align 16 .b8 purlin_block_scratch[{bytes}];",
    bytes = const BLOCK_SCRATCH_BYTES,
);

// ---------------------------------------------------------------- indices and barriers

/// `mov.u32 %r, %tid.x`
#[inline(always)]
pub fn thread_index() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `mov.u32 %r, %ntid.x`
#[inline(always)]
pub fn block_threads() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// `mov.u32 %r, %ctaid.x`
#[inline(always)]
pub fn block_index() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `mov.u32 %r, %nctaid.x`
#[inline(always)]
pub fn grid_blocks() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `bar.sync 0` (through the LLVM intrinsic, so it is never duplicated)
#[inline(always)]
pub fn sync_block() {
    // SAFETY: every thread of the block reaches this barrier (callers' contract, see Coop).
    unsafe { nvptx::_syncthreads() }
}

unsafe extern "C" {
    #[link_name = "llvm.nvvm.barrier0.or"]
    fn barrier0_or(pred: i32) -> i32;
}

/// `bar.red.or.pred` (through the LLVM intrinsic): a block barrier that also tells every
/// thread whether any thread's `pred` was true.
#[inline(always)]
pub fn sync_block_or(pred: bool) -> bool {
    // SAFETY: every thread of the block reaches this barrier (callers' contract, see Coop).
    unsafe { barrier0_or(pred as i32) != 0 }
}

/// `trap`
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: aborts the kernel; no memory is touched.
    unsafe { nvptx::trap() }
}

// ---------------------------------------------------------------- launch dependencies

/// `griddepcontrol.wait` (until the grids this one depends on are done and visible, sm_90)
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn await_prior_grids() {
    // SAFETY: a wait touches no memory; it orders this thread's later accesses after the
    // prerequisite grids' writes.
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) }
}

/// `griddepcontrol.launch_dependents` (lets this grid's dependents be scheduled, sm_90)
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn launch_dependents() {
    // SAFETY: a scheduling hint; touches no memory.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) }
}

// ---------------------------------------------------------------- fences

/// `fence.acq_rel.cta`
#[inline(always)]
pub fn fence_cta() {
    // SAFETY: a fence only orders this thread's memory operations.
    unsafe { asm!("fence.acq_rel.cta;", options(nostack)) }
}

/// `fence.acq_rel.gpu`
#[inline(always)]
pub fn fence_gpu() {
    // SAFETY: a fence only orders this thread's memory operations.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) }
}

/// `fence.acq_rel.sys`
#[inline(always)]
pub fn fence_sys() {
    // SAFETY: a fence only orders this thread's memory operations.
    unsafe { asm!("fence.acq_rel.sys;", options(nostack)) }
}

/// `fence.proxy.async` (orders generic-proxy and async-proxy accesses, sm_90)
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn fence_proxy_async() {
    // SAFETY: a fence only orders this thread's memory operations.
    unsafe { asm!("fence.proxy.async;", options(nostack)) }
}

/// `fence.mbarrier_init.release.cluster` (makes `mbarrier.init` visible to the async proxy, sm_90)
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn fence_mbarrier_init() {
    // SAFETY: a fence only orders this thread's memory operations.
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
}

// ---------------------------------------------------------------- scoped loads and stores

macro_rules! scoped_load {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $reg:ident, $insn:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is a valid, aligned pointer into global memory.
        #[inline(always)]
        pub unsafe fn $name(p: *const $ty) -> $ty {
            let v: $ty;
            // SAFETY: the caller guarantees `p` is a valid global address.
            unsafe { asm!(concat!($insn, " {v}, [{p}];"), v = out($reg) v, p = in(reg64) p, options(nostack)) };
            v
        }
    };
}

macro_rules! scoped_store {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $reg:ident, $insn:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is a valid, aligned pointer into global memory.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $ty, v: $ty) {
            // SAFETY: the caller guarantees `p` is a valid global address.
            unsafe { asm!(concat!($insn, " [{p}], {v};"), v = in($reg) v, p = in(reg64) p, options(nostack)) };
        }
    };
}

scoped_load!(
    /// `ld.relaxed.gpu.global.u64`
    ld_relaxed_gpu_u64,
    u64,
    reg64,
    "ld.relaxed.gpu.global.u64"
);
scoped_load!(
    /// `ld.relaxed.sys.global.u64`
    ld_relaxed_sys_u64,
    u64,
    reg64,
    "ld.relaxed.sys.global.u64"
);
scoped_load!(
    /// `ld.acquire.gpu.global.u64`
    ld_acquire_gpu_u64,
    u64,
    reg64,
    "ld.acquire.gpu.global.u64"
);
scoped_load!(
    /// `ld.acquire.sys.global.u64`
    ld_acquire_sys_u64,
    u64,
    reg64,
    "ld.acquire.sys.global.u64"
);
scoped_load!(
    /// `ld.relaxed.gpu.global.u32`
    ld_relaxed_gpu_u32,
    u32,
    reg32,
    "ld.relaxed.gpu.global.u32"
);
scoped_load!(
    /// `ld.acquire.gpu.global.u32`
    ld_acquire_gpu_u32,
    u32,
    reg32,
    "ld.acquire.gpu.global.u32"
);
scoped_store!(
    /// `st.relaxed.gpu.global.u64`
    st_relaxed_gpu_u64,
    u64,
    reg64,
    "st.relaxed.gpu.global.u64"
);
scoped_store!(
    /// `st.relaxed.sys.global.u64`
    st_relaxed_sys_u64,
    u64,
    reg64,
    "st.relaxed.sys.global.u64"
);
scoped_store!(
    /// `st.release.gpu.global.u64`
    st_release_gpu_u64,
    u64,
    reg64,
    "st.release.gpu.global.u64"
);
scoped_store!(
    /// `st.release.sys.global.u64`
    st_release_sys_u64,
    u64,
    reg64,
    "st.release.sys.global.u64"
);
scoped_store!(
    /// `st.relaxed.gpu.global.u32`
    st_relaxed_gpu_u32,
    u32,
    reg32,
    "st.relaxed.gpu.global.u32"
);
scoped_store!(
    /// `st.release.gpu.global.u32`
    st_release_gpu_u32,
    u32,
    reg32,
    "st.release.gpu.global.u32"
);

// ---------------------------------------------------------------- atomics

/// `atom.acq_rel.gpu.global.add.u32`
///
/// # Safety
/// `p` is a valid, aligned pointer into global memory.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_gpu_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("atom.acq_rel.gpu.global.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
    old
}

/// `atom.acq_rel.sys.global.add.u32`
///
/// # Safety
/// `p` is a valid, aligned pointer into global memory.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_sys_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("atom.acq_rel.sys.global.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
    old
}

/// `red.release.sys.global.add.u64`
///
/// # Safety
/// `p` is a valid, aligned pointer into global memory.
#[inline(always)]
pub unsafe fn red_add_release_sys_u64(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("red.release.sys.global.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack))
    };
}

/// `red.relaxed.gpu.global.add.u64`
///
/// # Safety
/// `p` is a valid, aligned pointer into global memory.
#[inline(always)]
pub unsafe fn red_add_relaxed_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p` is a valid global address.
    unsafe {
        asm!("red.relaxed.gpu.global.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack))
    };
}

// ---------------------------------------------------------------- 16-byte vector access

/// `ld.global.v2.u64`
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer into global memory.
#[inline(always)]
pub unsafe fn ld_v128(p: *const u128) -> u128 {
    let (lo, hi): (u64, u64);
    // SAFETY: the caller guarantees `p` is a valid, aligned global address.
    unsafe {
        asm!("ld.global.v2.u64 {{{lo}, {hi}}}, [{p}];", lo = out(reg64) lo, hi = out(reg64) hi, p = in(reg64) p,
             options(nostack, readonly, pure))
    };
    (lo as u128) | ((hi as u128) << 64)
}

/// `st.global.v2.u64`
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer into global memory.
#[inline(always)]
pub unsafe fn st_v128(p: *mut u128, v: u128) {
    // SAFETY: the caller guarantees `p` is a valid, aligned global address.
    unsafe {
        asm!("st.global.v2.u64 [{p}], {{{lo}, {hi}}};", lo = in(reg64) v as u64, hi = in(reg64) (v >> 64) as u64,
             p = in(reg64) p, options(nostack))
    };
}

/// `ld.volatile.global.v2.u64` (both words arrive together: the latency-packet read)
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer into global memory.
#[inline(always)]
pub unsafe fn ld_volatile_v2_u64(p: *const [u64; 2]) -> [u64; 2] {
    let (lo, hi): (u64, u64);
    // SAFETY: the caller guarantees `p` is a valid, aligned global address.
    unsafe {
        asm!("ld.volatile.global.v2.u64 {{{lo}, {hi}}}, [{p}];", lo = out(reg64) lo, hi = out(reg64) hi, p = in(reg64) p,
             options(nostack))
    };
    [lo, hi]
}

/// `st.volatile.global.v2.u64` (both words land together: the latency-packet write)
///
/// # Safety
/// `p` is a valid, 16-byte aligned pointer into global memory.
#[inline(always)]
pub unsafe fn st_volatile_v2_u64(p: *mut [u64; 2], v: [u64; 2]) {
    // SAFETY: the caller guarantees `p` is a valid, aligned global address.
    unsafe {
        asm!("st.volatile.global.v2.u64 [{p}], {{{lo}, {hi}}};", lo = in(reg64) v[0], hi = in(reg64) v[1],
             p = in(reg64) p, options(nostack))
    };
}

/// `ld.shared.v2.u64`
///
/// # Safety
/// `p` is a valid, 16-byte aligned generic pointer into this block's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v128(p: *const u128) -> u128 {
    let (lo, hi): (u64, u64);
    // SAFETY: the caller guarantees `p` points into shared memory; the asm converts it.
    unsafe {
        asm!("{{ .reg .u64 a; cvta.to.shared.u64 a, {p}; ld.shared.v2.u64 {{{lo}, {hi}}}, [a]; }}",
             lo = out(reg64) lo, hi = out(reg64) hi, p = in(reg64) p, options(nostack))
    };
    (lo as u128) | ((hi as u128) << 64)
}

// ---------------------------------------------------------------- sleeping

/// `nanosleep.u32`
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: sleeping touches no memory.
    unsafe { asm!("nanosleep.u32 {ns};", ns = in(reg32) ns, options(nostack, nomem)) };
}

/// `mov.u64 %rd, %globaltimer` (nanoseconds; used to bound waits)
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    let t: u64;
    // Not `nomem`: a trace mark must read the clock after the memory accesses before it.
    // SAFETY: reading a special register has no preconditions.
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack)) };
    t
}

// ---------------------------------------------------------------- dynamic shared memory

/// Bytes at [`block_scratch`]: static shared memory, allotted only to the kernels that use it.
pub const BLOCK_SCRATCH_BYTES: usize = 512;

/// `cvta.shared.u64` of the module's static `.shared` scratch: the generic address of this
/// block's [`BLOCK_SCRATCH_BYTES`] of scratch, apart from the dynamic shared memory.
#[inline(always)]
pub fn block_scratch() -> *mut u8 {
    let p: u64;
    // SAFETY: taking the address of the module-scope shared array touches no memory.
    unsafe {
        asm!("cvta.shared.u64 {p}, purlin_block_scratch;", p = out(reg64) p, options(nostack, nomem, pure))
    };
    p as *mut u8
}

/// `cvta.shared.u64` of the module's `.extern .shared` array: the generic address of this
/// block's dynamic shared memory.
#[inline(always)]
pub fn dynamic_shared() -> *mut u8 {
    let p: u64;
    // SAFETY: taking the address of the module-scope shared array touches no memory.
    unsafe {
        asm!("cvta.shared.u64 {p}, purlin_dynamic_smem;", p = out(reg64) p, options(nostack, nomem, pure))
    };
    p as *mut u8
}

/// `mov.u32 %r, %dynamic_smem_size`: bytes of dynamic shared memory this launch gave the block.
#[inline(always)]
pub fn dynamic_shared_bytes() -> u32 {
    let n: u32;
    // SAFETY: reading a special register touches no memory.
    unsafe {
        asm!("mov.u32 {n}, %dynamic_smem_size;", n = out(reg32) n, options(nostack, nomem, pure))
    };
    n
}

/// `cvta.to.shared.u64`: the shared-window address of a generic shared pointer.
#[inline(always)]
#[cfg(target_feature = "sm_80")]
fn shared_window(p: *const u8) -> u32 {
    let a: u64;
    // SAFETY: an address conversion touches no memory.
    unsafe {
        asm!("cvta.to.shared.u64 {a}, {p};", a = out(reg64) a, p = in(reg64) p, options(nostack, nomem, pure))
    };
    a as u32
}

// ---------------------------------------------------------------- cp.async (sm_80)

/// `cp.async.cg.shared.global [smem], [gmem], 16`
///
/// # Safety
/// `smem` is 16-byte aligned shared memory of this block; `src` 16-byte aligned global memory.
#[inline(always)]
#[cfg(target_feature = "sm_80")]
pub unsafe fn cp_async_16(smem: *mut u8, src: *const u8) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.cg.shared.global [{s}], [{g}], 16;", s = in(reg32) shared_window(smem), g = in(reg64) src,
             options(nostack))
    };
}

/// `cp.async.commit_group`
#[inline(always)]
#[cfg(target_feature = "sm_80")]
pub fn cp_async_commit() {
    // SAFETY: closes this thread's open group of asynchronous copies.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// `cp.async.wait_group N`
#[inline(always)]
#[cfg(target_feature = "sm_80")]
pub fn cp_async_wait<const PENDING: u32>() {
    // SAFETY: waits for this thread's own asynchronous copies.
    unsafe { asm!("cp.async.wait_group {n};", n = const PENDING, options(nostack)) };
}

// ---------------------------------------------------------------- mbarrier + bulk copies (sm_90)

/// `mbarrier.init.shared::cta.b64`
///
/// # Safety
/// `bar` is an 8-byte aligned shared-memory word not in use as an mbarrier.
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub unsafe fn mbarrier_init(bar: *mut u64, arrivals: u32) {
    // SAFETY: the caller guarantees `bar`.
    unsafe {
        asm!("mbarrier.init.shared::cta.b64 [{b}], {n};", b = in(reg32) shared_window(bar as *const u8),
             n = in(reg32) arrivals, options(nostack))
    };
}

/// `mbarrier.inval.shared::cta.b64`
///
/// # Safety
/// `bar` is an initialised mbarrier with no pending phase.
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub unsafe fn mbarrier_inval(bar: *mut u64) {
    // SAFETY: the caller guarantees `bar`.
    unsafe {
        asm!("mbarrier.inval.shared::cta.b64 [{b}];", b = in(reg32) shared_window(bar as *const u8), options(nostack))
    };
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64`
///
/// # Safety
/// `bar` is an initialised mbarrier in this block's shared memory.
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub unsafe fn mbarrier_arrive_expect_tx(bar: *mut u64, bytes: u32) {
    // SAFETY: the caller guarantees `bar`.
    unsafe {
        asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) shared_window(bar as *const u8),
             n = in(reg32) bytes, options(nostack))
    };
}

/// `mbarrier.try_wait.parity.shared::cta.b64` (true once the phase of `parity` completed)
///
/// # Safety
/// `bar` is an initialised mbarrier in this block's shared memory.
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub unsafe fn mbarrier_try_wait_parity(bar: *mut u64, parity: u32) -> bool {
    let done: u32;
    // SAFETY: the caller guarantees `bar`.
    unsafe {
        asm!("{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
             d = out(reg32) done, b = in(reg32) shared_window(bar as *const u8), ph = in(reg32) parity, options(nostack))
    };
    done != 0
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`
///
/// # Safety
/// `smem` and `src` are 16-byte aligned, `bytes` a multiple of 16, `bar` an initialised mbarrier.
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub unsafe fn bulk_load(smem: *mut u8, src: *const u8, bytes: u32, bar: *mut u64) {
    // SAFETY: the caller guarantees the addresses and size.
    unsafe {
        asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{s}], [{g}], {n}, [{b}];",
             s = in(reg32) shared_window(smem), g = in(reg64) src, n = in(reg32) bytes,
             b = in(reg32) shared_window(bar as *const u8), options(nostack))
    };
}

/// `cp.async.bulk.global.shared::cta.bulk_group`
///
/// # Safety
/// `dst` and `smem` are 16-byte aligned and `bytes` a multiple of 16.
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub unsafe fn bulk_store(dst: *mut u8, smem: *const u8, bytes: u32) {
    // SAFETY: the caller guarantees the addresses and size.
    unsafe {
        asm!("cp.async.bulk.global.shared::cta.bulk_group [{g}], [{s}], {n};", g = in(reg64) dst,
             s = in(reg32) shared_window(smem), n = in(reg32) bytes, options(nostack))
    };
}

/// `cp.async.bulk.commit_group`
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn bulk_commit() {
    // SAFETY: closes this thread's open group of bulk copies.
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
}

/// `cp.async.bulk.wait_group.read N` (the shared-memory sources of all but N groups are free)
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn bulk_wait_read<const PENDING: u32>() {
    // SAFETY: waits for this thread's own bulk copies.
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const PENDING, options(nostack)) };
}

/// `cp.async.bulk.wait_group N` (all but N groups are complete and their writes performed)
#[inline(always)]
#[cfg(target_feature = "sm_90")]
pub fn bulk_wait<const PENDING: u32>() {
    // SAFETY: waits for this thread's own bulk copies.
    unsafe { asm!("cp.async.bulk.wait_group {n};", n = const PENDING, options(nostack)) };
}

// ---------------------------------------------------------------- conversions

/// `cvt.f32.f16`
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    let v: f32;
    // SAFETY: a register conversion.
    unsafe {
        asm!("cvt.f32.f16 {v}, {h};", v = out(reg32) v, h = in(reg16) bits, options(nostack, nomem, pure))
    };
    v
}

/// `cvt.rn.f16.f32`
#[inline(always)]
pub fn f32_to_f16(v: f32) -> u16 {
    let h: u16;
    // SAFETY: a register conversion.
    unsafe {
        asm!("cvt.rn.f16.f32 {h}, {v};", h = out(reg16) h, v = in(reg32) v, options(nostack, nomem, pure))
    };
    h
}

/// `cvt.rn.bf16.f32` (sm_80)
#[inline(always)]
#[cfg(target_feature = "sm_80")]
pub fn f32_to_bf16(v: f32) -> u16 {
    let h: u16;
    // SAFETY: a register conversion.
    unsafe {
        asm!("cvt.rn.bf16.f32 {h}, {v};", h = out(reg16) h, v = in(reg32) v, options(nostack, nomem, pure))
    };
    h
}
