//! # purlin-builder
//!
//! Compiles a `no_std` kernel crate to PTX with rustc's NVPTX backend, once per architecture,
//! from a `build.rs`. This is how `purlin` builds its own kernels, and how you build a crate of
//! your own kernels that call Purlin's Atoms and collectives from device code.
//!
//! The inner build runs `cargo build --release --target nvptx64-nvidia-cuda -Zbuild-std=core`
//! with the pinned nightly toolchain, `-Ctarget-cpu=sm_XX` (and the PTX version the
//! architecture needs), in its own target directory and with the outer build's flags cleared,
//! so the two builds never fight over flags or locks.
//!
//! ```no_run
//! // build.rs of a host crate that launches kernels from `../my-kernels`
//! use purlin_builder::{Arch, Builder};
//! let built = Builder::new("../my-kernels").archs(&[Arch::Sm80, Arch::Sm90]).build().unwrap();
//! for ptx in &built {
//!     println!("cargo:warning={} -> {}", ptx.arch, ptx.path.display());
//! }
//! // In the crate: include_str!(concat!(env!("OUT_DIR"), "/my_kernels.sm_90.ptx"))
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The toolchain device code is built with (it must provide `rust-src` and
/// `llvm-bitcode-linker`).
pub const TOOLCHAIN: &str = "nightly-2026-10-30";

/// The LLVM target of NVIDIA GPUs.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// The one list of the architectures Purlin builds for (`purlin_device::for_each_arch!`): each
/// entry's [`Arch`] variant, its Atom's module, its `-Ctarget-cpu` name, its compute capability
/// and the PTX version its instructions need.
///
/// ```
/// macro_rules! count {
///     ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
///         [$($cc),*].len()
///     };
/// }
/// assert_eq!(purlin_builder::for_each_arch!(count), purlin_builder::Arch::ALL.len());
/// ```
pub use purlin_device::for_each_arch;

/// Declares [`Arch`] from [`for_each_arch!`]'s list.
macro_rules! declare_arch {
    ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
        /// A GPU architecture Purlin builds for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Arch {
            $($(#[$doc])* $arch,)*
        }

        impl Arch {
            /// Every architecture, oldest first.
            pub const ALL: [Arch; [$($cc),*].len()] = [$(Arch::$arch),*];

            /// The `-Ctarget-cpu` value and file-name tag: `sm_90`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Arch::$arch => $name,)*
                }
            }

            /// The compute capability, `major * 10 + minor`.
            pub const fn compute_capability(self) -> u32 {
                match self {
                    $(Arch::$arch => $cc,)*
                }
            }

            /// The PTX version the architecture's instructions need (LLVM defaults to 7.8).
            pub const fn ptx_feature(self) -> Option<&'static str> {
                match self {
                    $(Arch::$arch => $ptx,)*
                }
            }
        }
    };
}

for_each_arch!(declare_arch);

impl Arch {
    /// The newest architecture whose code a device of compute capability `cc`
    /// (`major * 10 + minor`) can run, if any.
    ///
    /// ```
    /// use purlin_builder::Arch;
    /// assert_eq!(Arch::for_compute_capability(90), Some(Arch::Sm90));
    /// assert_eq!(Arch::for_compute_capability(86), Some(Arch::Sm80));
    /// assert_eq!(Arch::for_compute_capability(61), None);
    /// ```
    pub fn for_compute_capability(cc: u32) -> Option<Arch> {
        Self::ALL
            .into_iter()
            .rev()
            .find(|a| a.compute_capability() <= cc)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The cargo target directory a build script runs under, found from its `OUT_DIR`
/// (`<target>/[<triple>/]<profile>/build/<pkg>-<hash>/out`); `OUT_DIR` itself when the shape
/// is not recognised.
///
/// ```
/// use std::path::Path;
/// let out = Path::new("/w/target/debug/build/purlin-0123/out");
/// assert_eq!(purlin_builder::target_dir_from_out_dir(out), Path::new("/w/target"));
/// ```
pub fn target_dir_from_out_dir(out_dir: &Path) -> PathBuf {
    let build = out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"));
    match build
        .and_then(|b| b.parent())
        .and_then(|profile| profile.parent())
    {
        // Cross builds add a <triple> level: <target>/<triple>/<profile>/build.
        Some(dir) if dir.join("CACHEDIR.TAG").exists() || dir.parent().is_none() => {
            dir.to_path_buf()
        }
        Some(dir) => match dir.parent() {
            Some(up) if up.join("CACHEDIR.TAG").exists() => up.to_path_buf(),
            _ => dir.to_path_buf(),
        },
        None => out_dir.to_path_buf(),
    }
}

/// A PTX file the builder produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltPtx {
    /// The architecture it was built for.
    pub arch: Arch,
    /// Where it is: `<out dir>/<lib name>.<arch>.ptx`.
    pub path: PathBuf,
}

/// What went wrong in a device build.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The kernel crate's manifest could not be read or has no `[package] name`.
    #[error("cannot read the kernel crate manifest {path}: {reason}")]
    Manifest {
        /// The manifest path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// `cargo` could not be started.
    #[error("cannot run {cargo}: {source}")]
    Spawn {
        /// The cargo binary.
        cargo: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The device build failed; its output was forwarded.
    #[error(
        "device build for {arch} failed ({status}); run `rustup toolchain install {TOOLCHAIN} --component rust-src,llvm-bitcode-linker,llvm-tools` if the toolchain is missing"
    )]
    Cargo {
        /// The architecture being built.
        arch: Arch,
        /// cargo's exit status.
        status: std::process::ExitStatus,
    },
    /// The build succeeded but left no PTX where expected.
    #[error("no PTX at {0}")]
    Missing(PathBuf),
    /// Copying the PTX out failed.
    #[error("cannot copy PTX to {path}: {source}")]
    Copy {
        /// The destination.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Builds one kernel crate to PTX for a set of architectures.
#[derive(Clone, Debug)]
pub struct Builder {
    crate_dir: PathBuf,
    archs: Vec<Arch>,
    target_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    toolchain: String,
    watch: Vec<PathBuf>,
}

/// The inner build's target directory for `arch` under `target_dir`, one per cargo workspace
/// of kernel crates (a hash of its root's path in the name; the crates of one workspace share it,
/// and with it one build of `core` per architecture). Two checkouts sharing one outer target
/// directory (git worktrees under one `CARGO_TARGET_DIR`) each get their own: with one
/// directory the second checkout's cargo found its unit fresh and left the first checkout's
/// PTX at the shared output path, which the second then embedded.
fn arch_target_dir(target_dir: &Path, crate_dir: &Path, arch: Arch) -> PathBuf {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    // A name only has to stay the same from one build to the next with this builder.
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(workspace_root(crate_dir));
    target_dir.join(format!("{}-{hash:016x}", arch.name()))
}

/// The root of the cargo workspace `crate_dir` builds in, as cargo finds it: the nearest
/// directory at or above it whose `Cargo.toml` has a `[workspace]` table (else `crate_dir`),
/// canonical where it exists.
fn workspace_root(crate_dir: &Path) -> PathBuf {
    let crate_dir = crate_dir
        .canonicalize()
        .unwrap_or_else(|_| crate_dir.to_path_buf());
    let declares_workspace = |dir: &Path| {
        std::fs::read_to_string(dir.join("Cargo.toml"))
            .ok()
            .and_then(|text| toml::from_str::<toml::Table>(&text).ok())
            .is_some_and(|manifest| manifest.contains_key("workspace"))
    };
    crate_dir
        .ancestors()
        .find(|dir| declares_workspace(dir))
        .unwrap_or(&crate_dir)
        .to_path_buf()
}

#[derive(serde::Deserialize)]
struct Manifest {
    package: Option<Package>,
    lib: Option<Lib>,
}
#[derive(serde::Deserialize)]
struct Package {
    name: String,
}
#[derive(serde::Deserialize)]
struct Lib {
    name: Option<String>,
}

/// Environment of the outer build that must not leak into the device build.
const CLEARED_ENV: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_LLVM_COV",
    "LLVM_PROFILE_FILE",
];

impl Builder {
    /// A builder for the crate in `crate_dir` (relative paths are taken from the calling
    /// crate's manifest directory when run from a build script), for every [`Arch`].
    pub fn new(crate_dir: impl AsRef<Path>) -> Self {
        let dir = crate_dir.as_ref();
        let crate_dir = match std::env::var_os("CARGO_MANIFEST_DIR") {
            Some(base) if dir.is_relative() => PathBuf::from(base).join(dir),
            _ => dir.to_path_buf(),
        };
        Self {
            crate_dir,
            archs: Arch::ALL.to_vec(),
            target_dir: None,
            out_dir: None,
            toolchain: TOOLCHAIN.to_owned(),
            watch: Vec::new(),
        }
    }

    /// Builds for these architectures only.
    pub fn archs(mut self, archs: &[Arch]) -> Self {
        self.archs = archs.to_vec();
        self
    }

    /// Where the inner builds keep their artifacts (default: `purlin-ptx` beside the outer
    /// build's target directory, found from `OUT_DIR`, so every profile shares one build).
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Where the PTX files go (default: `OUT_DIR`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Builds with this rustup toolchain instead of [`TOOLCHAIN`].
    pub fn toolchain(mut self, toolchain: impl Into<String>) -> Self {
        self.toolchain = toolchain.into();
        self
    }

    /// Also rebuild when files under `path` change (the kernel crate itself is always watched).
    pub fn watch(mut self, path: impl AsRef<Path>) -> Self {
        let p = path.as_ref();
        let p = match std::env::var_os("CARGO_MANIFEST_DIR") {
            Some(base) if p.is_relative() => PathBuf::from(base).join(p),
            _ => p.to_path_buf(),
        };
        self.watch.push(p);
        self
    }

    /// The library name of the kernel crate (the PTX file stem).
    pub fn lib_name(&self) -> Result<String, BuildError> {
        let path = self.crate_dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| BuildError::Manifest {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let manifest: Manifest = toml::from_str(&text).map_err(|e| BuildError::Manifest {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let name = manifest
            .lib
            .and_then(|l| l.name)
            .or(manifest.package.map(|p| p.name))
            .ok_or_else(|| BuildError::Manifest {
                path,
                reason: "no [package] name".into(),
            })?;
        Ok(name.replace('-', "_"))
    }

    fn default_target_dir() -> PathBuf {
        match std::env::var_os("OUT_DIR") {
            Some(out) => target_dir_from_out_dir(Path::new(&out)).join("purlin-ptx"),
            None => std::env::temp_dir().join("purlin-ptx"),
        }
    }

    /// Builds every architecture and copies the PTX to the output directory.
    pub fn build(&self) -> Result<Vec<BuiltPtx>, BuildError> {
        let lib = self.lib_name()?;
        let target_dir = self
            .target_dir
            .clone()
            .unwrap_or_else(Self::default_target_dir);
        let out_dir = self
            .out_dir
            .clone()
            .or_else(|| std::env::var_os("OUT_DIR").map(PathBuf::from))
            .unwrap_or_else(|| target_dir.join("out"));
        let in_build_script = std::env::var_os("OUT_DIR").is_some();
        if in_build_script {
            println!("cargo:rerun-if-changed={}", self.crate_dir.display());
            for w in &self.watch {
                println!("cargo:rerun-if-changed={}", w.display());
            }
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut built = Vec::new();
        for &arch in &self.archs {
            let arch_dir = arch_target_dir(&target_dir, &self.crate_dir, arch);
            let mut flags = format!("-Ctarget-cpu={}", arch.name());
            if let Some(f) = arch.ptx_feature() {
                flags.push_str(" -Ctarget-feature=");
                flags.push_str(f);
            }
            let mut cmd = Command::new(&cargo);
            cmd.current_dir(&self.crate_dir)
                .args([
                    "build",
                    "--release",
                    "--lib",
                    "--target",
                    TARGET,
                    "-Zbuild-std=core",
                ])
                .arg("--manifest-path")
                .arg(self.crate_dir.join("Cargo.toml"))
                .arg("--target-dir")
                .arg(&arch_dir)
                .env("RUSTUP_TOOLCHAIN", &self.toolchain)
                .env("CARGO_TARGET_NVPTX64_NVIDIA_CUDA_RUSTFLAGS", &flags)
                .env_remove("RUSTC");
            for var in CLEARED_ENV {
                cmd.env_remove(var);
            }
            // The inner cargo must resolve rustc through rustup for RUSTUP_TOOLCHAIN to apply.
            let status = cmd.status().map_err(|source| BuildError::Spawn {
                cargo: cargo.clone(),
                source,
            })?;
            if !status.success() {
                return Err(BuildError::Cargo { arch, status });
            }
            let ptx = arch_dir
                .join(TARGET)
                .join("release")
                .join(format!("{lib}.ptx"));
            if !ptx.exists() {
                return Err(BuildError::Missing(ptx));
            }
            std::fs::create_dir_all(&out_dir).map_err(|source| BuildError::Copy {
                path: out_dir.clone(),
                source,
            })?;
            let dest = out_dir.join(format!("{lib}.{}.ptx", arch.name()));
            std::fs::copy(&ptx, &dest).map_err(|source| BuildError::Copy {
                path: dest.clone(),
                source,
            })?;
            built.push(BuiltPtx { arch, path: dest });
        }
        Ok(built)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_checkout_gets_its_own_inner_target_dir_and_a_workspace_shares_one() {
        let target = Path::new("/tmp/target/purlin-ptx");
        let dir = |c: &Path, arch| arch_target_dir(target, c, arch);
        // Crates outside any workspace: one directory each.
        let (a, b) = (Path::new("/src/one/device"), Path::new("/src/two/device"));
        assert_eq!(dir(a, Arch::Sm90), dir(a, Arch::Sm90));
        assert_ne!(dir(a, Arch::Sm90), dir(b, Arch::Sm90));
        assert_ne!(dir(a, Arch::Sm80), dir(a, Arch::Sm90));
        assert!(dir(a, Arch::Sm90).starts_with(target));
        let name = dir(a, Arch::Sm90);
        let name = name.file_name().unwrap().to_string_lossy();
        assert!(name.starts_with("sm_90-"), "{name}");
        // This repository's two kernel crates share its workspace's directory, which a copy of
        // the workspace elsewhere does not.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let kernels = repo.join("device/kernels");
        let atoms = repo.join("device/atom-kernels");
        assert_eq!(workspace_root(&kernels), repo.canonicalize().unwrap());
        assert_eq!(dir(&kernels, Arch::Sm90), dir(&atoms, Arch::Sm90));
        let copy = std::env::temp_dir().join(format!("purlin-builder-test-{}", std::process::id()));
        for krate in ["device/kernels", "device/atom-kernels"] {
            std::fs::create_dir_all(copy.join(krate)).unwrap();
            std::fs::copy(
                repo.join(krate).join("Cargo.toml"),
                copy.join(krate).join("Cargo.toml"),
            )
            .unwrap();
        }
        std::fs::copy(repo.join("Cargo.toml"), copy.join("Cargo.toml")).unwrap();
        let copied = copy.join("device/kernels");
        assert_eq!(
            dir(&copied, Arch::Sm90),
            dir(&copy.join("device/atom-kernels"), Arch::Sm90)
        );
        assert_ne!(dir(&copied, Arch::Sm90), dir(&kernels, Arch::Sm90));
        std::fs::remove_dir_all(&copy).unwrap();
    }
}
