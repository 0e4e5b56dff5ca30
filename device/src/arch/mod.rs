//! The one place with inline PTX: thread indices, barriers, launch dependencies, fences,
//! scoped loads, stores and atomics, 16-byte vector access, `nanosleep`, `cp.async`,
//! `cp.async.bulk` with `mbarrier`, dynamic shared memory and the few conversions the datapath
//! needs.
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

/// A reference to a by-value parameter of the kernel whose body this is, read where the
/// launch put it (`mov.b64` of the parameter's symbol, then `cvta.param.u64`, PTX 7.7 on
/// sm_70 and later): no per-thread copy into local memory, which is what taking the address
/// of a kernel parameter (`&ctx` to a function that is not inlined) otherwise costs — 37
/// stores per thread for a [`Context`](crate::context::Context). With older PTX, and on the
/// host, it is `&param`.
///
/// `kernel_param!(ctx in my_kernel[1])` names the parameter, the kernel's unmangled name and
/// the parameter's position (from 0); a kernel exported under another name (`#[export_name]`)
/// is named by that string instead, `kernel_param!(ctx in symbol("purlin_x") [1])` (any string
/// `concat!` takes). Use it in an `unsafe` block: the macro cannot check that `my_kernel` is
/// the enclosing kernel nor that `ctx` is its parameter at that position, and a wrong one reads
/// other bytes (a wrong name fails to assemble).
///
/// ```
/// use purlin_device::context::Context;
/// # let ctx = purlin_device::emulation::Communicator::builder(1).build().unwrap().context(0);
/// // On the host this is `&ctx`.
/// // SAFETY: (on the GPU) `ctx` is parameter 1 of the kernel `my_kernel`.
/// let view: &Context = unsafe { purlin_device::kernel_param!(ctx in my_kernel[1]) };
/// assert_eq!(view.world, 1);
/// ```
#[macro_export]
#[cfg_attr(
    target_arch = "nvptx64",
    allow_internal_unstable(asm_experimental_arch)
)]
macro_rules! kernel_param {
    ($param:ident in symbol($symbol:expr) [$index:literal]) => {{
        #[cfg(all(target_arch = "nvptx64", target_feature = "ptx77"))]
        let view = {
            let at: u64;
            // SAFETY: taking a parameter's address touches no memory.
            unsafe {
                ::core::arch::asm!(
                    concat!(
                        "mov.b64 {at}, ", $symbol, "_param_", stringify!($index), ";\n\t",
                        "cvta.param.u64 {at}, {at};"
                    ),
                    at = out(reg64) at,
                    options(nostack, nomem, pure),
                )
            };
            $crate::arch::parameter_at(&$param, at)
        };
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "ptx77")))]
        let view = $crate::arch::parameter_at(&$param, &$param as *const _ as u64);
        view
    }};
    ($param:ident in $kernel:ident [$index:literal]) => {
        $crate::kernel_param!($param in symbol(stringify!($kernel)) [$index])
    };
}

/// The parameter `param` as read at the generic address `at` ([`kernel_param!`]'s result,
/// with `param`'s type and lifetime).
///
/// # Safety
/// `at` is the address of `param`'s bytes (or of a copy that lives as long and is not written).
#[inline(always)]
pub unsafe fn parameter_at<T>(param: &T, at: u64) -> &T {
    let _ = param;
    // SAFETY: the caller's contract.
    unsafe { &*(at as *const T) }
}
