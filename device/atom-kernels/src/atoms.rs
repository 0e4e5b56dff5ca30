//! Grid-wide Atom kernels: either each block takes an even share of the work, in whole 16-byte
//! vectors, and runs the Atom on it with the whole block, or all blocks interleave over the
//! whole range (the `layout` argument). Reduce kernels are named
//! `purlin_atom_reduce_<atom>_<type>` with the type's nccl-tests name.

use purlin_device::arch;
use purlin_device::atom::{Atom, ReduceSources};
use purlin_device::coop::Coop;
use purlin_device::element::{E4m3, E5m2, Element};
use purlin_device::half;
use purlin_device::op::{ReduceOp, ReduceOpKind, TypedVisitor, dispatch};
use purlin_device::partition::{even_split, split_bytes};

/// How a grid shares one range: `0` = each block copies a contiguous even share with
/// `Coop::block()`; `1` = all blocks interleave over the whole range with `Coop::grid()`.
const LAYOUT_BLOCKS: u32 = 0;

/// This block's part of a grid-wide copy.
#[inline(always)]
unsafe fn grid_copy<A: Atom>(dst: *mut u8, src: *const u8, bytes: u64, layout: u32) {
    if layout != LAYOUT_BLOCKS {
        // SAFETY: the whole grid shares the whole range.
        return unsafe {
            A::copy(
                Coop::grid(),
                dst,
                src,
                bytes as usize,
                arch::dynamic_shared(),
            )
        };
    }
    let (offset, len) = split_bytes(
        bytes as usize,
        16,
        arch::grid_blocks() as usize,
        arch::block_index() as usize,
    );
    // SAFETY: the share lies inside both buffers, at a 16-byte offset.
    unsafe {
        A::copy(
            Coop::block(),
            dst.add(offset),
            src.add(offset),
            len,
            arch::dynamic_shared(),
        )
    }
}

struct GridReduce<A> {
    dst: *mut u8,
    srcs: ReduceSources,
    count: usize,
    layout: u32,
    atom: core::marker::PhantomData<A>,
}

impl<A: Atom> TypedVisitor for GridReduce<A> {
    type Output = ();
    #[inline(always)]
    fn visit<T: Element, O: ReduceOp>(self) {
        let (blocks, block) = (arch::grid_blocks() as usize, arch::block_index() as usize);
        let ((offset, len), coop) = if self.layout == LAYOUT_BLOCKS {
            let vectors = self.count / T::LANES;
            let (first, n) = even_split(vectors, blocks, block);
            let mut len = n * T::LANES;
            if block + 1 == blocks {
                len += self.count % T::LANES;
            }
            ((first * T::LANES, len), Coop::block())
        } else {
            ((0, self.count), Coop::grid())
        };
        let mut srcs = [core::ptr::null::<T>(); purlin_device::atom::MAX_SOURCES];
        let n_src = self.srcs.len();
        for (s, p) in srcs.iter_mut().enumerate().take(n_src) {
            // SAFETY: the share lies inside every source.
            *p = unsafe { (self.srcs.ptrs[s] as *const T).add(offset) };
        }
        // SAFETY: the share lies inside `dst` and every source, 16-byte aligned.
        unsafe {
            A::reduce::<T, O>(
                coop,
                (self.dst as *mut T).add(offset),
                &srcs[..n_src],
                len,
                arch::dynamic_shared(),
            )
        }
    }
}

/// This block's share of a grid-wide reduce of `T`, for the run-time operator.
#[inline(always)]
unsafe fn grid_reduce<A: Atom, T: Element>(
    dst: *mut u8,
    srcs: ReduceSources,
    count: u64,
    op: u32,
    layout: u32,
) {
    let Some(op) = ReduceOpKind::from_u32(op) else {
        arch::trap()
    };
    if srcs.is_empty() || srcs.len() > purlin_device::atom::MAX_SOURCES {
        arch::trap()
    }
    // One kernel per element type (not one for all), so each gets the registers its own
    // datapath needs rather than the worst type's.
    dispatch(
        T::DTYPE,
        op,
        GridReduce::<A> {
            dst,
            srcs,
            count: count as usize,
            layout,
            atom: core::marker::PhantomData,
        },
    )
}

/// One Atom's kernels: `purlin_atom_copy_<atom>` and `purlin_atom_reduce_<atom>_<type>` (the
/// type's nccl-tests name), one per element type so each gets the registers its own datapath
/// needs.
macro_rules! atom_kernels {
    ($atom:ty, $module:ident) => {
        atom_kernels!(@copy $atom, concat!("purlin_atom_copy_", stringify!($module)));
        atom_kernels!(@reduce $atom, $module, [
            f32 => float, half::f16 => half, half::bf16 => bfloat16, E4m3 => f8e4m3,
            E5m2 => f8e5m2,
        ]);
    };
    (@copy $atom:ty, $name:expr) => {
        /// Grid-wide copy of `bytes` bytes with this Atom.
        ///
        /// # Safety
        /// Launched with `THREADS` threads and `SMEM_BYTES` of dynamic shared memory; buffers
        /// valid and 16-byte aligned.
        #[unsafe(export_name = $name)]
        pub unsafe extern "ptx-kernel" fn copy(dst: *mut u8, src: *const u8, bytes: u64, layout: u32) {
            // SAFETY: forwarded launch contract.
            unsafe { grid_copy::<$atom>(dst, src, bytes, layout) }
        }
    };
    (@reduce $atom:ty, $module:ident, [$($ty:ty => $dtype:ident),* $(,)?]) => {
        $(
            /// Grid-wide reduce of `count` elements with operator `op` over `srcs`.
            ///
            /// # Safety
            /// As the copy kernel; every source valid for `count` elements.
            #[unsafe(export_name = concat!(
                "purlin_atom_reduce_", stringify!($module), "_", stringify!($dtype)
            ))]
            pub unsafe extern "ptx-kernel" fn $dtype(dst: *mut u8, srcs: ReduceSources, count: u64, op: u32, layout: u32) {
                // SAFETY: forwarded launch contract.
                unsafe { grid_reduce::<$atom, $ty>(dst, srcs, count, op, layout) }
            }
        )*
    };
}

/// Every architecture's Atom kernels, from the architectures' list, in the builds whose target
/// has the architecture's features (a module per Atom).
macro_rules! every_atom {
    ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
        $(
            #[doc = concat!("The `", stringify!($arch), "` Atom's kernels.")]
            #[cfg(target_feature = $name)]
            pub mod $module {
                use super::*;
                atom_kernels!(purlin_device::atom::$arch, $module);
            }
        )*
    };
}

purlin_device::for_each_arch!(every_atom);

/// A fused kernel as a user would write one: it does its own work first (scales `src` by
/// `scale` into `scratch`, each block its own share), then, in the same kernel, calls the
/// native Atom to copy the scaled share to `dst`.
///
/// # Safety
/// Launched with `Native::THREADS` threads and `Native::SMEM_BYTES` of shared memory; buffers
/// hold `count` 16-byte aligned f32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn purlin_test_fused_scale_copy(
    dst: *mut f32,
    scratch: *mut f32,
    src: *const f32,
    count: u64,
    scale: f32,
) {
    use purlin_device::atom::Native;
    let (blocks, block) = (arch::grid_blocks() as usize, arch::block_index() as usize);
    let (offset, len) = split_bytes(count as usize * 4, 16, blocks, block);
    let (first, n) = (offset / 4, len / 4);
    let mut i = arch::thread_index() as usize;
    while i < n {
        // SAFETY: `first + i < count`.
        unsafe {
            scratch
                .add(first + i)
                .write(src.add(first + i).read() * scale)
        };
        i += arch::block_threads() as usize;
    }
    // The copy reads what other threads of the block wrote.
    arch::sync_block();
    // SAFETY: the share lies inside both buffers, 16-byte aligned.
    unsafe {
        Native::copy(
            Coop::block(),
            dst.add(first).cast(),
            scratch.add(first).cast(),
            len,
            arch::dynamic_shared(),
        )
    }
}
