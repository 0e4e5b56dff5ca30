//! The one place with inline PTX: thread indices, barriers, fences, scoped loads, stores and
//! atomics, 16-byte vector access, `nanosleep`, `cp.async`, `cp.async.bulk` with `mbarrier`,
//! dynamic shared memory and the few conversions the datapath needs.
//!
//! Two implementations share one surface. On `nvptx64` every function is a single PTX
//! instruction. On any other target the same functions run on CPU threads with `core`
//! atomics: a *block* is one thread, shared memory is whatever buffer the caller passes, and
//! asynchronous copies complete immediately. Everything above this module compiles for both,
//! which is how the protocol is tested without a GPU.
//!
//! Pointers given to the `global` functions must point to global memory (device memory of this
//! or a peer GPU); `shared` functions take generic pointers into dynamic shared memory.
//!
//! ```
//! use purlin_device::arch;
//! let flag = 0u64;
//! // SAFETY: `flag` is a live, aligned u64 that nothing else writes.
//! unsafe { arch::st_release_sys_u64(&flag as *const u64 as *mut u64, 7) };
//! // SAFETY: as above.
//! assert_eq!(unsafe { arch::ld_acquire_sys_u64(&flag) }, 7);
//! ```

#[cfg(target_arch = "nvptx64")]
mod nvptx;
#[cfg(target_arch = "nvptx64")]
pub use nvptx::*;

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;
