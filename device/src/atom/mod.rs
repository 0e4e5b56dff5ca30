//! Atoms: how one architecture moves bytes. An Atom copies a range, or reduces up to
//! [`MAX_SOURCES`] ranges into one, using the threads of a [`Coop`] and a slice of the block's
//! shared memory. It knows nothing of collectives; SNAC decides where and when it runs.
//!
//! | Atom | datapath |
//! | --- | --- |
//! | [`Sm70`] | 16-byte register loads, several in flight per thread |
//! | [`Sm80`] | `cp.async` into a per-thread shared-memory ring, drained to global |
//! | [`Sm90`] | bulk-copy engine + `mbarrier` for large copies, else Sm80's ring |
//! | [`Sm100`] | Sm90's datapath (checked by `ptxas` only for now) |
//! | [`Host`] | the register datapath on one CPU thread: the portable reference |
//!
//! [`Native`] names the best Atom of the architecture being compiled for.
//!
//! Contract of every call: all pointers are 16-byte aligned; any byte count (copy) or element
//! count (reduce) works, tails included; `smem` points to at least
//! [`Atom::SMEM_BYTES`] bytes of shared memory that the caller is not using (null is allowed
//! when `SMEM_BYTES` is 0); every thread of `coop` makes the same call. Reductions accumulate
//! in `f32` and visit sources in index order, so they are bitwise repeatable and do not
//! depend on the Atom or the number of threads.
//!
//! ```
//! use purlin_device::atom::{Atom, Host};
//! use purlin_device::coop::Coop;
//! use purlin_device::op::Sum;
//! #[repr(align(16))]
//! struct Aligned([f32; 5]);
//! let (a, b) = (Aligned([1.0; 5]), Aligned([2.0; 5]));
//! let mut out = Aligned([0.0; 5]);
//! // SAFETY: all three buffers hold 5 aligned f32 and do not overlap.
//! unsafe {
//!     Host::reduce::<f32, Sum>(Coop::block(), out.0.as_mut_ptr(), &[a.0.as_ptr(), b.0.as_ptr()], 5, core::ptr::null_mut())
//! };
//! assert_eq!(out.0, [3.0; 5]);
//! ```

use crate::coop::Coop;
use crate::element::Element;
use crate::op::ReduceOp;

/// Implements [`Atom`] for an architecture's type: its name, block size and shared memory,
/// and the datapath functions its `copy` and `reduce` forward to (the bodies name the
/// parameters they use and the element and operator types `T` and `O`).
macro_rules! atom {
    (
        $(#[$meta:meta])*
        $atom:ty {
            name: $name:literal,
            $(#[$threads_meta:meta])*
            threads: $threads:expr,
            smem: $smem:expr,
            copy($coop:ident, $dst:ident, $src:ident, $bytes:ident, $csmem:ident) => $copy:expr,
            reduce<$t:ident, $o:ident>(
                $rcoop:ident, $rdst:ident, $srcs:ident, $count:ident, $rsmem:ident
            ) => $reduce:expr $(,)?
        }
    ) => {
        $(#[$meta])*
        impl $crate::atom::Atom for $atom {
            const NAME: &'static str = $name;
            $(#[$threads_meta])*
            const THREADS: u32 = $threads;
            const SMEM_BYTES: u32 = $smem;

            #[inline(always)]
            unsafe fn copy(
                $coop: $crate::coop::Coop,
                $dst: *mut u8,
                $src: *const u8,
                $bytes: usize,
                $csmem: *mut u8,
            ) {
                // SAFETY: forwarded contract.
                unsafe { $copy }
            }

            #[inline(always)]
            unsafe fn reduce<$t: $crate::element::Element, $o: $crate::op::ReduceOp>(
                $rcoop: $crate::coop::Coop,
                $rdst: *mut $t,
                $srcs: &[*const $t],
                $count: usize,
                $rsmem: *mut u8,
            ) {
                // SAFETY: forwarded contract.
                unsafe { $reduce }
            }
        }
    };
}

mod register;
pub use register::Host;

mod sm70;
pub use sm70::Sm70;

#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_80"))]
mod sm80;
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_80"))]
pub use sm80::Sm80;

#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90"))]
mod sm90;
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90"))]
pub use sm90::Sm90;

#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_100"))]
mod sm100;
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_100"))]
pub use sm100::Sm100;

/// The most sources one reduce takes (the most ranks Purlin supports).
pub const MAX_SOURCES: usize = 16;

/// How one architecture copies and reduces.
pub trait Atom {
    /// Short name (`sm70`, `sm80`, ...).
    const NAME: &'static str;
    /// Threads per block the Atom is tuned for.
    const THREADS: u32;
    /// Dynamic shared memory per block, in bytes.
    const SMEM_BYTES: u32;

    /// Copies `bytes` bytes from `src` to `dst`.
    ///
    /// # Safety
    /// See the module contract; `src` and `dst` are valid for `bytes` and do not overlap.
    unsafe fn copy(coop: Coop, dst: *mut u8, src: *const u8, bytes: usize, smem: *mut u8);

    /// `dst[i] = srcs[0][i] ⊕ srcs[1][i] ⊕ …` for `i < count`, in `f32`, sources in order.
    /// `dst` may equal one of the sources (each element is read before it is written).
    ///
    /// # Safety
    /// See the module contract; `1 <= srcs.len() <= MAX_SOURCES`, every pointer is valid for
    /// `count` elements.
    unsafe fn reduce<T: Element, O: ReduceOp>(
        coop: Coop,
        dst: *mut T,
        srcs: &[*const T],
        count: usize,
        smem: *mut u8,
    );
}

/// The best Atom for the architecture this crate is compiled for.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_100"))]
pub type Native = Sm100;
/// The best Atom for the architecture this crate is compiled for.
#[cfg(all(
    target_arch = "nvptx64",
    target_feature = "sm_90",
    not(target_feature = "sm_100")
))]
pub type Native = Sm90;
/// The best Atom for the architecture this crate is compiled for.
#[cfg(all(
    target_arch = "nvptx64",
    target_feature = "sm_80",
    not(target_feature = "sm_90")
))]
pub type Native = Sm80;
/// The best Atom for the architecture this crate is compiled for.
#[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_80")))]
pub type Native = Sm70;
/// The best Atom for the architecture this crate is compiled for.
#[cfg(not(target_arch = "nvptx64"))]
pub type Native = Host;

/// One element at a time, for the elements after the last whole vector.
///
/// # Safety
/// As [`Atom::reduce`], for elements `from..to`.
#[inline(always)]
pub(crate) unsafe fn reduce_scalar<T: Element, O: ReduceOp>(
    coop: Coop,
    dst: *mut T,
    srcs: &[*const T],
    from: usize,
    to: usize,
) {
    let mut i = from + coop.index as usize;
    while i < to {
        // SAFETY: `i < to <= count`; the caller guarantees every pointer for `count` elements.
        unsafe {
            let mut acc = srcs[0].add(i).read().to_f32();
            for src in &srcs[1..] {
                acc = O::combine(acc, src.add(i).read().to_f32());
            }
            dst.add(i).write(T::from_f32(acc));
        }
        i += coop.size as usize;
    }
}

/// One byte at a time, for the bytes after the last whole vector.
///
/// # Safety
/// As [`Atom::copy`], for bytes `from..to`.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(coop: Coop, dst: *mut u8, src: *const u8, from: usize, to: usize) {
    let mut i = from + coop.index as usize;
    while i < to {
        // SAFETY: `i < to <= bytes`; the caller guarantees both pointers for `bytes`.
        unsafe { dst.add(i).write(src.add(i).read()) };
        i += coop.size as usize;
    }
}

/// Up to [`MAX_SOURCES`] source addresses of a reduce, as a plain kernel argument (the same
/// bytes on host and device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ReduceSources {
    /// Source addresses; the first `count` are used.
    pub ptrs: [u64; MAX_SOURCES],
    /// Number of sources.
    pub count: u32,
}

impl ReduceSources {
    /// Sources from addresses; `None` for none or more than [`MAX_SOURCES`].
    ///
    /// ```
    /// use purlin_device::atom::ReduceSources;
    /// let s = ReduceSources::new(&[0x1000, 0x2000]).unwrap();
    /// assert_eq!(s.len(), 2);
    /// assert!(ReduceSources::new(&[]).is_none());
    /// ```
    pub fn new(addrs: &[u64]) -> Option<Self> {
        if addrs.is_empty() || addrs.len() > MAX_SOURCES {
            return None;
        }
        let mut ptrs = [0u64; MAX_SOURCES];
        ptrs[..addrs.len()].copy_from_slice(addrs);
        Some(Self {
            ptrs,
            count: addrs.len() as u32,
        })
    }

    /// Number of sources.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when there are no sources.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}
