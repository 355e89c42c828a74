//! What the provider calls in the libibverbs that loaded it: the private
//! provider interface of rdma-core 44 (`IBVERBS_PRIVATE_34`: registration,
//! the context's life cycle, the uverbs commands) and the two public verbs
//! an AH needs on kernels that predate AH numbers. The build links these
//! against our libibverbs.so, so the provider NEEDs libibverbs.so.1 and
//! binds them by version, as rdma-core's C providers do.
//!
//! The unit tests run without libibverbs: there the same list declares
//! stand-ins that are never called (nothing the tests reach issues a
//! command), so the test program links.

use core::ffi::{c_int, c_void};

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

type Buf = *mut c_void;

/// Declares libibverbs' functions (or, in the unit tests, stand-ins).
macro_rules! libibverbs {
    ($(pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;)*) => {
        #[cfg(not(test))]
        #[allow(clippy::too_many_arguments)]
        extern "C" {
            $(pub fn $name($($arg: $ty),*) $(-> $ret)?;)*
        }

        $(
            #[cfg(test)]
            #[allow(dead_code, clippy::too_many_arguments, clippy::missing_safety_doc)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                let _ = ($($arg,)*);
                unreachable!(concat!("the unit tests do not call ", stringify!($name)))
            }
        )*
    };
}

libibverbs! {
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;
    pub fn verbs_uninit_context(vctx: *mut verbs_context);
    pub fn verbs_set_ops(vctx: *mut verbs_context, ops: *const verbs_context_ops);

    pub fn ibv_cmd_get_context(
        vctx: *mut verbs_context,
        cmd: Buf,
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
        cmd: Buf,
        cmd_size: usize,
    ) -> c_int;

    pub fn ibv_cmd_alloc_pd(
        ctx: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: Buf,
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
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int;
    pub fn ibv_cmd_alloc_mw(
        pd: *mut ibv_pd,
        mw_type: ibv_mw_type,
        mw: *mut ibv_mw,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_mw_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int;

    pub fn ibv_cmd_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_cq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_create_cq_ex(
        ctx: *mut ibv_context,
        attr: *const ibv_cq_init_attr_ex,
        cq: *mut verbs_cq,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_cq_resp,
        resp_size: usize,
        cmd_flags: u32,
    ) -> c_int;
    pub fn ibv_cmd_resize_cq(
        cq: *mut ibv_cq,
        cqe: c_int,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_resize_cq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
    pub fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;

    pub fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_create_srq_ex(
        ctx: *mut ibv_context,
        srq: *mut verbs_srq,
        attr_ex: *mut ibv_srq_init_attr_ex,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        mask: c_int,
        cmd: Buf,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        cmd: Buf,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;

    pub fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_create_qp_ex2(
        ctx: *mut ibv_context,
        qp: *mut verbs_qp,
        attr_ex: *mut ibv_qp_init_attr_ex,
        cmd: Buf,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init: *mut ibv_qp_init_attr,
        cmd: Buf,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: Buf,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;

    pub fn ibv_cmd_create_ah(
        pd: *mut ibv_pd,
        ah: *mut ibv_ah,
        attr: *mut ibv_ah_attr,
        resp: *mut ib_uverbs_create_ah_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int;
    pub fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;

    pub fn ibv_query_gid(
        ctx: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int;
    pub fn ibv_resolve_eth_l2_from_gid(
        ctx: *mut ibv_context,
        attr: *mut ibv_ah_attr,
        eth_mac: *mut u8,
        vid: *mut u16,
    ) -> c_int;
}
