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
/// and the datapath functions its `copy_to_all` and `reduce_to_all` forward to (the bodies
/// name the parameters they use and the element and operator types `T` and `O`). The
/// one-destination `copy` and `reduce` are those with one destination.
macro_rules! atom {
    (
        $(#[$meta:meta])*
        $atom:ty {
            name: $name:literal,
            $(#[$threads_meta:meta])*
            threads: $threads:expr,
            smem: $smem:expr,
            copy_to_all($coop:ident, $dsts:ident, $src:ident, $bytes:ident, $csmem:ident) => $copy:expr,
            reduce_to_all<$t:ident, $o:ident>(
                $rcoop:ident, $rdsts:ident, $srcs:ident, $count:ident, $rsmem:ident
            ) => $reduce:expr
            $(, after_wait() => $after_wait:expr)?
            $(, await_prior_grids() => $await_prior:expr, launch_dependents() => $launch:expr)?
            $(,)?
        }
    ) => {
        $(#[$meta])*
        impl $crate::atom::Atom for $atom {
            const NAME: &'static str = $name;
            $(#[$threads_meta])*
            const THREADS: u32 = $threads;
            const SMEM_BYTES: u32 = $smem;

            $(
                #[inline(always)]
                fn after_wait() {
                    $after_wait
                }
            )?

            $(
                #[inline(always)]
                fn await_prior_grids() {
                    $await_prior
                }

                #[inline(always)]
                fn launch_dependents() {
                    $launch
                }
            )?

            #[inline(always)]
            unsafe fn copy(
                coop: $crate::coop::Coop,
                dst: *mut u8,
                src: *const u8,
                bytes: usize,
                smem: *mut u8,
            ) {
                // SAFETY: forwarded contract, one destination.
                unsafe { Self::copy_to_all(coop, &[dst], src, bytes, smem) }
            }

            #[inline(always)]
            unsafe fn reduce<T: $crate::element::Element, O: $crate::op::ReduceOp>(
                coop: $crate::coop::Coop,
                dst: *mut T,
                srcs: &[*const T],
                count: usize,
                smem: *mut u8,
            ) {
                // SAFETY: forwarded contract, one destination.
                unsafe { Self::reduce_to_all::<T, O>(coop, &[dst], srcs, count, smem) }
            }

            #[inline(always)]
            unsafe fn copy_to_all(
                $coop: $crate::coop::Coop,
                $dsts: &[*mut u8],
                $src: *const u8,
                $bytes: usize,
                $csmem: *mut u8,
            ) {
                // SAFETY: forwarded contract.
                unsafe { $copy }
            }

            #[inline(always)]
            unsafe fn reduce_to_all<$t: $crate::element::Element, $o: $crate::op::ReduceOp>(
                $rcoop: $crate::coop::Coop,
                $rdsts: &[*mut $t],
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

pub(crate) mod register;
pub use register::Host;

/// The one list of the architectures Purlin builds for, oldest first. Each entry: the
/// architecture's name, which is also its Atom's (`Sm90`), the module of that Atom (`sm90`, also
/// the Atom's short name in kernel names), its `-Ctarget-cpu` name and target feature
/// (`"sm_90"`), its compute capability and the PTX version its instructions need. Expands the
/// macro `$then` with the list, so the per-architecture tables — this crate's Atom modules and
/// [`Native`], `purlin_builder::Arch`, the host's Atom kinds and embedded PTX — are generated
/// from here: a new architecture is a line here, its Atom's file, and its line of grid-wide
/// Atom kernels in `purlin-atom-kernels`.
///
/// ```
/// macro_rules! count {
///     ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
///         [$($cc),*].len()
///     };
/// }
/// assert_eq!(purlin_device::for_each_arch!(count), 4);
/// ```
#[macro_export]
macro_rules! for_each_arch {
    ($then:ident) => {
        $then! {
            /// Volta (compute capability 7.0).
            Sm70 in sm70 = "sm_70", 70, None;
            /// Ampere (8.0).
            Sm80 in sm80 = "sm_80", 80, None;
            /// Hopper (9.0).
            Sm90 in sm90 = "sm_90", 90, Some("+ptx80");
            /// Blackwell (10.0).
            Sm100 in sm100 = "sm_100", 100, Some("+ptx86");
        }
    };
}

/// Every architecture's Atom module, compiled on the host and for the architectures that can run
/// it.
macro_rules! atom_modules {
    ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
        $(
            #[cfg(any(not(target_arch = "nvptx64"), target_feature = $name))]
            mod $module;
            #[cfg(any(not(target_arch = "nvptx64"), target_feature = $name))]
            pub use $module::$arch;
        )*
    };
}

for_each_arch!(atom_modules);

/// The most sources one reduce takes (the most ranks Purlin supports).
pub const MAX_SOURCES: usize = 16;

/// The most destinations one [`Atom::copy_to_all`] or [`Atom::reduce_to_all`] writes (one per
/// rank).
pub const MAX_DESTINATIONS: usize = MAX_SOURCES;

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

    /// Called by thread 0 of a block after it waited for a peer's signal and before the block
    /// copies what the signal announced (or overwrites what the peer was done reading): an
    /// Atom whose copies thread 0 issues through another memory proxy orders them after the
    /// acquire here. Provided: nothing (copies through registers and `cp.async` need no
    /// fence).
    ///
    /// ```
    /// use purlin_device::atom::{Atom, Host};
    /// Host::after_wait();
    /// ```
    #[inline(always)]
    fn after_wait() {}

    /// Called by every thread of a collective before it touches memory that the work before
    /// it on its stream may write: waits until that work has finished and its writes are
    /// visible. An Atom whose architecture lets a launch start while the one before it runs
    /// (a programmatic dependent launch) waits here; what comes before reads only the
    /// launch's parameters. Provided: nothing (a launch starts after the work before it).
    ///
    /// ```
    /// use purlin_device::atom::{Atom, Host};
    /// Host::await_prior_grids();
    /// ```
    #[inline(always)]
    fn await_prior_grids() {}

    /// Called by every thread of a collective after [`await_prior_grids`](Self::await_prior_grids)
    /// when the plan allows it ([`Plan::launch_dependents`](crate::snac::Plan::launch_dependents)):
    /// lets the next launch on the stream, if launched as a programmatic dependent, be
    /// scheduled now, to wait in its own `await_prior_grids` instead of starting after this
    /// grid ends. Provided: nothing.
    ///
    /// ```
    /// use purlin_device::atom::{Atom, Host};
    /// Host::launch_dependents();
    /// ```
    #[inline(always)]
    fn launch_dependents() {}

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

    /// Copies `bytes` bytes from `src` to every range of `dsts`: each byte is read once and
    /// stored `dsts.len()` times (an AllGather pushing its part into every rank's output).
    /// Provided: the register datapath, which needs no shared memory; Purlin's Atoms use
    /// their own.
    ///
    /// ```
    /// use purlin_device::atom::{Atom, Host};
    /// use purlin_device::coop::Coop;
    /// #[repr(align(16))]
    /// struct Aligned([u8; 40]);
    /// let src = Aligned([7; 40]);
    /// let (mut a, mut b) = (Aligned([0; 40]), Aligned([0; 40]));
    /// // SAFETY: the three buffers hold 40 aligned bytes each and do not overlap.
    /// unsafe {
    ///     Host::copy_to_all(Coop::block(), &[a.0.as_mut_ptr(), b.0.as_mut_ptr()], src.0.as_ptr(), 40, core::ptr::null_mut())
    /// };
    /// assert_eq!((a.0, b.0), ([7; 40], [7; 40]));
    /// ```
    ///
    /// # Safety
    /// See the module contract; `1 <= dsts.len() <= MAX_DESTINATIONS`; `src` and every
    /// destination are valid for `bytes`, and no two of them overlap.
    #[inline(always)]
    unsafe fn copy_to_all(
        coop: Coop,
        dsts: &[*mut u8],
        src: *const u8,
        bytes: usize,
        _smem: *mut u8,
    ) {
        // SAFETY: forwarded contract; the register datapath needs no shared memory.
        unsafe { register::copy_to_all(coop, dsts, src, bytes) }
    }

    /// [`Atom::reduce`] stored into every range of `dsts` (an AllReduce storing its shard into
    /// every rank's output): the sources are read once. Any destination may equal one of the
    /// sources (each element of every source is read before that element of any destination is
    /// written). Provided: the register datapath; Purlin's Atoms use their own.
    ///
    /// # Safety
    /// As [`Atom::reduce`]; `1 <= dsts.len() <= MAX_DESTINATIONS`, every destination is valid
    /// for `count` elements and no two destinations overlap.
    #[inline(always)]
    unsafe fn reduce_to_all<T: Element, O: ReduceOp>(
        coop: Coop,
        dsts: &[*mut T],
        srcs: &[*const T],
        count: usize,
        _smem: *mut u8,
    ) {
        // SAFETY: forwarded contract; the register datapath needs no shared memory.
        unsafe { register::reduce_to_all::<T, O>(coop, dsts, srcs, count) }
    }
}

/// [`Native`] on the GPU: the newest architecture whose target feature the build has.
macro_rules! native_atom {
    ($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr; $($later:tt)*) => {
        native_atom!(@is $arch $name; $($later)*);
        native_atom!($($later)*);
    };
    () => {};
    (@is $arch:ident $name:literal;
        $($(#[$d:meta])* $l:ident in $lm:ident = $later:literal, $lcc:literal, $lptx:expr;)*) => {
        /// The best Atom for the architecture this crate is compiled for.
        #[cfg(all(
            target_arch = "nvptx64",
            target_feature = $name,
            not(any($(target_feature = $later),*))
        ))]
        pub type Native = $arch;
    };
}

for_each_arch!(native_atom);
/// The best Atom for the architecture this crate is compiled for.
#[cfg(not(target_arch = "nvptx64"))]
pub type Native = Host;

/// One element at a time, for the elements after the last whole vector, into every
/// destination.
///
/// # Safety
/// As [`Atom::reduce_to_all`], for elements `from..to`.
#[inline(always)]
pub(crate) unsafe fn reduce_scalar<T: Element, O: ReduceOp>(
    coop: Coop,
    dsts: &[*mut T],
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
            let value = T::from_f32(acc);
            for dst in dsts {
                dst.add(i).write(value);
            }
        }
        i += coop.size as usize;
    }
}

/// One byte at a time, for the bytes after the last whole vector, into every destination.
///
/// # Safety
/// As [`Atom::copy_to_all`], for bytes `from..to`.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(
    coop: Coop,
    dsts: &[*mut u8],
    src: *const u8,
    from: usize,
    to: usize,
) {
    let mut i = from + coop.index as usize;
    while i < to {
        // SAFETY: `i < to <= bytes`; the caller guarantees every pointer for `bytes`.
        unsafe {
            let byte = src.add(i).read();
            for dst in dsts {
                dst.add(i).write(byte);
            }
        }
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
