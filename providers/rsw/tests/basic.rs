//! Devices, queries, PD/MR and object creation limits.

mod common;

use std::ptr::null_mut;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::provider::PROVIDER_ABI_VERSION;
use verbs_abi::*;

#[test]
fn table_header() {
    assert_eq!(OPS.abi_version, PROVIDER_ABI_VERSION);
    assert_eq!(
        OPS.size as usize,
        std::mem::size_of::<verbs_abi::provider::ProviderOps>()
    );
    // SAFETY: name is a static C string.
    let name = unsafe { std::ffi::CStr::from_ptr(OPS.name) };
    assert_eq!(name.to_bytes(), b"rsw");
}

#[test]
fn discover_counts_even_without_room() {
    // SAFETY: max 0 means nothing is written.
    let n = unsafe { OPS.discover.unwrap()(null_mut(), 0) };
    assert!(n >= 1, "at least rsw_lo");
}

#[test]
fn open_fills_extended_context() {
    let c = Ctx::open();
    // SAFETY: ctx is open.
    let ctx = unsafe { &*c.ctx };
    assert_eq!(ctx.abi_compat, VERBS_ABI_IS_EXTENDED);
    assert_eq!(c.vctx().sz, std::mem::size_of::<verbs_context>());
    assert!(c.vctx().query_port.is_some());
    assert!(c.vctx().create_cq_ex.is_some());
    assert!(c.vctx().create_qp_ex.is_some());
    assert!(c.vctx().query_device_ex.is_some());
    assert!(ctx.ops.post_send.is_some() && ctx.ops.post_recv.is_some());
    assert!(ctx.ops.poll_cq.is_some() && ctx.ops.req_notify_cq.is_some());
    assert_eq!(ctx.num_comp_vectors, 1);
    // SAFETY: F_GETFL on the context's descriptor.
    assert!(unsafe { libc::fcntl(ctx.async_fd, libc::F_GETFL) } >= 0);
    // SAFETY: ctx is open and not used afterwards.
    assert_eq!(unsafe { OPS.close_device.unwrap()(c.ctx) }, 0);
}

#[test]
fn device_and_port_attributes() {
    let c = Ctx::open();
    let mut ex = ibv_device_attr_ex::zeroed();
    // SAFETY: ctx is open; ex is valid for its size.
    let r = unsafe {
        OPS.query_device_ex.unwrap()(c.ctx, null_mut(), &mut ex, std::mem::size_of_val(&ex))
    };
    assert_eq!(r, 0);
    let a = ex.orig_attr;
    assert_eq!(a.phys_port_cnt, 1);
    assert_eq!(a.node_guid, a.sys_image_guid);
    assert_ne!(a.node_guid, 0);
    assert_eq!(a.atomic_cap, IBV_ATOMIC_HCA);
    assert!(a.max_qp_wr >= 1024 && a.max_sge >= 16 && a.max_cqe >= 65535);
    assert!(a.max_srq >= 1 && a.max_srq_wr >= 1024 && a.max_srq_sge >= 1);
    assert_eq!(ex.hca_core_clock, 1_000_000);
    assert_ne!(ex.completion_timestamp_mask, 0);
    // SAFETY: fw_ver is NUL-terminated.
    let fw = unsafe { std::ffi::CStr::from_ptr(a.fw_ver.as_ptr()) };
    assert!(fw.to_str().unwrap().starts_with("rsw "));

    // An old, short ibv_device_attr is filled without overrunning it.
    let mut small = [0xabu8; std::mem::size_of::<ibv_device_attr>() + 8];
    // SAFETY: small has room for the requested size.
    let r = unsafe {
        OPS.query_device_ex.unwrap()(
            c.ctx,
            null_mut(),
            small.as_mut_ptr() as *mut ibv_device_attr_ex,
            std::mem::size_of::<ibv_device_attr>(),
        )
    };
    assert_eq!(r, 0);
    assert!(small[std::mem::size_of::<ibv_device_attr>()..]
        .iter()
        .all(|&b| b == 0xab));

    let mut p = ibv_port_attr {
        state: 0,
        max_mtu: 0,
        active_mtu: 0,
        gid_tbl_len: 0,
        port_cap_flags: 0,
        max_msg_sz: 0,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 0,
        lid: 7,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 0,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 0,
        active_speed: 0,
        phys_state: 0,
        link_layer: 0,
        flags: 0,
        port_cap_flags2: 0,
    };
    assert_eq!(
        // SAFETY: ctx is open; p is valid.
        unsafe { c.vctx().query_port.unwrap()(c.ctx, 1, &mut p, std::mem::size_of_val(&p)) },
        0
    );
    assert_eq!(p.state, IBV_PORT_ACTIVE);
    assert_eq!(p.link_layer, IBV_LINK_LAYER_ETHERNET);
    assert_eq!(p.active_mtu, IBV_MTU_4096);
    assert_eq!(p.lid, 0);
    assert_eq!(p.pkey_tbl_len, 1);
    assert!(p.gid_tbl_len >= 1);
    assert_eq!(
        // SAFETY: as above.
        unsafe { c.vctx().query_port.unwrap()(c.ctx, 2, &mut p, std::mem::size_of_val(&p)) },
        libc::EINVAL
    );

    let mut e = ibv_gid_entry {
        gid: ibv_gid::zeroed(),
        gid_index: 0,
        port_num: 0,
        gid_type: 0,
        ndev_ifindex: 0,
    };
    assert_eq!(
        // SAFETY: ctx is open; e is valid.
        unsafe { OPS.query_gid_ex.unwrap()(c.ctx, 1, 0, &mut e, 0) },
        0
    );
    let mut lo = [0u8; 16];
    lo[10] = 0xff;
    lo[11] = 0xff;
    lo[12..].copy_from_slice(&[127, 0, 0, 1]);
    assert_eq!(e.gid.raw(), lo);
    assert_eq!(e.gid_type, IBV_GID_TYPE_ROCE_V2);
    assert_eq!(e.port_num, 1);
    assert_ne!(e.ndev_ifindex, 0);
    // SAFETY: as above.
    let r = unsafe { OPS.query_gid_ex.unwrap()(c.ctx, 1, p.gid_tbl_len as u32, &mut e, 0) };
    assert_eq!(r, libc::EINVAL);

    let mut pkey = 0u16;
    assert_eq!(
        // SAFETY: ctx is open; pkey is valid.
        unsafe { OPS.query_pkey.unwrap()(c.ctx, 1, 0, &mut pkey) },
        0
    );
    assert_eq!(u16::from_be(pkey), 0xffff);
    assert_eq!(
        // SAFETY: as above.
        unsafe { OPS.query_pkey.unwrap()(c.ctx, 1, 1, &mut pkey) },
        libc::EINVAL
    );
}

#[test]
fn mr_keys_and_access_rules() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let a = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let b = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    assert_ne!(a.lkey(), b.lkey());
    assert_eq!(a.lkey(), a.rkey());
    // SAFETY: mr is live.
    unsafe {
        assert_eq!((*a.mr).addr as u64, a.addr());
        assert_eq!((*a.mr).length, 64);
        assert_eq!((*a.mr).pd, pd);
        assert_eq!((*a.mr).context, c.ctx);
    }
    let mut mem = [0u8; 16];
    for bad in [IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC] {
        // SAFETY: pd is ours; mem outlives the call.
        let mr = unsafe {
            OPS.reg_mr.unwrap()(pd, mem.as_mut_ptr().cast(), 16, mem.as_ptr() as u64, bad)
        };
        assert!(mr.is_null());
        assert_eq!(errno(), libc::EINVAL);
    }
    // A PD with MRs cannot go away.
    // SAFETY: pd is ours.
    assert_eq!(unsafe { OPS.dealloc_pd.unwrap()(pd) }, libc::EBUSY);
    drop(a);
    drop(b);
    // SAFETY: pd is ours and now unused.
    assert_eq!(unsafe { OPS.dealloc_pd.unwrap()(pd) }, 0);
}

/// rereg_mr refuses what reg_mr refuses (a range that wraps the address
/// space, a missing PD) and leaves the MR as it was; a good change applies.
#[test]
fn rereg_mr_checks_its_arguments() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let pd2 = c.alloc_pd();
    let a = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let mut other = vec![0u64; 16];
    let rereg = |flags: u32, pd: *mut ibv_pd, addr: usize, len: usize| {
        // SAFETY: a.mr is live; the provider only records addr/len.
        unsafe { OPS.rereg_mr.unwrap()(a.mr, flags as i32, pd, addr as *mut _, len, 0) }
    };
    let t = IBV_REREG_MR_CHANGE_TRANSLATION;
    assert_eq!(rereg(t, null_mut(), usize::MAX - 16, 64), libc::EINVAL);
    assert_eq!(rereg(t, null_mut(), 4096, 1 << 48), libc::EINVAL);
    assert_eq!(
        rereg(IBV_REREG_MR_CHANGE_PD, null_mut(), 0, 0),
        libc::EINVAL
    );
    // SAFETY: mr is live.
    unsafe {
        assert_eq!((*a.mr).addr as u64, a.addr());
        assert_eq!((*a.mr).length, 64);
        assert_eq!((*a.mr).pd, pd);
    }
    let addr = other.as_mut_ptr() as usize;
    assert_eq!(rereg(t | IBV_REREG_MR_CHANGE_PD, pd2, addr, 128), 0);
    // SAFETY: mr is live.
    unsafe {
        assert_eq!((*a.mr).addr as usize, addr);
        assert_eq!((*a.mr).length, 128);
        assert_eq!((*a.mr).pd, pd2);
    }
    // The MR moved to pd2: pd is free, pd2 is not.
    // SAFETY: both PDs are ours.
    unsafe {
        assert_eq!(OPS.dealloc_pd.unwrap()(pd2), libc::EBUSY);
        assert_eq!(OPS.dealloc_pd.unwrap()(pd), 0);
    }
    drop(a);
    drop(other);
}

#[test]
fn qp_caps_and_unsupported_types() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let mut a = c.qp_attr(pd, cq, cq);
    a.cap = ibv_qp_cap {
        max_send_wr: 5,
        max_recv_wr: 3,
        max_send_sge: 2,
        max_recv_sge: 3,
        max_inline_data: 100,
    };
    a.sq_sig_all = 1;
    let qp = c.create_qp(&mut a);
    assert!(a.cap.max_send_wr >= 5 && a.cap.max_recv_wr >= 3);
    assert!(a.cap.max_send_sge >= 2 && a.cap.max_recv_sge >= 3);
    assert!(a.cap.max_inline_data >= 100);
    // SAFETY: qp is live.
    unsafe {
        assert_eq!((*qp).state, IBV_QPS_RESET);
        assert_eq!((*qp).qp_type, IBV_QPT_RC);
        assert_eq!((*qp).pd, pd);
        assert_eq!((*qp).send_cq, cq);
        assert_ne!((*qp).qp_num, 0);
    }
    let (qa, qi) = query(qp);
    assert_eq!(qa.qp_state, IBV_QPS_RESET);
    assert_eq!(qa.cap.max_send_wr, a.cap.max_send_wr);
    assert_eq!(qi.cap.max_inline_data, a.cap.max_inline_data);
    assert_eq!(qi.sq_sig_all, 1);
    assert_eq!(qi.send_cq, cq);

    // Two QPs never share a number.
    let qp2 = c.qp(pd, cq, cq);
    assert_ne!(qpn(qp), qpn(qp2));

    // A CQ or PD in use cannot be destroyed.
    assert_eq!(destroy_cq(cq), libc::EBUSY);
    // SAFETY: pd is ours.
    assert_eq!(unsafe { OPS.dealloc_pd.unwrap()(pd) }, libc::EBUSY);

    let try_create = |tweak: &dyn Fn(&mut ibv_qp_init_attr_ex)| {
        let mut a = c.qp_attr(pd, cq, cq);
        tweak(&mut a);
        // SAFETY: ctx is open; a is valid.
        let q = unsafe { c.vctx().create_qp_ex.unwrap()(c.ctx, &mut a) };
        assert!(q.is_null());
        errno()
    };
    assert_eq!(
        try_create(&|a| a.qp_type = IBV_QPT_DRIVER),
        libc::EOPNOTSUPP
    );
    assert_eq!(try_create(&|a| a.cap.max_send_wr = 1 << 30), libc::EINVAL);
    assert_eq!(try_create(&|a| a.cap.max_send_sge = 1000), libc::EINVAL);
    assert_eq!(
        try_create(&|a| a.cap.max_inline_data = 1 << 20),
        libc::EINVAL
    );
    assert_eq!(try_create(&|a| a.send_cq = null_mut()), libc::EINVAL);
    assert_eq!(
        try_create(&|a| a.srq = std::ptr::dangling_mut::<ibv_srq>()),
        libc::EINVAL
    );
    assert_eq!(
        try_create(&|a| {
            a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            a.send_ops_flags = IBV_QP_EX_WITH_TSO as u64;
        }),
        libc::EOPNOTSUPP
    );

    destroy_qp(qp);
    destroy_qp(qp2);
    // A destroyed QP's pointer fails with EINVAL instead of touching freed
    // memory (librdmacm moves an id's QP to ERR on DISCONNECTED even after
    // the program destroyed it, as rping does).
    let mut attr = ibv_qp_attr::zeroed();
    attr.qp_state = IBV_QPS_ERR;
    assert_eq!(modify(qp, &mut attr, IBV_QP_STATE), libc::EINVAL);
    let mut init = ibv_qp_init_attr::zeroed();
    // SAFETY: the provider must reject the stale pointer without using it.
    let rc = unsafe { OPS.query_qp.unwrap()(qp, &mut attr, 0, &mut init) };
    assert_eq!(rc, libc::EINVAL);
    // SAFETY: as above, for a second destroy.
    assert_eq!(unsafe { OPS.destroy_qp.unwrap()(qp2) }, libc::EINVAL);
    assert_eq!(destroy_cq(cq), 0);
    // SAFETY: pd is ours and now unused.
    assert_eq!(unsafe { OPS.dealloc_pd.unwrap()(pd) }, 0);
}

#[test]
fn cq_create_checks_and_resize() {
    let c = Ctx::open();
    let mk = |cqe: u32, flags: u64| {
        let mut a = ibv_cq_init_attr_ex {
            cqe,
            cq_context: null_mut(),
            channel: null_mut(),
            comp_vector: 0,
            wc_flags: flags,
            comp_mask: 0,
            flags: 0,
            parent_domain: null_mut(),
        };
        // SAFETY: ctx is open; a is valid.
        let cq = unsafe { c.vctx().create_cq_ex.unwrap()(c.ctx, &mut a) };
        (cq, errno())
    };
    assert_eq!(mk(0, 0).1, libc::EINVAL);
    assert_eq!(mk(1 << 30, 0).1, libc::EINVAL);
    assert_eq!(mk(4, IBV_WC_EX_WITH_FLOW_TAG as u64).1, libc::EOPNOTSUPP);
    let (cq, _) = mk(4, 0);
    assert!(!cq.is_null());
    // SAFETY: cq is live.
    unsafe {
        assert!((*cq).cqe >= 4);
        assert_eq!((*cq).context, c.ctx);
        assert_eq!(OPS.resize_cq.unwrap()(cq as *mut ibv_cq, 100), 0);
        assert!((*cq).cqe >= 100);
        assert_eq!(OPS.resize_cq.unwrap()(cq as *mut ibv_cq, 0), libc::EINVAL);
    }
    assert_eq!(destroy_cq(cq as *mut ibv_cq), 0);
}
