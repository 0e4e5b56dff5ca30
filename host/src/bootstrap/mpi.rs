//! The MPI bootstrap: one process per GPU, started by `mpirun`.

use super::Bootstrap;
use crate::error::{Error, Result};
use crate::validate;
use mpi::Threading;
use mpi::collective::CommunicatorCollectives;
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One process per rank, started by `mpirun` (cargo feature `mpi`). Rank and world come from
/// `MPI_COMM_WORLD`; the node-local rank (from a shared-memory split of it) picks the GPU.
/// Device buffers are shared through CUDA IPC handles exchanged with an all-gather.
///
/// Exchanges and barriers are bounded ([`with_timeout`](Mpi::with_timeout), default
/// [`DEFAULT_BOOTSTRAP_TIMEOUT`](super::DEFAULT_BOOTSTRAP_TIMEOUT)): they run as MPI's
/// non-blocking collectives polled against the bound, and a rank that never arrives is an
/// [`Error::Bootstrap`] instead of a hang. MPI cannot cancel a collective, so after such an error
/// the bootstrap refuses every later exchange (the abandoned one keeps its buffers, which are
/// never freed).
///
/// Cloning is cheap and shares the communicators. MPI is finalized when the last clone of a
/// bootstrap made by [`Mpi::init`] is dropped, so every context made with it must be finalized
/// or dropped before then (they hold a clone, so that happens by itself).
///
/// ```no_run
/// use purlin::bootstrap::{Bootstrap, Mpi};
/// let mpi = Mpi::init()?;
/// let gpu = purlin::Gpu::open(mpi.local_device()?)?;
/// println!("rank {} of {} on {}", mpi.rank(), mpi.world(), gpu.name());
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Clone)]
pub struct Mpi {
    inner: Arc<Inner>,
}

struct Inner {
    // Fields drop in order: the communicators are freed before MPI is finalized.
    comms: Mutex<Comms>,
    rank: u32,
    world: u32,
    local_rank: u32,
    local_size: u32,
    timeout: Duration,
    /// Set once an exchange ran out of time: MPI's collectives can no longer line up.
    broken: AtomicBool,
    _universe: Option<mpi::environment::Universe>,
}

struct Comms {
    world: SimpleCommunicator,
    _local: SimpleCommunicator,
}

// SAFETY: MPI handles are plain integers (Open MPI: pointers to library-owned objects) that any
// thread may use when MPI runs with `MPI_THREAD_SERIALIZED` or better, which `init` requires;
// every call through them is serialised by the `Mutex`.
unsafe impl Send for Comms {}

impl fmt::Debug for Mpi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.inner.rank)
            .field("world", &self.inner.world)
            .field("local_rank", &self.inner.local_rank)
            .field("local_size", &self.inner.local_size)
            .finish()
    }
}

impl Mpi {
    /// Initializes MPI (thread level `MPI_THREAD_MULTIPLE` requested, `SERIALIZED` required)
    /// and reads rank, world and the node-local rank. Fails if MPI is already initialized:
    /// use [`Mpi::from_initialized`] then.
    ///
    /// ```no_run
    /// let mpi = purlin::bootstrap::Mpi::init()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn init() -> Result<Mpi> {
        let (universe, level) =
            mpi::initialize_with_threading(Threading::Multiple).ok_or_else(|| {
                Error::Bootstrap("MPI is already initialized: use Mpi::from_initialized".into())
            })?;
        if level < Threading::Serialized {
            return Err(Error::Bootstrap(format!(
                "the MPI library gives thread level {level:?}; Purlin needs Serialized or better"
            )));
        }
        Self::build(Some(universe))
    }

    /// Uses an MPI that the program initialized itself (with `MPI_THREAD_SERIALIZED` or
    /// better, and finalizes after every Purlin object is gone).
    ///
    /// ```no_run
    /// let (_universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap();
    /// let b = purlin::bootstrap::Mpi::from_initialized()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn from_initialized() -> Result<Mpi> {
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(Error::Bootstrap("MPI is not initialized".into()));
        }
        Self::build(None)
    }

    fn build(universe: Option<mpi::environment::Universe>) -> Result<Mpi> {
        let world = SimpleCommunicator::world();
        let local = world.split_shared(world.rank());
        let (rank, size) = (world.rank() as u32, world.size() as u32);
        validate::check_world(size)?;
        let (local_rank, local_size) = (local.rank() as u32, local.size() as u32);
        Ok(Mpi {
            inner: Arc::new(Inner {
                comms: Mutex::new(Comms {
                    world,
                    _local: local,
                }),
                rank,
                world: size,
                local_rank,
                local_size,
                timeout: super::DEFAULT_BOOTSTRAP_TIMEOUT,
                broken: AtomicBool::new(false),
                _universe: universe,
            }),
        })
    }

    /// This bootstrap with every exchange bounded by `timeout` (shares the communicators).
    ///
    /// ```no_run
    /// let mpi = purlin::bootstrap::Mpi::init()?.with_timeout(std::time::Duration::from_secs(30));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn with_timeout(self, timeout: Duration) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.timeout = timeout;
                Mpi {
                    inner: Arc::new(inner),
                }
            }
            // Shared: the bound stays the clones' (they must agree on it anyway).
            Err(inner) => Mpi { inner },
        }
    }

    /// Waits for `request` at most the bootstrap's timeout. On expiry the request is abandoned
    /// (its buffers are `'static` and never freed, since MPI may still write them) and the
    /// bootstrap refuses every later exchange.
    fn finish<R: ?Sized>(
        &self,
        request: Request<'static, R, StaticScope>,
        what: &str,
    ) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(1);
        let mut pending = request;
        loop {
            match pending.test() {
                Ok(_) => return Ok(()),
                Err(p) => pending = p,
            }
            if start.elapsed() > self.inner.timeout {
                std::mem::forget(pending);
                self.inner.broken.store(true, Ordering::Release);
                return Err(Error::Bootstrap(format!(
                    "MPI {what} did not complete within {:?} on rank {}: a rank is missing or \
                     stuck; the bootstrap refuses further exchanges",
                    self.inner.timeout, self.inner.rank
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    fn usable(&self) -> Result<()> {
        if self.inner.broken.load(Ordering::Acquire) {
            return Err(Error::Bootstrap(
                "an earlier MPI exchange ran out of time: this bootstrap cannot exchange again"
                    .into(),
            ));
        }
        Ok(())
    }

    /// All-gathers `send` (the same length on every rank) into a new vector, bounded.
    fn gather_fixed<T: mpi::datatype::Equivalence + Copy + Default + 'static>(
        &self,
        comms: &Comms,
        send: Vec<T>,
        world: usize,
    ) -> Result<Vec<T>> {
        let per = send.len();
        // 'static for MPI's request: reclaimed once the request completed, leaked if not.
        let send: &'static [T] = Box::leak(send.into_boxed_slice());
        let recv: &'static mut [T] = Box::leak(vec![T::default(); per * world].into_boxed_slice());
        let (send_ptr, recv_ptr) = (send as *const [T], recv as *mut [T]);
        let request = comms
            .world
            .immediate_all_gather_into(StaticScope, send, recv);
        self.finish(request, "all-gather")?;
        // SAFETY: both came from `Box::leak` above and the request that used them completed,
        // so nothing else refers to them.
        let (send, recv) =
            unsafe { (Box::from_raw(send_ptr as *mut [T]), Box::from_raw(recv_ptr)) };
        drop(send);
        Ok(recv.into_vec())
    }

    /// This process's rank among the processes of its node.
    ///
    /// ```no_run
    /// let mpi = purlin::bootstrap::Mpi::init()?;
    /// assert!(mpi.local_rank() < mpi.local_size());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn local_rank(&self) -> u32 {
        self.inner.local_rank
    }

    /// Processes on this node.
    ///
    /// ```no_run
    /// let mpi = purlin::bootstrap::Mpi::init()?;
    /// println!("{} ranks on this node", mpi.local_size());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn local_size(&self) -> u32 {
        self.inner.local_size
    }

    /// The GPU this process should use: node-local rank modulo the GPUs it can see (more ranks
    /// than GPUs share them, as on the virtual node, time-sliced across processes).
    ///
    /// ```no_run
    /// let mpi = purlin::bootstrap::Mpi::init()?;
    /// let gpu = purlin::Gpu::open(mpi.local_device()?)?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn local_device(&self) -> Result<usize> {
        let count = crate::Gpu::count()?;
        if count == 0 {
            return Err(if crate::Gpu::driver_present() {
                Error::NoDevice { ordinal: 0, count }
            } else {
                Error::NoDriver
            });
        }
        Ok(self.inner.local_rank as usize % count)
    }
}

impl Bootstrap for Mpi {
    fn rank(&self) -> u32 {
        self.inner.rank
    }

    fn world(&self) -> u32 {
        self.inner.world
    }

    fn same_process(&self) -> bool {
        self.inner.world == 1
    }

    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.usable()?;
        let comms = self.inner.comms.lock().unwrap_or_else(|e| e.into_inner());
        let world = self.inner.world as usize;
        let lengths = self.gather_fixed(&comms, vec![data.len() as u64], world)?;
        let width = lengths.iter().copied().max().unwrap_or(0) as usize;
        let mut padded = data.to_vec();
        padded.resize(width, 0);
        let flat = self.gather_fixed(&comms, padded, world)?;
        Ok(flat
            .chunks(width.max(1))
            .zip(&lengths)
            .map(|(chunk, &len)| chunk[..len as usize].to_vec())
            .chain(std::iter::repeat_with(Vec::new))
            .take(world)
            .collect())
    }

    fn barrier(&self) -> Result<()> {
        self.usable()?;
        let comms = self.inner.comms.lock().unwrap_or_else(|e| e.into_inner());
        self.finish(comms.world.immediate_barrier(), "barrier")
    }
}
