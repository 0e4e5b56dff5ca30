//! The Atoms a host launch can choose: one per architecture, declared from the architecture
//! list, with the constants `purlin_device::atom` gives them.

use crate::ptx::Arch;
use purlin_device::atom::Atom;

/// Declares [`AtomKind`] from the architecture list (`purlin_device::for_each_arch!`): one
/// Atom per architecture, named as it is, whose constants come from `purlin_device::atom`.
macro_rules! atom_kinds {
    ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
        /// Which Atom a launch uses: each architecture's own (see `purlin_device::atom`).
        ///
        /// ```
        /// use purlin::atom::AtomKind;
        /// use purlin::ptx::Arch;
        /// assert_eq!(AtomKind::available_in(Arch::Sm90).count(), 3);
        /// assert_eq!(AtomKind::Sm80.threads(), 256);
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum AtomKind {
            $(
                #[doc = concat!("[`purlin_device::atom::", stringify!($arch), "`].")]
                $arch,
            )*
        }

        impl AtomKind {
            /// Every Atom.
            /// ```
            /// assert_eq!(purlin::atom::AtomKind::ALL.len(), 4);
            /// ```
            pub const ALL: [AtomKind; [$($cc),*].len()] = [$(Self::$arch),*];

            /// The oldest architecture whose PTX contains this Atom.
            /// ```
            /// use purlin::{atom::AtomKind, ptx::Arch};
            /// assert_eq!(AtomKind::Sm80.arch(), Arch::Sm80);
            /// ```
            pub const fn arch(self) -> Arch {
                match self {
                    $(Self::$arch => Arch::$arch,)*
                }
            }

            /// The native Atom of `arch`: what its collective kernels run.
            /// ```
            /// use purlin::{atom::AtomKind, ptx::Arch};
            /// assert_eq!(AtomKind::native(Arch::Sm90), AtomKind::Sm90);
            /// ```
            pub const fn native(arch: Arch) -> Self {
                match arch {
                    $(Arch::$arch => Self::$arch,)*
                }
            }

            /// Threads per block.
            /// ```
            /// assert!(purlin::atom::AtomKind::Sm70.threads() >= 32);
            /// ```
            pub const fn threads(self) -> u32 {
                match self {
                    $(Self::$arch => <purlin_device::atom::$arch as Atom>::THREADS,)*
                }
            }

            /// Dynamic shared memory per block.
            /// ```
            /// assert_eq!(purlin::atom::AtomKind::Sm70.smem_bytes(), 0);
            /// ```
            pub const fn smem_bytes(self) -> u32 {
                match self {
                    $(Self::$arch => <purlin_device::atom::$arch as Atom>::SMEM_BYTES,)*
                }
            }

            /// Dynamic shared memory a collective kernel running this Atom launches with
            /// (SNAC's scratch and the Atom's).
            /// ```
            /// let atom = purlin::atom::AtomKind::Sm90;
            /// assert!(atom.collective_smem_bytes() >= atom.smem_bytes());
            /// ```
            pub const fn collective_smem_bytes(self) -> u32 {
                match self {
                    $(Self::$arch => purlin_device::snac::smem_bytes::<purlin_device::atom::$arch>(),)*
                }
            }

            /// Short name (`sm70`, ...), as in kernel names.
            /// ```
            /// assert_eq!(purlin::atom::AtomKind::Sm90.name(), "sm90");
            /// ```
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$arch => <purlin_device::atom::$arch as Atom>::NAME,)*
                }
            }
        }
    };
}

purlin_device::for_each_arch!(atom_kinds);

impl AtomKind {
    /// The Atoms whose kernels the PTX of `arch` contains.
    /// ```
    /// use purlin::{atom::AtomKind, ptx::Arch};
    /// assert_eq!(AtomKind::available_in(Arch::Sm70).collect::<Vec<_>>(), [AtomKind::Sm70]);
    /// ```
    pub fn available_in(arch: Arch) -> impl Iterator<Item = AtomKind> {
        Self::ALL.into_iter().filter(move |a| a.arch() <= arch)
    }
}
