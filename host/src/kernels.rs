//! Purlin's embedded kernels as the host sees them: the entry point of every call, and the
//! launch constants the kernels export. It depends on the PTX and the device crate only, so
//! every part of the host (the GPU handle that fetches the kernels, the collectives that
//! launch them) can use it.

use crate::atom_kind::AtomKind;
use crate::ptx::{self, Arch};
use purlin_device::collective::CollectiveKind;
use purlin_device::element::DataType;

/// The purlin-kernels entry point of [`Window::wait_on_stream`](crate::p2p::Window::wait_on_stream).
pub(crate) const WINDOW_WAIT_KERNEL: &str = "purlin_window_wait";

/// Threads and dynamic shared memory per block of a kernel that runs collectives with the
/// native Atom of `arch`: what Purlin's own kernels export (`PURLIN_COLLECTIVE_THREADS` /
/// `PURLIN_COLLECTIVE_SMEM_BYTES` in `purlin-kernels`, read from the embedded PTX), and what
/// yours needs when you fuse a collective into your kernel (add your own shared memory after
/// it). A block larger than this is refused by the collectives on the device.
///
/// ```
/// use purlin::collective::kernel_shape;
/// let (threads, smem) = kernel_shape(purlin::ptx::Arch::Sm90);
/// assert_eq!(threads, 256);
/// assert!(smem >= 64 << 10);
/// ```
pub fn kernel_shape(arch: Arch) -> (u32, u32) {
    let text = ptx::kernels(arch).text();
    let exported = (
        ptx::exported_u32(text, "PURLIN_COLLECTIVE_THREADS"),
        ptx::exported_u32(text, "PURLIN_COLLECTIVE_SMEM_BYTES"),
    );
    match exported {
        (Some(threads), Some(smem)) => (threads, smem),
        // Every embedded PTX exports both (a unit test checks); derive them if one did not.
        _ => derived_shape(arch),
    }
}

/// [`kernel_shape`] as the Atom constants give it (what the kernels export, recomputed).
fn derived_shape(arch: Arch) -> (u32, u32) {
    let atom = AtomKind::native(arch);
    (atom.threads().min(256), atom.collective_smem_bytes())
}

/// The most threads per block a kernel that calls a collective may have on `arch`: what its
/// native Atom's shared memory is laid out for.
pub fn atom_threads(arch: Arch) -> u32 {
    AtomKind::native(arch).threads()
}

/// Every purlin-kernels entry point a call (or a window's stream wait) can launch, each once.
pub(crate) fn kernel_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = CollectiveKind::ALL
        .into_iter()
        .flat_map(|kind| {
            DataType::ALL.into_iter().flat_map(move |dtype| {
                [false, true].map(|latency| kernel_name(kind, dtype, latency))
            })
        })
        .collect();
    names.push(WINDOW_WAIT_KERNEL);
    names.sort_unstable();
    names.dedup();
    names
}

/// The purlin-kernels entry point of a call: the whole collective, or (`latency`) the build of
/// only its latency paths that lean calls launch. Generated from the collectives' list as the
/// kernels are (`purlin_<collective>[_latency][_<type>]`, the type for reductions only).
pub(crate) fn kernel_name(kind: CollectiveKind, dtype: DataType, latency: bool) -> &'static str {
    macro_rules! typed {
        ($prefix:expr) => {
            match dtype {
                DataType::F32 => concat!($prefix, "_float"),
                DataType::F16 => concat!($prefix, "_half"),
                DataType::Bf16 => concat!($prefix, "_bfloat16"),
                DataType::E4m3 => concat!($prefix, "_f8e4m3"),
                DataType::E5m2 => concat!($prefix, "_f8e5m2"),
            }
        };
    }
    macro_rules! build {
        (reduce, $name:expr) => {
            typed!($name)
        };
        (copy, $name:expr) => {
            $name
        };
    }
    macro_rules! names {
        ($($(#[$doc:meta])* $kind:ident = $code:literal, $short:literal,
            $datapath:ident $(($op:ident))? => $file:ident::{$entry:ident, $semantics:ident};)*) => {
            match (kind, latency) {
                $(
                    (CollectiveKind::$kind, false) => {
                        build!($datapath, concat!("purlin_", stringify!($entry)))
                    }
                    (CollectiveKind::$kind, true) => {
                        build!($datapath, concat!("purlin_", stringify!($entry), "_latency"))
                    }
                )*
            }
        };
    }
    purlin_device::for_each_collective!(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel a call can launch — each collective, type and build (whole, latency-only) —
    /// is an entry point of every embedded PTX.
    #[test]
    fn every_launched_kernel_is_in_every_embedded_ptx() {
        for arch in Arch::ALL {
            let ptx = crate::ptx::kernels(arch).text();
            for kind in CollectiveKind::ALL {
                for dtype in DataType::ALL {
                    for latency in [false, true] {
                        let name = kernel_name(kind, dtype, latency);
                        assert!(
                            ptx.contains(&format!(".entry {name}(")),
                            "{arch}: no {name}"
                        );
                    }
                }
            }
            let name = WINDOW_WAIT_KERNEL;
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: no {name}"
            );
        }
    }

    /// The launch constants the kernels export are in every embedded PTX, and equal what the
    /// Atoms say.
    #[test]
    fn every_embedded_ptx_exports_its_launch_shape() {
        for arch in Arch::ALL {
            let ptx = crate::ptx::kernels(arch).text();
            assert!(crate::ptx::exported_u32(ptx, "PURLIN_COLLECTIVE_THREADS").is_some());
            assert!(crate::ptx::exported_u32(ptx, "PURLIN_COLLECTIVE_SMEM_BYTES").is_some());
            assert_eq!(kernel_shape(arch), derived_shape(arch), "{arch}");
        }
    }
}
