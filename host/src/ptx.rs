//! The PTX of Purlin's kernels, built for every [`Arch`] and embedded (compressed) in this
//! crate, and the choice of one by compute capability. Two modules per architecture: the
//! collectives ([`kernels`]), which every program loads, and the grid-wide Atom kernels of the
//! tests and benchmarks ([`atom_kernels`]), loaded only when one of them is launched.

pub use purlin_builder::{Arch, for_each_arch};
use std::sync::OnceLock;

/// The embedded PTX of one architecture.
/// ```
/// let ptx = purlin::ptx::kernels(purlin::ptx::Arch::Sm80);
/// assert_eq!(ptx.arch, purlin::ptx::Arch::Sm80);
/// ```
#[derive(Debug)]
pub struct EmbeddedPtx {
    /// The architecture it targets.
    pub arch: Arch,
    /// The file's stem (`purlin_kernels.sm_90`): what a precompiled cubin of it is named
    /// after (see [`precompiled`]).
    pub stem: &'static str,
    compressed: &'static [u8],
    text: OnceLock<String>,
}

impl EmbeddedPtx {
    /// The PTX text (decompressed once, on first use).
    /// ```
    /// let text = purlin::ptx::atom_kernels(purlin::ptx::Arch::Sm70).text();
    /// assert!(text.contains("purlin_atom_copy_sm70"));
    /// ```
    pub fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let bytes = miniz_oxide::inflate::decompress_to_vec(self.compressed)
                .expect("the embedded PTX was compressed by this crate's build script");
            String::from_utf8(bytes).expect("PTX is ASCII")
        })
    }
}

macro_rules! embedded {
    ($arch:ident, $stem:literal, $file:literal) => {
        EmbeddedPtx {
            arch: Arch::$arch,
            stem: $stem,
            compressed: include_bytes!(concat!(env!("OUT_DIR"), "/", $file)),
            text: OnceLock::new(),
        }
    };
}

// `static KERNELS` and `static ATOM_KERNELS`: one `embedded!` per architecture, written by
// the build script from `Arch::ALL`.
include!(concat!(env!("OUT_DIR"), "/embedded_ptx.rs"));

/// The embedded PTX of the collectives for `arch`.
///
/// ```
/// use purlin::ptx::{self, Arch};
/// assert!(ptx::kernels(Arch::Sm90).text().contains(".target sm_90"));
/// assert!(ptx::kernels(Arch::Sm90).text().contains("purlin_all_reduce_bfloat16"));
/// ```
pub fn kernels(arch: Arch) -> &'static EmbeddedPtx {
    KERNELS
        .iter()
        .find(|k| k.arch == arch)
        .expect("every Arch is embedded")
}

/// The embedded PTX of the grid-wide Atom kernels (`purlin_atom_*`, `purlin_test_*`) for `arch`.
///
/// ```
/// use purlin::ptx::{self, Arch};
/// assert!(ptx::atom_kernels(Arch::Sm90).text().contains("purlin_atom_copy_sm90"));
/// ```
pub fn atom_kernels(arch: Arch) -> &'static EmbeddedPtx {
    ATOM_KERNELS
        .iter()
        .find(|k| k.arch == arch)
        .expect("every Arch is embedded")
}

/// The PTX a device of compute capability `major.minor` should load: the newest architecture
/// it can run.
///
/// ```
/// use purlin::ptx::{self, Arch};
/// assert_eq!(ptx::for_compute_capability(9, 0).unwrap().arch, Arch::Sm90);
/// assert_eq!(ptx::for_compute_capability(8, 9).unwrap().arch, Arch::Sm80);
/// assert!(ptx::for_compute_capability(6, 1).is_none());
/// ```
pub fn for_compute_capability(major: i32, minor: i32) -> Option<&'static EmbeddedPtx> {
    Arch::for_compute_capability((major * 10 + minor) as u32).map(kernels)
}

/// FNV-1a (64-bit) of a PTX text, in hex: how a precompiled cubin names the PTX it was made from.
///
/// ```
/// assert_eq!(purlin::ptx::fingerprint(""), "cbf29ce484222325");
/// ```
pub fn fingerprint(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A cubin that `ptxas` made from exactly this PTX, if the directory named by
/// `PURLIN_CUBIN_DIR` holds one: `<stem>.cubin` beside `<stem>.fingerprint` (the PTX's
/// [`fingerprint`]). Loading it skips the driver's JIT compilation of the PTX (tens of seconds
/// for the collectives on a machine whose JIT cache is cold). A cubin whose fingerprint does
/// not match this PTX is ignored, with a warning.
///
/// ```
/// // Without PURLIN_CUBIN_DIR there is nothing precompiled.
/// # unsafe { std::env::remove_var("PURLIN_CUBIN_DIR") };
/// assert!(purlin::ptx::precompiled(purlin::ptx::kernels(purlin::ptx::Arch::Sm90)).is_none());
/// ```
pub fn precompiled(ptx: &EmbeddedPtx) -> Option<Vec<u8>> {
    let dir = std::path::PathBuf::from(std::env::var_os("PURLIN_CUBIN_DIR")?);
    let cubin = std::fs::read(dir.join(format!("{}.cubin", ptx.stem))).ok()?;
    let made_from = std::fs::read_to_string(dir.join(format!("{}.fingerprint", ptx.stem))).ok();
    let want = fingerprint(ptx.text());
    if made_from.as_deref().map(str::trim) == Some(want.as_str()) {
        Some(cubin)
    } else {
        tracing::warn!(stem = ptx.stem, dir = %dir.display(), "ignoring a cubin made from other PTX");
        None
    }
}

/// The value of a `u32` the PTX exports as a global (`#[no_mangle] static` in the kernel
/// crate), read from its initializer: `.u32 NAME = v;` or `.b8 NAME[4] = {b0, b1, ..};`
/// (little-endian, trailing zero bytes left out). `None` when the PTX has no such global.
///
/// ```
/// use purlin::ptx::{exported_u32, kernels, Arch};
/// let ptx = ".visible .global .align 4 .b8 PURLIN_X[4] = {96, 1, 1};";
/// assert_eq!(exported_u32(ptx, "PURLIN_X"), Some(0x0001_0160));
/// assert_eq!(exported_u32(".global .align 4 .u32 PURLIN_Y = 256;", "PURLIN_Y"), Some(256));
/// assert_eq!(exported_u32(kernels(Arch::Sm90).text(), "PURLIN_COLLECTIVE_THREADS"), Some(256));
/// ```
pub fn exported_u32(ptx: &str, name: &str) -> Option<u32> {
    ptx.lines().find_map(|line| {
        let line = line.trim();
        if !line.contains(".global") {
            return None;
        }
        let (decl, init) = line.split_once('=')?;
        let decl = decl.trim();
        let init = init.trim().trim_end_matches(';').trim();
        if decl.ends_with(&format!(" {name}")) {
            return init.parse().ok();
        }
        if decl.ends_with(&format!(" {name}[4]")) && decl.contains(".b8") {
            let bytes = init.strip_prefix('{')?.strip_suffix('}')?;
            let mut v = [0u8; 4];
            for (i, b) in bytes.split(',').enumerate() {
                *v.get_mut(i)? = b.trim().parse().ok()?;
            }
            return Some(u32::from_le_bytes(v));
        }
        None
    })
}

/// The architecture whose compute capability × 10 is `code` (700, 800, 900, 1000: the `ARCH`
/// values of the benchmark binaries' kernel templates).
///
/// ```
/// use purlin::launch::arch_from_code;
/// use purlin::ptx::Arch;
/// assert_eq!(arch_from_code(900), Some(Arch::Sm90));
/// assert_eq!(arch_from_code(750), None);
/// ```
pub const fn arch_from_code(code: u32) -> Option<Arch> {
    let mut i = 0;
    while i < Arch::ALL.len() {
        if Arch::ALL[i].compute_capability() * 10 == code {
            return Some(Arch::ALL[i]);
        }
        i += 1;
    }
    None
}
