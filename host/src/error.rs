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
    /// Workspace requirements that cannot be met or make no sense.
    #[error("invalid workspace requirements: {what} {reason}")]
    InvalidRequirements {
        /// Which requirement.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An argument out of its range that no other variant names.
    #[error("invalid argument {what}: {reason}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An object belongs to another device than the one the call runs on.
    #[error("{what} is on {found}, but the call runs on {expected}")]
    WrongDevice {
        /// Which object.
        what: &'static str,
        /// Where the call runs (e.g. `GPU 0`, `host memory`).
        expected: String,
        /// Where the object is.
        found: String,
    },
    /// The bootstrap (the exchange between ranks) failed.
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    /// Another rank failed a step that every rank takes together (so this one stops too).
    #[error("rank {rank} failed during {step}: every rank stops")]
    PeerFailed {
        /// The first rank that reported a failure.
        rank: u32,
        /// The collective step (`workspace allocation`, `peer mapping`, ...).
        step: &'static str,
    },
    /// A wait for another rank ran out of time (a rank that never arrives is an error, never a
    /// hang). Decoded from the fault record a kernel leaves, or raised by a host-side wait.
    /// When a rank never launches a call, every rank that did reports this, naming it
    /// (`peer_missing`): a rank that learns of another's timeout on a rank it has not seen
    /// arrive either reports its own, not [`PeerFaulted`](Self::PeerFaulted).
    #[error(
        "{collective} timed out on rank {rank} waiting for rank {peer}: {} (epoch {epoch})",
        if *peer_missing { "it never launched the call (a rank that stopped, or a host thread blocked outside Purlin)".to_string() } else { format!("it is in the call but {waiting_for} did not come") }
    )]
    Timeout {
        /// The operation that was waiting (`all_gather`, `p2p wait`, ...).
        collective: &'static str,
        /// The rank that gave up.
        rank: u32,
        /// The rank it was waiting for (the one that never launched the call, if one did not).
        peer: u32,
        /// The epoch (or signal value) it waited for.
        epoch: u64,
        /// True when `peer` never launched the call; false when it is in the call but stuck.
        peer_missing: bool,
        /// What was awaited (`staged data`, `latency packets`, ...).
        waiting_for: &'static str,
    },
    /// A rank refused a call on the device: its arguments cannot run there (V counts above
    /// `max_count` or past the buffers, a block size the Atom does not support, ...). Nothing
    /// was read or written.
    #[error("{collective} refused on rank {rank}: {reason}")]
    Refused {
        /// The collective.
        collective: &'static str,
        /// The rank that refused.
        rank: u32,
        /// Why, with the offending value.
        reason: String,
    },
    /// Two ranks made different calls: they disagree on something every rank must agree on
    /// (the collective, element type, operator, sizes, blocks, plan, workspace or V counts).
    #[error(
        "{collective}: rank {rank} and rank {peer} disagree on the {field} ({mine} on rank {rank}, {theirs} on rank {peer})"
    )]
    Mismatch {
        /// The collective this rank was in.
        collective: &'static str,
        /// This rank.
        rank: u32,
        /// The rank whose call differs.
        peer: u32,
        /// What differs (`size`, `operator`, `counts`, ...).
        field: &'static str,
        /// This rank's value (or its hash, for the plan, workspace and counts).
        mine: u64,
        /// The peer's.
        theirs: u64,
    },
    /// Another rank faulted first and its fault ended this rank's call.
    #[error("{collective} on rank {rank} stopped: rank {first} faulted first: {cause}")]
    PeerFaulted {
        /// The collective this rank was in.
        collective: &'static str,
        /// This rank.
        rank: u32,
        /// The rank that faulted first.
        first: u32,
        /// Its fault.
        cause: String,
    },
    /// The context faulted earlier (a timeout); its protocol state is no longer consistent
    /// across ranks, so it refuses new work. Finalize it and make a new one.
    #[error("the context of rank {rank} faulted earlier and cannot be used: {reason}")]
    Poisoned {
        /// The rank.
        rank: u32,
        /// The first fault.
        reason: String,
    },
    /// The operation is not available in this configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
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
    if !addr.is_multiple_of(align) {
        return Err(Error::Misaligned { what, addr, align });
    }
    Ok(())
}
