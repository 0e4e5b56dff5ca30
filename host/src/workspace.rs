//! The symmetric workspace of one rank: staging (two throughput halves, then two latency
//! halves of one window per sender), signals, and the local protocol state, laid out as
//! [`purlin_device::context::WorkspaceLayout`] says. Declare what you need with
//! [`WorkspaceRequirements`], then allocate it on every rank with [`Workspace::new`].
//!
//! ```
//! use purlin::bootstrap::run_in_process;
//! use purlin::memory::HostAllocator;
//! use purlin::workspace::{Workspace, WorkspaceRequirements};
//! let req = WorkspaceRequirements::small();
//! let ok = run_in_process(2, |b| {
//!     let ws = Workspace::new(&b, HostAllocator::new(), req)?;
//!     // Every rank sees every rank's staging.
//!     assert_ne!(ws.staging(0)?, ws.staging(1)?);
//!     ws.finalize()
//! })?;
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::allocation::Symmetric;
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::{Allocator, MIN_ALIGN, Memory};
use crate::validate;
use purlin_device::context::{LocalState, WorkspaceLayout};
use std::sync::Arc;

/// Alignment of each part of the slab (staging, signals).
pub const PART_ALIGN: u64 = 256;

/// What a workspace needs, declared before anything is allocated. The defaults are the
/// original's: 256 MiB throughput staging halves and 4 MiB latency windows.
///
/// ```
/// use purlin::workspace::WorkspaceRequirements;
/// let req = WorkspaceRequirements { staging_half_bytes: 8 << 20, ..Default::default() };
/// assert_eq!(req.latency_window_bytes, 4 << 20);
/// // Per rank at world 8: 2 × 8 MiB staging + 2 × 8 × 4 MiB windows + signals + state.
/// assert!(req.bytes_per_rank(8)? > (16 << 20) + (64 << 20));
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceRequirements {
    /// Bytes of one throughput staging half (payloads above it are staged cyclically).
    pub staging_half_bytes: u64,
    /// Bytes of one latency window: one sender's packets to one receiver, in one half
    /// (packets are 16 bytes with 8 of payload).
    pub latency_window_bytes: u64,
}

impl Default for WorkspaceRequirements {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl WorkspaceRequirements {
    /// The original's sizes: 256 MiB staging halves, 4 MiB latency windows.
    pub const DEFAULT: Self = Self {
        staging_half_bytes: 256 << 20,
        latency_window_bytes: 4 << 20,
    };

    /// Small sizes for tests (1 MiB halves, 64 KiB windows), which push modest payloads into
    /// cyclic staging.
    ///
    /// ```
    /// let small = purlin::workspace::WorkspaceRequirements::small();
    /// assert!(small.staging_half_bytes < purlin::workspace::WorkspaceRequirements::DEFAULT.staging_half_bytes);
    /// ```
    pub const fn small() -> Self {
        Self {
            staging_half_bytes: 1 << 20,
            latency_window_bytes: 64 << 10,
        }
    }

    /// Checks the sizes: both non-zero multiples of 16 bytes, windows at least two packets.
    ///
    /// ```
    /// use purlin::workspace::WorkspaceRequirements;
    /// assert!(WorkspaceRequirements::default().check().is_ok());
    /// let odd = WorkspaceRequirements { staging_half_bytes: 1000, ..Default::default() };
    /// assert!(odd.check().is_err());
    /// ```
    pub fn check(&self) -> Result<()> {
        let bad = |what, reason: String| Err(Error::InvalidRequirements { what, reason });
        if self.staging_half_bytes == 0 || !self.staging_half_bytes.is_multiple_of(16) {
            return bad(
                "staging_half_bytes",
                format!(
                    "{} is not a positive multiple of 16",
                    self.staging_half_bytes
                ),
            );
        }
        if self.latency_window_bytes < 32 || !self.latency_window_bytes.is_multiple_of(16) {
            return bad(
                "latency_window_bytes",
                format!(
                    "{} is not a multiple of 16 of at least 32 (two packets)",
                    self.latency_window_bytes
                ),
            );
        }
        Ok(())
    }

    /// The device-side layout for `world` ranks.
    ///
    /// ```
    /// let l = purlin::workspace::WorkspaceRequirements::small().layout(2);
    /// assert_eq!(l.staging_bytes(), 2 * (1 << 20) + 2 * 2 * (64 << 10));
    /// ```
    pub const fn layout(&self, world: u32) -> WorkspaceLayout {
        WorkspaceLayout::new(world, self.staging_half_bytes, self.latency_window_bytes)
    }

    /// Where the signal array starts in the symmetric slab (staging comes first).
    ///
    /// ```
    /// let req = purlin::workspace::WorkspaceRequirements::small();
    /// assert_eq!(req.signal_offset(2)? % 256, 0);
    /// assert!(req.signal_offset(2)? >= req.layout(2).staging_bytes());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn signal_offset(&self, world: u32) -> Result<u64> {
        align_up(self.staging_bytes(world)?, PART_ALIGN)
    }

    /// Bytes of the staging slab for `world` ranks (as
    /// [`WorkspaceLayout::staging_bytes`], refusing sizes that overflow).
    ///
    /// ```
    /// use purlin::workspace::WorkspaceRequirements;
    /// let req = WorkspaceRequirements::small();
    /// assert_eq!(req.staging_bytes(4)?, req.layout(4).staging_bytes());
    /// let huge = WorkspaceRequirements { staging_half_bytes: u64::MAX / 2, ..req };
    /// assert!(huge.staging_bytes(4).is_err());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn staging_bytes(&self, world: u32) -> Result<u64> {
        self.layout(world)
            .checked_staging_bytes()
            .ok_or_else(|| overflow("staging"))
    }

    /// Bytes of the symmetric slab (staging, then signals) for `world` ranks.
    ///
    /// ```
    /// let req = purlin::workspace::WorkspaceRequirements::small();
    /// let l = req.layout(4);
    /// assert_eq!(req.slab_bytes(4)?, req.signal_offset(4)? + l.signal_bytes());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn slab_bytes(&self, world: u32) -> Result<u64> {
        self.signal_offset(world)?
            .checked_add(self.layout(world).signal_bytes())
            .ok_or_else(|| overflow("slab"))
    }

    /// Every byte one rank allocates for `world` ranks: the slab plus the local state.
    ///
    /// ```
    /// let req = purlin::workspace::WorkspaceRequirements::default();
    /// assert!(req.bytes_per_rank(8)? > 512 << 20);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn bytes_per_rank(&self, world: u32) -> Result<u64> {
        validate::check_world(world)?;
        self.check()?;
        self.slab_bytes(world)?
            .checked_add(self.layout(world).state_bytes())
            .ok_or_else(|| overflow("workspace"))
    }
}

fn overflow(what: &'static str) -> Error {
    Error::InvalidRequirements {
        what,
        reason: "its size overflows 64 bits".into(),
    }
}

/// `v` rounded up to a multiple of `align` (a power of two).
fn align_up(v: u64, align: u64) -> Result<u64> {
    v.checked_add(align - 1)
        .map(|x| x & !(align - 1))
        .ok_or_else(|| overflow("slab"))
}

/// One rank's workspace: its symmetric slab (staging and signals, addressable by every rank)
/// and its local state. Made collectively by every rank of a bootstrap; owned by a
/// [`Context`](crate::Context) once one is made from it.
///
/// Teardown ([`finalize`](Workspace::finalize) or drop) is collective too: each rank unmaps its
/// peers' slabs, waits at a barrier until every rank has, and frees its own.
///
/// ```
/// use purlin::bootstrap::run_in_process;
/// use purlin::memory::HostAllocator;
/// use purlin::workspace::{Workspace, WorkspaceRequirements};
/// run_in_process(3, |b| {
///     let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
///     assert_eq!((ws.rank(), ws.world()), (b.rank(), 3));
///     assert_eq!(ws.signals(2)? - ws.staging(2)?, ws.requirements().signal_offset(3)?);
///     ws.finalize()
/// })?;
/// # use purlin::bootstrap::Bootstrap;
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Debug)]
pub struct Workspace {
    requirements: WorkspaceRequirements,
    signal_offset: u64,
    slab: Symmetric,
    state: Option<u64>,
}

/// Every rank's requirements, compared field by field: a rank that asked for other sizes is an
/// error naming it and the field, on every rank (the same records reach every rank).
fn agree_on_requirements(bootstrap: &dyn Bootstrap, mine: &WorkspaceRequirements) -> Result<()> {
    let mut record = mine.staging_half_bytes.to_le_bytes().to_vec();
    record.extend_from_slice(&mine.latency_window_bytes.to_le_bytes());
    let all = bootstrap.all_gather(&record)?;
    let field = |r: &[u8], i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            r.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    let first = &all[0];
    for (rank, r) in all.iter().enumerate().skip(1) {
        for (i, what) in [(0, "staging_half_bytes"), (1, "latency_window_bytes")] {
            let (a, b) = (field(first, i), field(r, i));
            if a != b {
                return Err(Error::InvalidArgument {
                    what,
                    reason: format!(
                        "rank 0 asked for {} and rank {rank} for {}: every rank's workspace must \
                         have the same requirements",
                        a.map_or("nothing".into(), |v| v.to_string()),
                        b.map_or("nothing".into(), |v| v.to_string()),
                    ),
                });
            }
        }
    }
    Ok(())
}

impl Workspace {
    /// Ranks whose workspace lies on this rank's GPU, this one included (from the device UUIDs
    /// every rank announced when the workspace was made); 1 for host memory. Collectives cap
    /// their blocks so that the blocks of all of them fit the GPU at once.
    ///
    /// ```
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// use purlin::memory::HostAllocator;
    /// use purlin::workspace::{Workspace, WorkspaceRequirements};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.ranks_on_this_gpu(), 1);
    /// # ws.finalize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn ranks_on_this_gpu(&self) -> u32 {
        self.slab.ranks_on_this_gpu
    }

    /// Allocates this rank's workspace through `allocator` and maps every peer's (a collective
    /// call: every rank of `bootstrap` makes it, with the same requirements).
    ///
    /// ```no_run
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// use purlin::memory::DeviceAllocator;
    /// use purlin::workspace::{Workspace, WorkspaceRequirements};
    /// // The virtual node: two ranks on GPU 0, one thread each.
    /// let gpu = purlin::Gpu::open(0)?;
    /// std::thread::scope(|s| {
    ///     for b in InProcess::group(2)? {
    ///         let gpu = gpu.clone();
    ///         s.spawn(move || {
    ///             let ws = Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?;
    ///             ws.finalize()
    ///         });
    ///     }
    ///     Ok::<(), purlin::Error>(())
    /// })?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new<B, A>(
        bootstrap: &B,
        allocator: A,
        requirements: WorkspaceRequirements,
    ) -> Result<Self>
    where
        B: Bootstrap + Clone + 'static,
        A: Allocator + 'static,
    {
        Self::with_shared(
            Arc::new(bootstrap.clone()),
            Arc::new(allocator),
            requirements,
        )
    }

    /// As [`new`](Workspace::new), with shared trait objects.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// use purlin::memory::{Allocator, HostAllocator};
    /// use purlin::workspace::{Workspace, WorkspaceRequirements};
    /// let b: Arc<dyn Bootstrap> = Arc::new(InProcess::group(1)?.remove(0));
    /// let a: Arc<dyn Allocator> = Arc::new(HostAllocator::new());
    /// Workspace::with_shared(b, a, WorkspaceRequirements::small())?.finalize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn with_shared(
        bootstrap: Arc<dyn Bootstrap>,
        allocator: Arc<dyn Allocator>,
        requirements: WorkspaceRequirements,
    ) -> Result<Self> {
        let world = bootstrap.world();
        // Every rank checks the same things, so a bad request fails everywhere and no rank
        // is left waiting in an exchange.
        let bytes = requirements.bytes_per_rank(world)?;
        validate::check_rank(bootstrap.rank(), world)?;
        agree_on_requirements(&*bootstrap, &requirements)?;
        let slab_bytes = requirements.slab_bytes(world)?;
        let signal_offset = requirements.signal_offset(world)?;
        let state_bytes = requirements.layout(world).state_bytes();
        tracing::debug!(
            rank = bootstrap.rank(),
            world,
            bytes,
            memory = %allocator.memory(),
            "allocating a workspace"
        );
        let mut slab = Symmetric::new(bootstrap.clone(), allocator.clone(), slab_bytes)?;
        let state = allocator
            .allocate(state_bytes)
            .and_then(|s| validate::check_pointer("state", s, MIN_ALIGN).map(|()| s));
        // The state is local, but whether this rank got it must be agreed: a rank that
        // fails here still has to take part in the slab's collective teardown.
        let status: u64 = state.is_ok().into();
        let all = bootstrap.all_gather(&status.to_le_bytes());
        let failed = all.as_ref().ok().and_then(|all| {
            all.iter()
                .position(|s| s.first().copied().unwrap_or(0) != 1)
                .map(|r| r as u32)
        });
        match (state, all, failed) {
            (Ok(state), Ok(_), None) => Ok(Self {
                requirements,
                signal_offset,
                slab,
                state: Some(state),
            }),
            (state, all, failed) => {
                if let Ok(addr) = &state {
                    // SAFETY: just allocated; nothing has seen it.
                    if let Err(e) = unsafe { allocator.free(*addr, state_bytes) } {
                        tracing::warn!(%e, "freeing the state after a failed setup failed");
                    }
                }
                if let Err(e) = slab.release() {
                    tracing::warn!(%e, "releasing the slab after a failed setup failed");
                }
                Err(match (state, all, failed) {
                    (Err(e), _, _) | (_, Err(e), _) => e,
                    (_, _, Some(rank)) => Error::PeerFailed {
                        rank,
                        step: "state allocation",
                    },
                    _ => unreachable!("the success case is matched above"),
                })
            }
        }
    }

    /// This rank.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.rank(), 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn rank(&self) -> u32 {
        self.slab.bootstrap.rank()
    }

    /// Ranks sharing this workspace.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.world(), 1);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn world(&self) -> u32 {
        self.slab.bootstrap.world()
    }

    /// The sizes it was made with.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.requirements(), WorkspaceRequirements::small());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn requirements(&self) -> WorkspaceRequirements {
        self.requirements
    }

    /// The device-side layout.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.layout().world, 1);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn layout(&self) -> WorkspaceLayout {
        self.requirements.layout(self.world())
    }

    /// Where the buffers live.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::{HostAllocator, Memory}, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.memory(), Memory::Host);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn memory(&self) -> Memory {
        self.slab.memory()
    }

    /// The GPU of a device workspace (`None` for host memory).
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert!(ws.gpu().is_none());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        self.slab.gpu.as_ref()
    }

    /// The bootstrap the workspace was made with.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert!(ws.bootstrap().same_process());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.slab.bootstrap
    }

    /// The allocator the workspace was made with (windows allocate through it too).
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::{HostAllocator, Memory}, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.allocator().memory(), Memory::Host);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn allocator(&self) -> &Arc<dyn Allocator> {
        &self.slab.allocator
    }

    /// Rank `rank`'s staging slab, as this rank addresses it.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.staging(0)? % 256, 0);
    /// assert!(ws.staging(1).is_err());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn staging(&self, rank: u32) -> Result<u64> {
        validate::check_rank(rank, self.world())?;
        Ok(self.slab.addrs[rank as usize])
    }

    /// Rank `rank`'s signal array, as this rank addresses it.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert!(ws.signals(0)? > ws.staging(0)?);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn signals(&self, rank: u32) -> Result<u64> {
        Ok(self.staging(rank)? + self.signal_offset)
    }

    /// This rank's local state (epochs, counters, fault record: see
    /// [`LocalState`]).
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// assert_eq!(ws.state() % 16, 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn state(&self) -> u64 {
        self.state.unwrap_or(0)
    }

    /// Frees everything, collectively (see the type's docs); every step runs even if an
    /// earlier one fails, and the first failure is returned.
    ///
    /// ```
    /// # use purlin::{bootstrap::InProcess, memory::HostAllocator, workspace::*};
    /// let b = InProcess::group(1)?.remove(0);
    /// Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?.finalize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn finalize(mut self) -> Result<()> {
        self.release()
    }

    pub(crate) fn release(&mut self) -> Result<()> {
        // The slab first: its barrier guarantees no peer is still working, and only then
        // does the local state go.
        let slab = self.slab.release();
        let state = match self.state.take() {
            // SAFETY: allocated in `with_shared` with these bytes; the barrier above means
            // no rank runs work of this workspace any more.
            Some(addr) => unsafe { self.slab.allocator.free(addr, self.layout().state_bytes()) },
            None => Ok(()),
        };
        if let Err(e) = &state {
            tracing::warn!(%e, "freeing the local state failed");
        }
        slab.and(state)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::error!(%e, "releasing a workspace in drop failed");
        }
    }
}

/// Bytes one rank's local state takes (the same for every world).
///
/// ```
/// assert_eq!(purlin::workspace::STATE_BYTES, purlin::purlin_device::context::LocalState::BYTES as u64);
/// ```
pub const STATE_BYTES: u64 = LocalState::BYTES as u64;
