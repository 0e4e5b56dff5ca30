//! Host launches of the Atom kernels: grid-wide copy and N-to-1 reduce with one chosen Atom.
//! This is how the Atoms are tested and benchmarked on a GPU; collectives use Atoms from
//! inside their own kernels.

use crate::error::{Error, Result, check_pointer};
use crate::gpu::Gpu;
use crate::launch::{KernelArgs, LaunchShape, launch_on};

pub use crate::atom_kind::AtomKind;
use cudarc::driver::CudaStream;

impl AtomKind {
    /// Refuses an Atom the GPU's loaded PTX does not contain.
    fn check(self, gpu: &Gpu) -> Result<()> {
        if self.arch() > gpu.arch() {
            return Err(Error::InvalidLaunch(format!(
                "Atom {} is not in the {} PTX loaded on {}",
                self.name(),
                gpu.arch(),
                gpu.name()
            )));
        }
        Ok(())
    }
}
use purlin_device::atom::{MAX_SOURCES, ReduceSources};
use purlin_device::element::DataType;
use purlin_device::op::ReduceOpKind;

/// How the blocks of an Atom launch share the range.
///
/// ```
/// use purlin::atom::GridLayout;
/// assert_eq!(GridLayout::default(), GridLayout::Blocks);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GridLayout {
    /// Each block copies or reduces one contiguous, even share.
    #[default]
    Blocks = 0,
    /// All blocks interleave over the whole range, marching through it together.
    Interleaved = 1,
}

impl GridLayout {
    /// Both layouts.
    pub const ALL: [GridLayout; 2] = [Self::Blocks, Self::Interleaved];
}

/// A launch shape: which Atom, how many blocks, how they share the range.
///
/// ```
/// use purlin::atom::{AtomKind, GridLayout, Launch};
/// let launch = Launch { atom: AtomKind::Sm90, blocks: 264, layout: GridLayout::Interleaved };
/// assert_eq!(launch.atom.threads(), 256);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Launch {
    /// The Atom.
    pub atom: AtomKind,
    /// Blocks in the grid.
    pub blocks: u32,
    /// How the blocks share the range.
    pub layout: GridLayout,
}

impl LaunchShape {
    /// `blocks` blocks of an Atom: its threads and its shared-memory needs.
    ///
    /// ```
    /// let s = purlin::launch::LaunchShape::for_atom(purlin::atom::AtomKind::Sm70, 4);
    /// assert_eq!(s.blocks, 4);
    /// ```
    pub const fn for_atom(atom: AtomKind, blocks: u32) -> Self {
        Self {
            blocks,
            threads: atom.threads(),
            smem_bytes: atom.smem_bytes(),
        }
    }
}

/// Copies `bytes` bytes from device address `src` to `dst` on `stream` with the launch shape
/// `launch`. Both addresses must be 16-byte aligned; any byte count works.
///
/// # Safety
/// `src` and `dst` are device addresses valid for `bytes` bytes on this GPU (or mapped into it),
/// they do not overlap, and they stay valid until the copy has finished on `stream`.
/// ```no_run
/// use purlin::atom::{self, AtomKind, GridLayout, Launch};
/// let gpu = purlin::Gpu::open(0)?;
/// let stream = gpu.new_stream()?;
/// let (src, dst) = (stream.alloc_zeros::<u8>(4096)?, stream.alloc_zeros::<u8>(4096)?);
/// let (s, d) = (purlin::memory::Span::from_device(&src, &stream), purlin::memory::Span::from_device(&dst, &stream));
/// let launch = Launch { atom: AtomKind::Sm70, blocks: 4, layout: GridLayout::Blocks };
/// // SAFETY: both buffers hold 4096 bytes and outlive the synchronisation.
/// unsafe { atom::copy(&gpu, &stream, launch, d.addr, s.addr, 4096)? };
/// stream.synchronize()?;
/// # Ok::<(), purlin::Error>(())
/// ```
pub unsafe fn copy(
    gpu: &Gpu,
    stream: &CudaStream,
    launch: Launch,
    dst: u64,
    src: u64,
    bytes: u64,
) -> Result<()> {
    let Launch { atom, layout, .. } = launch;
    atom.check(gpu)?;
    if bytes > 0 {
        check_pointer("dst", dst, 16)?;
        check_pointer("src", src, 16)?;
    }
    let name = format!("purlin_atom_copy_{}", atom.name());
    // SAFETY: the Atom copy kernels take (dst, src, bytes, layout); the caller guarantees the
    // buffers.
    unsafe { launch_atom(gpu, stream, launch, &name, (dst, src, bytes, layout as u32)) }
}

/// `dst[i] = srcs[0][i] ⊕ … ⊕ srcs[n-1][i]` for `count` elements of `dtype`, accumulated in
/// `f32` in source order, on `stream` with the launch shape `launch`.
///
/// # Safety
/// Every address is a device address valid for `count` elements on this GPU (or mapped into
/// it) until the reduce has finished on `stream`; `dst` overlaps no source except possibly
/// being equal to one.
/// ```no_run
/// use purlin::atom::{self, AtomKind, GridLayout, Launch};
/// use purlin::{DataType, ReduceOpKind};
/// let gpu = purlin::Gpu::open(0)?;
/// let stream = gpu.new_stream()?;
/// let (a, b) = (stream.clone_htod(&[1f32; 1024])?, stream.clone_htod(&[2f32; 1024])?);
/// let out = stream.alloc_zeros::<f32>(1024)?;
/// let span = |x| purlin::memory::Span::from_device(x, &stream).addr;
/// let launch = Launch { atom: AtomKind::Sm70, blocks: 2, layout: GridLayout::Blocks };
/// // SAFETY: all three buffers hold 1024 f32 and outlive the synchronisation.
/// unsafe { atom::reduce(&gpu, &stream, launch, DataType::F32, ReduceOpKind::Sum, span(&out), &[span(&a), span(&b)], 1024)? };
/// assert_eq!(stream.clone_dtoh(&out)?, vec![3f32; 1024]);
/// # Ok::<(), purlin::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce(
    gpu: &Gpu,
    stream: &CudaStream,
    launch: Launch,
    dtype: DataType,
    op: ReduceOpKind,
    dst: u64,
    srcs: &[u64],
    count: u64,
) -> Result<()> {
    let Launch { atom, layout, .. } = launch;
    atom.check(gpu)?;
    let sources = ReduceSources::new(srcs).ok_or(Error::SourceCount {
        count: srcs.len(),
        max: MAX_SOURCES,
    })?;
    if count > 0 {
        check_pointer("dst", dst, 16)?;
        for &s in srcs {
            check_pointer("source", s, 16)?;
        }
    }
    let name = format!("purlin_atom_reduce_{}_{}", atom.name(), dtype.name());
    let args = (dst, sources, count, op as u32, layout as u32);
    // SAFETY: the Atom reduce kernels take (dst, sources, count, op, layout); the caller
    // guarantees the buffers.
    unsafe { launch_atom(gpu, stream, launch, &name, args) }
}

/// Launches the grid-wide Atom kernel `name` with `launch`'s blocks and its Atom's shape.
///
/// # Safety
/// `args` are the kernel's parameters; what it touches stays valid until it has run.
unsafe fn launch_atom<Args: KernelArgs>(
    gpu: &Gpu,
    stream: &CudaStream,
    launch: Launch,
    name: &str,
    args: Args,
) -> Result<()> {
    let shape = LaunchShape::for_atom(launch.atom, launch.blocks);
    // SAFETY: forwarded contract.
    unsafe {
        launch_on(
            gpu,
            stream,
            shape,
            || gpu.function(name, shape.smem_bytes),
            args,
            crate::launch::StreamOrder::AfterPrevious,
        )
    }
}
