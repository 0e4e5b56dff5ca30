//! Adapts SNAC's byte ranges to the Atom contract (16-byte aligned pointers). Staging offsets
//! are always 16-byte aligned, but a caller's part need not be (an AllGather of 3 floats puts
//! rank 1's part at byte 12). When both ends share their alignment the Atom moves everything
//! after a short head; otherwise the widest words their relative alignment allows are moved
//! by the cooperating threads. Sizes that are multiples of 16 never leave the Atom.

use super::sync::Left;
use crate::atom::{Atom, MAX_DESTINATIONS, copy_bytes, reduce_scalar};
use crate::coop::Coop;
use crate::element::Element;
use crate::op::{ReduceOp, ReduceOpKind};

/// Copies `bytes` bytes, any alignment. Every thread of the block calls with the same values.
///
/// # Safety
/// Both ranges are valid for `bytes` and do not overlap; `smem` as for [`Atom::copy`].
// Out of line: one instance per Atom, shared by every call site and every kernel of a
// module, rather than the Atom's whole datapath inlined at each site.
#[inline(never)]
pub(crate) unsafe fn copy<A: Atom>(
    coop: Coop,
    dst: *mut u8,
    src: *const u8,
    bytes: usize,
    smem: *mut u8,
) {
    if bytes == 0 {
        return;
    }
    let (d, s) = (dst as usize, src as usize);
    if (d ^ s) & 15 == 0 {
        let head = ((16 - (d & 15)) & 15).min(bytes);
        // SAFETY: the head and the rest lie inside both ranges; after the head both are
        // 16-byte aligned.
        unsafe {
            copy_bytes(coop, &[dst], src, 0, head);
            A::copy(coop, dst.add(head), src.add(head), bytes - head, smem);
        }
    } else if (d ^ s) & 3 == 0 {
        let head = ((4 - (d & 3)) & 3).min(bytes);
        let words = (bytes - head) / 4;
        // SAFETY: every access lies inside both ranges; word accesses are 4-byte aligned.
        unsafe {
            copy_bytes(coop, &[dst], src, 0, head);
            let (dw, sw) = (dst.add(head) as *mut u32, src.add(head) as *const u32);
            let mut w = coop.index as usize;
            while w < words {
                dw.add(w).write(sw.add(w).read());
                w += coop.size as usize;
            }
            copy_bytes(coop, &[dst], src, head + words * 4, bytes);
        }
    } else {
        // SAFETY: the whole range, byte by byte.
        unsafe { copy_bytes(coop, &[dst], src, 0, bytes) };
    }
}

/// Copies `bytes` bytes from `src` into every destination, any alignment: one read of `src`
/// through [`Atom::copy_to_all`] when every destination shares `src`'s alignment (the peers'
/// copies of a symmetric buffer do), else [`copy`] to each in turn.
///
/// # Safety
/// As [`Atom::copy_to_all`], except alignment; `smem` as for [`Atom::copy`].
#[inline(never)]
pub(crate) unsafe fn copy_to_all<A: Atom>(
    coop: Coop,
    dsts: &[*mut u8],
    src: *const u8,
    bytes: usize,
    smem: *mut u8,
) {
    if bytes == 0 || dsts.is_empty() {
        return;
    }
    let s = src as usize;
    if dsts.iter().all(|d| (*d as usize ^ s) & 15 == 0) {
        let head = ((16 - (s & 15)) & 15).min(bytes);
        let mut after = [core::ptr::null_mut::<u8>(); MAX_DESTINATIONS];
        for (a, d) in after.iter_mut().zip(dsts) {
            *a = d.wrapping_add(head);
        }
        // SAFETY: the head and the rest lie inside every range; after the head all are
        // 16-byte aligned; at most MAX_DESTINATIONS destinations (the contract).
        unsafe {
            copy_bytes(coop, dsts, src, 0, head);
            A::copy_to_all(
                coop,
                &after[..dsts.len()],
                src.add(head),
                bytes - head,
                smem,
            );
        }
    } else {
        for dst in dsts {
            // SAFETY: forwarded contract, one destination at a time.
            unsafe { copy::<A>(coop, *dst, src, bytes, smem) };
        }
    }
}

/// Copies `bytes` bytes from `src` into every destination in the group's registers (no shared
/// memory, no barrier), so that part of a block may copy one range while the rest copies
/// another: the loads of both are then in flight together. Every destination shares `src`'s
/// alignment within 16 bytes (the caller checks); every thread of the group calls with the
/// same values.
///
/// # Safety
/// As [`Atom::copy_to_all`], except alignment.
#[inline(never)]
pub(crate) unsafe fn copy_to_all_in_registers(
    coop: Coop,
    dsts: &[*mut u8],
    src: *const u8,
    bytes: usize,
) {
    if bytes == 0 || dsts.is_empty() {
        return;
    }
    let head = ((16 - (src as usize & 15)) & 15).min(bytes);
    let mut after = [core::ptr::null_mut::<u8>(); MAX_DESTINATIONS];
    for (a, d) in after.iter_mut().zip(dsts) {
        *a = d.wrapping_add(head);
    }
    // SAFETY: the head and the rest lie inside every range; after the head every pointer is
    // 16-byte aligned (they share `src`'s alignment); at most MAX_DESTINATIONS destinations.
    unsafe {
        copy_bytes(coop, dsts, src, 0, head);
        crate::atom::register::copy_to_all(coop, &after[..dsts.len()], src.add(head), bytes - head);
    }
}

/// `dst = srcs[0] ⊕ … ⊕ srcs[n-1]` over `count` elements, in `f32`, sources in order, into
/// every destination: the Atom when every pointer is 16-byte aligned (staging always is; a
/// caller's `dst` should be), the element-wise path otherwise. Both give the same bits.
///
/// # Safety
/// As [`Atom::reduce_to_all`], except alignment (elements must be naturally aligned).
#[inline(always)]
pub(crate) unsafe fn reduce<A: Atom, T: Element, O: ReduceOp>(
    coop: Coop,
    dsts: &[*mut T],
    srcs: &[*const T],
    count: usize,
    smem: *mut u8,
) {
    if count == 0 {
        return;
    }
    let mut misaligned = 0;
    for d in dsts {
        misaligned |= *d as usize & 15;
    }
    for s in srcs {
        misaligned |= *s as usize & 15;
    }
    if misaligned == 0 {
        // SAFETY: forwarded contract, all aligned.
        unsafe { A::reduce_to_all::<T, O>(coop, dsts, srcs, count, smem) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { reduce_scalar::<T, O>(coop, dsts, srcs, 0, count) }
    }
}

/// A reduce operator as the collectives hold it: a type (`Static<O>`, for calls whose operator
/// is known at compile time) or a run-time value ([`ReduceOpKind`], a `match` over the four
/// static operators at each use). Either way every call is static: no function pointers, which
/// `ptxas` cannot prune and which make it size every kernel for the largest target.
pub(crate) trait Operator: Copy {
    /// Which operator this is (for the call digest).
    fn kind(self) -> ReduceOpKind;

    /// `acc[i] ⊕= x[i]` for every lane, in `f32`.
    fn lanes<T: Element>(self, acc: &mut T::Lanes, x: &T::Lanes);

    /// [`reduce_bytes`] with this operator.
    ///
    /// # Safety
    /// As [`reduce_bytes`].
    unsafe fn reduce<A: Atom, T: Element>(
        self,
        coop: Coop,
        dsts: &[*mut u8],
        srcs: &[*const u8],
        bytes: u64,
        smem: *mut u8,
    );
}

/// The operator `O`, known at compile time.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Static<O>(core::marker::PhantomData<O>);

impl<O: ReduceOp> Static<O> {
    pub(crate) const NEW: Self = Self(core::marker::PhantomData);
}

impl<O: ReduceOp> Operator for Static<O> {
    #[inline(always)]
    fn kind(self) -> ReduceOpKind {
        O::KIND
    }

    #[inline(always)]
    fn lanes<T: Element>(self, acc: &mut T::Lanes, x: &T::Lanes) {
        for (a, b) in acc.as_mut().iter_mut().zip(x.as_ref()) {
            *a = O::combine(*a, *b);
        }
    }

    #[inline(always)]
    unsafe fn reduce<A: Atom, T: Element>(
        self,
        coop: Coop,
        dsts: &[*mut u8],
        srcs: &[*const u8],
        bytes: u64,
        smem: *mut u8,
    ) {
        // SAFETY: forwarded contract.
        unsafe { reduce_bytes::<A, T, O>(coop, dsts, srcs, bytes, smem) }
    }
}

/// Runs `$e` with `$o` bound to the static operator for the run-time `$op`.
macro_rules! by_op {
    ($op:expr, $o:ident => $e:expr) => {
        match $op {
            $crate::op::ReduceOpKind::Sum => {
                type $o = $crate::op::Sum;
                $e
            }
            $crate::op::ReduceOpKind::Max => {
                type $o = $crate::op::Max;
                $e
            }
            $crate::op::ReduceOpKind::Min => {
                type $o = $crate::op::Min;
                $e
            }
            $crate::op::ReduceOpKind::Prod => {
                type $o = $crate::op::Prod;
                $e
            }
        }
    };
}
pub(crate) use by_op;

impl Operator for ReduceOpKind {
    #[inline(always)]
    fn kind(self) -> ReduceOpKind {
        self
    }

    #[inline(always)]
    fn lanes<T: Element>(self, acc: &mut T::Lanes, x: &T::Lanes) {
        by_op!(self, O => Static::<O>::NEW.lanes::<T>(acc, x))
    }

    #[inline(always)]
    unsafe fn reduce<A: Atom, T: Element>(
        self,
        coop: Coop,
        dsts: &[*mut u8],
        srcs: &[*const u8],
        bytes: u64,
        smem: *mut u8,
    ) {
        // SAFETY (every arm): forwarded contract.
        by_op!(self, O => unsafe { reduce_bytes::<A, T, O>(coop, dsts, srcs, bytes, smem) })
    }
}

/// What a collective reduces chunks with: [`Typed`] for a reduction, [`NoReduce`] for the copy
/// collectives.
pub(crate) trait Reducer: Copy {
    /// `dst = srcs[0] ⊕ … ⊕ srcs[n-1]` over `bytes` bytes of elements into every destination,
    /// as [`reduce`].
    ///
    /// # Safety
    /// As [`reduce`], with `bytes` a multiple of the element size.
    unsafe fn reduce<A: Atom>(
        self,
        coop: Coop,
        dsts: &[*mut u8],
        srcs: &[*const u8],
        bytes: u64,
        smem: *mut u8,
    );

    /// The packet paths' running reduction of one 16-byte unit, in `f32` registers.
    type Acc: Copy + Default;

    /// Folds source `i`'s `unit` into `acc`, sources in order from 0 (`first`: source 0, which
    /// starts it).
    fn fold_unit(self, acc: &mut Self::Acc, first: bool, unit: u128);

    /// The reduced unit, rounded to the element type once.
    fn unit_of(self, acc: Self::Acc) -> u128;

    /// One 16-byte unit reduced over `n` sources in order (`unit(i)` fetches source `i`'s),
    /// in `f32`, rounded once: the packet paths' datapath, in registers.
    #[inline(always)]
    fn reduce_unit<F: FnMut(u32) -> Result<u128, Left>>(
        self,
        n: u32,
        mut unit: F,
    ) -> Result<u128, Left> {
        let mut acc = Self::Acc::default();
        for i in 0..n {
            self.fold_unit(&mut acc, i == 0, unit(i)?);
        }
        Ok(self.unit_of(acc))
    }
}

/// The reduction of elements `T` with operator `P`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Typed<T, P> {
    pub(crate) op: P,
    _elem: core::marker::PhantomData<T>,
}

impl<T: Element, P: Operator> Typed<T, P> {
    #[inline(always)]
    pub(crate) const fn new(op: P) -> Self {
        Self {
            op,
            _elem: core::marker::PhantomData,
        }
    }
}

impl<T: Element, P: Operator> Reducer for Typed<T, P> {
    #[inline(always)]
    unsafe fn reduce<A: Atom>(
        self,
        coop: Coop,
        dsts: &[*mut u8],
        srcs: &[*const u8],
        bytes: u64,
        smem: *mut u8,
    ) {
        // SAFETY: forwarded contract.
        unsafe { self.op.reduce::<A, T>(coop, dsts, srcs, bytes, smem) }
    }

    type Acc = T::Lanes;

    #[inline(always)]
    fn fold_unit(self, acc: &mut T::Lanes, first: bool, unit: u128) {
        if first {
            *acc = T::unpack(unit);
        } else {
            self.op.lanes::<T>(acc, &T::unpack(unit));
        }
    }

    #[inline(always)]
    fn unit_of(self, acc: T::Lanes) -> u128 {
        T::pack(acc)
    }
}

/// No reduction: the copy collectives build no reducing stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoReduce;

impl Reducer for NoReduce {
    #[inline(always)]
    unsafe fn reduce<A: Atom>(self, _: Coop, _: &[*mut u8], _: &[*const u8], _: u64, _: *mut u8) {
        crate::arch::trap()
    }

    type Acc = ();

    fn fold_unit(self, _: &mut (), _: bool, _: u128) {
        crate::arch::trap()
    }

    fn unit_of(self, _: ()) -> u128 {
        crate::arch::trap()
    }
}

/// [`reduce`] over byte pointers: one out-of-line instance per (Atom, type, operator), shared
/// by the call sites of one collective.
///
/// # Safety
/// As [`reduce`], with `bytes` a multiple of `size_of::<T>()`.
#[inline(never)]
pub(crate) unsafe fn reduce_bytes<A: Atom, T: Element, O: ReduceOp>(
    coop: Coop,
    dsts: &[*mut u8],
    srcs: &[*const u8],
    bytes: u64,
    smem: *mut u8,
) {
    // SAFETY: `*const u8` and `*const T`, `*mut u8` and `*mut T` have the same layout.
    let (typed_dsts, typed_srcs) = unsafe {
        (
            core::slice::from_raw_parts(dsts.as_ptr() as *const *mut T, dsts.len()),
            core::slice::from_raw_parts(srcs.as_ptr() as *const *const T, srcs.len()),
        )
    };
    let count = bytes as usize / core::mem::size_of::<T>();
    // SAFETY: forwarded contract.
    unsafe { reduce::<A, T, O>(coop, typed_dsts, typed_srcs, count, smem) }
}
