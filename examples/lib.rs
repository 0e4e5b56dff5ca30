//! Small helpers the numbered examples share: logging, size arguments, and 16-byte aligned host
//! buffers for the CPU path.

/// Logs to stderr at the level of `RUST_LOG` (default `warn`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Parses a byte count with an optional `K`, `M` or `G` suffix (powers of 1024).
///
/// ```
/// assert_eq!(purlin_examples::parse_size("64M"), Some(64 << 20));
/// assert_eq!(purlin_examples::parse_size("17"), Some(17));
/// assert_eq!(purlin_examples::parse_size("x"), None);
/// ```
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, shift) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 10),
        'M' => (&s[..s.len() - 1], 20),
        'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Whether this process was started by `mpirun` (Open MPI, MPICH and PMIx set these).
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The example's payload: byte `i` of a transfer of `bytes` bytes.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 8)) as u8
}

/// A 16-byte aligned host buffer (the CPU path's "device" memory).
pub struct HostBuffer {
    words: Vec<u128>,
    len: usize,
}

impl HostBuffer {
    /// `len` bytes of [`pattern`].
    pub fn with_pattern(len: usize) -> Self {
        let mut b = Self {
            words: vec![0; len.div_ceil(16).max(1)],
            len,
        };
        for (i, x) in b.bytes_mut().iter_mut().enumerate() {
            *x = pattern(i as u64);
        }
        b
    }

    /// The address of the first byte.
    pub fn addr(&self) -> u64 {
        self.words.as_ptr() as u64
    }

    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the words hold at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }
}

/// The PTX of the example kernel crate (`fused-kernel`) for `arch`, built by this package's
/// build script with `purlin-builder`, as your own build script would build yours.
///
/// ```
/// use purlin::ptx::Arch;
/// assert!(purlin_examples::fused_kernel_ptx(Arch::Sm90).contains("example_scale_then_all_gather"));
/// ```
pub fn fused_kernel_ptx(arch: purlin::ptx::Arch) -> &'static str {
    use purlin::ptx::Arch;
    // One arm per architecture of Purlin's list: the build script's PTX file for it.
    macro_rules! by_arch {
        ($($(#[$doc:meta])* $arch:ident in $module:ident = $name:literal, $cc:literal, $ptx:expr;)*) => {
            match arch {
                $(Arch::$arch => include_str!(concat!(
                    env!("OUT_DIR"),
                    "/purlin_example_kernels.",
                    $name,
                    ".ptx"
                )),)*
            }
        };
    }
    purlin::ptx::for_each_arch!(by_arch)
}
