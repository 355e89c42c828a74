//! Shared receive queues: create (plain and XRC/TM), modify, query,
//! destroy. (rdma-core's `ibv_cmd_*` helpers; see `cmd`.)

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd::{payload, wait_events, Ptr};
use super::cmd_issue::{destroy_err, req_buf, HDR};
use super::write::{legacy, legacy_with_resp, ptr_u64, run};
use verbs_rt::export;

/// # Safety
/// `pd` live; `srq` the provider's new SRQ; buffers its own (legacy).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_srq(
    pd: *mut ibv_pd,
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_init_attr,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_srq_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let ctx = (*pd).context;
            (*srq).context = ctx;
            libc::pthread_mutex_init(&mut (*srq).mutex, core::ptr::null());
            libc::pthread_cond_init(&mut (*srq).cond, core::ptr::null());
            let a = &mut *attr;
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_create_srq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_create_srq>(cmd);
            p.user_handle = ptr_u64(srq);
            p.pd_handle = (*pd).handle;
            p.max_wr = a.attr.max_wr;
            p.max_sge = a.attr.max_sge;
            p.srq_limit = a.attr.srq_limit;
            let rc = legacy_with_resp(
                ctx,
                IB_USER_VERBS_CMD_CREATE_SRQ,
                cmd,
                cmd_size,
                resp.cast(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            (*srq).handle = (*resp).srq_handle;
            a.attr.max_wr = (*resp).max_wr;
            a.attr.max_sge = (*resp).max_sge;
        }
        0
    })
}

/// # Safety
/// `ctx` a kernel context; `srq` the provider's new verbs_srq; buffers its
/// own (`struct ibv_create_xsrq` layout).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_srq_ex(
    _ctx: *mut ibv_context,
    srq: *mut verbs_srq,
    attr_ex: *mut ibv_srq_init_attr_ex,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_srq_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &mut *attr_ex;
            if a.comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED {
                verbs_rt::errno::set_errno(libc::EOPNOTSUPP);
                return libc::EOPNOTSUPP;
            }
            if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
                verbs_rt::errno::set_errno(libc::EINVAL);
                return libc::EINVAL;
            }
            let pd = a.pd;
            let ctx = (*pd).context;
            let s = &mut (*srq).srq;
            s.context = ctx;
            libc::pthread_mutex_init(&mut s.mutex, core::ptr::null());
            libc::pthread_cond_init(&mut s.cond, core::ptr::null());
            let t = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
                a.srq_type
            } else {
                IBV_SRQT_BASIC
            };
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_create_xsrq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_create_xsrq>(cmd);
            p.user_handle = ptr_u64(s as *mut ibv_srq);
            p.srq_type = t;
            p.pd_handle = (*pd).handle;
            p.max_wr = a.attr.max_wr;
            p.max_sge = a.attr.max_sge;
            p.srq_limit = a.attr.srq_limit;
            p.max_num_tags = 0;
            p.xrcd_handle = 0;
            p.cq_handle = 0;
            match t {
                IBV_SRQT_XRC => {
                    if a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0
                        || a.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0
                    {
                        verbs_rt::errno::set_errno(libc::EINVAL);
                        return libc::EINVAL;
                    }
                    p.xrcd_handle = (*a.xrcd.cast::<verbs_xrcd>()).handle;
                    p.cq_handle = (*a.cq).handle;
                }
                IBV_SRQT_TM => {
                    if a.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0
                        || a.comp_mask & IBV_SRQ_INIT_ATTR_TM == 0
                        || a.tm_cap.max_num_tags == 0
                    {
                        verbs_rt::errno::set_errno(libc::EINVAL);
                        return libc::EINVAL;
                    }
                    p.max_num_tags = a.tm_cap.max_num_tags;
                    p.cq_handle = (*a.cq).handle;
                }
                _ => {}
            }
            let rc = legacy_with_resp(
                ctx,
                IB_USER_VERBS_CMD_CREATE_XSRQ,
                cmd,
                cmd_size,
                resp.cast(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            s.handle = (*resp).srq_handle;
            a.attr.max_wr = (*resp).max_wr;
            a.attr.max_sge = (*resp).max_sge;
            (*srq).srq_type = t;
            if t == IBV_SRQT_XRC {
                (*srq).srq_num = (*resp).srqn;
                (*srq).xrcd = a.xrcd.cast();
            }
            if a.comp_mask & IBV_SRQ_INIT_ATTR_CQ != 0 {
                (*srq).cq = a.cq;
            }
        }
        0
    })
}

/// # Safety
/// `srq` a live SRQ of a kernel context; `attr` valid; `cmd` the
/// provider's legacy request.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
    cmd: Ptr,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_modify_srq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_modify_srq>(cmd);
            p.srq_handle = (*srq).handle;
            p.attr_mask = mask as u32;
            p.max_wr = (*attr).max_wr;
            p.srq_limit = (*attr).srq_limit;
            legacy(
                (*srq).context,
                IB_USER_VERBS_CMD_MODIFY_SRQ,
                cmd,
                cmd_size,
                0,
            )
        }
    })
}

/// # Safety
/// `srq` a live SRQ of a kernel context; `attr` writable; `cmd` the
/// provider's request.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    cmd: Ptr,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        let mut r = ib_uverbs_query_srq_resp::default();
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_query_srq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_query_srq>(cmd);
            p.srq_handle = (*srq).handle;
            p.reserved = 0;
            let rc = legacy_with_resp(
                (*srq).context,
                IB_USER_VERBS_CMD_QUERY_SRQ,
                cmd,
                cmd_size,
                (&mut r as *mut ib_uverbs_query_srq_resp).cast(),
                size_of::<ib_uverbs_query_srq_resp>(),
            );
            if rc != 0 {
                return rc;
            }
            (*attr).max_wr = r.max_wr;
            (*attr).max_sge = r.max_sge;
            (*attr).srq_limit = r.srq_limit;
        }
        0
    })
}

/// # Safety
/// `srq` a live SRQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int {
    export!(raw::int, untraced, {
        let mut resp = ib_uverbs_destroy_srq_resp::default();
        // SAFETY: per the contract.
        let mut rc = unsafe {
            run(
                (*srq).context,
                IB_USER_VERBS_CMD_DESTROY_SRQ,
                ib_uverbs_destroy_srq {
                    response: 0,
                    srq_handle: (*srq).handle,
                    reserved: 0,
                },
                Some(&mut resp),
            )
        };
        if destroy_err(&mut rc) {
            return rc;
        }
        // SAFETY: the SRQ's own lock, condition and counter.
        unsafe {
            wait_events(
                core::ptr::addr_of_mut!((*srq).mutex),
                core::ptr::addr_of_mut!((*srq).cond),
                || {
                    core::ptr::read_volatile(core::ptr::addr_of!((*srq).events_completed))
                        == resp.events_reported
                },
            )
        };
        0
    })
}
