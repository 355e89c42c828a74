//! What the provider calls in libibverbs: rdma-core 44's provider
//! interface, exported under the version node `IBVERBS_PRIVATE_34` (by
//! rdma-core's libibverbs and by ours alike). build.rs links the library
//! against our `libibverbs.so`, so these resolve with that version.
//!
//! The `ibv_cmd_*` helpers take the provider's whole request buffer
//! (header, kernel payload, driver part: see [`crate::abi`]) as an untyped
//! pointer and its size, fill the kernel payload themselves, and return 0
//! or a positive errno.
//!
//! The unit tests' executables have no libibverbs: there the same names
//! are Rust functions that fail the test if reached (nothing that needs
//! the kernel runs in them).

use core::ffi::{c_int, c_void};

use verbs_abi::driver::{verbs_context_ops, verbs_device_ops, verbs_mr};
use verbs_abi::uverbs::*;
use verbs_abi::*;

/// Declares the functions for the library build and stand-ins for the
/// unit tests.
macro_rules! libibverbs {
    ($($(#[$m:meta])* pub fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)?;)*) => {
        #[cfg(not(test))]
        extern "C" {
            $($(#[$m])* pub fn $name($($a: $t),*) $(-> $r)?;)*
        }
        #[cfg(test)]
        #[allow(dead_code)]
        mod absent {
            use super::*;
            $(
                #[allow(unused_variables)]
                pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
                    unreachable!(concat!(stringify!($name), ": no libibverbs in unit tests"))
                }
            )*
        }
        #[cfg(test)]
        pub use absent::*;
    };
}

libibverbs! {
    /// Adds `ops` to libibverbs' list of providers (from our constructor).
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);

    /// Allocates `alloc_size` zeroed bytes (freed with `free`) holding a
    /// `verbs_context` at offset `context_offset`, initialised for
    /// `cmd_fd`, which it takes over (and closes on failure).
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;
    /// Releases what `_verbs_init_and_alloc_context` set up (not the memory).
    pub fn verbs_uninit_context(vctx: *mut verbs_context);
    /// Installs the provider's operations in a new context.
    pub fn verbs_set_ops(vctx: *mut verbs_context, ops: *const verbs_context_ops);

    pub fn ibv_cmd_get_context(
        vctx: *mut verbs_context,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_get_context_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_device_any(
        ctx: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        attr_size: usize,
        resp: *mut ib_uverbs_ex_query_device_resp,
        resp_size: *mut usize,
    ) -> c_int;
    pub fn ibv_cmd_query_port(
        ctx: *mut ibv_context,
        port_num: u8,
        attr: *mut ibv_port_attr,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;

    pub fn ibv_cmd_alloc_pd(
        ctx: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_pd_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;

    pub fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut verbs_mr,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int;

    pub fn ibv_cmd_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_cq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;

    pub fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        attr_mask: c_int,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;

    pub fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;
}
