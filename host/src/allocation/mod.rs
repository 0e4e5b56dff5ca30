//! Symmetric allocations: every rank allocates the same number of bytes, and every rank can
//! address every other rank's buffer. The one mechanism under workspaces, windows and the
//! [`SymmetricBuffer`](crate::SymmetricBuffer)s that collectives run one pass over, and the
//! registry through which a context finds the symmetric buffers of a call.

pub(crate) mod registry;

use crate::bootstrap::{Bootstrap, Reader, Record};
use crate::cuda;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::{Allocator, MIN_ALIGN, Memory};
use std::sync::Arc;

/// One rank's buffer of a symmetric allocation plus every peer's, as this rank addresses them.
#[derive(Debug)]
pub(crate) struct Symmetric {
    pub(crate) bootstrap: Arc<dyn Bootstrap>,
    pub(crate) allocator: Arc<dyn Allocator>,
    pub(crate) gpu: Option<Arc<Gpu>>,
    pub(crate) bytes: u64,
    /// Every rank's buffer, as this rank addresses it (this rank's own at `rank`).
    pub(crate) addrs: Vec<u64>,
    /// Ranks whose buffer lies on the same GPU as this rank's (this rank included), from the
    /// device UUIDs every rank announced; 1 for host memory.
    pub(crate) ranks_on_this_gpu: u32,
    /// IPC mappings of peers' allocations (their bases), closed before the local buffer goes.
    imported: Vec<u64>,
    released: bool,
}

const STATUS_OK: u64 = 1;
const STATUS_FAILED: u64 = 0;
const KIND_HOST: u64 = 0;
const KIND_DEVICE: u64 = 1;

/// What one rank tells the others about its buffer.
struct Announcement {
    status: u64,
    kind: u64,
    ordinal: u64,
    uuid: [u8; 16],
    pid: u64,
    bytes: u64,
    addr: u64,
    ipc: [u8; cuda::IPC_HANDLE_BYTES],
    ipc_offset: u64,
}

impl Announcement {
    fn failed() -> Self {
        Self {
            status: STATUS_FAILED,
            kind: 0,
            ordinal: 0,
            uuid: [0; 16],
            pid: 0,
            bytes: 0,
            addr: 0,
            ipc: [0; cuda::IPC_HANDLE_BYTES],
            ipc_offset: 0,
        }
    }

    fn encode(&self) -> Vec<u8> {
        Record::new()
            .u64(self.status)
            .u64(self.kind)
            .u64(self.ordinal)
            .bytes(&self.uuid)
            .u64(self.pid)
            .u64(self.bytes)
            .u64(self.addr)
            .bytes(&self.ipc)
            .u64(self.ipc_offset)
            .finish()
    }

    fn decode(data: &[u8], rank: usize) -> Result<Self> {
        let mut r = Reader::new(data, rank);
        Ok(Self {
            status: r.u64()?,
            kind: r.u64()?,
            ordinal: r.u64()?,
            uuid: r.bytes()?,
            pid: r.u64()?,
            bytes: r.u64()?,
            addr: r.u64()?,
            ipc: r.bytes()?,
            ipc_offset: r.u64()?,
        })
    }
}

/// Every rank's status of one collective step: `Ok` if all succeeded, else this rank's own
/// error if it failed, else the first failed rank.
pub(crate) fn agree(bootstrap: &dyn Bootstrap, mine: Result<()>, step: &'static str) -> Result<()> {
    let status = if mine.is_ok() {
        STATUS_OK
    } else {
        STATUS_FAILED
    };
    let all = bootstrap.all_gather(&status.to_le_bytes());
    mine?;
    let all = all?;
    for (rank, s) in all.iter().enumerate() {
        if Reader::new(s, rank).u64()? != STATUS_OK {
            return Err(Error::PeerFailed {
                rank: rank as u32,
                step,
            });
        }
    }
    Ok(())
}

impl Symmetric {
    /// Allocates `bytes` on every rank (a collective call: every rank of `bootstrap` makes it
    /// with the same `bytes`) and maps every peer's buffer.
    pub(crate) fn new(
        bootstrap: Arc<dyn Bootstrap>,
        allocator: Arc<dyn Allocator>,
        bytes: u64,
    ) -> Result<Self> {
        let rank = bootstrap.rank() as usize;
        let world = bootstrap.world() as usize;

        // 1. Allocate locally and describe the buffer; a failure is announced, not returned,
        //    so no peer waits forever for this rank.
        let mut local: Option<(u64, Option<Arc<Gpu>>)> = None;
        let described = (|| -> Result<Announcement> {
            let gpu = allocator.gpu()?;
            let memory = allocator.memory();
            let addr = allocator.allocate(bytes)?;
            local = Some((addr, gpu.clone()));
            crate::validate::check_pointer("allocator result", addr, MIN_ALIGN)?;
            let mut a = Announcement::failed();
            a.status = STATUS_OK;
            a.pid = std::process::id() as u64;
            a.bytes = bytes;
            a.addr = addr;
            match (memory, &gpu) {
                (Memory::Host, _) => a.kind = KIND_HOST,
                (Memory::Device { ordinal }, Some(gpu)) => {
                    a.kind = KIND_DEVICE;
                    a.ordinal = ordinal as u64;
                    a.uuid = cuda::device_uuid(ordinal)?;
                    if !bootstrap.same_process() {
                        (a.ipc, a.ipc_offset) = cuda::ipc_export(gpu, addr)?;
                    }
                }
                (Memory::Device { ordinal }, None) => {
                    return Err(Error::InvalidArgument {
                        what: "allocator",
                        reason: format!("it allocates on GPU {ordinal} but has no GPU handle"),
                    });
                }
            }
            Ok(a)
        })();
        let mine = match &described {
            Ok(a) => a.encode(),
            Err(_) => Announcement::failed().encode(),
        };
        let free_local = |local: &Option<(u64, Option<Arc<Gpu>>)>| {
            if let Some((addr, _)) = local {
                // SAFETY: allocated above; no peer uses it (the setup failed on every rank).
                if let Err(e) = unsafe { allocator.free(*addr, bytes) } {
                    tracing::warn!(%e, "freeing a symmetric buffer after a failed setup failed");
                }
            }
        };
        let gathered = match bootstrap.all_gather(&mine) {
            Ok(g) => g,
            Err(e) => {
                // The exchange itself is broken: no later step can line up either.
                free_local(&local);
                return Err(described.err().unwrap_or(e));
            }
        };
        let gpu = local.as_ref().and_then(|(_, g)| g.clone());

        // 2. Read every announcement and map every peer (every rank takes part in the steps
        //    below, even one whose allocation failed, so that no peer waits for it).
        let mut imported = Vec::new();
        let mut sharing = 1u32;
        let mapped = match &described {
            Err(e) => Err(clone_err(e)),
            Ok(me) => (|| -> Result<Vec<u64>> {
                let addr = me.addr;
                let peers = gathered
                    .iter()
                    .enumerate()
                    .map(|(r, d)| Announcement::decode(d, r))
                    .collect::<Result<Vec<_>>>()?;
                if peers.len() != world {
                    return Err(Error::Bootstrap(format!(
                        "the exchange returned {} records for {world} ranks",
                        peers.len()
                    )));
                }
                if let Some(r) = peers.iter().position(|p| p.status != STATUS_OK) {
                    return Err(Error::PeerFailed {
                        rank: r as u32,
                        step: "symmetric allocation",
                    });
                }
                let mut addrs = Vec::with_capacity(world);
                let mine_uuid = peers[rank].uuid;
                sharing = if peers[rank].kind == KIND_DEVICE {
                    peers
                        .iter()
                        .filter(|p| p.kind == KIND_DEVICE && p.uuid == mine_uuid)
                        .count() as u32
                } else {
                    1
                };
                for (r, p) in peers.iter().enumerate() {
                    if p.bytes != bytes {
                        return Err(Error::InvalidArgument {
                            what: "bytes",
                            reason: format!(
                                "rank {r} allocated {} bytes and rank {rank} {bytes}: a \
                                 symmetric allocation needs the same size everywhere",
                                p.bytes
                            ),
                        });
                    }
                    if r == rank {
                        addrs.push(addr);
                        continue;
                    }
                    addrs.push(map_peer(
                        &*bootstrap,
                        gpu.as_deref(),
                        me,
                        p,
                        r,
                        &mut imported,
                    )?);
                }
                Ok(addrs)
            })(),
        };

        // 3. Agree that every rank mapped every peer; undo everything otherwise.
        let status = agree(
            &*bootstrap,
            mapped.as_ref().map(drop).map_err(clone_err),
            "peer mapping",
        );
        match (mapped, status) {
            (Ok(addrs), Ok(())) => Ok(Self {
                bootstrap,
                allocator,
                gpu,
                bytes,
                addrs,
                ranks_on_this_gpu: sharing,
                imported,
                released: false,
            }),
            (mapped, status) => {
                if let Some(gpu) = &gpu {
                    for base in imported.drain(..) {
                        // SAFETY: mapped above, never handed out.
                        if let Err(e) = unsafe { cuda::ipc_close(gpu, base) } {
                            tracing::warn!(%e, "closing an IPC mapping after a failed setup failed");
                        }
                    }
                }
                // Every rank has passed `agree`, so no peer uses this buffer: only this rank's
                // own mapping step could have failed after peers mapped it, and they have all
                // learned of the failure and are unmapping too. Wait for them before freeing.
                if let Err(e) = bootstrap.barrier() {
                    tracing::warn!(%e, "barrier after a failed symmetric setup failed");
                }
                free_local(&local);
                Err(match (described, mapped) {
                    (Err(e), _) | (Ok(_), Err(e)) => e,
                    (Ok(_), Ok(_)) => status.expect_err("one of the steps failed"),
                })
            }
        }
    }

    /// This rank's own buffer.
    pub(crate) fn local(&self) -> u64 {
        self.addrs[self.bootstrap.rank() as usize]
    }

    pub(crate) fn memory(&self) -> Memory {
        self.allocator.memory()
    }

    /// Unmaps the peers' buffers, waits until every rank has, and frees this rank's buffer.
    /// A collective call; runs once (later calls do nothing). Every step runs even if an
    /// earlier one failed; the first failure is returned.
    pub(crate) fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let mut first: Option<Error> = None;
        let mut note = |r: Result<()>, what: &str| {
            if let Err(e) = r {
                tracing::warn!(%e, "{what} failed while releasing a symmetric buffer");
                first.get_or_insert(e);
            }
        };
        if let Some(gpu) = &self.gpu {
            for base in self.imported.drain(..) {
                // SAFETY: mapped by `new`; the owner (context or window) is being torn down.
                note(
                    unsafe { cuda::ipc_close(gpu, base) },
                    "closing an IPC mapping",
                );
            }
        }
        // No rank frees its buffer while a peer may still read or write it: if the barrier
        // fails, a peer may not have finished with it (a kernel still writing its signals, a
        // mapping still open), so the buffer is left allocated (leaked) rather than freed.
        let met = self.bootstrap.barrier();
        if met.is_ok() {
            let local = self.local();
            // SAFETY: allocated by `new` with `self.bytes`; every rank has passed the barrier,
            // so nothing uses it.
            note(unsafe { self.allocator.free(local, self.bytes) }, "freeing");
        } else {
            tracing::warn!(
                bytes = self.bytes,
                "a peer did not reach the teardown barrier: its buffer stays allocated, since the \
                 peer may still use it"
            );
        }
        note(met, "the teardown barrier");
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Symmetric {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::error!(%e, "releasing a symmetric buffer in drop failed");
        }
    }
}

/// The same error again, for reporting one failure twice (to `agree` and to the caller).
fn clone_err(e: &Error) -> Error {
    Error::Bootstrap(e.to_string())
}

/// How this rank addresses peer `r`'s buffer.
fn map_peer(
    bootstrap: &dyn Bootstrap,
    gpu: Option<&Gpu>,
    me: &Announcement,
    peer: &Announcement,
    r: usize,
    imported: &mut Vec<u64>,
) -> Result<u64> {
    if me.kind != peer.kind {
        return Err(Error::InvalidArgument {
            what: "allocator",
            reason: format!(
                "rank {r} allocates {} and this rank {}: every rank must use the same kind",
                kind_name(peer.kind),
                kind_name(me.kind)
            ),
        });
    }
    if bootstrap.same_process() && peer.pid != me.pid {
        return Err(Error::Bootstrap(format!(
            "the bootstrap says every rank is in this process, but rank {r} is process {}",
            peer.pid
        )));
    }
    match (peer.kind, gpu) {
        (KIND_HOST, _) if bootstrap.same_process() => Ok(peer.addr),
        (KIND_HOST, _) => Err(Error::Unsupported(
            "host-memory workspaces across processes (use device memory with the MPI bootstrap)"
                .into(),
        )),
        (_, None) => Err(Error::InvalidArgument {
            what: "allocator",
            reason: "device memory without a GPU handle".into(),
        }),
        (_, Some(gpu)) if bootstrap.same_process() => {
            cuda::enable_peer_access(gpu, peer.ordinal as usize)?;
            Ok(peer.addr)
        }
        (_, Some(gpu)) => {
            // Check reachability first where this process can see the peer's GPU.
            if let Some(ordinal) = cuda::ordinal_of_uuid(&peer.uuid)? {
                crate::validate::check_reachable(gpu.ordinal(), &[ordinal], |a, b| {
                    cuda::can_access_peer(a, b).unwrap_or(false)
                })?;
            }
            let base = cuda::ipc_open(gpu, &peer.ipc).map_err(|e| match e {
                Error::Driver(d)
                    if d.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED =>
                {
                    Error::PeerUnreachable {
                        from: gpu.ordinal(),
                        to: peer.ordinal as usize,
                    }
                }
                e => e,
            })?;
            imported.push(base);
            Ok(base + peer.ipc_offset)
        }
    }
}

fn kind_name(kind: u64) -> &'static str {
    if kind == KIND_HOST {
        "host memory"
    } else {
        "device memory"
    }
}
