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
        let (threads, smem) = kernel_shape(gpu.arch());
        plan.threads = threads;
        // Blocks wait for each other across ranks: all of them must be resident at once. The
        // collective kernels hold one block per SM (see purlin-kernels).
        let resident = (gpu.sm_count() / self.workspace().ranks_on_this_gpu().max(1)).max(1);
        let mut shape = LaunchShape {
            blocks: choice.blocks.min(resident),
            threads,
            smem_bytes: smem,
        };
        // A call whose path needs none of the Atom's shared memory (packets, a register copy
        // at world 1) launches with SNAC's scratch only and as many blocks as its bytes need:
        // a smaller launch starts sooner. The device takes the same decision from the same
        // arguments (`SnacArgs::smem_bytes` tells it what it got).
        if self.is_lean(kind, bytes, &plan) {
            shape.smem_bytes = purlin_device::snac::SNAC_SMEM_BYTES;
            shape.blocks =
                purlin_device::collective::lean_blocks(self.world(), bytes, threads, shape.blocks);
            // Such a call may overlap the next one on its stream: then a rank holds the
            // blocks of two calls at once, which must still fit beside every other rank's.
            plan.launch_dependents = (!options.strict_order
                && overlaps_launches(gpu.arch())
                && 2 * shape.blocks <= resident) as u32;
        }
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
        let (shape, plan) = self.plan(call.kind, bytes, options)?;
        call.args.plan = plan;
        call.args.blocks = shape.blocks;
        let name = kernel_name(call.kind, call.dtype, self.is_lean(call.kind, bytes, &plan));
        // The call that may let its successor start early may also start early itself: its
        // kernel waits for the work before it before touching memory (`collective::check`).
        let order = if plan.launch_dependents != 0 {
            StreamOrder::Overlapping
        } else {
            StreamOrder::AfterPrevious
        };
        let ctx = self.device_view();
        match call.op {
            Some(op) => {
                // SAFETY: a reduction kernel of purlin-kernels takes (SnacArgs, Context, op: u32).
                let kernel: Kernel<(SnacArgs, purlin_device::context::Context, u32)> =
                    unsafe { Kernel::new(name) };
                // SAFETY: forwarded contract.
                unsafe { self.launch_ordered(&kernel, shape, (call.args, ctx, op as u32), order) }
            }
            None => {
                // SAFETY: a copy kernel of purlin-kernels takes (SnacArgs, Context).
                let kernel: Kernel<(SnacArgs, purlin_device::context::Context)> =
                    unsafe { Kernel::new(name) };
                // SAFETY: forwarded contract.
                unsafe { self.launch_ordered(&kernel, shape, (call.args, ctx), order) }
            }
        }
    }
}

/// Whether `arch`'s collectives can be launched while the kernel before them runs: sm_90 and
/// later have programmatic dependent launch, and their Atoms wait for that kernel in the
/// collective's check (`Atom::await_prior_grids`).
fn overlaps_launches(arch: crate::ptx::Arch) -> bool {
    arch.compute_capability() >= 90
}
