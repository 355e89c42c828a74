//! Queue pairs: create (legacy and extended), open, query, modify, destroy. (rdma-core's `ibv_cmd_*` helpers; see `cmd`.)

use core::ffi::c_int;
use core::mem::{offset_of, size_of};

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd::{ex_payload, payload, wait_events, Ptr};
use super::cmd_issue::{destroy_err, req_buf, EX_HDRS, HDR};
use super::write::{extended, legacy, legacy_with_resp, ptr_u64, run};
use verbs_rt::export;

/// rdma-core's `set_qp`: the fields every new QP gets.
///
/// # Safety
/// `qp` is the provider's new QP; `vqp` NULL or the verbs_qp around it.
unsafe fn set_qp(qp: *mut ibv_qp, vqp: *mut verbs_qp, a: &ibv_qp_init_attr_ex) {
    // SAFETY: per the contract.
    unsafe {
        let q = &mut *qp;
        q.qp_context = a.qp_context;
        q.pd = a.pd;
        q.send_cq = a.send_cq;
        q.recv_cq = a.recv_cq;
        q.srq = a.srq;
        q.qp_type = a.qp_type;
        q.state = IBV_QPS_RESET;
        q.events_completed = 0;
        libc::pthread_mutex_init(&mut q.mutex, core::ptr::null());
        libc::pthread_cond_init(&mut q.cond, core::ptr::null());
        if !vqp.is_null() {
            (*vqp).comp_mask = 0;
            if a.comp_mask & IBV_QP_INIT_ATTR_XRCD != 0 {
                (*vqp).comp_mask |= VERBS_QP_XRCD;
                (*vqp).xrcd = a.xrcd.cast();
            }
        }
    }
}

/// The handles a create names, checked as rdma-core checks them.
///
/// # Safety
/// The attribute's objects are live.
unsafe fn qp_handles(a: &mut ibv_qp_init_attr_ex) -> Result<(u32, u32, u32), c_int> {
    // SAFETY: per the contract.
    unsafe {
        match a.qp_type {
            IBV_QPT_XRC_RECV => {
                if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
                    return Err(libc::EINVAL);
                }
                Ok(((*a.xrcd.cast::<verbs_xrcd>()).handle, 0, 0))
            }
            IBV_QPT_RC | IBV_QPT_UD | IBV_QPT_UC | IBV_QPT_RAW_PACKET | IBV_QPT_XRC_SEND
            | IBV_QPT_DRIVER => {
                if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
                    return Err(libc::EINVAL);
                }
                let pd = (*a.pd).handle;
                let mut send = 0;
                let mut recv = 0;
                if a.comp_mask & IBV_QP_INIT_ATTR_IND_TABLE != 0 {
                    if a.cap.max_recv_wr != 0
                        || a.cap.max_recv_sge != 0
                        || !a.recv_cq.is_null()
                        || !a.srq.is_null()
                    {
                        return Err(libc::EINVAL);
                    }
                    if a.cap.max_send_wr != 0 && !a.send_cq.is_null() {
                        send = (*a.send_cq).handle;
                    }
                } else {
                    if a.send_cq.is_null() {
                        return Err(libc::EINVAL);
                    }
                    send = (*a.send_cq).handle;
                    if a.qp_type != IBV_QPT_XRC_SEND {
                        if a.recv_cq.is_null() {
                            return Err(libc::EINVAL);
                        }
                        recv = (*a.recv_cq).handle;
                    }
                }
                if a.qp_type == IBV_QPT_XRC_SEND {
                    a.cap.max_recv_wr = 0;
                    a.cap.max_recv_sge = 0;
                }
                Ok((pd, send, recv))
            }
            _ => Err(libc::EINVAL),
        }
    }
}

/// What both creates do first: the QP's context, then the handles its
/// attribute names (errno set on failure).
///
/// # Safety
/// `qp` is the provider's new QP; the attribute's objects are live.
unsafe fn begin_create(
    ctx: *mut ibv_context,
    qp: *mut ibv_qp,
    a: &mut ibv_qp_init_attr_ex,
) -> Result<(u32, u32, u32), c_int> {
    // SAFETY: per the contract.
    unsafe {
        (*qp).context = ctx;
        qp_handles(a).inspect_err(|&e| verbs_rt::errno::set_errno(e))
    }
}

/// Fills the request fields both creates carry. `ib_uverbs_create_qp` and
/// `ib_uverbs_ex_create_qp` name them alike but share no type, so a macro
/// writes them into either.
macro_rules! fill_create_qp {
    ($p:expr, $qp:expr, $a:expr, $handles:expr) => {{
        let (p, a) = ($p, &*$a);
        let (pd, send, recv) = $handles;
        p.user_handle = ptr_u64($qp);
        p.pd_handle = pd;
        p.send_cq_handle = send;
        p.recv_cq_handle = recv;
        p.srq_handle = if a.srq.is_null() { 0 } else { (*a.srq).handle };
        p.max_send_wr = a.cap.max_send_wr;
        p.max_recv_wr = a.cap.max_recv_wr;
        p.max_send_sge = a.cap.max_send_sge;
        p.max_recv_sge = a.cap.max_recv_sge;
        p.max_inline_data = a.cap.max_inline_data;
        p.sq_sig_all = (a.sq_sig_all != 0) as u8;
        p.qp_type = a.qp_type as u8;
        p.is_srq = (!a.srq.is_null()) as u8;
        p.reserved = 0;
    }};
}

/// What both creates take from the kernel's answer (the extended one's
/// `base`): the QP's handle and number, the capabilities granted.
///
/// # Safety
/// As for [`set_qp`].
unsafe fn finish_create(
    qp: *mut ibv_qp,
    vqp: *mut verbs_qp,
    a: &mut ibv_qp_init_attr_ex,
    r: &ib_uverbs_create_qp_resp,
) {
    // SAFETY: per the contract.
    unsafe {
        (*qp).handle = r.qp_handle;
        (*qp).qp_num = r.qpn;
        a.cap.max_recv_sge = r.max_recv_sge;
        a.cap.max_send_sge = r.max_send_sge;
        a.cap.max_recv_wr = r.max_recv_wr;
        a.cap.max_send_wr = r.max_send_wr;
        a.cap.max_inline_data = r.max_inline_data;
        set_qp(qp, vqp, a);
    }
}

/// The legacy create: the provider's `struct ibv_create_qp` request.
///
/// # Safety
/// `pd` live; `qp` the provider's new QP; buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_qp(
    pd: *mut ibv_pd,
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_init_attr,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_qp_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_create_qp>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let init = &mut *attr;
            let mut ex = ibv_qp_init_attr_ex::zeroed();
            ex.qp_context = init.qp_context;
            ex.send_cq = init.send_cq;
            ex.recv_cq = init.recv_cq;
            ex.srq = init.srq;
            ex.cap = init.cap;
            ex.qp_type = init.qp_type;
            ex.sq_sig_all = init.sq_sig_all;
            ex.comp_mask = IBV_QP_INIT_ATTR_PD;
            ex.pd = pd;
            let rc = create_qp_legacy(
                (*pd).context,
                qp,
                core::ptr::null_mut(),
                &mut ex,
                cmd,
                cmd_size,
                resp,
                resp_size,
            );
            if rc == 0 {
                init.cap = ex.cap;
            }
            rc
        }
    })
}

/// # Safety
/// As for [`ibv_cmd_create_qp`], with an extended attribute.
#[allow(clippy::too_many_arguments)]
unsafe fn create_qp_legacy(
    ctx: *mut ibv_context,
    qp: *mut ibv_qp,
    vqp: *mut verbs_qp,
    a: &mut ibv_qp_init_attr_ex,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_qp_resp,
    resp_size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let handles = match begin_create(ctx, qp, a) {
            Ok(h) => h,
            Err(e) => return e,
        };
        let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_create_qp>());
        let (cmd, cmd_size) = (buf.ptr, buf.size);
        fill_create_qp!(payload::<ib_uverbs_create_qp>(cmd), qp, a, handles);
        let rc = legacy_with_resp(
            ctx,
            IB_USER_VERBS_CMD_CREATE_QP,
            cmd,
            cmd_size,
            resp.cast(),
            resp_size,
        );
        if rc != 0 {
            return rc;
        }
        finish_create(qp, vqp, a, &*resp);
    }
    0
}

/// Legacy create with a `verbs_qp` (rdma-core's `ibv_cmd_create_qp_ex`).
///
/// # Safety
/// `ctx` a kernel context; `qp` the provider's new verbs_qp; buffers its
/// own (legacy layout).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_qp_ex(
    ctx: *mut ibv_context,
    qp: *mut verbs_qp,
    attr_ex: *mut ibv_qp_init_attr_ex,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_qp_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &mut *attr_ex;
            if a.comp_mask & !(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD) != 0 {
                return libc::EINVAL;
            }
            create_qp_legacy(ctx, qp.cast(), qp, a, cmd, cmd_size, resp, resp_size)
        }
    })
}

/// The extended create: the provider's `struct ibv_create_qp_ex` request.
///
/// # Safety
/// `ctx` a kernel context; `qp` the provider's new verbs_qp; buffers its
/// own (extended layout).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_qp_ex2(
    ctx: *mut ibv_context,
    qp: *mut verbs_qp,
    attr_ex: *mut ibv_qp_init_attr_ex,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_ex_create_qp_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        const SUP_CREATE_FLAGS: u32 = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
            | IBV_QP_CREATE_SCATTER_FCS
            | IBV_QP_CREATE_CVLAN_STRIPPING
            | IBV_QP_CREATE_SOURCE_QPN
            | IBV_QP_CREATE_PCI_WRITE_END_PADDING;
        // SAFETY: per the contract.
        unsafe {
            let a = &mut *attr_ex;
            let ibqp = qp.cast::<ibv_qp>();
            let handles = match begin_create(ctx, ibqp, a) {
                Ok(h) => h,
                Err(e) => return e,
            };
            let buf = req_buf(cmd, cmd_size, EX_HDRS + size_of::<ib_uverbs_ex_create_qp>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = ex_payload::<ib_uverbs_ex_create_qp>(cmd);
            fill_create_qp!(&mut *p, ibqp, a, handles);
            p.comp_mask = 0;
            p.create_flags = 0;
            p.rwq_ind_tbl_handle = 0;
            p.source_qpn = 0;
            if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
                if a.create_flags & !SUP_CREATE_FLAGS != 0 {
                    verbs_rt::errno::set_errno(libc::EINVAL);
                    return libc::EINVAL;
                }
                p.create_flags = a.create_flags;
                if a.create_flags & IBV_QP_CREATE_SOURCE_QPN != 0 {
                    p.source_qpn = a.source_qpn;
                }
            }
            if a.comp_mask & IBV_QP_INIT_ATTR_IND_TABLE != 0 {
                p.rwq_ind_tbl_handle = (*a.rwq_ind_tbl).ind_tbl_handle as u32;
                p.comp_mask = IB_UVERBS_CREATE_QP_MASK_IND_TABLE;
            }
            let core_req = EX_HDRS + size_of::<ib_uverbs_ex_create_qp>();
            let rc = extended(
                ctx,
                IB_USER_VERBS_EX_CMD_CREATE_QP,
                cmd,
                core_req,
                cmd_size.max(core_req),
                resp.cast(),
                size_of::<ib_uverbs_ex_create_qp_resp>(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            finish_create(ibqp, qp, a, &(*resp).base);
        }
        0
    })
}

/// # Safety
/// `ctx` a kernel context; `qp` the provider's new verbs_qp of `vqp_sz`
/// bytes; buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_open_qp(
    ctx: *mut ibv_context,
    qp: *mut verbs_qp,
    vqp_sz: c_int,
    attr: *mut ibv_qp_open_attr,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_qp_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &*attr;
            if a.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED {
                return libc::EOPNOTSUPP;
            }
            let need = IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;
            if a.comp_mask & need != need {
                return libc::EINVAL;
            }
            let xrcd = a.xrcd.cast::<verbs_xrcd>();
            let ibqp = qp.cast::<ibv_qp>();
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_open_qp>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_open_qp>(cmd);
            p.user_handle = ptr_u64(ibqp);
            p.pd_handle = (*xrcd).handle;
            p.qpn = a.qp_num;
            p.qp_type = a.qp_type as u8;
            p.reserved = [0; 7];
            let rc = legacy_with_resp(
                ctx,
                IB_USER_VERBS_CMD_OPEN_QP,
                cmd,
                cmd_size,
                resp.cast(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            let q = &mut *ibqp;
            q.handle = (*resp).qp_handle;
            q.context = ctx;
            q.qp_context = a.qp_context;
            q.pd = core::ptr::null_mut();
            q.send_cq = core::ptr::null_mut();
            q.recv_cq = core::ptr::null_mut();
            q.srq = core::ptr::null_mut();
            q.qp_num = a.qp_num;
            q.qp_type = a.qp_type;
            q.state = IBV_QPS_UNKNOWN;
            q.events_completed = 0;
            libc::pthread_mutex_init(&mut q.mutex, core::ptr::null());
            libc::pthread_cond_init(&mut q.cond, core::ptr::null());
            (*qp).comp_mask = 0;
            if vqp_sz as usize >= offset_of!(verbs_qp, xrcd) + size_of::<usize>() {
                (*qp).comp_mask = VERBS_QP_XRCD;
                (*qp).xrcd = xrcd;
            }
        }
        0
    })
}

fn dest_from(d: &ib_uverbs_qp_dest) -> ibv_ah_attr {
    let mut a = ibv_ah_attr::zeroed();
    a.grh.dgid.raw = d.dgid;
    a.grh.flow_label = d.flow_label;
    a.dlid = d.dlid;
    a.grh.sgid_index = d.sgid_index;
    a.grh.hop_limit = d.hop_limit;
    a.grh.traffic_class = d.traffic_class;
    a.sl = d.sl;
    a.src_path_bits = d.src_path_bits;
    a.static_rate = d.static_rate;
    a.is_global = d.is_global;
    a.port_num = d.port_num;
    a
}

fn dest_to(a: &ibv_ah_attr) -> ib_uverbs_qp_dest {
    ib_uverbs_qp_dest {
        // SAFETY: every bit pattern of the union is a valid byte array.
        dgid: unsafe { a.grh.dgid.raw },
        flow_label: a.grh.flow_label,
        dlid: a.dlid,
        reserved: 0,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global,
        port_num: a.port_num,
    }
}

/// # Safety
/// `qp` a live QP of a kernel context; `attr`, `init` writable; `cmd` the
/// provider's request.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init: *mut ibv_qp_init_attr,
    cmd: Ptr,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        if attr_mask as u32 & !(IBV_QP_RATE_LIMIT - 1) != 0 {
            return libc::EOPNOTSUPP;
        }
        let mut r = ib_uverbs_query_qp_resp::default();
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_query_qp>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_query_qp>(cmd);
            p.qp_handle = (*qp).handle;
            p.attr_mask = attr_mask as u32;
            let rc = legacy_with_resp(
                (*qp).context,
                IB_USER_VERBS_CMD_QUERY_QP,
                cmd,
                cmd_size,
                (&mut r as *mut ib_uverbs_query_qp_resp).cast(),
                size_of::<ib_uverbs_query_qp_resp>(),
            );
            if rc != 0 {
                return rc;
            }
            let a = &mut *attr;
            a.qkey = r.qkey;
            a.rq_psn = r.rq_psn;
            a.sq_psn = r.sq_psn;
            a.dest_qp_num = r.dest_qp_num;
            a.qp_access_flags = r.qp_access_flags as _;
            a.pkey_index = r.pkey_index;
            a.alt_pkey_index = r.alt_pkey_index;
            a.qp_state = r.qp_state as _;
            a.cur_qp_state = r.cur_qp_state as _;
            a.path_mtu = r.path_mtu as _;
            a.path_mig_state = r.path_mig_state as _;
            a.sq_draining = r.sq_draining;
            a.max_rd_atomic = r.max_rd_atomic;
            a.max_dest_rd_atomic = r.max_dest_rd_atomic;
            a.min_rnr_timer = r.min_rnr_timer;
            a.port_num = r.port_num;
            a.timeout = r.timeout;
            a.retry_cnt = r.retry_cnt;
            a.rnr_retry = r.rnr_retry;
            a.alt_port_num = r.alt_port_num;
            a.alt_timeout = r.alt_timeout;
            a.cap.max_send_wr = r.max_send_wr;
            a.cap.max_recv_wr = r.max_recv_wr;
            a.cap.max_send_sge = r.max_send_sge;
            a.cap.max_recv_sge = r.max_recv_sge;
            a.cap.max_inline_data = r.max_inline_data;
            a.ah_attr = dest_from(&r.dest);
            a.alt_ah_attr = dest_from(&r.alt_dest);
            let i = &mut *init;
            let q = &*qp;
            i.qp_context = q.qp_context;
            i.send_cq = q.send_cq;
            i.recv_cq = q.recv_cq;
            i.srq = q.srq;
            i.qp_type = q.qp_type;
            i.cap = a.cap;
            i.sq_sig_all = r.sq_sig_all as c_int;
        }
        0
    })
}

fn modify_fields(qp: &ibv_qp, a: &ibv_qp_attr, mask: c_int, c: &mut ib_uverbs_modify_qp) {
    let m = mask as u32;
    c.qp_handle = qp.handle;
    c.attr_mask = m;
    if m & IBV_QP_STATE != 0 {
        c.qp_state = a.qp_state as u8;
    }
    if m & IBV_QP_CUR_STATE != 0 {
        c.cur_qp_state = a.cur_qp_state as u8;
    }
    if m & IBV_QP_EN_SQD_ASYNC_NOTIFY != 0 {
        c.en_sqd_async_notify = a.en_sqd_async_notify;
    }
    if m & IBV_QP_ACCESS_FLAGS != 0 {
        c.qp_access_flags = a.qp_access_flags;
    }
    if m & IBV_QP_PKEY_INDEX != 0 {
        c.pkey_index = a.pkey_index;
    }
    if m & IBV_QP_PORT != 0 {
        c.port_num = a.port_num;
    }
    if m & IBV_QP_QKEY != 0 {
        c.qkey = a.qkey;
    }
    if m & IBV_QP_AV != 0 {
        c.dest = dest_to(&a.ah_attr);
    }
    if m & IBV_QP_PATH_MTU != 0 {
        c.path_mtu = a.path_mtu as u8;
    }
    if m & IBV_QP_TIMEOUT != 0 {
        c.timeout = a.timeout;
    }
    if m & IBV_QP_RETRY_CNT != 0 {
        c.retry_cnt = a.retry_cnt;
    }
    if m & IBV_QP_RNR_RETRY != 0 {
        c.rnr_retry = a.rnr_retry;
    }
    if m & IBV_QP_RQ_PSN != 0 {
        c.rq_psn = a.rq_psn;
    }
    if m & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        c.max_rd_atomic = a.max_rd_atomic;
    }
    if m & IBV_QP_ALT_PATH != 0 {
        c.alt_pkey_index = a.alt_pkey_index;
        c.alt_port_num = a.alt_port_num;
        c.alt_timeout = a.alt_timeout;
        c.alt_dest = dest_to(&a.alt_ah_attr);
    }
    if m & IBV_QP_MIN_RNR_TIMER != 0 {
        c.min_rnr_timer = a.min_rnr_timer;
    }
    if m & IBV_QP_SQ_PSN != 0 {
        c.sq_psn = a.sq_psn;
    }
    if m & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if m & IBV_QP_PATH_MIG_STATE != 0 {
        c.path_mig_state = a.path_mig_state as u8;
    }
    if m & IBV_QP_DEST_QPN != 0 {
        c.dest_qp_num = a.dest_qp_num;
    }
    c.reserved = [0; 2];
}

/// # Safety
/// `qp` a live QP of a kernel context; `attr` valid; `cmd` the provider's
/// legacy request.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    cmd: Ptr,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        if attr_mask as u32 & !(IBV_QP_RATE_LIMIT - 1) != 0 {
            return libc::EOPNOTSUPP;
        }
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_modify_qp>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            modify_fields(&*qp, &*attr, attr_mask, payload(cmd));
            legacy((*qp).context, IB_USER_VERBS_CMD_MODIFY_QP, cmd, cmd_size, 0)
        }
    })
}

/// # Safety
/// As for [`ibv_cmd_modify_qp`], with the provider's extended request and
/// response.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_modify_qp_ex(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_ex_modify_qp_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, EX_HDRS + size_of::<ib_uverbs_ex_modify_qp>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = ex_payload::<ib_uverbs_ex_modify_qp>(cmd);
            modify_fields(&*qp, &*attr, attr_mask, &mut p.base);
            if attr_mask as u32 & IBV_QP_RATE_LIMIT != 0 {
                if cmd_size >= EX_HDRS + offset_of!(ib_uverbs_ex_modify_qp, rate_limit) + 4 {
                    p.rate_limit = (*attr).rate_limit;
                } else {
                    return libc::EINVAL;
                }
            }
            let core_req = EX_HDRS + size_of::<ib_uverbs_ex_modify_qp>();
            extended(
                (*qp).context,
                IB_USER_VERBS_EX_CMD_MODIFY_QP,
                cmd,
                core_req.min(cmd_size),
                cmd_size,
                resp.cast(),
                size_of::<ib_uverbs_ex_modify_qp_resp>().min(resp_size),
                resp_size,
            )
        }
    })
}

/// # Safety
/// `qp` a live QP of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int {
    export!(raw::int, untraced, {
        let mut resp = ib_uverbs_destroy_qp_resp::default();
        // SAFETY: per the contract.
        let mut rc = unsafe {
            run(
                (*qp).context,
                IB_USER_VERBS_CMD_DESTROY_QP,
                ib_uverbs_destroy_qp {
                    response: 0,
                    qp_handle: (*qp).handle,
                    reserved: 0,
                },
                Some(&mut resp),
            )
        };
        if destroy_err(&mut rc) {
            return rc;
        }
        // SAFETY: the QP's own lock, condition and counter.
        unsafe {
            wait_events(
                core::ptr::addr_of_mut!((*qp).mutex),
                core::ptr::addr_of_mut!((*qp).cond),
                || {
                    core::ptr::read_volatile(core::ptr::addr_of!((*qp).events_completed))
                        == resp.events_reported
                },
            )
        };
        0
    })
}

#[cfg(test)]
mod tests {
    use super::super::cmd_issue::testing::*;
    use super::*;

    fn bytes_of<T>(t: &T) -> &[u8] {
        // SAFETY: a plain repr(C) request, read as the bytes it is.
        unsafe { core::slice::from_raw_parts((t as *const T).cast(), size_of::<T>()) }
    }

    /// What a create names: a PD, two CQs and an SRQ, with their handles.
    struct Objs {
        pd: ibv_pd,
        send: ibv_cq,
        recv: ibv_cq,
        srq: ibv_srq,
    }

    fn objs(ctx: *mut ibv_context) -> Box<Objs> {
        let mut o = Box::new(Objs {
            pd: ibv_pd::zeroed(),
            send: ibv_cq::zeroed(),
            recv: ibv_cq::zeroed(),
            srq: ibv_srq::zeroed(),
        });
        o.pd.context = ctx;
        o.pd.handle = 7;
        o.send.handle = 11;
        o.recv.handle = 12;
        o.srq.handle = 13;
        o
    }

    fn attr_ex(o: &mut Objs) -> ibv_qp_init_attr_ex {
        let mut a = ibv_qp_init_attr_ex::zeroed();
        a.send_cq = &mut o.send;
        a.recv_cq = &mut o.recv;
        a.srq = &mut o.srq;
        (a.cap.max_send_wr, a.cap.max_recv_wr) = (10, 20);
        (a.cap.max_send_sge, a.cap.max_recv_sge) = (3, 4);
        a.cap.max_inline_data = 64;
        a.qp_type = IBV_QPT_UD;
        a.sq_sig_all = 1;
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a.pd = &mut o.pd;
        a
    }

    /// The request's fields both creates carry, as `attr_ex` sets them.
    fn core_fields(qp: *mut ibv_qp) -> ib_uverbs_ex_create_qp {
        ib_uverbs_ex_create_qp {
            user_handle: qp as u64,
            pd_handle: 7,
            send_cq_handle: 11,
            recv_cq_handle: 12,
            srq_handle: 13,
            max_send_wr: 10,
            max_recv_wr: 20,
            max_send_sge: 3,
            max_recv_sge: 4,
            max_inline_data: 64,
            sq_sig_all: 1,
            qp_type: IBV_QPT_UD as u8,
            is_srq: 1,
            ..Default::default()
        }
    }

    #[test]
    fn legacy_create_writes_every_field() {
        let f = FakeCtx::new();
        let mut o = objs(f.ctx());
        let a = attr_ex(&mut o);
        // The legacy attribute holding what `attr_ex` holds.
        let mut init = ibv_qp_init_attr {
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
            ..ibv_qp_init_attr::zeroed()
        };
        let mut qp = ibv_qp::zeroed();
        let mut resp = ib_uverbs_create_qp_resp::default();
        let (no_req, n) = (core::ptr::null_mut(), size_of_val(&resp));
        // SAFETY: fake objects of a fake kernel context; NULL request:
        // ours is used; the response is ours and of its size.
        let rc =
            unsafe { ibv_cmd_create_qp(&mut o.pd, &mut qp, &mut init, no_req, 0, &mut resp, n) };
        assert_eq!(rc, 0);
        let c = core_fields(&mut qp);
        let want = ib_uverbs_create_qp {
            response: &mut resp as *mut ib_uverbs_create_qp_resp as u64,
            user_handle: c.user_handle,
            pd_handle: c.pd_handle,
            send_cq_handle: c.send_cq_handle,
            recv_cq_handle: c.recv_cq_handle,
            srq_handle: c.srq_handle,
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
            sq_sig_all: c.sq_sig_all,
            qp_type: c.qp_type,
            is_srq: c.is_srq,
            reserved: 0,
        };
        let b = f.take();
        assert_eq!(b.len(), HDR + size_of::<ib_uverbs_create_qp>());
        assert_eq!(u32_at(&b, 0), IB_USER_VERBS_CMD_CREATE_QP);
        assert_eq!(&b[HDR..], bytes_of(&want));
    }

    #[test]
    fn extended_create_writes_every_field() {
        let f = FakeCtx::new();
        let mut o = objs(f.ctx());
        let mut a = attr_ex(&mut o);
        a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
        a.create_flags = IBV_QP_CREATE_SOURCE_QPN | IBV_QP_CREATE_SCATTER_FCS;
        a.source_qpn = 0x5a5a;
        let mut qp = verbs_qp::zeroed();
        let mut resp = ib_uverbs_ex_create_qp_resp::default();
        let (no_req, n) = (core::ptr::null_mut(), size_of_val(&resp));
        // SAFETY: as above, with the extended layout.
        let rc =
            unsafe { ibv_cmd_create_qp_ex2(f.ctx(), &mut qp, &mut a, no_req, 0, &mut resp, n) };
        assert_eq!(rc, 0);
        let want = ib_uverbs_ex_create_qp {
            create_flags: a.create_flags,
            source_qpn: 0x5a5a,
            ..core_fields(qp.qp())
        };
        let b = f.take();
        assert_eq!(b.len(), EX_HDRS + size_of::<ib_uverbs_ex_create_qp>());
        assert_eq!(
            u32_at(&b, 0),
            IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_QP
        );
        assert_eq!(&b[EX_HDRS..], bytes_of(&want));
    }

    #[test]
    fn modify_qp_copies_only_the_masked_fields() {
        let f = FakeCtx::new();
        let mut qp = ibv_qp::zeroed();
        qp.context = f.ctx();
        qp.handle = 3;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = 0x1234;
        a.rq_psn = 99;
        a.qkey = 0xdead; // not in the mask: must not be sent
        let mask = (IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN) as c_int;
        // SAFETY: a fake kernel context; NULL request: ours is used.
        let rc = unsafe { ibv_cmd_modify_qp(&mut qp, &mut a, mask, core::ptr::null_mut(), 0) };
        assert_eq!(rc, 0);
        let b = f.take();
        let p = &b[HDR..];
        // SAFETY: the bytes are an ib_uverbs_modify_qp.
        let m = unsafe { &*(p.as_ptr() as *const ib_uverbs_modify_qp) };
        assert_eq!((m.qp_handle, m.attr_mask), (3, mask as u32));
        assert_eq!(
            (m.qp_state, m.path_mtu),
            (IBV_QPS_RTR as u8, IBV_MTU_1024 as u8)
        );
        assert_eq!((m.dest_qp_num, m.rq_psn, m.qkey), (0x1234, 99, 0));
        // Attributes past IBV_QP_RATE_LIMIT go through the extended command.
        let mask = (IBV_QP_STATE | IBV_QP_RATE_LIMIT) as c_int;
        // SAFETY: as above.
        let rc = unsafe { ibv_cmd_modify_qp(&mut qp, &mut a, mask, core::ptr::null_mut(), 0) };
        assert_eq!(rc, libc::EOPNOTSUPP);
    }
}
