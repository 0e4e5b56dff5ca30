//! How ranks find each other: the [`Bootstrap`] trait (rank, world, an all-gather of bytes, a
//! barrier) and its implementations. A workspace uses it once to exchange buffer addresses or
//! CUDA IPC handles; nothing on the data path goes through it.
//!
//! - [`InProcess`]: one thread per rank in one process. Ranks may sit on distinct GPUs (peer
//!   access, direct pointers) or several on one GPU — the *virtual node*, what the tests use.
//! - `Mpi` (cargo feature `mpi`): one process per GPU, started by `mpirun`.
//!
//! ```
//! use purlin::bootstrap::{Bootstrap, InProcess};
//! let ranks = InProcess::group(3)?;
//! let gathered: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
//!     let handles: Vec<_> = ranks
//!         .iter()
//!         .map(|b| s.spawn(move || b.all_gather(&[b.rank() as u8; 2]).unwrap()))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert!(gathered.iter().all(|g| *g == vec![vec![0, 0], vec![1, 1], vec![2, 2]]));
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::validate;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
pub use self::mpi::Mpi;

/// What every bootstrap offers: who this rank is, and a blocking exchange with every other rank.
/// Every rank must make the same sequence of calls.
///
/// ```
/// use purlin::bootstrap::{Bootstrap, InProcess};
/// fn describe(b: &dyn Bootstrap) -> String {
///     format!("rank {} of {}", b.rank(), b.world())
/// }
/// let ranks = InProcess::group(1)?;
/// assert_eq!(describe(&ranks[0]), "rank 0 of 1");
/// # Ok::<(), purlin::Error>(())
/// ```
pub trait Bootstrap: Send + Sync + fmt::Debug {
    /// This rank, in `0..world()`.
    /// ```
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// let ranks = InProcess::group(2)?;
    /// assert_eq!(ranks[1].rank(), 1);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn rank(&self) -> u32;

    /// Ranks in the group.
    /// ```
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// let ranks = InProcess::group(2)?;
    /// assert_eq!(ranks[0].world(), 2);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn world(&self) -> u32;

    /// Whether every rank runs in this process, so addresses can be shared as they are (else
    /// device buffers are shared through CUDA IPC handles).
    /// ```
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// let ranks = InProcess::group(2)?;
    /// assert!(ranks[0].same_process());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn same_process(&self) -> bool;

    /// Every rank's `data`, in rank order. Each rank may contribute a different length.
    /// ```
    /// use purlin::bootstrap::{Bootstrap, run_in_process};
    /// let all = run_in_process(2, |b| b.all_gather(&[b.rank() as u8 + 10]))?;
    /// assert_eq!(all[0], vec![vec![10], vec![11]]);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Returns once every rank has called it.
    /// ```
    /// use purlin::bootstrap::{Bootstrap, run_in_process};
    /// run_in_process(3, |b| b.barrier())?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }
}

/// How long an [`InProcess`] exchange waits for the slowest rank by default.
pub const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(120);

/// One thread per rank in one process: each thread takes one handle of a [`group`].
/// Exchanges are bounded: a rank that never arrives makes the others fail with
/// [`Error::Bootstrap`] after the group's timeout, and the group refuses every later exchange.
///
/// Ranks in one process share the driver: a rank's host thread that blocks on the GPU
/// (a pageable host-to-device copy, a synchronous free) between queued collectives can wait
/// for a peer's collective that waits for this rank. See [host calls that wait for the
/// GPU](crate::collective#host-calls-that-wait-for-the-gpu).
///
/// [`group`]: InProcess::group
///
/// ```
/// use purlin::bootstrap::{Bootstrap, InProcess};
/// let ranks = InProcess::group(2)?;
/// assert_eq!((ranks[1].rank(), ranks[1].world()), (1, 2));
/// assert!(ranks[0].same_process());
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Clone)]
pub struct InProcess {
    rank: u32,
    group: Arc<Group>,
}

struct Group {
    world: u32,
    timeout: Duration,
    state: Mutex<Round>,
    arrived: Condvar,
}

struct Round {
    /// Completed exchanges; waiting ranks watch it change.
    generation: u64,
    contributions: Vec<Option<Vec<u8>>>,
    count: u32,
    result: Arc<Vec<Vec<u8>>>,
    /// Set when a rank gave up: the group's exchanges no longer line up.
    broken: Option<String>,
}

impl fmt::Debug for InProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcess")
            .field("rank", &self.rank)
            .field("world", &self.group.world)
            .field("timeout", &self.group.timeout)
            .finish()
    }
}

impl InProcess {
    /// Handles for `world` ranks (`1..=MAX_RANKS`), one per thread, with the default timeout.
    ///
    /// ```
    /// let ranks = purlin::bootstrap::InProcess::group(4)?;
    /// assert_eq!(ranks.len(), 4);
    /// assert!(purlin::bootstrap::InProcess::group(0).is_err());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn group(world: u32) -> Result<Vec<InProcess>> {
        Self::group_with_timeout(world, DEFAULT_BOOTSTRAP_TIMEOUT)
    }

    /// As [`group`](InProcess::group), waiting at most `timeout` for the slowest rank in any
    /// exchange.
    ///
    /// ```
    /// use purlin::bootstrap::{Bootstrap, InProcess};
    /// use std::time::Duration;
    /// let ranks = InProcess::group_with_timeout(2, Duration::from_millis(10))?;
    /// // Rank 1 never joins: rank 0's exchange times out instead of hanging.
    /// assert!(matches!(ranks[0].barrier(), Err(purlin::Error::Bootstrap(_))));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn group_with_timeout(world: u32, timeout: Duration) -> Result<Vec<InProcess>> {
        validate::check_world(world)?;
        let group = Arc::new(Group {
            world,
            timeout,
            state: Mutex::new(Round {
                generation: 0,
                contributions: vec![None; world as usize],
                count: 0,
                result: Arc::new(Vec::new()),
                broken: None,
            }),
            arrived: Condvar::new(),
        });
        Ok((0..world)
            .map(|rank| InProcess {
                rank,
                group: group.clone(),
            })
            .collect())
    }
}

impl Bootstrap for InProcess {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn world(&self) -> u32 {
        self.group.world
    }

    fn same_process(&self) -> bool {
        true
    }

    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let group = &*self.group;
        let mut round = group.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = &round.broken {
            return Err(Error::Bootstrap(why.clone()));
        }
        let slot = &mut round.contributions[self.rank as usize];
        if slot.is_some() {
            return Err(Error::Bootstrap(format!(
                "rank {} joined one exchange twice (two threads share a handle?)",
                self.rank
            )));
        }
        *slot = Some(data.to_vec());
        round.count += 1;
        let generation = round.generation;
        if round.count == group.world {
            let gathered = round
                .contributions
                .iter_mut()
                .map(|c| c.take().unwrap_or_default())
                .collect();
            round.result = Arc::new(gathered);
            round.count = 0;
            round.generation += 1;
            group.arrived.notify_all();
            return Ok(round.result.to_vec());
        }
        let deadline = Instant::now() + group.timeout;
        loop {
            let now = Instant::now();
            if round.generation != generation {
                // The next round cannot complete before this rank joins it, so `result` is
                // still this round's.
                return Ok(round.result.to_vec());
            }
            if let Some(why) = &round.broken {
                return Err(Error::Bootstrap(why.clone()));
            }
            if now >= deadline {
                let missing: Vec<usize> = round
                    .contributions
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.is_none())
                    .map(|(r, _)| r)
                    .collect();
                let why = format!(
                    "rank {} waited {:?} for ranks {missing:?} to join an exchange",
                    self.rank, group.timeout
                );
                round.broken = Some(why.clone());
                group.arrived.notify_all();
                return Err(Error::Bootstrap(why));
            }
            round = group
                .arrived
                .wait_timeout(round, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Runs `f(rank_handle)` for every rank of an [`InProcess`] group of `world` on its own thread
/// and returns the results in rank order (a convenience for tests and examples).
///
/// ```
/// use purlin::bootstrap::{Bootstrap, run_in_process};
/// let sums = run_in_process(4, |b| {
///     let all = b.all_gather(&[b.rank() as u8])?;
///     Ok(all.iter().map(|v| v[0] as u32).sum::<u32>())
/// })?;
/// assert_eq!(sums, vec![6; 4]);
/// # Ok::<(), purlin::Error>(())
/// ```
pub fn run_in_process<T: Send>(
    world: u32,
    f: impl Fn(InProcess) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let ranks = InProcess::group(world)?;
    let f = &f;
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|b| {
                std::thread::Builder::new()
                    .name(format!("purlin-rank-{}", b.rank()))
                    .spawn_scoped(s, move || f(b))
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::Bootstrap(format!(
                        "the thread of rank {rank} panicked"
                    )))
                }),
                Err(e) => Err(Error::Bootstrap(format!(
                    "cannot start the thread of rank {rank}: {e}"
                ))),
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Fixed-size records for the exchanges a workspace makes (little-endian fields).
pub(crate) struct Record(Vec<u8>);

impl Record {
    pub(crate) fn new() -> Self {
        Self(Vec::new())
    }
    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    pub(crate) fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a [`Record`] back.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    rank: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8], rank: usize) -> Self {
        Self { data, rank }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.data.len() < n {
            return Err(Error::Bootstrap(format!(
                "rank {} sent a record too short to read",
                self.rank
            )));
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub(crate) fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
}
