//! The one list of the collectives, and what each means for its caller's buffers.

use crate::snac::CallKind;
use crate::snac::symmetric::PeerAccess;

/// The one list of the collectives. Each entry: the collective's [`CollectiveKind`] variant
/// and wire code, its short name (`purlin-bench`'s subcommand), its datapath (`copy`: moves
/// bytes; `reduce(entry_op)`: typed, with an operator, and `entry_op` its entry point for an
/// operator chosen at run time), and where it lives: the module of `purlin_device::collective`
/// (its own file) with its device entry point, whose name is also the collective's name
/// (`all_gather`, in kernel names, tables and output), and its [`Semantics`]. Expands the macro `$then` with the list, so every per-collective table —
/// [`CollectiveKind`], `purlin-kernels`' entry points, the CPU emulation's dispatch, the host's
/// kernel names and the benchmark's subcommands — is generated from here: a new collective is a
/// line here and its own files (the device entry point and semantics here, its public host
/// functions in `purlin::collective`).
///
/// ```
/// macro_rules! names {
///     ($($(#[$doc:meta])* $kind:ident = $code:literal, $short:literal,
///         $datapath:ident $(($op:ident))? => $file:ident::{$entry:ident, $semantics:ident};)*) => {
///         [$(stringify!($entry)),*]
///     };
/// }
/// assert_eq!(purlin_device::for_each_collective!(names)[0], "all_reduce");
/// ```
#[macro_export]
macro_rules! for_each_collective {
    ($then:ident) => {
        $then! {
            /// AllReduce: every rank's output is the reduction of every rank's input.
            AllReduce = 1, "ar", reduce(all_reduce_op) => all_reduce::{all_reduce, ALL_REDUCE};
            /// AllGather: every rank's output holds every rank's input, in rank order.
            AllGather = 2, "ag", copy => all_gather::{all_gather, ALL_GATHER};
            /// ReduceScatter: rank `r`'s output is the reduction of part `r` of every input.
            ReduceScatter = 3, "rs", reduce(reduce_scatter_op)
                => reduce_scatter::{reduce_scatter, REDUCE_SCATTER};
            /// AllToAll: part `q` of rank `p`'s input becomes part `p` of rank `q`'s output.
            AllToAll = 4, "a2a", copy => all_to_all::{all_to_all, ALL_TO_ALL};
            /// AllGatherV: AllGather with a count per rank.
            AllGatherV = 5, "agv", copy => all_gather::{all_gather_v, ALL_GATHER_V};
            /// ReduceScatterV: ReduceScatter with a count per rank.
            ReduceScatterV = 6, "rsv", reduce(reduce_scatter_v_op)
                => reduce_scatter::{reduce_scatter_v, REDUCE_SCATTER_V};
            /// AllToAllV: AllToAll with a count per pair of ranks.
            AllToAllV = 7, "a2av", copy => all_to_all::{all_to_all_v, ALL_TO_ALL_V};
        }
    };
}

/// `true` for the `reduce(..)` datapath of [`for_each_collective!`], `false` for `copy`.
macro_rules! reduces {
    (reduce($op:ident)) => {
        true
    };
    (copy) => {
        false
    };
}

/// Declares [`CollectiveKind`] from [`for_each_collective!`]'s list.
macro_rules! collective_kinds {
    ($($(#[$doc:meta])* $kind:ident = $code:literal, $short:literal,
        $datapath:ident $(($op:ident))? => $file:ident::{$entry:ident, $semantics:ident};)*) => {
        /// Which collective a call runs: its code in kernel arguments, fault records, the call
        /// digest and tuning tables.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum CollectiveKind {
            $($(#[$doc])* $kind = $code,)*
        }

        impl CollectiveKind {
            /// Every collective, in the list's order.
            pub const ALL: [Self; [$($code),*].len()] = [$(Self::$kind),*];

            /// The collective with this code, if any.
            pub const fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $($code => Some(Self::$kind),)*
                    _ => None,
                }
            }

            /// The name nccl-tests and the original print (`all_reduce`, ...), also its device
            /// entry point's.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$kind => stringify!($entry),)*
                }
            }

            /// The short name (`ar`, `a2av`, ...).
            pub const fn short_name(self) -> &'static str {
                match self {
                    $(Self::$kind => $short,)*
                }
            }

            /// True for the collectives that reduce (typed, with an operator).
            pub const fn reduces(self) -> bool {
                match self {
                    $(Self::$kind => reduces!($datapath $(($op))?),)*
                }
            }

            /// What the collective means for its caller's buffers.
            pub const fn semantics(self) -> Semantics {
                match self {
                    $(Self::$kind => super::$file::$semantics,)*
                }
            }
        }
    };
}

for_each_collective!(collective_kinds);

impl CollectiveKind {
    /// True for the variable-length collectives (sized by counts in device memory).
    ///
    /// ```
    /// use purlin_device::collective::CollectiveKind;
    /// assert!(CollectiveKind::AllToAllV.is_v() && !CollectiveKind::AllToAll.is_v());
    /// ```
    pub const fn is_v(self) -> bool {
        self.semantics().is_v()
    }

    /// The code SNAC carries into fault records and the call digest.
    #[inline(always)]
    pub const fn call(self) -> CallKind {
        CallKind(self as u8)
    }
}

/// How much of a call one rank's buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extent {
    /// This rank's part: the call's size (fixed-size forms) or this rank's count (V forms).
    Own,
    /// Every rank's part in rank order: `world ×` the size, or the sum of the counts.
    All,
}

/// How a call's `src` and `dst` may share memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InPlace {
    /// Not at all.
    Never,
    /// They may be the same buffer (`src == dst`).
    Same,
    /// `src` may be this rank's part of `dst`.
    InputIsOwnPart,
    /// `dst` may be this rank's part of `src`.
    OutputIsOwnPart,
}

/// What a collective means for its caller's buffers: what the argument checks (on the device
/// and the host) and the symmetric-buffer registry need to know of it.
///
/// ```
/// use purlin_device::collective::{CollectiveKind, Extent};
/// let s = CollectiveKind::AllGather.semantics();
/// assert_eq!((s.src, s.dst), (Extent::Own, Extent::All));
/// assert_eq!(CollectiveKind::AllToAllV.semantics().counts_per_rank, 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Semantics {
    /// V forms: counts per rank in the call's counts (1: one per rank; 2: what this rank sends
    /// to each rank, then what it receives from each, which every pair compares). 0 for a
    /// fixed-size collective.
    pub counts_per_rank: u32,
    /// How much of the call `src` holds (a V form's second half of counts sizes `dst`).
    pub src: Extent,
    /// How much of the call `dst` holds.
    pub dst: Extent,
    /// How `src` and `dst` may overlap.
    pub in_place: InPlace,
    /// Which peers' buffers one pass over symmetric buffers uses.
    pub peers: PeerAccess,
}

impl Semantics {
    /// Sized by counts in device memory (a V form).
    pub const fn is_v(&self) -> bool {
        self.counts_per_rank > 0
    }

    /// Whether each pair of ranks has counts of its own (each sender's count for a receiver
    /// is compared by that receiver) rather than every rank the same counts.
    pub const fn per_pair(&self) -> bool {
        self.counts_per_rank > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code, name and short name of the list names one collective, and `from_u32` reads
    /// every code back.
    #[test]
    fn the_list_names_each_collective_once() {
        for (i, a) in CollectiveKind::ALL.into_iter().enumerate() {
            assert_eq!(CollectiveKind::from_u32(a as u32), Some(a));
            assert_eq!(a.call().0 as u32, a as u32);
            for b in &CollectiveKind::ALL[i + 1..] {
                assert_ne!(a as u32, *b as u32);
                assert_ne!(a.name(), b.name());
                assert_ne!(a.short_name(), b.short_name());
            }
        }
        assert_eq!(CollectiveKind::from_u32(0), None);
    }

    /// What the host and the device read of each collective, as the collectives are defined.
    #[test]
    fn semantics_say_what_each_collective_is() {
        use CollectiveKind::*;
        let reduces = [AllReduce, ReduceScatter, ReduceScatterV];
        let v = [AllGatherV, ReduceScatterV, AllToAllV];
        for k in CollectiveKind::ALL {
            let s = k.semantics();
            assert_eq!(k.reduces(), reduces.contains(&k), "{k:?}");
            assert_eq!(k.is_v(), v.contains(&k), "{k:?}");
            assert_eq!(s.per_pair(), k == AllToAllV, "{k:?}");
            assert_eq!(
                s.peers == PeerAccess::ReadAnnounced,
                k == AllToAllV,
                "{k:?}"
            );
        }
        assert_eq!(AllReduce.semantics().in_place, InPlace::Same);
        assert_eq!(ReduceScatterV.semantics().src, Extent::All);
        assert_eq!(ReduceScatterV.semantics().dst, Extent::Own);
        assert_eq!(AllToAll.semantics().in_place, InPlace::Never);
    }
}
