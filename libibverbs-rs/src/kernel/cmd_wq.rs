//! Receive work queues (rdma-core's cmd_wq.c and `ibv_cmd_modify_wq`):
//! create, modify, destroy, through the extended `write()` commands
//! rdma-core falls back to (the kernel takes them whatever its ioctl
//! support). The provider's request and response carry its driver part
//! after the core structs, which are filled in place.

use core::ffi::{c_int, c_void};
use core::mem::size_of;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_issue::{destroy_err, req_buf, ExCmd, ExReq, Issue, Kernel, EX_HDRS};
use super::write::ptr_u64;
use verbs_rt::export;

/// rdma-core's `struct ibv_create_wq`: headers and core payload.
const CREATE_CORE: usize = EX_HDRS + size_of::<ib_uverbs_ex_create_wq>();
const CREATE_RESP: usize = size_of::<ib_uverbs_ex_create_wq_resp>();
/// rdma-core's `struct ibv_modify_wq`.
const MODIFY_CORE: usize = EX_HDRS + size_of::<ib_uverbs_ex_modify_wq>();

fn fail(e: c_int) -> c_int {
    verbs_rt::errno::set_errno(e);
    e
}

/// # Safety
/// `ctx` a kernel context; `attr` valid with live PD and CQ; `wq` the
/// provider's new WQ; `cmd` NULL or `cmd_size` bytes of its request
/// (`struct ibv_create_wq` first), `resp` NULL or `resp_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_wq(
    ctx: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
    wq: *mut ibv_wq,
    cmd: *mut c_void,
    cmd_size: usize,
    resp: *mut ib_uverbs_ex_create_wq_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { create_wq(ctx, attr, wq, cmd, cmd_size, resp, resp_size, &mut Kernel) }
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn create_wq(
    ctx: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
    wq: *mut ibv_wq,
    cmd: *mut c_void,
    cmd_size: usize,
    resp: *mut ib_uverbs_ex_create_wq_resp,
    resp_size: usize,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_create_wq`.
    unsafe {
        let a = &mut *attr;
        if a.comp_mask >= IBV_WQ_INIT_ATTR_RESERVED {
            return fail(libc::EINVAL);
        }
        let w = &mut *wq;
        w.context = ctx;
        w.cq = a.cq;
        w.pd = a.pd;
        w.wq_type = a.wq_type;
        // The flags count only when the mask says so, as rdma-core sends
        // them to every kernel with the ioctl method (its write fallback,
        // for older kernels only, would pass whatever the field holds).
        let mut create_flags = 0;
        if a.comp_mask & IBV_WQ_INIT_ATTR_FLAGS != 0 {
            if a.create_flags & !(IBV_WQ_FLAGS_RESERVED - 1) != 0 {
                return fail(libc::EOPNOTSUPP);
            }
            create_flags = a.create_flags;
        }
        let buf = req_buf(cmd, cmd_size, CREATE_CORE);
        buf.ptr
            .cast::<u8>()
            .add(EX_HDRS)
            .cast::<ib_uverbs_ex_create_wq>()
            .write_unaligned(ib_uverbs_ex_create_wq {
                comp_mask: 0,
                wq_type: a.wq_type,
                user_handle: ptr_u64(wq),
                pd_handle: (*a.pd).handle,
                cq_handle: (*a.cq).handle,
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                create_flags,
                reserved: 0,
            });
        // The provider's response when it holds the core one (its driver
        // part follows), else ours.
        let mut own = ib_uverbs_ex_create_wq_resp::default();
        let (rp, rs) = if !resp.is_null() && resp_size >= CREATE_RESP {
            (resp, resp_size)
        } else {
            (&mut own as *mut ib_uverbs_ex_create_wq_resp, CREATE_RESP)
        };
        let rc = k.write_ex(
            ctx,
            &ExCmd {
                command: IB_USER_VERBS_EX_CMD_CREATE_WQ,
                req: buf.ptr,
                core_req: CREATE_CORE,
                req_size: buf.size,
                resp: rp.cast(),
                core_resp: CREATE_RESP,
                resp_size: rs,
            },
        );
        if rc != 0 {
            return rc;
        }
        let r = rp.read_volatile();
        w.handle = r.wq_handle;
        a.max_wr = r.max_wr;
        a.max_sge = r.max_sge;
        w.wq_num = r.wqn;
    }
    0
}

/// # Safety
/// `wq` a live WQ of a kernel context; `attr` valid; `cmd` NULL or
/// `cmd_size` bytes of the provider's request (`struct ibv_modify_wq`
/// first).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_modify_wq(
    wq: *mut ibv_wq,
    attr: *mut ibv_wq_attr,
    cmd: *mut c_void,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { modify_wq(wq, attr, cmd, cmd_size, &mut Kernel) }
    })
}

pub(crate) unsafe fn modify_wq(
    wq: *mut ibv_wq,
    attr: *mut ibv_wq_attr,
    cmd: *mut c_void,
    cmd_size: usize,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_modify_wq`.
    unsafe {
        let a = &*attr;
        if a.attr_mask >= IBV_WQ_ATTR_RESERVED {
            return libc::EINVAL;
        }
        let buf = req_buf(cmd, cmd_size, MODIFY_CORE);
        core::ptr::write_bytes(buf.ptr.cast::<u8>(), 0, MODIFY_CORE);
        let mut p = ib_uverbs_ex_modify_wq {
            curr_wq_state: a.curr_wq_state,
            wq_state: a.wq_state,
            ..Default::default()
        };
        if a.attr_mask & IBV_WQ_ATTR_FLAGS != 0 {
            if a.flags_mask & !(IBV_WQ_FLAGS_RESERVED - 1) != 0 {
                return libc::EOPNOTSUPP;
            }
            p.flags = a.flags;
            p.flags_mask = a.flags_mask;
        }
        p.wq_handle = (*wq).handle;
        p.attr_mask = a.attr_mask;
        buf.ptr
            .cast::<u8>()
            .add(EX_HDRS)
            .cast::<ib_uverbs_ex_modify_wq>()
            .write_unaligned(p);
        let rc = k.write_ex(
            (*wq).context,
            &ExCmd {
                command: IB_USER_VERBS_EX_CMD_MODIFY_WQ,
                req: buf.ptr,
                core_req: MODIFY_CORE,
                req_size: buf.size,
                resp: core::ptr::null_mut(),
                core_resp: 0,
                resp_size: 0,
            },
        );
        if rc != 0 {
            return rc;
        }
        if a.attr_mask & IBV_WQ_ATTR_STATE != 0 {
            (*wq).state = a.wq_state;
        }
    }
    0
}

/// # Safety
/// `wq` is a live WQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_wq(wq: *mut ibv_wq) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { destroy_wq(wq, &mut Kernel) }
    })
}

pub(crate) unsafe fn destroy_wq(wq: *mut ibv_wq, k: &mut impl Issue) -> c_int {
    let mut resp = ib_uverbs_ex_destroy_wq_resp::default();
    // SAFETY: per the contract of `ibv_cmd_destroy_wq`.
    let mut rc = unsafe {
        let mut req = ExReq::new(ib_uverbs_ex_destroy_wq {
            comp_mask: 0,
            wq_handle: (*wq).handle,
        });
        let c = req.cmd(IB_USER_VERBS_EX_CMD_DESTROY_WQ, Some(&mut resp));
        k.write_ex((*wq).context, &c)
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    // Events the program has not acknowledged yet hold the destroy.
    // SAFETY: the WQ's own lock, condition and counter.
    unsafe {
        let reported = core::ptr::read_volatile(&resp.events_reported);
        libc::pthread_mutex_lock(&mut (*wq).mutex);
        while core::ptr::read_volatile(&(*wq).events_completed) != reported {
            libc::pthread_cond_wait(&mut (*wq).cond, &mut (*wq).mutex);
        }
        libc::pthread_mutex_unlock(&mut (*wq).mutex);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_issue::testing::*;

    const EXT: u32 = IB_USER_VERBS_CMD_FLAG_EXTENDED;

    struct Objs {
        pd: ibv_pd,
        cq: ibv_cq,
    }

    fn objs() -> Objs {
        let mut pd = ibv_pd::zeroed();
        pd.handle = 0x0d;
        let mut cq = ibv_cq::zeroed();
        cq.handle = 0x0c;
        Objs { pd, cq }
    }

    fn init_attr(o: &mut Objs) -> ibv_wq_init_attr {
        let mut a = ibv_wq_init_attr::zeroed();
        a.wq_type = IBV_WQT_RQ;
        a.max_wr = 64;
        a.max_sge = 2;
        a.pd = &mut o.pd;
        a.cq = &mut o.cq;
        a
    }

    /// mlx5's request and response: the core structs, then its part.
    #[repr(C)]
    struct DrvCreate {
        core: [u8; CREATE_CORE],
        drv: [u64; 2],
    }
    #[repr(C)]
    struct DrvResp {
        core: ib_uverbs_ex_create_wq_resp,
        drv: [u64; 1],
    }

    #[test]
    fn create_wq_frames_the_provider_request_and_reads_the_answer() {
        let f = FakeCtx::new();
        let mut o = objs();
        let mut a = init_attr(&mut o);
        a.comp_mask = IBV_WQ_INIT_ATTR_FLAGS;
        a.create_flags = IBV_WQ_FLAGS_SCATTER_FCS;
        let mut wq = ibv_wq::zeroed();
        let mut cmd = DrvCreate {
            core: [0xff; CREATE_CORE],
            drv: [0x1111, 0x2222],
        };
        let mut resp = DrvResp {
            core: Default::default(),
            drv: [0],
        };
        let rp = &mut resp.core as *mut ib_uverbs_ex_create_wq_resp;
        let mut k = WriteFake(|_: &[u8], r: *mut c_void| {
            assert_eq!(r, rp.cast());
            // SAFETY: the response the command names.
            unsafe {
                *r.cast::<ib_uverbs_ex_create_wq_resp>() = ib_uverbs_ex_create_wq_resp {
                    comp_mask: 0,
                    response_length: 24,
                    wq_handle: 0x77,
                    max_wr: 128,
                    max_sge: 4,
                    wqn: 0x1234,
                };
            }
            0
        });
        // SAFETY: every object outlives the call.
        let rc = unsafe {
            create_wq(
                f.ctx(),
                &mut a,
                &mut wq,
                (&mut cmd as *mut DrvCreate).cast(),
                size_of::<DrvCreate>(),
                rp,
                size_of::<DrvResp>(),
                &mut k,
            )
        };
        assert_eq!(rc, 0);
        let b = f.take();
        assert_eq!(b.len(), CREATE_CORE + 16);
        assert_eq!(
            ex_hdr(&b),
            (EXT | 52, 5, 3, rp as u64, 2, 1, 0),
            "command, core in/out words, response, provider in/out words"
        );
        let p = EX_HDRS;
        assert_eq!((u32_at(&b, p), u32_at(&b, p + 4)), (0, IBV_WQT_RQ));
        assert_eq!(u64_at(&b, p + 8), &mut wq as *mut ibv_wq as u64);
        assert_eq!((u32_at(&b, p + 16), u32_at(&b, p + 20)), (0x0d, 0x0c));
        assert_eq!((u32_at(&b, p + 24), u32_at(&b, p + 28)), (64, 2));
        assert_eq!(
            (u32_at(&b, p + 32), u32_at(&b, p + 36)),
            (IBV_WQ_FLAGS_SCATTER_FCS, 0)
        );
        assert_eq!(
            (u64_at(&b, CREATE_CORE), u64_at(&b, CREATE_CORE + 8)),
            (0x1111, 0x2222)
        );
        assert_eq!(
            (wq.handle, wq.wq_num, a.max_wr, a.max_sge),
            (0x77, 0x1234, 128, 4)
        );
        assert_eq!((wq.context, wq.pd, wq.cq), (f.ctx(), a.pd, a.cq));
        assert_eq!(wq.wq_type, IBV_WQT_RQ);
    }

    #[test]
    fn create_wq_checks_masks_and_passes_errors() {
        let mut f = FakeCtx::new();
        let mut o = objs();
        let mut a = init_attr(&mut o);
        let mut wq = ibv_wq::zeroed();
        let null = core::ptr::null_mut();
        // SAFETY: every object outlives the calls.
        unsafe {
            a.comp_mask = IBV_WQ_INIT_ATTR_RESERVED;
            assert_eq!(
                ibv_cmd_create_wq(f.ctx(), &mut a, &mut wq, null, 0, null.cast(), 0),
                libc::EINVAL
            );
            a.comp_mask = IBV_WQ_INIT_ATTR_FLAGS;
            a.create_flags = IBV_WQ_FLAGS_RESERVED;
            assert_eq!(
                ibv_cmd_create_wq(f.ctx(), &mut a, &mut wq, null, 0, null.cast(), 0),
                libc::EOPNOTSUPP
            );
            assert!(f.take().is_empty());
            // Without the mask bit the flags are not sent; with no
            // provider buffers the core ones are ours.
            a.comp_mask = 0;
            a.create_flags = IBV_WQ_FLAGS_CVLAN_STRIPPING;
            assert_eq!(
                ibv_cmd_create_wq(f.ctx(), &mut a, &mut wq, null, 0, null.cast(), 0),
                0
            );
            let b = f.take();
            assert_eq!(b.len(), CREATE_CORE);
            let h = ex_hdr(&b);
            assert_eq!((h.0, h.1, h.2, h.4, h.5), (EXT | 52, 5, 3, 0, 0));
            assert_eq!(u32_at(&b, EX_HDRS + 32), 0);
            f.close_reader();
            wq.handle = 5;
            assert_eq!(
                ibv_cmd_create_wq(f.ctx(), &mut a, &mut wq, null, 0, null.cast(), 0),
                libc::EPIPE
            );
            assert_eq!(wq.handle, 5);
        }
    }

    #[test]
    fn modify_wq_clears_and_fills_the_core() {
        let mut f = FakeCtx::new();
        let mut wq = ibv_wq::zeroed();
        wq.context = f.ctx();
        wq.handle = 0x31;
        let mut cmd = [0xffu8; MODIFY_CORE + 8];
        let cp = cmd.as_mut_ptr().cast::<c_void>();
        let mut a = ibv_wq_attr {
            attr_mask: IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_FLAGS,
            wq_state: IBV_WQS_RDY,
            curr_wq_state: IBV_WQS_RESET,
            flags: IBV_WQ_FLAGS_DELAY_DROP,
            flags_mask: IBV_WQ_FLAGS_DELAY_DROP,
        };
        // SAFETY: every object outlives the calls.
        unsafe {
            assert_eq!(ibv_cmd_modify_wq(&mut wq, &mut a, cp, cmd.len()), 0);
            let b = f.take();
            assert_eq!(b.len(), MODIFY_CORE + 8);
            assert_eq!(ex_hdr(&b), (EXT | 53, 3, 0, 0, 1, 0, 0));
            let p = EX_HDRS;
            assert_eq!((u32_at(&b, p), u32_at(&b, p + 4)), (a.attr_mask, 0x31));
            assert_eq!(
                (u32_at(&b, p + 8), u32_at(&b, p + 12)),
                (IBV_WQS_RDY, IBV_WQS_RESET)
            );
            assert_eq!(
                (u32_at(&b, p + 16), u32_at(&b, p + 20)),
                (IBV_WQ_FLAGS_DELAY_DROP, IBV_WQ_FLAGS_DELAY_DROP)
            );
            assert_eq!(u64_at(&b, MODIFY_CORE), u64::MAX);
            assert_eq!(wq.state, IBV_WQS_RDY);
            // Flags not asked for are not sent.
            a.attr_mask = IBV_WQ_ATTR_CURR_STATE;
            a.wq_state = IBV_WQS_ERR;
            assert_eq!(ibv_cmd_modify_wq(&mut wq, &mut a, cp, cmd.len()), 0);
            let b = f.take();
            assert_eq!((u32_at(&b, EX_HDRS + 16), u32_at(&b, EX_HDRS + 20)), (0, 0));
            assert_eq!(wq.state, IBV_WQS_RDY);
            a.attr_mask = IBV_WQ_ATTR_RESERVED;
            assert_eq!(
                ibv_cmd_modify_wq(&mut wq, &mut a, cp, cmd.len()),
                libc::EINVAL
            );
            a.attr_mask = IBV_WQ_ATTR_FLAGS;
            a.flags_mask = IBV_WQ_FLAGS_RESERVED;
            assert_eq!(
                ibv_cmd_modify_wq(&mut wq, &mut a, cp, cmd.len()),
                libc::EOPNOTSUPP
            );
            assert!(f.take().is_empty());
            a.attr_mask = IBV_WQ_ATTR_STATE;
            f.close_reader();
            assert_eq!(
                ibv_cmd_modify_wq(&mut wq, &mut a, cp, cmd.len()),
                libc::EPIPE
            );
            assert_eq!(wq.state, IBV_WQS_RDY);
        }
    }

    #[test]
    fn destroy_wq_waits_for_the_reported_events() {
        let mut f = FakeCtx::new();
        let mut wq = ibv_wq::zeroed();
        wq.context = f.ctx();
        wq.handle = 0x44;
        wq.events_completed = 2;
        let mut k = WriteFake(|_: &[u8], r: *mut c_void| {
            // SAFETY: the response the command names.
            unsafe { (*r.cast::<ib_uverbs_ex_destroy_wq_resp>()).events_reported = 2 };
            0
        });
        // SAFETY: every object outlives the calls.
        unsafe {
            assert_eq!(destroy_wq(&mut wq, &mut k), 0);
            let b = f.take();
            assert_eq!(b.len(), EX_HDRS + 8);
            let h = ex_hdr(&b);
            assert_eq!((h.0, h.1, h.2, h.4, h.5), (EXT | 54, 1, 2, 0, 0));
            assert_ne!(h.3, 0);
            assert_eq!((u32_at(&b, EX_HDRS), u32_at(&b, EX_HDRS + 4)), (0, 0x44));
            f.close_reader();
            assert_eq!(ibv_cmd_destroy_wq(&mut wq), libc::EPIPE);
        }
    }
}
