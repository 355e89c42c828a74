//! A device context: made by libibverbs' `_verbs_init_and_alloc_context`
//! around the command file it opened, given the kernel's context
//! (`GET_CONTEXT`) and our operation table; plus the two queries.

use core::ffi::{c_char, c_int, c_void};
use core::fmt::Write as _;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::Cmd;
use crate::{ah, cq, ffi, mr, pd, post, qp, srq, wr};

/// Every operation rxe's C provider supplies (C: `rxe_ctx_ops`).
static CONTEXT_OPS: verbs_context_ops = {
    let mut o = EMPTY_OPS;
    o.query_device_ex = Some(query_device_ex);
    o.query_port = Some(query_port);
    o.alloc_pd = Some(pd::alloc_pd);
    o.dealloc_pd = Some(pd::dealloc_pd);
    o.reg_mr = Some(mr::reg_mr);
    o.dereg_mr = Some(mr::dereg_mr);
    o.alloc_mw = Some(mr::alloc_mw);
    o.dealloc_mw = Some(mr::dealloc_mw);
    o.bind_mw = Some(mr::bind_mw);
    o.create_cq = Some(cq::create_cq);
    o.create_cq_ex = Some(cq::create_cq_ex);
    o.poll_cq = Some(cq::poll_cq);
    o.req_notify_cq = Some(ffi::ibv_cmd_req_notify_cq);
    o.resize_cq = Some(cq::resize_cq);
    o.destroy_cq = Some(cq::destroy_cq);
    o.create_srq = Some(srq::create_srq);
    o.create_srq_ex = Some(srq::create_srq_ex);
    o.modify_srq = Some(srq::modify_srq);
    o.query_srq = Some(srq::query_srq);
    o.destroy_srq = Some(srq::destroy_srq);
    o.post_srq_recv = Some(post::post_srq_recv);
    o.create_qp = Some(qp::create_qp);
    o.create_qp_ex = Some(create_qp_ex);
    o.query_qp = Some(qp::query_qp);
    o.modify_qp = Some(qp::modify_qp);
    o.destroy_qp = Some(qp::destroy_qp);
    o.post_send = Some(post::post_send);
    o.post_recv = Some(post::post_recv);
    o.create_ah = Some(ah::create_ah);
    o.destroy_ah = Some(ah::destroy_ah);
    o.attach_mcast = Some(ffi::ibv_cmd_attach_mcast);
    o.detach_mcast = Some(ffi::ibv_cmd_detach_mcast);
    o.free_context = Some(free_context);
    o
};

/// `ibv_create_qp_ex`: the QP with the `ibv_wr_*` operations it was asked
/// for.
unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: libibverbs passes one of our contexts and the program's
    // attribute.
    verbs_rt::errno::ptr_or_errno(unsafe { qp::create_ex(ctx, attr, wr::install) })
}

/// `verbs_context_ops::zeroed()`, in a constant (every entry absent).
const EMPTY_OPS: verbs_context_ops = {
    // SAFETY: all-zero is a valid table: every entry is an Option of a
    // function pointer, None.
    unsafe { core::mem::zeroed() }
};

/// The device's `alloc_context`.
pub unsafe extern "C" fn alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    // Our context is the verbs_context itself, at offset 0 (which C
    // passes as a NULL pointer of the right type).
    // SAFETY: libibverbs hands us the device and the command file, which
    // the call owns from here on (it closes it on failure).
    let vctx = unsafe {
        ffi::_verbs_init_and_alloc_context(
            device,
            cmd_fd,
            core::mem::size_of::<verbs_context>(),
            core::ptr::null_mut(),
            RDMA_DRIVER_RXE,
        )
    }
    .cast::<verbs_context>();
    if vctx.is_null() {
        return vctx;
    }
    let mut cmd = Cmd::<ib_uverbs_get_context>::default();
    let mut resp = ib_uverbs_get_context_resp::default();
    // SAFETY: the context just made; the buffers are ours and of their
    // sizes; on failure it is undone as made (uninit, then free).
    unsafe {
        let rc = ffi::ibv_cmd_get_context(
            vctx,
            cmd.as_ptr(),
            cmd.size(),
            &mut resp,
            core::mem::size_of_val(&resp),
        );
        if rc != 0 {
            ffi::verbs_uninit_context(vctx);
            libc::free(vctx.cast());
            verbs_rt::errno::set_errno(rc);
            return core::ptr::null_mut();
        }
        ffi::verbs_set_ops(vctx, &CONTEXT_OPS);
    }
    vctx
}

unsafe extern "C" fn free_context(ctx: *mut ibv_context) {
    // The ibv_context is the verbs_context's last member; our allocation
    // starts with the verbs_context.
    let vctx = ctx
        .cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    // SAFETY: a context alloc_context made, freed once.
    unsafe {
        ffi::verbs_uninit_context(vctx);
        libc::free(vctx.cast());
    }
}

/// The kernel's 64-bit firmware version as `ibv_devinfo` shows it:
/// `major.minor.sub_minor` from its three low 16-bit fields.
pub fn fw_ver(raw: u64) -> [c_char; 64] {
    struct Buf([c_char; 64], usize);
    impl core::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            for &b in s.as_bytes() {
                // Keep the last byte for the NUL, as snprintf does.
                if self.1 + 1 < self.0.len() {
                    self.0[self.1] = b as c_char;
                    self.1 += 1;
                }
            }
            Ok(())
        }
    }
    let mut b = Buf([0; 64], 0);
    let _ = write!(
        b,
        "{}.{}.{}",
        (raw >> 32) & 0xffff,
        (raw >> 16) & 0xffff,
        raw & 0xffff
    );
    b.0
}

unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let mut resp = ib_uverbs_ex_query_device_resp::default();
    let mut resp_size = core::mem::size_of_val(&resp);
    // SAFETY: libibverbs passes one of our contexts and the program's
    // attribute of `attr_size` bytes (at least the legacy part, which
    // holds fw_ver).
    unsafe {
        let rc =
            ffi::ibv_cmd_query_device_any(ctx, input, attr, attr_size, &mut resp, &mut resp_size);
        if rc != 0 {
            return rc;
        }
        (*attr).orig_attr.fw_ver = fw_ver(resp.base.fw_ver);
    }
    0
}

unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    let mut cmd = Cmd::<ib_uverbs_query_port>::default();
    // SAFETY: libibverbs passes one of our contexts and the program's
    // attribute.
    unsafe { ffi::ibv_cmd_query_port(ctx, port, attr, cmd.as_ptr(), cmd.size()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &[c_char; 64]) -> String {
        b.iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect()
    }

    #[test]
    fn firmware_version_fields() {
        assert_eq!(text(&fw_ver(0)), "0.0.0");
        assert_eq!(text(&fw_ver(0x0001_0002_0003)), "1.2.3");
        assert_eq!(text(&fw_ver(0xffff_ffff_ffff_ffff)), "65535.65535.65535");
    }

    #[test]
    fn table_has_what_rxe_supplies() {
        let o = &CONTEXT_OPS;
        assert!(o.post_send.is_some() && o.poll_cq.is_some() && o.create_qp_ex.is_some());
        assert!(o.create_flow.is_none() && o.open_xrcd.is_none() && o.alloc_dm.is_none());
    }
}
