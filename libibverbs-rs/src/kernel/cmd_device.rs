//! The device and context commands: the context itself, device and port
//! attributes. (rdma-core's `ibv_cmd_*` helpers; see `cmd`.)

use core::ffi::c_int;
use core::mem::{offset_of, size_of};

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd::{payload, Ptr};
use super::cmd_issue::{req_buf, HDR};
use super::ioctl::{
    Call, UVERBS_METHOD_QUERY_CONTEXT, UVERBS_METHOD_QUERY_PORT, UVERBS_OBJECT_DEVICE,
};
use super::write::{extended, legacy_with_resp, run};
use verbs_rt::export;

/// # Safety
/// `vctx` is a context under construction; buffers as the provider's.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_get_context(
    vctx: *mut verbs_context,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_get_context_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let ctx = core::ptr::addr_of_mut!((*vctx).context);
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_get_context>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let rc = legacy_with_resp(
                ctx,
                IB_USER_VERBS_CMD_GET_CONTEXT,
                cmd,
                cmd_size,
                resp.cast(),
                resp_size,
            );
            if rc != 0 {
                return rc;
            }
            (*ctx).async_fd = (*resp).async_fd as c_int;
            (*ctx).num_comp_vectors = (*resp).num_comp_vectors as c_int;
            // Close-on-exec, as an ioctl-allocated event file would be.
            libc::fcntl((*ctx).async_fd, libc::F_SETFD, libc::FD_CLOEXEC);
            // What the kernel supports beyond the basics (optional MR access
            // flags): only the ioctl method tells.
            let mut n: u32 = 0;
            let mut core_support: u64 = 0;
            let mut call = Call::new(UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_CONTEXT);
            call.out(0, &mut n);
            call.out(1, &mut core_support);
            if call.run(ctx) == 0 {
                (*(*ctx).device.cast::<verbs_device>()).core_support = core_support;
            }
        }
        0
    })
}

/// # Safety
/// `ctx` is a kernel context; `driver` NULL or a provider's attributes.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_context(
    ctx: *mut ibv_context,
    driver: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        let _ = driver;
        let mut n: u32 = 0;
        let mut core_support: u64 = 0;
        let mut call = Call::new(UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_CONTEXT);
        call.out(0, &mut n);
        call.out(1, &mut core_support);
        // SAFETY: a kernel context; outputs live across the call.
        let rc = unsafe { call.run(ctx) };
        if rc == 0 {
            // SAFETY: as above; the device is the provider's verbs_device.
            unsafe {
                (*ctx).num_comp_vectors = n as c_int;
                (*(*ctx).device.cast::<verbs_device>()).core_support = core_support;
            }
        }
        rc
    })
}

/// # Safety
/// `ctx` is a kernel context; `attr` holds `attr_size` bytes; `resp` NULL
/// or a response of `*resp_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_device_any(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
    resp: *mut ib_uverbs_ex_query_device_resp,
    resp_size: *mut usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            if !input.is_null() && (*input).comp_mask != 0 {
                return libc::EINVAL;
            }
            if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
                return libc::EINVAL;
            }
            let mut internal = ib_uverbs_ex_query_device_resp::default();
            let mut internal_size = size_of::<ib_uverbs_ex_query_device_resp>();
            let (resp, resp_size) = if resp.is_null() || resp_size.is_null() {
                (
                    &mut internal as *mut ib_uverbs_ex_query_device_resp,
                    &mut internal_size as *mut usize,
                )
            } else {
                (resp, resp_size)
            };
            core::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            let mut size = attr_size;
            if size > size_of::<ibv_device_attr>() {
                #[repr(C)]
                struct Cmd {
                    hdr: ib_uverbs_cmd_hdr,
                    ex: ib_uverbs_ex_cmd_hdr,
                    body: ib_uverbs_ex_query_device,
                }
                let mut cmd = Cmd {
                    hdr: Default::default(),
                    ex: Default::default(),
                    body: Default::default(),
                };
                let rc = extended(
                    ctx,
                    IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
                    (&mut cmd as *mut Cmd).cast(),
                    size_of::<Cmd>(),
                    size_of::<Cmd>(),
                    resp.cast(),
                    *resp_size,
                    *resp_size,
                );
                if rc != 0 {
                    if rc != libc::EOPNOTSUPP && rc != libc::ENOSYS {
                        return rc;
                    }
                    size = size_of::<ibv_device_attr>();
                }
            }
            if size == size_of::<ibv_device_attr>() {
                let rc = run(
                    ctx,
                    IB_USER_VERBS_CMD_QUERY_DEVICE,
                    ib_uverbs_query_device::default(),
                    Some(&mut (*resp).base),
                );
                if rc != 0 {
                    return rc;
                }
                (*resp).response_length = size_of::<ib_uverbs_query_device_resp>() as u32;
            }
            *resp_size = (*resp).response_length as usize;
            let r = &*resp;
            let b = &r.base;
            let a = &mut *attr;
            let o = &mut a.orig_attr;
            o.node_guid = b.node_guid;
            o.sys_image_guid = b.sys_image_guid;
            o.max_mr_size = b.max_mr_size;
            o.page_size_cap = b.page_size_cap;
            o.vendor_id = b.vendor_id;
            o.vendor_part_id = b.vendor_part_id;
            o.hw_ver = b.hw_ver;
            o.max_qp = b.max_qp as _;
            o.max_qp_wr = b.max_qp_wr as _;
            o.device_cap_flags = b.device_cap_flags as _;
            o.max_sge = b.max_sge as _;
            o.max_sge_rd = b.max_sge_rd as _;
            o.max_cq = b.max_cq as _;
            o.max_cqe = b.max_cqe as _;
            o.max_mr = b.max_mr as _;
            o.max_pd = b.max_pd as _;
            o.max_qp_rd_atom = b.max_qp_rd_atom as _;
            o.max_ee_rd_atom = b.max_ee_rd_atom as _;
            o.max_res_rd_atom = b.max_res_rd_atom as _;
            o.max_qp_init_rd_atom = b.max_qp_init_rd_atom as _;
            o.max_ee_init_rd_atom = b.max_ee_init_rd_atom as _;
            o.atomic_cap = b.atomic_cap as _;
            o.max_ee = b.max_ee as _;
            o.max_rdd = b.max_rdd as _;
            o.max_mw = b.max_mw as _;
            o.max_raw_ipv6_qp = b.max_raw_ipv6_qp as _;
            o.max_raw_ethy_qp = b.max_raw_ethy_qp as _;
            o.max_mcast_grp = b.max_mcast_grp as _;
            o.max_mcast_qp_attach = b.max_mcast_qp_attach as _;
            o.max_total_mcast_qp_attach = b.max_total_mcast_qp_attach as _;
            o.max_ah = b.max_ah as _;
            o.max_fmr = b.max_fmr as _;
            o.max_map_per_fmr = b.max_map_per_fmr as _;
            o.max_srq = b.max_srq as _;
            o.max_srq_wr = b.max_srq_wr as _;
            o.max_srq_sge = b.max_srq_sge as _;
            o.max_pkeys = b.max_pkeys as _;
            o.local_ca_ack_delay = b.local_ca_ack_delay as _;
            o.phys_port_cnt = b.phys_port_cnt as _;

            let len = r.response_length as usize;
            macro_rules! can_copy {
                ($ibv:ident, $uv:ident) => {
                    size >= offset_of!(ibv_device_attr_ex, $ibv) + size_of_val(&a.$ibv)
                        && len
                            >= offset_of!(ib_uverbs_ex_query_device_resp, $uv) + size_of_val(&r.$uv)
                };
            }
            if can_copy!(odp_caps, odp_caps) {
                a.odp_caps.general_caps = r.odp_caps.general_caps;
                a.odp_caps.per_transport_caps.rc_odp_caps =
                    r.odp_caps.per_transport_caps.rc_odp_caps;
                a.odp_caps.per_transport_caps.uc_odp_caps =
                    r.odp_caps.per_transport_caps.uc_odp_caps;
                a.odp_caps.per_transport_caps.ud_odp_caps =
                    r.odp_caps.per_transport_caps.ud_odp_caps;
            }
            if can_copy!(completion_timestamp_mask, timestamp_mask) {
                a.completion_timestamp_mask = r.timestamp_mask;
            }
            if can_copy!(hca_core_clock, hca_core_clock) {
                a.hca_core_clock = r.hca_core_clock;
            }
            if can_copy!(device_cap_flags_ex, device_cap_flags_ex) {
                a.device_cap_flags_ex = r.device_cap_flags_ex;
            }
            if can_copy!(rss_caps, rss_caps) {
                a.rss_caps.supported_qpts = r.rss_caps.supported_qpts;
                a.rss_caps.max_rwq_indirection_tables = r.rss_caps.max_rwq_indirection_tables;
                a.rss_caps.max_rwq_indirection_table_size =
                    r.rss_caps.max_rwq_indirection_table_size;
            }
            if can_copy!(max_wq_type_rq, max_wq_type_rq) {
                a.max_wq_type_rq = r.max_wq_type_rq;
            }
            if can_copy!(raw_packet_caps, raw_packet_caps) {
                a.raw_packet_caps = r.raw_packet_caps;
            }
            if can_copy!(tm_caps, tm_caps) {
                a.tm_caps.max_rndv_hdr_size = r.tm_caps.max_rndv_hdr_size;
                a.tm_caps.max_num_tags = r.tm_caps.max_num_tags;
                a.tm_caps.flags = r.tm_caps.flags;
                a.tm_caps.max_ops = r.tm_caps.max_ops;
                a.tm_caps.max_sge = r.tm_caps.max_sge;
            }
            if can_copy!(cq_mod_caps, cq_moderation_caps) {
                a.cq_mod_caps.max_cq_count = r.cq_moderation_caps.max_cq_moderation_count;
                a.cq_mod_caps.max_cq_period = r.cq_moderation_caps.max_cq_moderation_period;
            }
            if can_copy!(max_dm_size, max_dm_size) {
                a.max_dm_size = r.max_dm_size;
            }
            if can_copy!(xrc_odp_caps, xrc_odp_caps) {
                a.xrc_odp_caps = r.xrc_odp_caps;
            }
            if size >= offset_of!(ibv_device_attr_ex, phys_port_cnt_ex) + 4 {
                let s = (*(*ctx).device.cast::<verbs_device>()).sysfs;
                a.phys_port_cnt_ex = if !s.is_null() && (*s).num_ports != 0 {
                    (*s).num_ports
                } else {
                    a.orig_attr.phys_port_cnt.into()
                };
            }
        }
        0
    })
}

fn copy_port(a: &mut ibv_port_attr, r: &ib_uverbs_query_port_resp) {
    a.state = r.state as _;
    a.max_mtu = r.max_mtu as _;
    a.active_mtu = r.active_mtu as _;
    a.gid_tbl_len = r.gid_tbl_len as _;
    a.port_cap_flags = r.port_cap_flags;
    a.max_msg_sz = r.max_msg_sz;
    a.bad_pkey_cntr = r.bad_pkey_cntr;
    a.qkey_viol_cntr = r.qkey_viol_cntr;
    a.pkey_tbl_len = r.pkey_tbl_len;
    a.lid = r.lid;
    a.sm_lid = r.sm_lid;
    a.lmc = r.lmc;
    a.max_vl_num = r.max_vl_num;
    a.sm_sl = r.sm_sl;
    a.subnet_timeout = r.subnet_timeout;
    a.init_type_reply = r.init_type_reply;
    a.active_width = r.active_width;
    a.active_speed = r.active_speed;
    a.phys_state = r.phys_state;
    a.link_layer = r.link_layer;
    a.flags = r.flags;
}

/// `struct ib_uverbs_query_port_resp_ex`.
#[repr(C)]
#[derive(Default)]
struct PortRespEx {
    legacy: ib_uverbs_query_port_resp,
    port_cap_flags2: u16,
    reserved: [u8; 6],
}

/// The ioctl method first (it alone carries `port_cap_flags2`), the
/// write command where the kernel lacks it.
///
/// # Safety
/// `ctx` is a kernel context; `attr` a full `ibv_port_attr`; `cmd` the
/// provider's legacy request of `cmd_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_port(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    cmd: Ptr,
    cmd_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        let mut ex = PortRespEx::default();
        let mut call = Call::new(UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_PORT);
        call.inline_in(0, port_num.into(), 8);
        call.out(1, &mut ex);
        // SAFETY: a kernel context; `ex` lives across the call.
        let rc = unsafe { call.run(ctx) };
        match rc {
            0 => {
                // SAFETY: the caller's attribute.
                let a = unsafe { &mut *attr };
                copy_port(a, &ex.legacy);
                a.port_cap_flags2 = ex.port_cap_flags2;
                0
            }
            libc::EOPNOTSUPP | libc::ENOTTY | libc::EPROTONOSUPPORT => {
                let mut resp = ib_uverbs_query_port_resp::default();
                // SAFETY: the provider's request holds the payload.
                unsafe {
                    let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_query_port>());
                    let (cmd, cmd_size) = (buf.ptr, buf.size);
                    let p = payload::<ib_uverbs_query_port>(cmd);
                    p.port_num = port_num;
                    p.reserved = [0; 7];
                    let rc = legacy_with_resp(
                        ctx,
                        IB_USER_VERBS_CMD_QUERY_PORT,
                        cmd,
                        cmd_size,
                        (&mut resp as *mut ib_uverbs_query_port_resp).cast(),
                        size_of::<ib_uverbs_query_port_resp>(),
                    );
                    if rc != 0 {
                        return rc;
                    }
                    copy_port(&mut *attr, &resp);
                }
                0
            }
            e => e,
        }
    })
}
