//! How a call is shaped and launched: the table's launch shape and plan, capped for the ranks
//! sharing the GPU, the lean shape of the latency paths, and the launch of the kernel.

use super::*;

impl Context {
    /// The launch shape and plan of a collective call of dispatch size `bytes` (see
    /// `purlin-tuning`): the table's (or the options'), with the mode and algorithm applied,
    /// and the blocks capped so that the blocks of every rank sharing the GPU are resident at
    /// once; a call that runs a latency path ([`purlin_device::collective::lean`]) gets SNAC's
    /// scratch only as shared memory and fewer blocks. Host-launched collectives use it; use
    /// it too for a kernel of yours that calls a collective (put the plan in `SnacArgs::plan`,
    /// launch `shape.blocks` blocks with at least `shape.smem_bytes` of dynamic shared memory
    /// at `SnacArgs::smem`: the collective sees how much it got and runs only the paths that
    /// fit).
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context) -> purlin::Result<()> {
    /// use purlin::collective::{CollectiveKind, Options};
    /// let (shape, plan) = ctx.plan(CollectiveKind::AllGather, 1 << 20, &Options::default())?;
    /// assert!(shape.blocks >= 1 && plan.chunk_bytes > 0);
    /// # Ok(()) }
    /// ```
    pub fn plan(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        options: &Options,
    ) -> Result<(LaunchShape, Plan)> {
        // A kernel of the caller's may hold no more than one block per SM.
        self.plan_resident(kind, bytes, options, |_, _, _| Ok(1))
    }

    /// [`Context::plan`] for a kernel of which `per_sm(lean, threads, smem_bytes)` blocks fit
    /// on one SM: the blocks of every rank sharing the GPU stay resident at once.
    fn plan_resident(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        options: &Options,
        per_sm: impl FnOnce(bool, u32, u32) -> Result<u32>,
    ) -> Result<(LaunchShape, Plan)> {
        let gpu = self.gpu().ok_or_else(host_context)?;
        let choice = match options.choice {
            Some(c) => c,
            None => table()?.lookup(gpu.compute_capability(), self.world(), kind, bytes),
        };
        check_choice(&choice, kind, bytes)?;
        let mut plan = choice.plan;
        plan.mode = options.mode as u32;
        plan.trace = options.trace as u32;
        if let Some(a) = options.algorithm {
            plan.algorithm = a as u32;
        }
        let (threads, mut smem_bytes) = kernel_shape(gpu.arch());
        plan.threads = threads;
        // A call whose path needs none of the Atom's shared memory (packets, a register copy
        // at world 1) launches with SNAC's scratch only and as many blocks as its bytes need:
        // a smaller launch starts sooner. The device takes the same decision from the same
        // arguments (`SnacArgs::smem_bytes` tells it what it got).
        let lean = self.is_lean(kind, bytes, &plan);
        if lean {
            smem_bytes = purlin_device::snac::SNAC_SMEM_BYTES;
        }
        // Blocks wait for each other across ranks: all of them must be resident at once.
        let on_one_sm = per_sm(lean, threads, smem_bytes)?.max(1);
        let ranks_here = self.workspace().ranks_on_this_gpu().max(1);
        let resident = (gpu.sm_count().saturating_mul(on_one_sm) / ranks_here).max(1);
        let mut blocks = choice.blocks.min(resident);
        if lean {
            blocks = purlin_device::collective::lean_blocks(self.world(), bytes, threads, blocks);
        }
        let shape = LaunchShape {
            blocks,
            threads,
            smem_bytes,
        };
        Ok((shape, plan))
    }

    /// Whether a call of dispatch size `bytes` with `plan` runs a latency path (the device's
    /// decision, from the same arguments).
    fn is_lean(&self, kind: CollectiveKind, bytes: u64, plan: &Plan) -> bool {
        let window = self.workspace().requirements().latency_window_bytes;
        purlin_device::collective::lean(kind, self.world(), bytes, plan, window)
    }

    /// Launches a checked call.
    ///
    /// # Safety
    /// The buffers in `call.args` are valid for the call and stay so until it has run.
    pub(super) unsafe fn launch_call(
        &self,
        mut call: Checked,
        options: &Options,
        bytes: u64,
    ) -> Result<()> {
        let gpu = self.gpu().ok_or_else(host_context)?;
        let mut name = "";
        let (shape, plan) = self.plan_resident(call.kind, bytes, options, |lean, threads, smem| {
            name = kernel_name(call.kind, call.dtype, lean);
            gpu.blocks_per_sm(name, threads, smem)
        })?;
        call.args.plan = plan;
        call.args.blocks = shape.blocks;
        let ctx = self.device_view();
        match call.op {
            Some(op) => {
                // SAFETY: a reduction kernel of purlin-kernels takes (SnacArgs, Context, op: u32).
                let kernel: Kernel<(SnacArgs, purlin_device::context::Context, u32)> =
                    unsafe { Kernel::new(name) };
                // SAFETY: forwarded contract.
                unsafe { self.launch(&kernel, shape, (call.args, ctx, op as u32)) }
            }
            None => {
                // SAFETY: a copy kernel of purlin-kernels takes (SnacArgs, Context).
                let kernel: Kernel<(SnacArgs, purlin_device::context::Context)> =
                    unsafe { Kernel::new(name) };
                // SAFETY: forwarded contract.
                unsafe { self.launch(&kernel, shape, (call.args, ctx)) }
            }
        }
    }
}
