//! # purlin-device
//!
//! The device side of Purlin: copy and N-to-1 reduce primitives tuned per GPU architecture
//! ([`atom`]), and the single-kernel collectives built on them, callable from inside your own
//! Rust GPU kernels.
//!
//! The crate is `#![no_std]` and builds for `nvptx64-nvidia-cuda` and for the host. On the host
//! the same code runs on CPU threads (a block is one thread), which is how the protocol is
//! tested without a GPU.
//!
//! Layers, one direction of knowledge: [`collective`]s, each a pair of [`layout`]s (what
//! moves) → [`snac`] (where and when) → [`atom`] (how bytes move on one architecture) →
//! [`arch`] (the only inline PTX). On the host, [`emulation`] runs the same device code with
//! one CPU thread per (rank, block).
//!
//! ```
//! use purlin_device::atom::{Atom, Native};
//! use purlin_device::coop::Coop;
//! let src = [7u128; 4];
//! let mut dst = [0u128; 4];
//! // SAFETY: both buffers are 64 aligned bytes; `Native` on the host needs no shared memory.
//! unsafe { Native::copy(Coop::block(), dst.as_mut_ptr().cast(), src.as_ptr().cast(), 64, core::ptr::null_mut()) };
//! assert_eq!(dst, src);
//! ```

#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        asm_experimental_arch,
        stdarch_nvptx,
        allow_internal_unstable,
        link_llvm_intrinsics
    )
)]
#![warn(missing_docs)]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

/// The `#[panic_handler]` a `no_std` crate of GPU kernels needs, with the `panic-trap`
/// feature: a panic traps, which ends the kernel with an error its host sees at the next
/// synchronise. Leave the feature off to supply your own.
#[cfg(all(target_arch = "nvptx64", feature = "panic-trap"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    arch::trap()
}

/// Declares a `#[repr(u32)]` enum that crosses the host-device boundary as its `u32` value
/// (kernel arguments, fault records, table keys), with `ALL` (every variant, in declaration
/// order) and `from_u32` (the variant with a value, if any), so none of them can fall out of
/// step with the variants.
///
/// Two optional items may follow the enum, in this order:
/// - `pub const fn from_u32(v: u32) -> Self else Fallback;` (with its rustdoc): `from_u32`
///   returns `Fallback` for unknown values instead of an `Option`.
/// - `pub const fn name(self) -> &'static str;` (any name, with its rustdoc): every variant is
///   then written `Variant = value => "text"`, and the function returns the variant's text.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal $(=> $text:literal)?, )+
        }
        $($methods:tt)*
    ) => {
        $(#[$meta])*
        #[repr(u32)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [Self; [$($value),+].len()] = [$(Self::$variant),+];

            wire_enum!(@from_u32 [$($variant = $value $(=> $text)?),+] $($methods)*);
        }
    };
    (
        @from_u32 [$($variant:ident = $value:literal $(=> $text:literal)?),+]
        $(#[$doc:meta])* pub const fn from_u32(v: u32) -> Self else $fallback:ident;
        $($rest:tt)*
    ) => {
        $(#[$doc])*
        pub const fn from_u32(v: u32) -> Self {
            match v {
                $( $value => Self::$variant, )+
                _ => Self::$fallback,
            }
        }

        wire_enum!(@text [$($variant = $value $(=> $text)?),+] $($rest)*);
    };
    (@from_u32 [$($variant:ident = $value:literal $(=> $text:literal)?),+] $($rest:tt)*) => {
        /// The variant with this `repr(u32)` value, if any.
        pub const fn from_u32(v: u32) -> Option<Self> {
            match v {
                $( $value => Some(Self::$variant), )+
                _ => None,
            }
        }

        wire_enum!(@text [$($variant = $value $(=> $text)?),+] $($rest)*);
    };
    (
        @text [$($variant:ident = $value:literal => $text:literal),+]
        $(#[$doc:meta])* pub const fn $text_fn:ident(self) -> &'static str;
    ) => {
        $(#[$doc])*
        pub const fn $text_fn(self) -> &'static str {
            match self {
                $( Self::$variant => $text, )+
            }
        }
    };
    (@text [$($variant:ident = $value:literal),+]) => {};
}

/// Runs `$body` once for each index literal `$n`, written out, with `$i` bound to it as a `$t`:
/// every index is a constant, so arrays indexed by it stay in registers (an array indexed at run
/// time lives in local memory, which made gathering slower than waiting in turn, and LLVM does
/// not unroll loops whose body holds a reduction's four operators). The packet paths wrap it
/// with their count's literals (`snac::latency`'s `in_flight!`, AllReduce two-shot's `batch!`).
macro_rules! unrolled {
    ([$($n:literal)*], $i:ident: $t:ty => $body:block) => {{
        $({
            let $i: $t = $n;
            $body
        })*
    }};
}

pub mod arch;
pub mod atom;
pub mod collective;
pub mod context;
pub mod coop;
pub mod element;
#[cfg(not(target_arch = "nvptx64"))]
pub mod emulation;
pub mod grid;
pub mod layout;
pub mod op;
pub mod partition;
pub mod snac;

pub use half;
