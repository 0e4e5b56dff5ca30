//! Reduce operators. Every reduction accumulates in `f32`, combining sources in index order,
//! so a reduce is bitwise repeatable.
//!
//! ```
//! use purlin_device::op::{Max, ReduceOp, ReduceOpKind, Sum};
//! assert_eq!(Sum::combine(1.0, 2.0), 3.0);
//! assert_eq!(Max::combine(1.0, 2.0), 2.0);
//! assert_eq!(Sum::KIND, ReduceOpKind::Sum);
//! ```

wire_enum! {
    /// A reduce operator as a run-time value.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum ReduceOpKind {
        /// a + b
        Sum = 0 => "sum",
        /// max(a, b): a NaN loses to a number; between +0 and -0 the earlier source wins
        Max = 1 => "max",
        /// min(a, b): a NaN loses to a number; between +0 and -0 the earlier source wins
        Min = 2 => "min",
        /// a × b
        Prod = 3 => "prod",
    }

    /// The name nccl-tests prints.
    pub const fn name(self) -> &'static str;
}

/// A reduce operator as a type, so the datapath is specialised for it.
pub trait ReduceOp: Copy + Send + Sync + 'static {
    /// The run-time tag of this operator.
    const KIND: ReduceOpKind;
    /// Combines the accumulator `acc` with the next source's value `x`.
    fn combine(acc: f32, x: f32) -> f32;
}

/// Sum.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sum;
/// Maximum.
#[derive(Clone, Copy, Debug, Default)]
pub struct Max;
/// Minimum.
#[derive(Clone, Copy, Debug, Default)]
pub struct Min;
/// Product.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prod;

impl ReduceOp for Sum {
    const KIND: ReduceOpKind = ReduceOpKind::Sum;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        acc + x
    }
}

// Max and Min are a compare and a select rather than `f32::max`/`min`, whose result for +0
// against -0 is unspecified and differs between the GPU's `max.f32` and CPUs: a compare and a
// select give the same bits everywhere, so reductions stay bitwise repeatable.
impl ReduceOp for Max {
    const KIND: ReduceOpKind = ReduceOpKind::Max;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        if x > acc || acc.is_nan() { x } else { acc }
    }
}

impl ReduceOp for Min {
    const KIND: ReduceOpKind = ReduceOpKind::Min;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        if x < acc || acc.is_nan() { x } else { acc }
    }
}

impl ReduceOp for Prod {
    const KIND: ReduceOpKind = ReduceOpKind::Prod;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        acc * x
    }
}

/// Code generic over an element type and a reduce operator, run for a run-time pair by
/// [`dispatch`].
pub trait TypedVisitor {
    /// What the visit returns.
    type Output;
    /// Runs the code for `T` and `O`.
    fn visit<T: crate::element::Element, O: ReduceOp>(self) -> Self::Output;
}

/// Runs `visitor` specialised for the run-time `dtype` and `op`.
///
/// ```
/// use purlin_device::element::{DataType, Element};
/// use purlin_device::op::{dispatch, ReduceOp, ReduceOpKind, TypedVisitor};
/// struct Size;
/// impl TypedVisitor for Size {
///     type Output = usize;
///     fn visit<T: Element, O: ReduceOp>(self) -> usize { core::mem::size_of::<T>() }
/// }
/// assert_eq!(dispatch(DataType::Bf16, ReduceOpKind::Max, Size), 2);
/// ```
#[inline(always)]
pub fn dispatch<V: TypedVisitor>(
    dtype: crate::element::DataType,
    op: ReduceOpKind,
    visitor: V,
) -> V::Output {
    use crate::element::{DataType, E4m3, E5m2};
    use half::{bf16, f16};
    macro_rules! by_op {
        ($t:ty) => {
            match op {
                ReduceOpKind::Sum => visitor.visit::<$t, Sum>(),
                ReduceOpKind::Max => visitor.visit::<$t, Max>(),
                ReduceOpKind::Min => visitor.visit::<$t, Min>(),
                ReduceOpKind::Prod => visitor.visit::<$t, Prod>(),
            }
        };
    }
    match dtype {
        DataType::F32 => by_op!(f32),
        DataType::F16 => by_op!(f16),
        DataType::Bf16 => by_op!(bf16),
        DataType::E4m3 => by_op!(E4m3),
        DataType::E5m2 => by_op!(E5m2),
    }
}
