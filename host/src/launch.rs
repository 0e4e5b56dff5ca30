//! Typed kernel launches: a [`Kernel`] names a PTX entry point together with the Rust types of
//! its parameters, so a launch with the wrong argument list does not compile; a
//! [`LaunchShape`] says how many blocks of how many threads with how much dynamic shared
//! memory, usually derived from an Atom's needs; every shape is checked against the device's
//! limits before launching, and every CUDA status is checked.
//!
//! ```no_run
//! use purlin::launch::{Kernel, LaunchShape};
//! use purlin::atom::AtomKind;
//! // SAFETY: `purlin_atom_copy_sm90` takes (dst: *mut u8, src: *const u8, bytes: u64).
//! const COPY: Kernel<(u64, u64, u64)> = unsafe { Kernel::new("purlin_atom_copy_sm90") };
//! let gpu = purlin::Gpu::open_for::<900>(0)?;
//! let stream = gpu.new_stream()?;
//! let (src, dst) = (stream.alloc_zeros::<u8>(1 << 20)?, stream.alloc_zeros::<u8>(1 << 20)?);
//! let (s, d) = (purlin::memory::Span::from_device(&src, &stream), purlin::memory::Span::from_device(&dst, &stream));
//! let shape = LaunchShape::for_atom(AtomKind::Sm90, gpu.sm_count());
//! // SAFETY: both buffers hold 1 MiB and outlive the launch (synchronised below).
//! unsafe { COPY.launch(&gpu, &stream, shape, (d.addr, s.addr, 1 << 20))? };
//! stream.synchronize()?;
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::error::{Error, Result};
pub use crate::gpu::DeviceLimits;
use crate::gpu::Gpu;
pub use crate::ptx::arch_from_code;
use cudarc::driver::{CudaStream, result};
use std::ffi::c_void;
use std::marker::PhantomData;

/// A kernel parameter type: plain data whose bytes mean the same on host and device.
///
/// # Safety
/// The type is `Copy`, has no padding whose value matters, and its layout (size, alignment,
/// field offsets) equals the device parameter's.
///
/// ```
/// use purlin::launch::KernelArg;
/// #[derive(Clone, Copy)]
/// #[repr(C)]
/// struct Pair { a: u64, b: u64 }
/// // SAFETY: `#[repr(C)]`, two u64, the same on host and nvptx64.
/// unsafe impl KernelArg for Pair {}
/// ```
pub unsafe trait KernelArg: Copy {}

macro_rules! kernel_arg {
    ($($t:ty),* $(,)?) => { $(
        // SAFETY: a primitive with the same layout on host and nvptx64.
        unsafe impl KernelArg for $t {}
    )* };
}
kernel_arg!(
    u8,
    u16,
    u32,
    u64,
    i8,
    i16,
    i32,
    i64,
    f32,
    f64,
    usize,
    half::f16,
    half::bf16
);
// SAFETY: an array of plain kernel arguments is laid out the same on both sides.
unsafe impl<T: KernelArg, const N: usize> KernelArg for [T; N] {}
// SAFETY: `#[repr(C)]`, `Copy`, only integers, the same bytes on host and device (its docs).
unsafe impl KernelArg for purlin_device::context::Context {}
// SAFETY: `#[repr(C)]` plain data, laid out identically on host and device.
unsafe impl KernelArg for purlin_device::atom::ReduceSources {}

/// A kernel's parameter list: a tuple of [`KernelArg`]s (up to 12).
///
/// # Safety
/// `pointers` gives one pointer per tuple field, in order, each to that field.
///
/// ```
/// use purlin::launch::KernelArgs;
/// let args = (1u64, 2u32);
/// assert_eq!(args.pointers().len(), 2);
/// ```
pub unsafe trait KernelArgs {
    /// A pointer to each parameter, in order, as `cuLaunchKernel` takes them.
    /// ```
    /// use purlin::launch::KernelArgs;
    /// let args = (7u32,);
    /// assert_eq!(args.pointers()[0], &args.0 as *const u32 as *mut std::ffi::c_void);
    /// ```
    fn pointers(&self) -> Vec<*mut c_void>;
}

macro_rules! kernel_args {
    ($($name:ident : $idx:tt),*) => {
        // SAFETY: one pointer per field, in field order.
        unsafe impl<$($name: KernelArg),*> KernelArgs for ($($name,)*) {
            fn pointers(&self) -> Vec<*mut c_void> {
                vec![$(&self.$idx as *const $name as *mut c_void),*]
            }
        }
    };
}
// SAFETY: no parameters, no pointers.
unsafe impl KernelArgs for () {
    fn pointers(&self) -> Vec<*mut c_void> {
        Vec::new()
    }
}
kernel_args!(A: 0);
kernel_args!(A: 0, B: 1);
kernel_args!(A: 0, B: 1, C: 2);
kernel_args!(A: 0, B: 1, C: 2, D: 3);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10);
kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11);

/// How a kernel runs: `blocks` blocks of `threads` threads, `smem_bytes` of dynamic shared
/// memory each.
///
/// ```
/// use purlin::launch::LaunchShape;
/// use purlin::atom::AtomKind;
/// let shape = LaunchShape::for_atom(AtomKind::Sm80, 8).with_extra_smem(896);
/// assert_eq!(shape.threads, AtomKind::Sm80.threads());
/// assert_eq!(shape.smem_bytes, AtomKind::Sm80.smem_bytes() + 896);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Blocks in the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory per block, in bytes.
    pub smem_bytes: u32,
}

impl LaunchShape {
    /// The same shape with `bytes` more shared memory per block (e.g. a collective's own
    /// state after the Atom's pipeline).
    ///
    /// ```
    /// let s = purlin::launch::LaunchShape { blocks: 1, threads: 32, smem_bytes: 0 }.with_extra_smem(128);
    /// assert_eq!(s.smem_bytes, 128);
    /// ```
    pub const fn with_extra_smem(mut self, bytes: u32) -> Self {
        self.smem_bytes += bytes;
        self
    }

    /// Checks the shape against a device's limits.
    ///
    /// ```
    /// use purlin::launch::{DeviceLimits, LaunchShape};
    /// let limits = DeviceLimits { max_threads_per_block: 1024, max_smem_per_block: 227 << 10, max_blocks: 1 << 31 };
    /// assert!(LaunchShape { blocks: 8, threads: 256, smem_bytes: 64 << 10 }.check(&limits).is_ok());
    /// assert!(LaunchShape { blocks: 0, threads: 256, smem_bytes: 0 }.check(&limits).is_err());
    /// assert!(LaunchShape { blocks: 1, threads: 2048, smem_bytes: 0 }.check(&limits).is_err());
    /// assert!(LaunchShape { blocks: 1, threads: 256, smem_bytes: 228 << 10 }.check(&limits).is_err());
    /// ```
    pub fn check(&self, limits: &DeviceLimits) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidLaunch(why));
        if self.blocks == 0 || self.blocks as u64 > limits.max_blocks as u64 {
            return bad(format!(
                "{} blocks is not in 1..={}",
                self.blocks, limits.max_blocks
            ));
        }
        if self.threads == 0 || self.threads > limits.max_threads_per_block {
            return bad(format!(
                "{} threads per block is not in 1..={}",
                self.threads, limits.max_threads_per_block
            ));
        }
        if self.smem_bytes > limits.max_smem_per_block {
            return bad(format!(
                "{} bytes of shared memory per block exceed the device's {}",
                self.smem_bytes, limits.max_smem_per_block
            ));
        }
        Ok(())
    }
}

/// A PTX entry point and the types of its parameters.
///
/// ```
/// use purlin::launch::Kernel;
/// // SAFETY: the signal kernel takes (addr: u64, value: u64) — example only.
/// const SIGNAL: Kernel<(u64, u64)> = unsafe { Kernel::new("my_signal") };
/// assert_eq!(SIGNAL.name(), "my_signal");
/// ```
pub struct Kernel<Args> {
    name: &'static str,
    args: PhantomData<fn(Args)>,
}

impl<Args> Clone for Kernel<Args> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Args> Copy for Kernel<Args> {}
impl<Args> std::fmt::Debug for Kernel<Args> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kernel").field(&self.name).finish()
    }
}

impl<Args: KernelArgs> Kernel<Args> {
    /// The kernel `name` with parameters `Args`.
    ///
    /// # Safety
    /// `Args` lists the kernel's parameter types, in order, with their device layouts.
    ///
    /// ```
    /// // SAFETY: purlin_atom_copy_sm70(dst: *mut u8, src: *const u8, bytes: u64).
    /// let k = unsafe { purlin::launch::Kernel::<(u64, u64, u64)>::new("purlin_atom_copy_sm70") };
    /// ```
    pub const unsafe fn new(name: &'static str) -> Self {
        Self {
            name,
            args: PhantomData,
        }
    }

    /// The entry point's name.
    ///
    /// ```
    /// // SAFETY: example only; never launched.
    /// let k = unsafe { purlin::launch::Kernel::<()>::new("k") };
    /// assert_eq!(k.name(), "k");
    /// ```
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Launches the kernel on `stream` of `gpu` (after checking `shape` against the device and
    /// raising the kernel's shared-memory limit once). Asynchronous and capturable in a CUDA
    /// graph: nothing waits on the host.
    ///
    /// # Safety
    /// Whatever the kernel requires of its arguments (pointers valid for what it touches until
    /// it finishes, the launch shape it assumes).
    ///
    /// ```no_run
    /// use purlin::launch::{Kernel, LaunchShape};
    /// // SAFETY: purlin_atom_copy_sm70(dst, src, bytes).
    /// const COPY: Kernel<(u64, u64, u64)> = unsafe { Kernel::new("purlin_atom_copy_sm70") };
    /// let gpu = purlin::Gpu::open(0)?;
    /// let stream = gpu.new_stream()?;
    /// // SAFETY: zero bytes touch no memory.
    /// unsafe { COPY.launch(&gpu, &stream, LaunchShape::for_atom(purlin::atom::AtomKind::Sm70, 1), (0, 0, 0))? };
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub unsafe fn launch(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        shape: LaunchShape,
        args: Args,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_ordered(gpu, stream, shape, args, StreamOrder::AfterPrevious) }
    }

    /// [`launch`](Self::launch) in the stream order `order`.
    ///
    /// # Safety
    /// As [`launch_on`].
    pub(crate) unsafe fn launch_ordered(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        shape: LaunchShape,
        args: Args,
        order: StreamOrder,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            launch_on(
                gpu,
                stream,
                shape,
                || gpu.function(self.name, shape.smem_bytes),
                args,
                order,
            )
        }
    }
}

/// How a launch starts after the work before it on its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamOrder {
    /// Once that work has finished: a plain launch.
    AfterPrevious,
    /// As soon as the kernel before it lets it (`griddepcontrol.launch_dependents`, or its
    /// end): a programmatic dependent launch (CUDA's programmatic stream serialization,
    /// sm_90 and later). The kernel must wait for that work itself
    /// (`griddepcontrol.wait`, `Atom::await_prior_grids`) before it touches memory.
    Overlapping,
}

/// The one launch path of Purlin's kernels and a module's: checks `shape` against `gpu` and
/// `stream`'s device, then fetches the function (`function`, which also raises its
/// shared-memory limit) and launches it with `args`, in the stream order `order`.
///
/// # Safety
/// `args` match the function's parameters; whatever the kernel requires of them holds until
/// it finishes; with [`StreamOrder::Overlapping`], the kernel waits for the work before it
/// on the stream before it reads or writes memory.
pub(crate) unsafe fn launch_on<Args: KernelArgs>(
    gpu: &Gpu,
    stream: &CudaStream,
    shape: LaunchShape,
    function: impl FnOnce() -> Result<cudarc::driver::CudaFunction>,
    args: Args,
    order: StreamOrder,
) -> Result<()> {
    shape.check(&gpu.limits())?;
    if stream.context().ordinal() != gpu.ordinal() {
        return Err(Error::WrongDevice {
            what: "stream",
            expected: format!("GPU {}", gpu.ordinal()),
            found: format!("GPU {}", stream.context().ordinal()),
        });
    }
    let f = function()?;
    let mut pointers = args.pointers();
    gpu.context().bind_to_thread()?;
    if order == StreamOrder::Overlapping {
        // SAFETY: as below; the kernel waits for the work before it (the caller's contract).
        return unsafe { launch_overlapping(&f, stream, shape, &mut pointers) };
    }
    // SAFETY: `pointers` point into `args`, which outlives the call and matches the kernel's
    // parameters (the caller's contract); the shape was checked above.
    unsafe {
        result::launch_kernel(
            f.cu_function(),
            (shape.blocks, 1, 1),
            (shape.threads, 1, 1),
            shape.smem_bytes,
            stream.cu_stream(),
            &mut pointers,
        )
    }?;
    Ok(())
}

/// `cuLaunchKernelEx` with the programmatic stream serialization attribute
/// ([`StreamOrder::Overlapping`]).
///
/// # Safety
/// As [`launch_on`] with [`StreamOrder::Overlapping`]; `pointers` are the kernel's parameters
/// and the shape was checked.
unsafe fn launch_overlapping(
    f: &cudarc::driver::CudaFunction,
    stream: &CudaStream,
    shape: LaunchShape,
    pointers: &mut [*mut c_void],
) -> Result<()> {
    use cudarc::driver::sys;
    // SAFETY: a plain-data union of integers; all zero is a valid value.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attribute = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: shape.blocks,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: shape.threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shape.smem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: 1,
    };
    // SAFETY: `config` and `attribute` live through the call; the parameters are the
    // caller's contract.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            pointers.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()?;
    Ok(())
}

/// Checks the shape of a kernel of yours that calls a collective (what
/// [`Context::launch`](crate::Context::launch) does before launching): at most
/// [`atom_threads`](crate::collective::atom_threads) threads per block. (Its shared memory is
/// the kernel's contract: [`kernel_shape`](crate::collective::kernel_shape) gives the
/// collectives' full layout.)
///
/// ```
/// use purlin::collective::{atom_threads, check_fused_shape};
/// use purlin::launch::LaunchShape;
/// use purlin::ptx::Arch;
/// let t = atom_threads(Arch::Sm90);
/// assert!(check_fused_shape(Arch::Sm90, &LaunchShape { blocks: 4, threads: t, smem_bytes: 320 }).is_ok());
/// assert!(check_fused_shape(Arch::Sm90, &LaunchShape { blocks: 4, threads: 2 * t, smem_bytes: 320 }).is_err());
/// ```
pub fn check_fused_shape(arch: crate::ptx::Arch, shape: &LaunchShape) -> Result<()> {
    let most = crate::kernels::atom_threads(arch);
    if shape.threads > most {
        return Err(Error::InvalidLaunch(format!(
            "{} threads per block: the {arch} Atom is laid out for at most {most}",
            shape.threads
        )));
    }
    Ok(())
}
