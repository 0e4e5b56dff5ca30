//! One GPU as Purlin uses it: its CUDA context, its architecture, and Purlin's kernel module
//! loaded once per (device, architecture) and shared by every handle.

use crate::error::{Error, Result};
use crate::ptx::{self, Arch};
use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A GPU with Purlin's kernels loaded.
///
/// Opening it turns cudarc's per-allocation event tracking off for the device's (primary)
/// context, for every user of that context: Purlin passes raw addresses and captures launches
/// into graphs, where the tracking's stream waits get in the way. Without tracking, cudarc
/// orders a buffer's free only by the stream it was allocated on; Purlin's safe typed
/// collectives therefore accept only buffers of the context's stream, and code of your own on
/// this context must order cross-stream use itself (events), as with plain CUDA.
///
/// ```no_run
/// let gpu = purlin::Gpu::open(0)?;
/// println!("{} (sm_{}), {} SMs", gpu.name(), gpu.compute_capability(), gpu.sm_count());
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Debug)]
pub struct Gpu {
    ordinal: usize,
    context: Arc<CudaContext>,
    arch: Arch,
    module: Arc<CudaModule>,
    atom_module: OnceLock<Arc<CudaModule>>,
    compute_capability: u32,
    sm_count: u32,
    limits: DeviceLimits,
    name: String,
    /// Loaded kernels, each with the dynamic shared memory it is allowed so far.
    functions: Kernels,
}

/// Loaded GPUs by (ordinal, architecture).
type Registry = Mutex<HashMap<(usize, Arch), Arc<Gpu>>>;

/// Loaded GPUs, one per (ordinal, architecture): module loading happens once per device.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The launch limits of a device.
///
/// ```no_run
/// let limits = purlin::Gpu::open(0)?.limits();
/// assert!(limits.max_threads_per_block >= 1024);
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most dynamic shared memory one block may opt in to.
    pub max_smem_per_block: u32,
    /// Most blocks in the grid's x dimension.
    pub max_blocks: u32,
}

/// Kernels fetched from modules, each with the dynamic shared memory it is allowed so far
/// (48 KiB until raised): what [`Gpu`] and [`Module`](crate::module::Module) share.
#[derive(Debug, Default)]
pub(crate) struct Kernels(Mutex<HashMap<String, (CudaFunction, u32)>>);

impl Kernels {
    /// Kernel `name`, fetched from `module()` the first time (a missing one is
    /// [`Error::MissingKernel`] for `arch`), allowed at least `smem_bytes`. A kernel launched
    /// lean first (SNAC's scratch only) and with the Atom's shared memory later is raised
    /// then: the limit only grows.
    pub(crate) fn get<'m>(
        &self,
        name: &str,
        smem_bytes: u32,
        arch: Arch,
        module: impl FnOnce() -> Result<&'m Arc<CudaModule>>,
    ) -> Result<CudaFunction> {
        let mut kernels = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !kernels.contains_key(name) {
            let f = module()?.load_function(name).map_err(|e| match e.0 {
                cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND => Error::MissingKernel {
                    name: name.to_owned(),
                    arch,
                },
                _ => Error::Driver(e),
            })?;
            kernels.insert(name.to_owned(), (f, 48 * 1024));
        }
        // Every launch passes here: a cached kernel whose limit suffices costs one lookup.
        let (f, allowed) = kernels.get_mut(name).expect("inserted above");
        if smem_bytes > *allowed {
            f.set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem_bytes as i32,
            )?;
            *allowed = smem_bytes;
        }
        Ok(f.clone())
    }
}

impl Gpu {
    /// Whether the NVIDIA driver library can be loaded on this machine.
    /// ```
    /// if !purlin::Gpu::driver_present() {
    ///     println!("no NVIDIA driver: the CPU emulation only");
    /// }
    /// ```
    pub fn driver_present() -> bool {
        // SAFETY: only tries to dlopen the driver library.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    /// Number of GPUs (0 when there is no driver).
    /// ```
    /// let gpus = purlin::Gpu::count()?; // 0 without a driver
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn count() -> Result<usize> {
        if !Self::driver_present() {
            return Ok(0);
        }
        Ok(CudaContext::device_count()? as usize)
    }

    /// GPU `ordinal` with the PTX of the newest architecture it can run.
    /// ```
    /// match purlin::Gpu::open(0) {
    ///     Ok(gpu) => println!("{}", gpu.name()),
    ///     Err(purlin::Error::NoDriver | purlin::Error::NoDevice { .. }) => println!("no GPU"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        Self::open_with(ordinal, None)
    }

    /// GPU `ordinal` with the PTX of `arch` (older PTX runs through the driver's JIT); an
    /// architecture newer than the device is refused.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// let sm80 = purlin::Gpu::open_arch(0, purlin::ptx::Arch::Sm80)?; // Ampere code on any newer GPU
    /// assert_eq!(sm80.arch(), purlin::ptx::Arch::Sm80);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn open_arch(ordinal: usize, arch: Arch) -> Result<Arc<Gpu>> {
        Self::open_with(ordinal, Some(arch))
    }

    /// GPU `ordinal` with the PTX of the architecture chosen at compile time by the original's
    /// `ARCH` template value: 700, 800, 900 or 1000 (any other value does not compile); an
    /// architecture newer than the device is refused with [`Error::ArchUnsupported`].
    ///
    /// ```no_run
    /// let gpu = purlin::Gpu::open_for::<800>(0)?; // the Sm80 datapath, even on a Hopper
    /// assert_eq!(gpu.arch(), purlin::ptx::Arch::Sm80);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    ///
    /// ```compile_fail
    /// let gpu = purlin::Gpu::open_for::<750>(0);
    /// ```
    pub fn open_for<const ARCH: u32>(ordinal: usize) -> Result<Arc<Gpu>> {
        let arch = const {
            match crate::ptx::arch_from_code(ARCH) {
                Some(a) => a,
                None => panic!("ARCH must be 700, 800, 900 or 1000"),
            }
        };
        Self::open_arch(ordinal, arch)
    }

    fn open_with(ordinal: usize, arch: Option<Arch>) -> Result<Arc<Gpu>> {
        if !Self::driver_present() {
            return Err(Error::NoDriver);
        }
        let count = CudaContext::device_count()? as usize;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let context = CudaContext::new(ordinal)?;
        let (major, minor) = context.compute_capability()?;
        let cc = (major * 10 + minor) as u32;
        let arch = match arch {
            Some(a) if a.compute_capability() > cc => {
                return Err(Error::ArchUnsupported {
                    arch: a,
                    major,
                    minor,
                });
            }
            Some(a) => a,
            None => Arch::for_compute_capability(cc).ok_or(Error::ArchUnsupported {
                arch: Arch::Sm70,
                major,
                minor,
            })?,
        };
        let mut loaded = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gpu) = loaded.get(&(ordinal, arch)) {
            return Ok(gpu.clone());
        }
        // Purlin passes raw device addresses and captures launches into graphs: cudarc's
        // per-allocation event tracking would add stream waits that neither needs.
        // SAFETY: no CudaSlice of this context is shared between streams by Purlin.
        unsafe { context.disable_event_tracking() };
        let module = load_embedded(&context, ptx::kernels(arch))?;
        let sm_count = context.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        use cudarc::driver::sys::CUdevice_attribute as A;
        let limits = DeviceLimits {
            max_threads_per_block: context
                .attribute(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?
                as u32,
            max_smem_per_block: context
                .attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as u32,
            max_blocks: context.attribute(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)? as u32,
        };
        let gpu = Arc::new(Gpu {
            ordinal,
            limits,
            name: context.name()?,
            context,
            arch,
            module,
            atom_module: OnceLock::new(),
            compute_capability: cc,
            sm_count,
            functions: Kernels::default(),
        });
        // Every collective kernel (both builds) is fetched, with its full shared-memory limit,
        // now, so that no launch between queued calls does more than launch: anything that
        // waits for the device to go idle there leaves the peers' kernels waiting for this
        // rank until they time out (the cause measured on the H200 was the local-memory growth
        // `reserve_local_memory` prevents; this keeps first fetches out of the launch path too).
        let (_, smem) = crate::kernels::kernel_shape(arch);
        for name in crate::kernels::kernel_names() {
            gpu.function(name, smem)?;
        }
        tracing::debug!(ordinal, %arch, name = %gpu.name, "loaded Purlin kernels");
        loaded.insert((ordinal, arch), gpu.clone());
        Ok(gpu)
    }

    /// The device ordinal.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// assert_eq!(gpu.ordinal(), 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The CUDA context (the device's primary context).
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// let (free, total) = gpu.context().mem_get_info()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The architecture of the loaded PTX.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// println!("running {} code", gpu.arch());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Compute capability as `major * 10 + minor` (90 for Hopper).
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// assert!(gpu.compute_capability() >= 70);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn compute_capability(&self) -> u32 {
        self.compute_capability
    }

    /// Streaming multiprocessors.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// let blocks = 2 * gpu.sm_count();
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The launch limits of the device.
    ///
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// println!("{} B of shared memory per block", gpu.limits().max_smem_per_block);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn limits(&self) -> DeviceLimits {
        self.limits
    }

    /// The device name.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// println!("{}", gpu.name());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A new stream on this GPU.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// let stream = gpu.new_stream()?;
    /// stream.synchronize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        Ok(self.context.new_stream()?)
    }

    /// Kernel `name` of the loaded PTX, allowed `smem_bytes` of dynamic shared memory
    /// (cached; the shared-memory limit is raised when a launch needs more than before). The
    /// grid-wide Atom kernels (`purlin_atom_*`, `purlin_test_*`) live in a module of their own,
    /// loaded (and so compiled by the driver) the first time one of them is asked for.
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// let f = gpu.function("purlin_atom_copy_sm70", 0)?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn function(&self, name: &str, smem_bytes: u32) -> Result<CudaFunction> {
        self.functions.get(name, smem_bytes, self.arch, || {
            if name.starts_with("purlin_atom_") || name.starts_with("purlin_test_") {
                self.atom_module()
            } else {
                Ok(&self.module)
            }
        })
    }

    /// Loads the grid-wide Atom kernels now (the driver compiles them: seconds on first use in
    /// a process, or less from its JIT cache). Loading a kernel may wait for the whole device
    /// to go idle, so do it before queuing work that waits for an Atom launch of another rank
    /// (a stream wait, a spinning kernel): [`Window::new`](crate::p2p::Window::new) does.
    /// ```no_run
    /// purlin::Gpu::open(0)?.load_atom_kernels()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn load_atom_kernels(&self) -> Result<()> {
        self.atom_module().map(|_| ())
    }

    /// The Atom kernels' module, loaded on first use.
    fn atom_module(&self) -> Result<&Arc<CudaModule>> {
        if let Some(m) = self.atom_module.get() {
            return Ok(m);
        }
        let loaded = load_embedded(&self.context, ptx::atom_kernels(self.arch))?;
        Ok(self.atom_module.get_or_init(|| loaded))
    }
}

/// The kernels (`.entry` names) of a PTX text.
pub(crate) fn entries(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|line| {
        let rest = line.trim_start();
        let rest = rest.strip_prefix(".visible ").unwrap_or(rest);
        let name = rest.strip_prefix(".entry ")?;
        name.split(['(', ' ']).next().filter(|n| !n.is_empty())
    })
}

/// Loads a PTX module with every kernel in it. Under the driver's lazy loading (the default
/// since CUDA 12.2), a kernel is loaded at its first launch, and loading can wait for the
/// device to go idle: on the virtual node, rank 0's first launch would then wait for rank 1's
/// kernel (or stream wait), which waits for rank 0. Loading everything up front removes that
/// deadlock.
pub(crate) fn load_eagerly(context: &Arc<CudaContext>, ptx: &str) -> Result<Arc<CudaModule>> {
    load_image(context, cudarc::nvrtc::Ptx::from_src(ptx), ptx)
}

/// One of Purlin's embedded modules: its precompiled cubin when there is one (see
/// [`ptx::precompiled`]), else its PTX.
fn load_embedded(
    context: &Arc<CudaContext>,
    embedded: &ptx::EmbeddedPtx,
) -> Result<Arc<CudaModule>> {
    let text = embedded.text();
    match ptx::precompiled(embedded) {
        Some(mut cubin) => {
            tracing::debug!(stem = embedded.stem, "loading a precompiled cubin");
            // `cuModuleLoadData` reads a cubin by its own header; a NUL after it costs nothing.
            cubin.push(0);
            load_image(context, cudarc::nvrtc::Ptx::from_binary(cubin), text)
        }
        None => load_eagerly(context, text),
    }
}

/// Loads a module image (PTX or cubin) and every kernel the PTX `text` declares.
fn load_image(
    context: &Arc<CudaContext>,
    image: cudarc::nvrtc::Ptx,
    text: &str,
) -> Result<Arc<CudaModule>> {
    let ptx = text;
    let module = context.load_module(image)?;
    let mut local_bytes = 0;
    for name in entries(ptx) {
        let f = module.load_function(name)?;
        // SAFETY: a function handle of a module this context just loaded.
        unsafe { cudarc::driver::sys::cuFuncLoad(f.cu_function()) }.result()?;
        local_bytes = local_bytes.max(f.local_size_bytes()?.max(0) as usize);
    }
    reserve_local_memory(context, local_bytes)?;
    Ok(module)
}

/// Makes the context's per-thread local memory (its stack limit) at least `bytes`, now.
///
/// The driver sizes local memory for the largest per-thread need launched so far, and a
/// launch that needs more grows it first, which waits for every kernel on the GPU to finish:
/// a rank whose launch did that while a peer's collective waited for it left both waiting
/// until the timeout (H200, 672f8ae: the first ReduceScatter of a queued sequence at world 2,
/// whose kernels keep 1056 bytes per thread (`ptxas -v`), above the default 1024, blocked its
/// host thread in `cuLaunchKernel` for the whole 5 s timeout in 5 runs of 6). Loading a module
/// already waits for the GPU, so reserving here costs nothing a launch would not.
fn reserve_local_memory(context: &Arc<CudaContext>, bytes: usize) -> Result<()> {
    use cudarc::driver::sys::CUlimit::CU_LIMIT_STACK_SIZE;
    if bytes > context.get_limit(CU_LIMIT_STACK_SIZE)? {
        tracing::debug!(bytes, "raising the per-thread stack limit");
        context.set_limit(CU_LIMIT_STACK_SIZE, bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::entries;
    use crate::ptx::{self, Arch};

    #[test]
    fn entries_name_every_kernel_of_the_embedded_ptx() {
        let text = ptx::kernels(Arch::Sm90).text();
        let names: Vec<&str> = entries(text).collect();
        assert_eq!(names.len(), text.matches(".entry ").count());
        assert!(names.contains(&"purlin_all_reduce_bfloat16"));
        assert!(names.contains(&"purlin_all_gather_v"));
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        );
        let atoms: Vec<&str> = entries(ptx::atom_kernels(Arch::Sm70).text()).collect();
        assert!(atoms.contains(&"purlin_atom_copy_sm70"));
    }
}
