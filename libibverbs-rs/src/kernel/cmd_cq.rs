//! Completion queues: create (plain and extended), resize, arm, poll
//! through the kernel, destroy. (rdma-core's `ibv_cmd_*` helpers; see `cmd`.)

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd::{ex_payload, payload, wait_events, Ptr};
use super::cmd_issue::{destroy_err, req_buf, EX_HDRS, HDR};
use super::write::{extended, legacy, legacy_with_resp, ptr_u64, run};
use verbs_rt::export;

/// # Safety
/// `ctx` a kernel context; `cq` the provider's new CQ; buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    cq: *mut ibv_cq,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_create_cq_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            (*cq).context = ctx;
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_create_cq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_create_cq>(cmd);
            p.user_handle = ptr_u64(cq);
            p.cqe = cqe as u32;
            p.comp_vector = comp_vector as u32;
            p.comp_channel = if channel.is_null() { -1 } else { (*channel).fd };
            p.reserved = 0;
            let rc = legacy_with_resp(
                ctx,
                IB_USER_VERBS_CMD_CREATE_CQ,
                cmd,
                cmd_size,
                resp.cast(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            (*cq).handle = (*resp).cq_handle;
            (*cq).cqe = (*resp).cqe as c_int;
        }
        0
    })
}

/// # Safety
/// `ctx` a kernel context; `cq` the provider's new CQ; buffers its own
/// (extended layout).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_cq_ex(
    ctx: *mut ibv_context,
    attr: *const ibv_cq_init_attr_ex,
    cq: *mut verbs_cq,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_ex_create_cq_resp,
    resp_size: usize,
    _cmd_flags: u32,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &*attr;
            if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
                return libc::EOPNOTSUPP;
            }
            let mut flags = 0u32;
            if a.wc_flags
                & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
                    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) as u64
                != 0
            {
                flags |= IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION;
            }
            if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
                && a.flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0
            {
                flags |= IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN;
            }
            let ibcq = cq.cast::<ibv_cq>();
            (*ibcq).context = ctx;
            let buf = req_buf(cmd, cmd_size, EX_HDRS + size_of::<ib_uverbs_ex_create_cq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = ex_payload::<ib_uverbs_ex_create_cq>(cmd);
            p.user_handle = ptr_u64(ibcq);
            p.cqe = a.cqe;
            p.comp_vector = a.comp_vector;
            p.comp_channel = if a.channel.is_null() {
                -1
            } else {
                (*a.channel).fd
            };
            p.comp_mask = 0;
            p.flags = flags;
            p.reserved = 0;
            let core_req = EX_HDRS + size_of::<ib_uverbs_ex_create_cq>();
            let rc = extended(
                ctx,
                IB_USER_VERBS_EX_CMD_CREATE_CQ,
                cmd,
                core_req,
                cmd_size.max(core_req),
                resp.cast(),
                size_of::<ib_uverbs_ex_create_cq_resp>(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            (*ibcq).handle = (*resp).base.cq_handle;
            (*ibcq).cqe = (*resp).base.cqe as c_int;
        }
        0
    })
}

/// # Safety
/// `cq` a live CQ of a kernel context; buffers the provider's.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_resize_cq(
    cq: *mut ibv_cq,
    cqe: c_int,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_resize_cq_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_resize_cq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_resize_cq>(cmd);
            p.cq_handle = (*cq).handle;
            p.cqe = cqe as u32;
            let rc = legacy_with_resp(
                (*cq).context,
                IB_USER_VERBS_CMD_RESIZE_CQ,
                cmd,
                cmd_size,
                resp.cast(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            (*cq).cqe = (*resp).cqe as c_int;
        }
        0
    })
}

/// # Safety
/// `cq` a live CQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            run::<_, ()>(
                (*cq).context,
                IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
                ib_uverbs_req_notify_cq {
                    cq_handle: (*cq).handle,
                    solicited_only: (solicited_only != 0) as u32,
                },
                None,
            )
        }
    })
}

/// Polls through the kernel (providers without a user-space CQ).
/// Returns the count, or -1.
///
/// # Safety
/// `cq` a live CQ of a kernel context; `wc` room for `ne` entries.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int {
    export!(raw::int, untraced, {
        if ne < 0 {
            verbs_rt::errno::set_errno(libc::EINVAL);
            return -1;
        }
        let n = ne as usize;
        let words =
            (size_of::<ib_uverbs_poll_cq_resp>() + n * size_of::<ib_uverbs_wc>()).div_ceil(8);
        let mut resp = vec![0u64; words];
        // SAFETY: per the contract; the response buffer holds `n` entries.
        unsafe {
            // The response holds `ne` entries after its header.
            let mut req = super::write::Req {
                hdr: ib_uverbs_cmd_hdr::default(),
                body: ib_uverbs_poll_cq {
                    // Written by the kernel: a pointer with write provenance.
                    response: ptr_u64(resp.as_mut_ptr()),
                    cq_handle: (*cq).handle,
                    ne: ne as u32,
                },
            };
            let rc = legacy(
                (*cq).context,
                IB_USER_VERBS_CMD_POLL_CQ,
                (&mut req as *mut super::write::Req<ib_uverbs_poll_cq>).cast(),
                size_of::<super::write::Req<ib_uverbs_poll_cq>>(),
                words * 8,
            );
            if rc != 0 {
                verbs_rt::errno::set_errno(rc);
                return -1;
            }
            let head = &*resp.as_ptr().cast::<ib_uverbs_poll_cq_resp>();
            let count = (head.count as usize).min(n);
            let src = resp
                .as_ptr()
                .cast::<u8>()
                .add(size_of::<ib_uverbs_poll_cq_resp>())
                .cast::<ib_uverbs_wc>();
            for i in 0..count {
                let k = &*src.add(i);
                let w = &mut *wc.add(i);
                w.wr_id = k.wr_id;
                w.status = k.status as _;
                w.opcode = k.opcode as _;
                w.vendor_err = k.vendor_err;
                w.byte_len = k.byte_len;
                w.set_imm_data(k.ex);
                w.qp_num = k.qp_num;
                w.src_qp = k.src_qp;
                w.wc_flags = k.wc_flags as _;
                w.pkey_index = k.pkey_index;
                w.slid = k.slid;
                w.sl = k.sl;
                w.dlid_path_bits = k.dlid_path_bits;
            }
            count as c_int
        }
    })
}

/// # Safety
/// `cq` a live CQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int {
    export!(raw::int, untraced, {
        let mut resp = ib_uverbs_destroy_cq_resp::default();
        // SAFETY: per the contract.
        let mut rc = unsafe {
            run(
                (*cq).context,
                IB_USER_VERBS_CMD_DESTROY_CQ,
                ib_uverbs_destroy_cq {
                    response: 0,
                    cq_handle: (*cq).handle,
                    reserved: 0,
                },
                Some(&mut resp),
            )
        };
        if destroy_err(&mut rc) {
            return rc;
        }
        // SAFETY: the CQ's own lock, condition and counters.
        unsafe {
            wait_events(
                core::ptr::addr_of_mut!((*cq).mutex),
                core::ptr::addr_of_mut!((*cq).cond),
                || {
                    core::ptr::read_volatile(core::ptr::addr_of!((*cq).comp_events_completed))
                        == resp.comp_events_reported
                        && core::ptr::read_volatile(core::ptr::addr_of!(
                            (*cq).async_events_completed
                        )) == resp.async_events_reported
                },
            )
        };
        0
    })
}

/// # Safety
/// `cq` a live CQ of a kernel context; `attr` valid; `cmd` the provider's
/// extended request.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_modify_cq(
    cq: *mut ibv_cq,
    attr: *mut ibv_modify_cq_attr,
    cmd: Ptr,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &*attr;
            if a.attr_mask >= IBV_CQ_ATTR_RESERVED {
                return libc::EINVAL;
            }
            let buf = req_buf(cmd, cmd_size, EX_HDRS + size_of::<ib_uverbs_ex_modify_cq>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = ex_payload::<ib_uverbs_ex_modify_cq>(cmd);
            p.cq_handle = (*cq).handle;
            p.attr_mask = a.attr_mask;
            p.attr.cq_count = a.moderate.cq_count;
            p.attr.cq_period = a.moderate.cq_period;
            p.reserved = 0;
            let core_req = EX_HDRS + size_of::<ib_uverbs_ex_modify_cq>();
            extended(
                (*cq).context,
                IB_USER_VERBS_EX_CMD_MODIFY_CQ,
                cmd,
                core_req,
                cmd_size.max(core_req),
                core::ptr::null_mut(),
                0,
                0,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::cmd_issue::testing::*;
    use super::*;

    #[test]
    fn poll_cq_asks_for_room_for_every_entry_and_consumes_nothing_else() {
        let f = FakeCtx::new();
        let mut cq = ibv_cq::zeroed();
        cq.context = f.ctx();
        cq.handle = 7;
        let mut wc = [ibv_wc::zeroed(); 4];
        // SAFETY: a fake kernel context; room for 4 completions.
        let n = unsafe { ibv_cmd_poll_cq(&mut cq, 4, wc.as_mut_ptr()) };
        // The pipe answers nothing: a zeroed response, no completion.
        assert_eq!(n, 0);
        let b = f.take();
        // One command only (a second would poll the kernel's CQ again).
        assert_eq!(b.len(), HDR + size_of::<ib_uverbs_poll_cq>());
        let (cmd, inw, outw) = legacy_hdr(&b);
        assert_eq!(cmd, IB_USER_VERBS_CMD_POLL_CQ);
        assert_eq!(inw as usize * 4, b.len());
        assert_eq!(
            outw as usize * 4,
            size_of::<ib_uverbs_poll_cq_resp>() + 4 * size_of::<ib_uverbs_wc>()
        );
        assert_eq!(u32_at(&b, HDR + 8), 7);
        assert_eq!(u32_at(&b, HDR + 12), 4);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_cmd_poll_cq(&mut cq, -1, wc.as_mut_ptr()) }, -1);
    }

    #[test]
    fn a_null_provider_request_gets_ours_and_the_response_pointer() {
        let f = FakeCtx::new();
        let mut cq = ibv_cq::zeroed();
        let mut resp = [0u64; 4]; // core response plus a provider part
                                  // SAFETY: a fake kernel context; `cq` and `resp` are ours. rxe
                                  // passes no request buffer.
        let rc = unsafe {
            ibv_cmd_create_cq(
                f.ctx(),
                16,
                core::ptr::null_mut(),
                0,
                &mut cq,
                core::ptr::null_mut(),
                0,
                resp.as_mut_ptr().cast(),
                32,
            )
        };
        assert_eq!(rc, 0);
        let b = f.take();
        assert_eq!(b.len(), HDR + size_of::<ib_uverbs_create_cq>());
        let (cmd, inw, outw) = legacy_hdr(&b);
        assert_eq!(
            (cmd, inw as usize * 4, outw),
            (IB_USER_VERBS_CMD_CREATE_CQ, b.len(), 8)
        );
        assert_eq!(u64_at(&b, HDR), resp.as_ptr() as u64);
        assert_eq!(u64_at(&b, HDR + 8), &cq as *const ibv_cq as u64);
        assert_eq!(u32_at(&b, HDR + 16), 16);
        // No channel: -1, as the kernel expects.
        assert_eq!(u32_at(&b, HDR + 24) as i32, -1);
        assert_eq!(cq.context, f.ctx());
    }

    #[test]
    fn a_dead_kernel_fails_the_destroy_without_waiting() {
        let mut f = FakeCtx::new();
        f.close_reader();
        let mut cq = ibv_cq::zeroed();
        cq.context = f.ctx();
        // SAFETY: the CQ's lock and condition, as creation sets them up.
        unsafe {
            libc::pthread_mutex_init(&mut cq.mutex, core::ptr::null());
            libc::pthread_cond_init(&mut cq.cond, core::ptr::null());
        }
        // SAFETY: a fake kernel context whose command file is broken.
        assert_eq!(unsafe { ibv_cmd_destroy_cq(&mut cq) }, libc::EPIPE);
        let mut pd = ibv_pd::zeroed();
        pd.context = f.ctx();
        // SAFETY: as above.
        let rc = unsafe { super::super::cmd_pd::ibv_cmd_dealloc_pd(&mut pd) };
        assert_eq!(rc, libc::EPIPE);
    }
}
