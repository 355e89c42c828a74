//! A device opened by a program: siw's context (the `verbs_context`
//! libibverbs builds for us, and the device id the kernel gives), its
//! queries and its table of operations.

use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::{addr_of_mut, null_mut};

use verbs_abi::driver::verbs_context_ops;
use verbs_abi::uverbs::*;
use verbs_abi::*;
use verbs_rt::errno::set_errno;

use crate::abi::{GetContextReq, GetContextResp, QueryPortReq};
use crate::ffi;
use crate::{cq, mr, pd, post, qp, srq};

/// rdma-core's `siw_context`: the `verbs_context` first, so the pointer
/// libibverbs hands back is ours.
#[repr(C)]
pub struct Context {
    pub vctx: verbs_context,
    /// The kernel's id of the device (for messages only).
    pub dev_id: u32,
}

/// Everything siw does, as rdma-core's siw does it; the rest stays with
/// libibverbs' defaults (EOPNOTSUPP).
pub static OPS: verbs_context_ops = {
    // SAFETY: all-zero is the empty table (every entry None).
    let mut o: verbs_context_ops = unsafe { core::mem::zeroed() };
    o.alloc_pd = Some(pd::alloc_pd);
    o.async_event = Some(async_event);
    o.create_cq = Some(cq::create_cq);
    o.create_qp = Some(qp::create_qp);
    o.create_srq = Some(srq::create_srq);
    o.dealloc_pd = Some(pd::dealloc_pd);
    o.dereg_mr = Some(mr::dereg_mr);
    o.destroy_cq = Some(cq::destroy_cq);
    o.destroy_qp = Some(qp::destroy_qp);
    o.destroy_srq = Some(srq::destroy_srq);
    o.free_context = Some(free_context);
    o.modify_qp = Some(qp::modify_qp);
    o.modify_srq = Some(srq::modify_srq);
    o.poll_cq = Some(cq::poll_cq);
    o.post_recv = Some(post::post_recv);
    o.post_send = Some(post::post_send);
    o.post_srq_recv = Some(post::post_srq_recv);
    o.query_device_ex = Some(query_device_ex);
    o.query_port = Some(query_port);
    o.query_qp = Some(qp::query_qp);
    // Not in rdma-core's siw (ibv_query_srq fails there), but the kernel
    // answers it like any other device.
    o.query_srq = Some(srq::query_srq);
    o.reg_mr = Some(mr::reg_mr);
    o.req_notify_cq = Some(cq::req_notify_cq);
    o
};

/// `verbs_device_ops.alloc_context`: a new context on the command file
/// `cmd_fd`, which libibverbs hands over.
///
/// # Safety
/// `device` is our device; `cmd_fd` is open on its uverbs file.
pub unsafe extern "C" fn alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    verbs_rt::logging::init();
    // SAFETY: libibverbs allocates our Context with its verbs_context at
    // the offset we give (rdma-core passes the offset as a pointer).
    let ctx = unsafe {
        ffi::_verbs_init_and_alloc_context(
            device,
            cmd_fd,
            size_of::<Context>(),
            offset_of!(Context, vctx) as *mut verbs_context,
            RDMA_DRIVER_SIW,
        )
    }
    .cast::<Context>();
    if ctx.is_null() {
        return null_mut();
    }
    // SAFETY: zeroed memory of our size, initialised by libibverbs.
    let vctx = unsafe { addr_of_mut!((*ctx).vctx) };
    let mut req = GetContextReq::default();
    let mut resp = GetContextResp::default();
    let (c, cs) = req.buf();
    let (r, rs) = resp.buf();
    // SAFETY: the new context and our buffers.
    let rc = unsafe { ffi::ibv_cmd_get_context(vctx, c, cs, r, rs) };
    if rc != 0 {
        log::error!("siw: the kernel refused a context: errno {rc}");
        // SAFETY: built by _verbs_init_and_alloc_context, which malloc'ed
        // it; nothing else refers to it yet.
        unsafe {
            ffi::verbs_uninit_context(vctx);
            libc::free(ctx.cast());
        }
        set_errno(rc);
        return null_mut();
    }
    // SAFETY: as above; OPS is static.
    unsafe {
        ffi::verbs_set_ops(vctx, &OPS);
        (*ctx).dev_id = resp.drv.dev_id;
    }
    if log::log_enabled!(log::Level::Debug) {
        // SAFETY: libibverbs' device, with its NUL-terminated name.
        let name = unsafe { core::ffi::CStr::from_ptr((*device).name.as_ptr()) };
        log::debug!(
            "siw-rs: context on {}, kernel device id {}",
            name.to_string_lossy(),
            resp.drv.dev_id
        );
    }
    vctx
}

/// # Safety
/// `ctx` is one of our contexts, with no objects left.
unsafe extern "C" fn free_context(ctx: *mut ibv_context) {
    // SAFETY: every context of ours is extended and is the tail of our
    // Context's verbs_context, at offset 0.
    unsafe {
        let Some(vctx) = verbs_abi::vctx::verbs_context_of(ctx) else {
            return;
        };
        ffi::verbs_uninit_context(vctx);
        libc::free(vctx.cast());
    }
}

/// The firmware version string siw reports: the kernel's 64-bit version as
/// three 16-bit fields.
pub fn fw_ver(raw: u64) -> String {
    format!(
        "{}.{}.{}",
        (raw >> 32) & 0xffff,
        (raw >> 16) & 0xffff,
        raw & 0xffff
    )
}

/// Copies `s` into a C string field, truncated and NUL-terminated.
fn set_c_string(dst: &mut [core::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as core::ffi::c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// # Safety
/// `ctx` is ours; `attr` holds `attr_size` bytes (at least the basic
/// attributes).
unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let mut resp = ib_uverbs_ex_query_device_resp::default();
    let mut resp_size = size_of::<ib_uverbs_ex_query_device_resp>();
    // SAFETY: the caller's buffers and ours.
    let rc = unsafe {
        ffi::ibv_cmd_query_device_any(ctx, input, attr, attr_size, &mut resp, &mut resp_size)
    };
    if rc != 0 {
        return rc;
    }
    // SAFETY: libibverbs' query filled at least the basic attributes,
    // which start the caller's buffer.
    let fw = unsafe { &mut (*attr).orig_attr.fw_ver };
    set_c_string(fw, &fw_ver(resp.base.fw_ver));
    0
}

/// # Safety
/// `ctx` is ours; `attr` is a whole `ibv_port_attr`.
unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    let mut req = QueryPortReq::default();
    let (c, cs) = req.buf();
    // SAFETY: the caller's buffer and ours.
    unsafe { ffi::ibv_cmd_query_port(ctx, port, attr, c, cs) }
}

/// What siw does with an asynchronous event before the program sees it:
/// errors are logged, as rdma-core's siw logs them.
///
/// # Safety
/// `event` is an event of one of our contexts, its element ours.
unsafe extern "C" fn async_event(_ctx: *mut ibv_context, event: *mut ibv_async_event) {
    // SAFETY: the event libibverbs just read; the union member the event
    // type names is set and points to one of our objects.
    unsafe {
        let e = &*event;
        let what = match e.event_type {
            IBV_EVENT_CQ_ERR => {
                let cq = crate::cq::Cq::from_base(e.element.cq);
                log::error!("siw: CQ[{}] event: error", cq.id());
                return;
            }
            IBV_EVENT_QP_FATAL => "fatal error",
            IBV_EVENT_QP_REQ_ERR => "request error",
            IBV_EVENT_QP_ACCESS_ERR => "access error",
            _ => return,
        };
        let qp = crate::qp::Qp::from_base(e.element.qp);
        log::error!("siw: QP[{}] event: {what}", qp.id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_version() {
        assert_eq!(fw_ver(0), "0.0.0");
        assert_eq!(fw_ver(0x0001_0002_0003), "1.2.3");
        assert_eq!(fw_ver(0xffff_ffff_0000_0000 | 0x7), "65535.0.7");
    }

    #[test]
    fn c_strings() {
        let mut b = [1 as core::ffi::c_char; 4];
        set_c_string(&mut b, "1.2.3");
        assert_eq!(b, [b'1' as _, b'.' as _, b'2' as _, 0]);
        let mut b = [1 as core::ffi::c_char; 8];
        set_c_string(&mut b, "0.0.0");
        assert_eq!(
            &b[..6],
            &[b'0' as _, b'.' as _, b'0' as _, b'.' as _, b'0' as _, 0]
        );
    }

    #[test]
    fn ops_are_siws() {
        assert!(OPS.post_send.is_some() && OPS.poll_cq.is_some());
        assert!(OPS.req_notify_cq.is_some() && OPS.free_context.is_some());
        // Extended creation stays with libibverbs, as for rdma-core's siw.
        assert!(OPS.create_cq_ex.is_none() && OPS.create_qp_ex.is_none());
        assert!(OPS.alloc_mw.is_none() && OPS.create_ah.is_none());
    }
}
