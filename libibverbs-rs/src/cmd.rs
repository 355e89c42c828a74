//! rdma-core's `ibv_cmd_*` helpers: the private calls its kernel-backed
//! providers use to issue uverbs commands on the device's command fd.
//!
//! Our devices have no kernel driver and no command fd, and our providers
//! never use these calls. They exist so that binaries linked against
//! IBVERBS_PRIVATE_34 (rdma-core's own providers, if one is ever loaded by
//! accident) resolve, and every one of them fails with ENOSYS, the answer a
//! kernel without the verbs module would give. Pointer arguments of
//! rdma-core-internal types are `void *`: same ABI, and never dereferenced
//! except to report the failing work request where the C contract asks.

use core::ffi::{c_int, c_uint, c_void};

use verbs_abi::*;

use crate::util::set_errno;

/// Defines `int name(args...)` returning ENOSYS.
macro_rules! enosys {
    ($( fn $name:ident($($arg:ident: $ty:ty),* $(,)?); )*) => {$(
        /// # Safety
        /// Arguments are not dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let _ = ($($arg,)*);
            libc::ENOSYS
        }
    )*};
}

type Ptr = *mut c_void;

enosys! {
    fn ibv_cmd_advise_mr(pd: *mut ibv_pd, advice: c_uint, flags: u32, sg_list: *mut ibv_sge, num_sge: u32);
    fn ibv_cmd_alloc_dm(ctx: *mut ibv_context, dm_attr: *const ibv_alloc_dm_attr, dm: Ptr, link: Ptr);
    fn ibv_cmd_alloc_mw(pd: *mut ibv_pd, mw_type: c_uint, mw: *mut ibv_mw, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
    fn ibv_cmd_alloc_pd(context: *mut ibv_context, pd: *mut ibv_pd, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
    fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16);
    fn ibv_cmd_close_xrcd(xrcd: Ptr);
    fn ibv_cmd_create_ah(pd: *mut ibv_pd, ah: *mut ibv_ah, attr: *mut ibv_ah_attr, resp: Ptr, resp_size: usize);
    fn ibv_cmd_create_counters(context: *mut ibv_context, init_attr: *mut ibv_counters_init_attr, vcounters: Ptr, link: Ptr);
    fn ibv_cmd_create_cq(
        context: *mut ibv_context, cqe: c_int, channel: *mut ibv_comp_channel, comp_vector: c_int,
        cq: *mut ibv_cq, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_create_cq_ex(
        context: *mut ibv_context, cq_attr: *const ibv_cq_init_attr_ex, cq: Ptr, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize, cmd_flags: u32,
    );
    fn ibv_cmd_create_flow(qp: *mut ibv_qp, flow_id: *mut ibv_flow, flow_attr: *mut ibv_flow_attr, ucmd: Ptr, ucmd_size: usize);
    fn ibv_cmd_create_flow_action_esp(ctx: *mut ibv_context, attr: *mut ibv_flow_action_esp_attr, flow_action: Ptr, driver: Ptr);
    fn ibv_cmd_create_qp(pd: *mut ibv_pd, qp: *mut ibv_qp, attr: *mut ibv_qp_init_attr, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
    fn ibv_cmd_create_qp_ex(
        context: *mut ibv_context, qp: Ptr, attr_ex: *mut ibv_qp_init_attr_ex, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_create_qp_ex2(
        context: *mut ibv_context, qp: Ptr, qp_attr: *mut ibv_qp_init_attr_ex, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_create_rwq_ind_table(
        context: *mut ibv_context, init_attr: *mut ibv_rwq_ind_table_init_attr, rwq_ind_table: *mut ibv_rwq_ind_table,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_create_srq(pd: *mut ibv_pd, srq: *mut ibv_srq, attr: *mut ibv_srq_init_attr, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
    fn ibv_cmd_create_srq_ex(
        context: *mut ibv_context, srq: Ptr, attr_ex: *mut ibv_srq_init_attr_ex, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_create_wq(
        context: *mut ibv_context, wq_init_attr: *mut ibv_wq_init_attr, wq: *mut ibv_wq, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw);
    fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd);
    fn ibv_cmd_dereg_mr(vmr: Ptr);
    fn ibv_cmd_destroy_ah(ah: *mut ibv_ah);
    fn ibv_cmd_destroy_counters(vcounters: Ptr);
    fn ibv_cmd_destroy_cq(cq: *mut ibv_cq);
    fn ibv_cmd_destroy_flow(flow_id: *mut ibv_flow);
    fn ibv_cmd_destroy_flow_action(action: Ptr);
    fn ibv_cmd_destroy_qp(qp: *mut ibv_qp);
    fn ibv_cmd_destroy_rwq_ind_table(rwq_ind_table: *mut ibv_rwq_ind_table);
    fn ibv_cmd_destroy_srq(srq: *mut ibv_srq);
    fn ibv_cmd_destroy_wq(wq: *mut ibv_wq);
    fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16);
    fn ibv_cmd_free_dm(dm: Ptr);
    fn ibv_cmd_get_context(context: *mut verbs_context, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
    fn ibv_cmd_modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_modify_flow_action_esp(flow_action: Ptr, attr: *mut ibv_flow_action_esp_attr, driver: Ptr);
    fn ibv_cmd_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_modify_qp_ex(
        qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_open_qp(
        context: *mut ibv_context, qp: Ptr, vqp_sz: c_int, attr: *mut ibv_qp_open_attr, cmd: Ptr, cmd_size: usize,
        resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_open_xrcd(
        context: *mut ibv_context, xrcd: Ptr, vxrcd_size: c_int, attr: *mut ibv_xrcd_init_attr, cmd: Ptr,
        cmd_size: usize, resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_query_context(ctx: *mut ibv_context, driver: Ptr);
    fn ibv_cmd_query_device_any(
        context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut ibv_device_attr_ex,
        attr_size: usize, resp: Ptr, resp_size: *mut usize,
    );
    fn ibv_cmd_query_mr(pd: *mut ibv_pd, vmr: Ptr, mr_handle: u32);
    fn ibv_cmd_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_query_qp(
        qp: *mut ibv_qp, qp_attr: *mut ibv_qp_attr, attr_mask: c_int, qp_init_attr: *mut ibv_qp_init_attr,
        cmd: Ptr, cmd_size: usize,
    );
    fn ibv_cmd_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, cmd: Ptr, cmd_size: usize);
    fn ibv_cmd_read_counters(vcounters: Ptr, counters_value: *mut u64, ncounters: u32, flags: u32, link: Ptr);
    fn ibv_cmd_reg_dm_mr(pd: *mut ibv_pd, dm: Ptr, offset: u64, length: usize, access: c_uint, vmr: Ptr, link: Ptr);
    fn ibv_cmd_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int, vmr: Ptr);
    fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd, addr: *mut c_void, length: usize, hca_va: u64, access: c_int, vmr: Ptr, cmd: Ptr,
        cmd_size: usize, resp: Ptr, resp_size: usize,
    );
    fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int);
    fn ibv_cmd_rereg_mr(
        vmr: Ptr, flags: u32, addr: *mut c_void, length: usize, hca_va: u64, access: c_int, pd: *mut ibv_pd,
        cmd: Ptr, cmd_sz: usize, resp: Ptr, resp_sz: usize,
    );
    fn ibv_cmd_resize_cq(cq: *mut ibv_cq, cqe: c_int, cmd: Ptr, cmd_size: usize, resp: Ptr, resp_size: usize);
}

/// Returns a completion count, so failure is -1 with errno.
///
/// # Safety
/// Arguments are not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_poll_cq(_cq: *mut ibv_cq, _ne: c_int, _wc: *mut ibv_wc) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// Reports the first work request as the failing one, as the posting calls
/// must whenever they fail.
///
/// # Safety
/// `bad_wr` is NULL or writable.
unsafe fn post_failed<T>(wr: *mut T, bad_wr: *mut *mut T) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: non-NULL per the check; the caller provides the slot.
        unsafe { *bad_wr = wr };
    }
    libc::ENOSYS
}

/// # Safety
/// `bad_wr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_send(
    _qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { post_failed(wr, bad_wr) }
}

/// # Safety
/// `bad_wr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_recv(
    _qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { post_failed(wr, bad_wr) }
}

/// # Safety
/// `bad_wr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_post_srq_recv(
    _srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { post_failed(wr, bad_wr) }
}
