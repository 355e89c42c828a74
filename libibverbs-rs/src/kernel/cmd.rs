//! rdma-core's `ibv_cmd_*` helpers: the uverbs commands its providers
//! issue on a kernel device's command file, with the object bookkeeping
//! rdma-core 44 does around each.
//!
//! A provider passes its own request and response buffers: the legacy
//! request is `ib_uverbs_cmd_hdr`, the kernel's payload, then the
//! provider's part; the extended one has `ib_uverbs_ex_cmd_hdr` after the
//! header. We fill the kernel's payload in place and send the whole
//! buffer, so the provider's part reaches its kernel driver untouched and
//! the kernel writes the driver's answer after the core response, where
//! the provider's struct has it. Every command goes through `write()`,
//! which the kernel accepts for all of them; the ioctl interface is used
//! where only it carries the data (port capability flags 2, GID entries,
//! the provider's own ioctl methods through `execute_ioctl`).

use core::ffi::{c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use core::sync::atomic::Ordering;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::ioctl::{
    Call, UVERBS_METHOD_QUERY_CONTEXT, UVERBS_METHOD_QUERY_PORT, UVERBS_OBJECT_DEVICE,
};
use super::write::{extended, legacy, legacy_with_resp, ptr_u64, run};

const HDR: usize = size_of::<ib_uverbs_cmd_hdr>();
const EX_HDRS: usize = HDR + size_of::<ib_uverbs_ex_cmd_hdr>();

type Ptr = *mut c_void;

/// The kernel payload of a provider's legacy request.
///
/// # Safety
/// `cmd` holds a header and a `T` at least.
unsafe fn payload<'a, T>(cmd: Ptr) -> &'a mut T {
    // SAFETY: per the contract (providers' structs are 8-byte aligned).
    unsafe { &mut *cmd.cast::<u8>().add(HDR).cast::<T>() }
}

/// The kernel payload of a provider's extended request.
///
/// # Safety
/// `cmd` holds both headers and a `T` at least.
unsafe fn ex_payload<'a, T>(cmd: Ptr) -> &'a mut T {
    // SAFETY: per the contract.
    unsafe { &mut *cmd.cast::<u8>().add(EX_HDRS).cast::<T>() }
}

/// The request to send: the provider's buffer, or ours when it passed
/// none or one too short for the kernel's payload (rxe creates its CQs
/// with a NULL request: no provider part).
struct ReqBuf {
    _owned: Vec<u64>,
    ptr: Ptr,
    size: usize,
}

/// A request of at least `core` bytes holding the provider's `cmd_size`.
fn req_buf(cmd: Ptr, cmd_size: usize, core: usize) -> ReqBuf {
    if !cmd.is_null() && cmd_size >= core {
        return ReqBuf {
            _owned: Vec::new(),
            ptr: cmd,
            size: cmd_size,
        };
    }
    let mut v = vec![0u64; core.div_ceil(8)];
    if !cmd.is_null() {
        // SAFETY: the provider's buffer holds `cmd_size` (< core) bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(cmd.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), cmd_size)
        };
    }
    let ptr = v.as_mut_ptr().cast();
    ReqBuf {
        _owned: v,
        ptr,
        size: core.div_ceil(8) * 8,
    }
}

/// rdma-core's `verbs_is_destroy_err`: after the device went away (EIO)
/// a destroy may count as done when the program asked for that.
/// When that applies, the caller returns at once: the kernel filled no
/// event counts to wait for.
fn destroy_err(rc: &mut c_int) -> bool {
    if *rc == libc::EIO && crate::driver::verbs_allow_disassociate_destroy.load(Ordering::Relaxed) {
        *rc = 0;
        return true;
    }
    *rc != 0
}

/// Waits until `completed` reaches what the kernel reported, under the
/// object's own lock (events still unacknowledged hold the destroy).
///
/// # Safety
/// The three pointers belong to one live object.
unsafe fn wait_events(
    m: *mut libc::pthread_mutex_t,
    c: *mut libc::pthread_cond_t,
    done: impl Fn() -> bool,
) {
    // SAFETY: per the contract.
    unsafe {
        libc::pthread_mutex_lock(m);
        while !done() {
            libc::pthread_cond_wait(c, m);
        }
        libc::pthread_mutex_unlock(m);
    }
}

// ---- context and device ----------------------------------------------------

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
}

/// # Safety
/// `ctx` is a kernel context; `driver` NULL or a provider's attributes.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_context(
    ctx: *mut ibv_context,
    driver: *mut ibv_command_buffer,
) -> c_int {
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
                    && len >= offset_of!(ib_uverbs_ex_query_device_resp, $uv) + size_of_val(&r.$uv)
            };
        }
        if can_copy!(odp_caps, odp_caps) {
            a.odp_caps.general_caps = r.odp_caps.general_caps;
            a.odp_caps.per_transport_caps.rc_odp_caps = r.odp_caps.per_transport_caps.rc_odp_caps;
            a.odp_caps.per_transport_caps.uc_odp_caps = r.odp_caps.per_transport_caps.uc_odp_caps;
            a.odp_caps.per_transport_caps.ud_odp_caps = r.odp_caps.per_transport_caps.ud_odp_caps;
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
            a.rss_caps.max_rwq_indirection_table_size = r.rss_caps.max_rwq_indirection_table_size;
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
}

// ---- PD, XRCD, MR, MW ------------------------------------------------------

/// # Safety
/// `ctx` a kernel context; `pd` the provider's new PD; buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_alloc_pd(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_alloc_pd_resp,
    resp_size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let rc = legacy_with_resp(
            ctx,
            IB_USER_VERBS_CMD_ALLOC_PD,
            cmd,
            cmd_size,
            resp.cast(),
            resp_size,
        );
        if rc != 0 {
            return rc;
        }
        (*pd).handle = (*resp).pd_handle;
        (*pd).context = ctx;
    }
    0
}

/// # Safety
/// `pd` is a live PD of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: per the contract.
    let mut rc = unsafe {
        run::<_, ()>(
            (*pd).context,
            IB_USER_VERBS_CMD_DEALLOC_PD,
            ib_uverbs_dealloc_pd {
                pd_handle: (*pd).handle,
            },
            None,
        )
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

/// # Safety
/// `ctx` a kernel context; `xrcd` the provider's new XRCD of
/// `vxrcd_size` bytes; buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_open_xrcd(
    ctx: *mut ibv_context,
    xrcd: *mut verbs_xrcd,
    vxrcd_size: c_int,
    attr: *mut ibv_xrcd_init_attr,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_open_xrcd_resp,
    resp_size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let a = &*attr;
        if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
            return libc::EOPNOTSUPP;
        }
        if a.comp_mask & IBV_XRCD_INIT_ATTR_FD == 0 || a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS == 0
        {
            return libc::EINVAL;
        }
        let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_open_xrcd>());
        let (cmd, cmd_size) = (buf.ptr, buf.size);
        let p = payload::<ib_uverbs_open_xrcd>(cmd);
        p.fd = a.fd as u32;
        p.oflags = a.oflags as u32;
        let rc = legacy_with_resp(
            ctx,
            IB_USER_VERBS_CMD_OPEN_XRCD,
            cmd,
            cmd_size,
            resp.cast(),
            resp_size,
        );
        if rc != 0 {
            return rc;
        }
        (*xrcd).xrcd.context = ctx;
        (*xrcd).comp_mask = 0;
        if vxrcd_size as usize >= offset_of!(verbs_xrcd, handle) + 4 {
            (*xrcd).comp_mask = VERBS_XRCD_HANDLE;
            (*xrcd).handle = (*resp).xrcd_handle;
        }
    }
    0
}

/// # Safety
/// `xrcd` is a live XRCD of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_close_xrcd(xrcd: *mut verbs_xrcd) -> c_int {
    // SAFETY: per the contract.
    let mut rc = unsafe {
        run::<_, ()>(
            (*xrcd).xrcd.context,
            IB_USER_VERBS_CMD_CLOSE_XRCD,
            ib_uverbs_close_xrcd {
                xrcd_handle: (*xrcd).handle,
            },
            None,
        )
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

/// # Safety
/// `pd` a live PD of a kernel context; `vmr` the provider's new MR;
/// buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
    vmr: *mut verbs_mr,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_reg_mr_resp,
    resp_size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_reg_mr>());
        let (cmd, cmd_size) = (buf.ptr, buf.size);
        let p = payload::<ib_uverbs_reg_mr>(cmd);
        p.start = ptr_u64(addr);
        p.length = length as u64;
        if access as c_uint & IBV_ACCESS_ON_DEMAND != 0 {
            if length == usize::MAX && !addr.is_null() {
                verbs_abi::errno::set_errno(libc::EINVAL);
                return libc::EINVAL;
            }
            if length == usize::MAX {
                p.length = u64::MAX;
            }
        }
        p.hca_va = hca_va;
        p.pd_handle = (*pd).handle;
        p.access_flags = access as u32;
        let ctx = (*pd).context;
        let rc = legacy_with_resp(
            ctx,
            IB_USER_VERBS_CMD_REG_MR,
            cmd,
            cmd_size,
            resp.cast(),
            resp_size,
        );
        if rc != 0 {
            return rc;
        }
        let m = &mut (*vmr).ibv_mr;
        m.handle = (*resp).mr_handle;
        m.lkey = (*resp).lkey;
        m.rkey = (*resp).rkey;
        m.context = ctx;
        (*vmr).mr_type = IBV_MR_TYPE_MR;
        (*vmr).access = access;
    }
    0
}

/// # Safety
/// `vmr` a live MR of a kernel context; buffers the provider's.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_rereg_mr(
    vmr: *mut verbs_mr,
    flags: u32,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
    pd: *mut ibv_pd,
    cmd: Ptr,
    cmd_sz: usize,
    resp: *mut ib_uverbs_rereg_mr_resp,
    resp_sz: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let change_pd = flags & IBV_REREG_MR_CHANGE_PD != 0;
        let buf = req_buf(cmd, cmd_sz, HDR + size_of::<ib_uverbs_rereg_mr>());
        let (cmd, cmd_sz) = (buf.ptr, buf.size);
        let p = payload::<ib_uverbs_rereg_mr>(cmd);
        p.mr_handle = (*vmr).ibv_mr.handle;
        p.flags = flags;
        p.start = ptr_u64(addr);
        p.length = length as u64;
        p.hca_va = hca_va;
        p.pd_handle = if change_pd { (*pd).handle } else { 0 };
        p.access_flags = access as u32;
        let rc = legacy_with_resp(
            (*vmr).ibv_mr.context,
            IB_USER_VERBS_CMD_REREG_MR,
            cmd,
            cmd_sz,
            resp.cast(),
            resp_sz,
        );
        if rc != 0 {
            return rc;
        }
        (*vmr).ibv_mr.lkey = (*resp).lkey;
        (*vmr).ibv_mr.rkey = (*resp).rkey;
        if change_pd {
            (*vmr).ibv_mr.context = (*pd).context;
        }
    }
    0
}

/// # Safety
/// `vmr` is a live MR of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int {
    // SAFETY: per the contract.
    let mut rc = unsafe {
        run::<_, ()>(
            (*vmr).ibv_mr.context,
            IB_USER_VERBS_CMD_DEREG_MR,
            ib_uverbs_dereg_mr {
                mr_handle: (*vmr).ibv_mr.handle,
            },
            None,
        )
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

/// # Safety
/// `pd` a live PD of a kernel context; `mw` the provider's new MW;
/// buffers its own.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_alloc_mw(
    pd: *mut ibv_pd,
    mw_type: ibv_mw_type,
    mw: *mut ibv_mw,
    cmd: Ptr,
    cmd_size: usize,
    resp: *mut ib_uverbs_alloc_mw_resp,
    resp_size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_alloc_mw>());
        let (cmd, cmd_size) = (buf.ptr, buf.size);
        let p = payload::<ib_uverbs_alloc_mw>(cmd);
        p.pd_handle = (*pd).handle;
        p.mw_type = mw_type as u8;
        p.reserved = [0; 3];
        let rc = legacy_with_resp(
            (*pd).context,
            IB_USER_VERBS_CMD_ALLOC_MW,
            cmd,
            cmd_size,
            resp.cast(),
            resp_size,
        );
        if rc != 0 {
            return rc;
        }
        (*mw).context = (*pd).context;
        (*mw).pd = pd;
        (*mw).rkey = (*resp).rkey;
        (*mw).handle = (*resp).mw_handle;
        (*mw).r#type = mw_type;
    }
    0
}

/// # Safety
/// `mw` is a live MW of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: per the contract.
    let mut rc = unsafe {
        run::<_, ()>(
            (*mw).context,
            IB_USER_VERBS_CMD_DEALLOC_MW,
            ib_uverbs_dealloc_mw {
                mw_handle: (*mw).handle,
            },
            None,
        )
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

// ---- CQ ----------------------------------------------------------------------

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
    // SAFETY: per the contract.
    unsafe {
        let a = &*attr;
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return libc::EOPNOTSUPP;
        }
        let mut flags = 0u32;
        if a.wc_flags
            & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
                as u64
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
}

/// # Safety
/// `cq` a live CQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
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
}

/// Polls through the kernel (providers without a user-space CQ).
/// Returns the count, or -1.
///
/// # Safety
/// `cq` a live CQ of a kernel context; `wc` room for `ne` entries.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int {
    if ne < 0 {
        verbs_abi::errno::set_errno(libc::EINVAL);
        return -1;
    }
    let n = ne as usize;
    let words = (size_of::<ib_uverbs_poll_cq_resp>() + n * size_of::<ib_uverbs_wc>()).div_ceil(8);
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
            verbs_abi::errno::set_errno(rc);
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
}

/// # Safety
/// `cq` a live CQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int {
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
                    && core::ptr::read_volatile(core::ptr::addr_of!((*cq).async_events_completed))
                        == resp.async_events_reported
            },
        )
    };
    0
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
}

// ---- QP ----------------------------------------------------------------------

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
        (*qp).context = ctx;
        let (pd, send, recv) = match qp_handles(a) {
            Ok(h) => h,
            Err(e) => {
                verbs_abi::errno::set_errno(e);
                return e;
            }
        };
        let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_create_qp>());
        let (cmd, cmd_size) = (buf.ptr, buf.size);
        let p = payload::<ib_uverbs_create_qp>(cmd);
        p.user_handle = ptr_u64(qp);
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
        let r = &*resp;
        (*qp).handle = r.qp_handle;
        (*qp).qp_num = r.qpn;
        a.cap.max_recv_sge = r.max_recv_sge;
        a.cap.max_send_sge = r.max_send_sge;
        a.cap.max_recv_wr = r.max_recv_wr;
        a.cap.max_send_wr = r.max_send_wr;
        a.cap.max_inline_data = r.max_inline_data;
        set_qp(qp, vqp, a);
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
    // SAFETY: per the contract.
    unsafe {
        let a = &mut *attr_ex;
        if a.comp_mask & !(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD) != 0 {
            return libc::EINVAL;
        }
        create_qp_legacy(ctx, qp.cast(), qp, a, cmd, cmd_size, resp, resp_size)
    }
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
    const SUP_CREATE_FLAGS: u32 = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
        | IBV_QP_CREATE_SCATTER_FCS
        | IBV_QP_CREATE_CVLAN_STRIPPING
        | IBV_QP_CREATE_SOURCE_QPN
        | IBV_QP_CREATE_PCI_WRITE_END_PADDING;
    // SAFETY: per the contract.
    unsafe {
        let a = &mut *attr_ex;
        let ibqp = qp.cast::<ibv_qp>();
        (*ibqp).context = ctx;
        let (pd, send, recv) = match qp_handles(a) {
            Ok(h) => h,
            Err(e) => {
                verbs_abi::errno::set_errno(e);
                return e;
            }
        };
        let buf = req_buf(cmd, cmd_size, EX_HDRS + size_of::<ib_uverbs_ex_create_qp>());
        let (cmd, cmd_size) = (buf.ptr, buf.size);
        let p = ex_payload::<ib_uverbs_ex_create_qp>(cmd);
        p.user_handle = ptr_u64(ibqp);
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
        p.comp_mask = 0;
        p.create_flags = 0;
        p.rwq_ind_tbl_handle = 0;
        p.source_qpn = 0;
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
            if a.create_flags & !SUP_CREATE_FLAGS != 0 {
                verbs_abi::errno::set_errno(libc::EINVAL);
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
        let r = &(*resp).base;
        (*ibqp).handle = r.qp_handle;
        (*ibqp).qp_num = r.qpn;
        a.cap.max_recv_sge = r.max_recv_sge;
        a.cap.max_send_sge = r.max_send_sge;
        a.cap.max_recv_wr = r.max_recv_wr;
        a.cap.max_send_wr = r.max_send_wr;
        a.cap.max_inline_data = r.max_inline_data;
        set_qp(ibqp, qp, a);
    }
    0
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
}

/// # Safety
/// `qp` a live QP of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int {
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
}

// ---- SRQ ---------------------------------------------------------------------

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
    // SAFETY: per the contract.
    unsafe {
        let a = &mut *attr_ex;
        if a.comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED {
            verbs_abi::errno::set_errno(libc::EOPNOTSUPP);
            return libc::EOPNOTSUPP;
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
            verbs_abi::errno::set_errno(libc::EINVAL);
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
                    verbs_abi::errno::set_errno(libc::EINVAL);
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
                    verbs_abi::errno::set_errno(libc::EINVAL);
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
}

/// # Safety
/// `srq` a live SRQ of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int {
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
}

// ---- AH and multicast ----------------------------------------------------------

/// # Safety
/// `pd` live; `ah` the provider's new AH; `resp` its response buffer.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_ah(
    pd: *mut ibv_pd,
    ah: *mut ibv_ah,
    attr: *mut ibv_ah_attr,
    resp: *mut ib_uverbs_create_ah_resp,
    resp_size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let a = &*attr;
        let mut req = super::write::Req {
            hdr: ib_uverbs_cmd_hdr::default(),
            body: ib_uverbs_create_ah {
                response: ptr_u64(resp),
                user_handle: ptr_u64(ah),
                pd_handle: (*pd).handle,
                reserved: 0,
                attr: ib_uverbs_ah_attr {
                    grh: ib_uverbs_global_route {
                        dgid: a.grh.dgid.raw,
                        flow_label: a.grh.flow_label,
                        sgid_index: a.grh.sgid_index,
                        hop_limit: a.grh.hop_limit,
                        traffic_class: a.grh.traffic_class,
                        reserved: 0,
                    },
                    dlid: a.dlid,
                    sl: a.sl,
                    src_path_bits: a.src_path_bits,
                    static_rate: a.static_rate,
                    is_global: a.is_global,
                    port_num: a.port_num,
                    reserved: 0,
                },
            },
        };
        let rc = legacy(
            (*pd).context,
            IB_USER_VERBS_CMD_CREATE_AH,
            (&mut req as *mut super::write::Req<ib_uverbs_create_ah>).cast(),
            size_of::<super::write::Req<ib_uverbs_create_ah>>(),
            resp_size,
        );
        if rc != 0 {
            return rc;
        }
        (*ah).handle = (*resp).ah_handle;
        (*ah).context = (*pd).context;
    }
    0
}

/// # Safety
/// `ah` a live AH of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: per the contract.
    let mut rc = unsafe {
        run::<_, ()>(
            (*ah).context,
            IB_USER_VERBS_CMD_DESTROY_AH,
            ib_uverbs_destroy_ah {
                ah_handle: (*ah).handle,
            },
            None,
        )
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

/// # Safety
/// `qp` a live QP of a kernel context; `gid` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        run::<_, ()>(
            (*qp).context,
            IB_USER_VERBS_CMD_ATTACH_MCAST,
            ib_uverbs_attach_mcast {
                gid: (*gid).raw,
                qp_handle: (*qp).handle,
                mlid: lid,
                reserved: 0,
            },
            None,
        )
    }
}

/// # Safety
/// `qp` a live QP of a kernel context; `gid` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    // SAFETY: per the contract.
    let mut rc = unsafe {
        run::<_, ()>(
            (*qp).context,
            IB_USER_VERBS_CMD_DETACH_MCAST,
            ib_uverbs_detach_mcast {
                gid: (*gid).raw,
                qp_handle: (*qp).handle,
                mlid: lid,
                reserved: 0,
            },
            None,
        )
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
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
        assert_eq!(unsafe { ibv_cmd_dealloc_pd(&mut pd) }, libc::EPIPE);
    }
}
