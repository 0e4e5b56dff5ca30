//! The one error type of the host API. Every bad input is caught before anything is launched
//! and named in the error.

/// Everything that can go wrong in a Purlin host call.
///
/// ```
/// use purlin::Error;
/// let e = Error::Misaligned { what: "dst", addr: 0x1004, align: 16 };
/// assert_eq!(e.to_string(), "dst pointer 0x1004 is not 16-byte aligned");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// `libcuda.so.1` could not be loaded: no NVIDIA driver on this machine.
    #[error("no CUDA driver could be loaded (libcuda.so.1): this machine has no usable NVIDIA GPU")]
    NoDriver,
    /// The requested GPU does not exist.
    #[error("no GPU {ordinal}: {count} present")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// GPUs present.
        count: usize,
    },
    /// The code of an architecture cannot run on this device.
    #[error("{arch} code cannot run on a device of compute capability {major}.{minor}")]
    ArchUnsupported {
        /// The architecture asked for.
        arch: purlin_builder::Arch,
        /// Device compute capability, major.
        major: i32,
        /// Device compute capability, minor.
        minor: i32,
    },
    /// A kernel the host expected is missing from the embedded PTX.
    #[error("kernel {name} is not in the {arch} PTX")]
    MissingKernel {
        /// The kernel name.
        name: String,
        /// The PTX it was looked up in.
        arch: purlin_builder::Arch,
    },
    /// A pointer argument is null.
    #[error("{what} pointer is null")]
    NullPointer {
        /// Which argument.
        what: &'static str,
    },
    /// A pointer argument is not aligned enough.
    #[error("{what} pointer {addr:#x} is not {align}-byte aligned")]
    Misaligned {
        /// Which argument.
        what: &'static str,
        /// Its address.
        addr: u64,
        /// The alignment required.
        align: u64,
    },
    /// A byte count is not a whole number of elements.
    #[error("{bytes} bytes is not a whole number of {elem_size}-byte elements")]
    PartialElement {
        /// The byte count given.
        bytes: u64,
        /// The element size.
        elem_size: usize,
    },
    /// A reduce got no sources or too many.
    #[error("a reduce takes 1 to {max} sources, not {count}")]
    SourceCount {
        /// Sources given.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A rank outside `0..world`.
    #[error("rank {rank} is outside 0..{world}")]
    RankOutOfRange {
        /// The rank given.
        rank: u32,
        /// The world size.
        world: u32,
    },
    /// A world size of 0 or above the supported maximum.
    #[error("world size {world} is not in 1..={max}")]
    WorldSize {
        /// The world size given.
        world: u32,
        /// The most supported.
        max: usize,
    },
    /// The world size does not match the bootstrap's.
    #[error("world size {world} does not match the bootstrap's {bootstrap}")]
    WorldMismatch {
        /// The world size given.
        world: u32,
        /// The bootstrap's.
        bootstrap: u32,
    },
    /// A buffer is smaller than the call needs.
    #[error("{what} is too small: {needed} bytes needed, {available} available")]
    BufferTooSmall {
        /// Which buffer.
        what: &'static str,
        /// Bytes the call needs.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// Two GPUs that must reach each other's memory cannot.
    #[error("GPU {from} cannot access the memory of GPU {to} (no peer access)")]
    PeerUnreachable {
        /// The accessing GPU.
        from: usize,
        /// The GPU whose memory it needs.
        to: usize,
    },
    /// A launch shape the kernel cannot run with.
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks that a device address is non-null and aligned to `align` bytes.
///
/// ```
/// assert!(purlin::error::check_pointer("src", 0x1000, 16).is_ok());
/// assert!(purlin::error::check_pointer("src", 0, 16).is_err());
/// assert!(purlin::error::check_pointer("src", 0x1008, 16).is_err());
/// ```
pub fn check_pointer(what: &'static str, addr: u64, align: u64) -> Result<()> {
    if addr == 0 {
        return Err(Error::NullPointer { what });
    }
    if addr % align != 0 {
        return Err(Error::Misaligned { what, addr, align });
    }
    Ok(())
}
