//! CPU emulation: the *same* device code (SNAC, layouts, the [`Host`] Atom) on CPU threads, one
//! thread per (rank, block), with every rank's staging, signals and local state in host
//! memory. It is how the protocol is tested without a GPU, and the CPU backend of `purlin`.
//!
//! A [`Communicator`] owns `world` ranks' buffers (zeroed, 16-byte aligned) and keeps them
//! across calls, so epochs, staging halves and cyclic slots carry over exactly as on a GPU.
//! [`Communicator::launch`] runs any per-block body (a fused kernel, say); [`Communicator::run`]
//! runs one collective from a run-time description. A rank can be left out of a launch (its
//! threads never start), which must end in a timeout [`Fault`] on the others naming it.
//!
//! ```
//! use purlin_device::emulation::{Buffer, Communicator, Launch};
//! use purlin_device::element::DataType;
//! use purlin_device::op::ReduceOpKind;
//! use purlin_device::snac::CollectiveKind;
//! let comm = Communicator::builder(3).build().unwrap();
//! let src: Vec<Buffer> = (0..3).map(|r| Buffer::from_slice(&[r as f32 + 1.0; 7])).collect();
//! let dst: Vec<Buffer> = (0..3).map(|_| Buffer::zeroed(28)).collect();
//! let launch = Launch::new(CollectiveKind::AllReduce, 28).typed(DataType::F32, ReduceOpKind::Sum);
//! comm.run(&launch, &src, &dst, None).unwrap();
//! assert_eq!(dst[2].as_slice::<f32>(), &[6.0; 7]);
//! ```

use crate::atom::Host;
use crate::collective;
use crate::context::{Context, LocalState, MAX_RANKS, WorkspaceLayout};
use crate::element::{DataType, Element};
use crate::op::{ReduceOp, ReduceOpKind, TypedVisitor, dispatch};
use crate::snac::{CollectiveKind, Fault, Plan, Runtime, SnacArgs, smem_bytes};
use core::fmt;
use std::boxed::Box;
use std::time::Duration;
use std::vec::Vec;

/// A heap buffer, zeroed and 16-byte aligned, that emulated blocks on several threads may
/// read and write through raw pointers. Read it with [`Buffer::bytes`] only while no launch is
/// running.
pub struct Buffer {
    ptr: *mut u128,
    words: usize,
    len: usize,
}

// SAFETY: the buffer owns its memory; concurrent access goes through raw pointers under the
// collectives' contracts (no two writers of one byte, readers synchronised by signals).
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let words = len.div_ceil(16).max(1);
        let storage: Box<[u128]> = std::vec![0u128; words].into_boxed_slice();
        Self {
            ptr: Box::into_raw(storage) as *mut u128,
            words,
            len,
        }
    }

    /// A copy of `values`.
    pub fn from_slice<T: Copy>(values: &[T]) -> Self {
        let bytes = core::mem::size_of_val(values);
        let b = Self::zeroed(bytes);
        // SAFETY: `b` holds `bytes` bytes and does not overlap `values`.
        unsafe {
            core::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, b.as_mut_ptr(), bytes)
        };
        b
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte, for reading.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }

    /// The first byte, for writing (the buffer is shared by the emulated blocks).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// The address, as a [`Context`] holds it.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The contents. No launch may be writing the buffer.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes; the caller's contract excludes writers.
        unsafe { core::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// The contents as `T`s (`len / size_of::<T>()` of them). No launch may be writing.
    pub fn as_slice<T: Element>(&self) -> &[T] {
        // SAFETY: 16-byte aligned, initialised bytes; every bit pattern is a valid element.
        unsafe {
            core::slice::from_raw_parts(self.ptr as *const T, self.len / core::mem::size_of::<T>())
        }
    }

    /// Overwrites the contents with `values` (at most `len` bytes). No launch may be running.
    pub fn write<T: Copy>(&self, values: &[T]) {
        let bytes = core::mem::size_of_val(values).min(self.len);
        // SAFETY: inside the buffer; no concurrent access by contract.
        unsafe {
            core::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, self.as_mut_ptr(), bytes)
        };
    }

    /// Fills every byte with `byte` (to poison an output). No launch may be running.
    pub fn fill(&self, byte: u8) {
        // SAFETY: inside the buffer; no concurrent access by contract.
        unsafe { core::ptr::write_bytes(self.as_mut_ptr(), byte, self.len) };
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::into_raw` of `words` u128s.
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.ptr, self.words)) });
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// What can go wrong in the emulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmulationError {
    /// `world` is 0 or above [`MAX_RANKS`].
    World(u32),
    /// A launch asked for 0 or more than `MAX_BLOCKS` blocks.
    Blocks(u32),
    /// Fewer buffers than ranks were given.
    Buffers,
    /// One or more ranks recorded a fault (one per rank that did, in rank order).
    Faults(Vec<Fault>),
}

impl fmt::Display for EmulationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::World(w) => write!(f, "world {w} is not in 1..={MAX_RANKS}"),
            Self::Blocks(b) => write!(f, "{b} blocks is not in 1..={}", crate::context::MAX_BLOCKS),
            Self::Buffers => write!(f, "every rank needs its buffers"),
            Self::Faults(faults) => {
                write!(f, "{} rank(s) faulted", faults.len())?;
                for fault in faults {
                    write!(f, "; {fault}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for EmulationError {}

/// Sizes and timeout of an emulated communicator.
#[derive(Clone, Copy, Debug)]
pub struct CommunicatorBuilder {
    world: u32,
    staging_half_bytes: u64,
    latency_window_bytes: u64,
    timeout: Duration,
}

impl CommunicatorBuilder {
    /// Bytes of one throughput staging half (small values force cyclic staging).
    pub fn staging_half_bytes(mut self, bytes: u64) -> Self {
        self.staging_half_bytes = bytes;
        self
    }

    /// Bytes of one latency window (one sender's packets, one half; a multiple of 32).
    pub fn latency_window_bytes(mut self, bytes: u64) -> Self {
        self.latency_window_bytes = bytes;
        self
    }

    /// How long a wait may spin before the call faults.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Allocates every rank's buffers.
    pub fn build(self) -> Result<Communicator, EmulationError> {
        if self.world == 0 || self.world as usize > MAX_RANKS {
            return Err(EmulationError::World(self.world));
        }
        let layout = WorkspaceLayout::new(
            self.world,
            self.staging_half_bytes,
            self.latency_window_bytes,
        );
        let ranks = (0..self.world)
            .map(|_| RankMemory {
                staging: Buffer::zeroed(layout.staging_bytes() as usize),
                signals: Buffer::zeroed(layout.signal_bytes() as usize),
                state: Buffer::zeroed(layout.state_bytes() as usize),
            })
            .collect();
        Ok(Communicator {
            layout,
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            ranks,
        })
    }
}

struct RankMemory {
    staging: Buffer,
    signals: Buffer,
    state: Buffer,
}

/// `world` emulated ranks and their symmetric and local buffers.
pub struct Communicator {
    layout: WorkspaceLayout,
    timeout_ns: u64,
    ranks: Vec<RankMemory>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("layout", &self.layout)
            .field("timeout_ns", &self.timeout_ns)
            .finish()
    }
}

impl Communicator {
    /// A builder: 64 KiB staging halves, 16 KiB latency windows, 10 s timeout.
    pub fn builder(world: u32) -> CommunicatorBuilder {
        CommunicatorBuilder {
            world,
            staging_half_bytes: 64 << 10,
            latency_window_bytes: 16 << 10,
            timeout: Duration::from_secs(10),
        }
    }

    /// Ranks.
    pub fn world(&self) -> u32 {
        self.layout.world
    }

    /// The buffer sizes.
    pub fn layout(&self) -> WorkspaceLayout {
        self.layout
    }

    /// Rank `rank`'s context, as a kernel of that rank receives it.
    pub fn context(&self, rank: u32) -> Context {
        let mut staging = [0u64; MAX_RANKS];
        let mut signals = [0u64; MAX_RANKS];
        for (r, m) in self.ranks.iter().enumerate() {
            staging[r] = m.staging.addr();
            signals[r] = m.signals.addr();
        }
        Context {
            staging,
            signals,
            state: self.ranks[rank as usize].state.addr(),
            staging_half_bytes: self.layout.staging_half_bytes,
            latency_window_bytes: self.layout.latency_window_bytes,
            timeout_ns: self.timeout_ns,
            rank,
            world: self.layout.world,
        }
    }

    /// The fault recorded by `rank`, if any.
    pub fn fault(&self, rank: u32) -> Option<Fault> {
        let state = self.ranks[rank as usize].state.bytes();
        let record: &[u8; 64] = state[LocalState::FAULT..LocalState::FAULT + 64]
            .try_into()
            .ok()?;
        Fault::decode(record)
    }

    /// Runs `body(rank, block, ctx, smem)` on one thread per (rank, block), `blocks` blocks
    /// per rank, every rank but `absent`; returns when all are done. `smem` is the block's
    /// shared memory ([`smem_bytes::<Host>()`](smem_bytes) bytes). Errors with every present
    /// rank's fault if any recorded one.
    pub fn launch<F>(&self, blocks: u32, absent: Option<u32>, body: F) -> Result<(), EmulationError>
    where
        F: Fn(u32, u32, Context, *mut u8) + Sync,
    {
        if blocks == 0 || blocks as usize > crate::context::MAX_BLOCKS {
            return Err(EmulationError::Blocks(blocks));
        }
        let body = &body;
        std::thread::scope(|scope| {
            for rank in (0..self.world()).filter(|r| Some(*r) != absent) {
                let ctx = self.context(rank);
                for block in 0..blocks {
                    scope.spawn(move || {
                        let smem = Buffer::zeroed(smem_bytes::<Host>() as usize);
                        body(rank, block, ctx, smem.as_mut_ptr());
                    });
                }
            }
        });
        let faults: Vec<Fault> = (0..self.world())
            .filter(|r| Some(*r) != absent)
            .filter_map(|r| self.fault(r))
            .collect();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(EmulationError::Faults(faults))
        }
    }

    /// Runs one collective: `src[r]` and `dst[r]` are rank `r`'s buffers, `counts[r]` its V
    /// counts (u64, in device-memory form). Sizes as [`SnacArgs`] documents.
    pub fn run(
        &self,
        launch: &Launch,
        src: &[Buffer],
        dst: &[Buffer],
        counts: Option<&[Buffer]>,
    ) -> Result<(), EmulationError> {
        let world = self.world() as usize;
        if src.len() < world
            || dst.len() < world
            || (launch.collective.is_v() && counts.is_none_or(|c| c.len() < world))
        {
            return Err(EmulationError::Buffers);
        }
        let l = *launch;
        self.launch(l.blocks, l.absent, |rank, block, ctx, smem| {
            let r = rank as usize;
            let mut args = SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), l.bytes, l.blocks);
            args.block = block;
            args.smem = smem;
            args.plan = l.plan;
            args.elem_bytes = l.elem_bytes;
            if let Some(c) = counts {
                args.counts = c[r].as_ptr() as *const u64;
            }
            // SAFETY: every rank's buffers are live for the launch; sizes are the caller's
            // contract (as on a GPU).
            unsafe { call(l, args, ctx) };
        })
    }
}

/// One collective call, described at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Which collective.
    pub collective: CollectiveKind,
    /// Element type (reductions).
    pub dtype: DataType,
    /// Operator (reductions).
    pub op: ReduceOpKind,
    /// `SnacArgs::bytes`.
    pub bytes: u64,
    /// `SnacArgs::elem_bytes` (copy V collectives).
    pub elem_bytes: u32,
    /// Blocks per rank.
    pub blocks: u32,
    /// The tuning knobs.
    pub plan: Plan,
    /// A rank whose threads never start.
    pub absent: Option<u32>,
}

impl Launch {
    /// `collective` of `bytes` (f32 sum, 1-byte elements for copies, 2 blocks, default plan).
    pub fn new(collective: CollectiveKind, bytes: u64) -> Self {
        Self {
            collective,
            dtype: DataType::F32,
            op: ReduceOpKind::Sum,
            bytes,
            elem_bytes: 1,
            blocks: 2,
            plan: Plan::DEFAULT,
            absent: None,
        }
    }

    /// With element type and operator.
    pub fn typed(mut self, dtype: DataType, op: ReduceOpKind) -> Self {
        self.dtype = dtype;
        self.op = op;
        self
    }
}

/// Calls the device entry point of `launch.collective` on this thread.
///
/// # Safety
/// As the entry point.
unsafe fn call(launch: Launch, args: SnacArgs, ctx: Context) {
    struct Typed {
        collective: CollectiveKind,
        args: SnacArgs,
        ctx: Context,
    }
    impl TypedVisitor for Typed {
        type Output = ();
        fn visit<T: Element, O: ReduceOp>(self) {
            let (a, c) = (self.args, self.ctx);
            // SAFETY: forwarded contract.
            unsafe {
                match self.collective {
                    CollectiveKind::AllReduce => {
                        collective::all_reduce::<Host, Runtime, T, O>(a, c)
                    }
                    CollectiveKind::ReduceScatter => {
                        collective::reduce_scatter::<Host, Runtime, T, O>(a, c)
                    }
                    CollectiveKind::ReduceScatterV => {
                        collective::reduce_scatter_v::<Host, Runtime, T, O>(a, c)
                    }
                    _ => {}
                }
            }
        }
    }
    // SAFETY: forwarded contract.
    unsafe {
        match launch.collective {
            CollectiveKind::AllGather => collective::all_gather::<Host, Runtime>(args, ctx),
            CollectiveKind::AllGatherV => collective::all_gather_v::<Host, Runtime>(args, ctx),
            CollectiveKind::AllToAll => collective::all_to_all::<Host, Runtime>(args, ctx),
            CollectiveKind::AllToAllV => collective::all_to_all_v::<Host, Runtime>(args, ctx),
            kind => dispatch(
                launch.dtype,
                launch.op,
                Typed {
                    collective: kind,
                    args,
                    ctx,
                },
            ),
        }
    }
}
