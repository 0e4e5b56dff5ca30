//! Your own PTX (a kernel crate built with [`purlin_builder`], calling Purlin's Atoms and
//! collectives from device code), loaded on a [`Gpu`] and launched with checked shapes and
//! typed parameters, like Purlin's own kernels.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::launch::{KernelArgs, LaunchShape};
use cudarc::driver::{CudaFunction, CudaModule, CudaStream};
use std::sync::Arc;

/// A module of your PTX on one GPU.
///
/// ```no_run
/// # fn demo(my_ptx: &str) -> purlin::Result<()> {
/// // `my_ptx`: e.g. include_str!(concat!(env!("OUT_DIR"), "/my_kernels.sm_90.ptx")) from a
/// // build.rs that ran purlin_builder::Builder on your kernel crate.
/// let gpu = purlin::Gpu::open(0)?;
/// let module = purlin::module::Module::load(&gpu, my_ptx)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Module {
    gpu: Arc<Gpu>,
    module: Arc<CudaModule>,
    /// Loaded kernels, each with the dynamic shared memory it is allowed so far.
    functions: crate::gpu::Kernels,
}

impl Module {
    /// Loads PTX text on `gpu` (the driver compiles it for the device).
    pub fn load(gpu: &Arc<Gpu>, ptx: &str) -> Result<Self> {
        // Every kernel now, not at its first launch (see `gpu::load_eagerly`): a fused kernel
        // whose ranks wait for each other must not wait for a lazy load as well.
        let module = crate::gpu::load_eagerly(gpu.context(), ptx)?;
        Ok(Self {
            gpu: gpu.clone(),
            module,
            functions: Default::default(),
        })
    }

    /// The GPU the module is loaded on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn function(&self, name: &str, smem_bytes: u32) -> Result<CudaFunction> {
        self.functions
            .get(name, smem_bytes, self.gpu.arch(), || Ok(&self.module))
    }

    /// Launches kernel `name` with `shape` and `args` on `stream` (of this module's GPU);
    /// more threads per block than the GPU's native Atom is laid out for are refused
    /// ([`check_fused_shape`](crate::collective::check_fused_shape)). Asynchronous and
    /// capturable in a CUDA graph.
    ///
    /// # Safety
    /// `Args` are the kernel's parameter types in order; the kernel's requirements on its
    /// arguments hold until it has run.
    pub unsafe fn launch<Args: KernelArgs>(
        &self,
        stream: &CudaStream,
        name: &str,
        shape: LaunchShape,
        args: Args,
    ) -> Result<()> {
        shape.check(&self.gpu.limits())?;
        crate::launch::check_fused_shape(self.gpu.arch(), &shape)?;
        // SAFETY: forwarded contract.
        unsafe {
            crate::launch::launch_on(
                &self.gpu,
                stream,
                shape,
                || self.function(name, shape.smem_bytes),
                args,
                crate::launch::StreamOrder::AfterPrevious,
            )
        }
    }
}
