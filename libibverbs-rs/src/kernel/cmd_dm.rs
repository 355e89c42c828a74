//! Device memory (rdma-core's cmd_dm.c): allocate, free, and register as
//! an MR. Only the ioctl interface has these methods; the provider's
//! driver attributes come linked (`link`).

use core::ffi::{c_int, c_uint};

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_buffer::CmdBuf;
use super::cmd_issue::{destroy_err, Issue, Kernel};
use verbs_rt::export;

/// # Safety
/// `ctx` a kernel context; `dm_attr` readable; `dm` the provider's new
/// DM; `link` NULL or its command buffers.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_alloc_dm(
    ctx: *mut ibv_context,
    dm_attr: *const ibv_alloc_dm_attr,
    dm: *mut verbs_dm,
    link: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { alloc_dm(ctx, dm_attr, dm, link, &mut Kernel) }
    })
}

pub(crate) unsafe fn alloc_dm(
    ctx: *mut ibv_context,
    dm_attr: *const ibv_alloc_dm_attr,
    dm: *mut verbs_dm,
    link: *mut ibv_command_buffer,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_alloc_dm`.
    unsafe {
        let mut cb = CmdBuf::new(UVERBS_OBJECT_DM, UVERBS_METHOD_DM_ALLOC, 3, link);
        let handle = cb.out_obj(UVERBS_ATTR_ALLOC_DM_HANDLE);
        cb.in_u64(UVERBS_ATTR_ALLOC_DM_LENGTH, (*dm_attr).length as u64);
        cb.in_u32(UVERBS_ATTR_ALLOC_DM_ALIGNMENT, (*dm_attr).log_align_req);
        let rc = k.ioctl(ctx, &mut cb);
        if rc != 0 {
            return rc;
        }
        let d = &mut *dm;
        d.handle = cb.read_obj(handle);
        d.dm.handle = d.handle;
        d.dm.comp_mask = IBV_DM_MASK_HANDLE;
        d.dm.context = ctx;
    }
    0
}

/// # Safety
/// `dm` is a live DM of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_free_dm(dm: *mut verbs_dm) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { free_dm(dm, &mut Kernel) }
    })
}

pub(crate) unsafe fn free_dm(dm: *mut verbs_dm, k: &mut impl Issue) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_free_dm`.
    let mut rc = unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_DM,
            UVERBS_METHOD_DM_FREE,
            1,
            core::ptr::null_mut(),
        );
        cb.in_obj(UVERBS_ATTR_FREE_DM_HANDLE, (*dm).handle);
        k.ioctl((*dm).dm.context, &mut cb)
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

/// # Safety
/// `pd` and `dm` live objects of a kernel context; `vmr` the provider's
/// new MR; `link` NULL or its command buffers.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut verbs_dm,
    offset: u64,
    length: usize,
    access: c_uint,
    vmr: *mut verbs_mr,
    link: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { reg_dm_mr(pd, dm, offset, length, access, vmr, link, &mut Kernel) }
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut verbs_dm,
    offset: u64,
    length: usize,
    access: c_uint,
    vmr: *mut verbs_mr,
    link: *mut ibv_command_buffer,
    k: &mut impl Issue,
) -> c_int {
    // DM MRs are always zero based: the mapping, if any, is hidden from
    // the user.
    if access & IBV_ACCESS_ZERO_BASED == 0 {
        verbs_rt::errno::set_errno(libc::EINVAL);
        return libc::EINVAL;
    }
    let (mut lkey, mut rkey) = (0u32, 0u32);
    // SAFETY: per the contract of `ibv_cmd_reg_dm_mr`; the keys outlive
    // the call.
    unsafe {
        let mut cb = CmdBuf::new(UVERBS_OBJECT_MR, UVERBS_METHOD_DM_MR_REG, 8, link);
        let handle = cb.out_obj(UVERBS_ATTR_REG_DM_MR_HANDLE);
        cb.out_ptr(UVERBS_ATTR_REG_DM_MR_RESP_LKEY, &mut lkey);
        cb.out_ptr(UVERBS_ATTR_REG_DM_MR_RESP_RKEY, &mut rkey);
        cb.in_obj(UVERBS_ATTR_REG_DM_MR_PD_HANDLE, (*pd).handle);
        cb.in_obj(UVERBS_ATTR_REG_DM_MR_DM_HANDLE, (*dm).handle);
        cb.in_u64(UVERBS_ATTR_REG_DM_MR_OFFSET, offset);
        cb.in_u64(UVERBS_ATTR_REG_DM_MR_LENGTH, length as u64);
        cb.in_u32(UVERBS_ATTR_REG_DM_MR_ACCESS_FLAGS, access);
        let ctx = (*pd).context;
        let rc = k.ioctl(ctx, &mut cb);
        if rc != 0 {
            return rc;
        }
        let m = &mut (*vmr).ibv_mr;
        m.handle = cb.read_obj(handle);
        m.context = ctx;
        m.lkey = lkey;
        m.rkey = rkey;
        m.length = length;
        m.pd = pd;
        m.addr = core::ptr::null_mut();
        (*vmr).mr_type = IBV_MR_TYPE_MR;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_buffer::key;
    use crate::kernel::cmd_issue::testing::{FakeCtx, IoctlFake};
    use crate::kernel::ioctl::UVERBS_ATTR_F_MANDATORY as M;

    fn u32_data(v: u32) -> u64 {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&v.to_ne_bytes());
        u64::from_ne_bytes(b)
    }

    /// A provider's driver attributes, as mlx5 links them.
    unsafe fn provider_link(out: &mut u64) -> CmdBuf {
        // SAFETY: no further link; `out` outlives the test's call.
        unsafe {
            let mut l = CmdBuf::new(
                UVERBS_OBJECT_DM,
                UVERBS_METHOD_DM_ALLOC,
                2,
                core::ptr::null_mut(),
            );
            l.in_u32(0x1000, 3);
            l.out_ptr(0x1001, out);
            l
        }
    }

    #[test]
    fn alloc_dm_builds_chains_and_reads_the_handle() {
        let f = FakeCtx::new();
        let mut drv_out = 0u64;
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut link = provider_link(&mut drv_out);
            let attr = ibv_alloc_dm_attr {
                length: 0x4000,
                log_align_req: 6,
                comp_mask: 0,
            };
            let mut dm = verbs_dm::zeroed();
            let lp = link.cmdb();
            let mut seen = 0;
            let rc = alloc_dm(
                f.ctx(),
                &attr,
                &mut dm,
                lp,
                &mut IoctlFake(|ctx, cb: &mut CmdBuf| {
                    assert_eq!(ctx, f.ctx());
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_DM, UVERBS_METHOD_DM_ALLOC)
                    );
                    assert_eq!((*cb.cmdb()).next, lp);
                    let a = cb.filled();
                    assert_eq!(a.len(), 3);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_ALLOC_DM_HANDLE, 0, M, 0, 0));
                    assert_eq!(key(&a[1]), (UVERBS_ATTR_ALLOC_DM_LENGTH, 8, M, 0, 0x4000));
                    assert_eq!(
                        key(&a[2]),
                        (UVERBS_ATTR_ALLOC_DM_ALIGNMENT, 4, M, 0, u32_data(6))
                    );
                    // The kernel answers with the new handle.
                    cb.set_data(0, 0x42);
                    seen += 1;
                    0
                }),
            );
            assert_eq!((rc, seen), (0, 1));
            assert_eq!((dm.handle, dm.dm.handle), (0x42, 0x42));
            assert_eq!(dm.dm.comp_mask, IBV_DM_MASK_HANDLE);
            assert_eq!(dm.dm.context, f.ctx());
        }
    }

    #[test]
    fn alloc_dm_linearises_the_link_and_returns_the_ioctl_errno() {
        let f = FakeCtx::new();
        let mut drv_out = 0u64;
        // SAFETY: as above; the pipe refuses the ioctl (ENOTTY).
        unsafe {
            let mut link = provider_link(&mut drv_out);
            let want = link.filled();
            let attr = ibv_alloc_dm_attr {
                length: 64,
                log_align_req: 0,
                comp_mask: 0,
            };
            let mut dm = verbs_dm::zeroed();
            dm.handle = 9;
            let mut got = Vec::new();
            let rc = alloc_dm(
                f.ctx(),
                &attr,
                &mut dm,
                link.cmdb(),
                &mut IoctlFake(|ctx, cb: &mut CmdBuf| {
                    let rc = cb.execute(ctx);
                    let n = cb.hdr().num_attrs as usize;
                    got = cb.array(n);
                    rc
                }),
            );
            assert_eq!(rc, libc::ENOTTY);
            assert_eq!(got.len(), 5);
            assert_eq!(key(&got[3]), key(&want[0]));
            assert_eq!(key(&got[4]), key(&want[1]));
            // Nothing taken from a failed call.
            assert_eq!(dm.handle, 9);
            assert!(dm.dm.context.is_null());
            // The real entry point ends the same way.
            assert_eq!(
                ibv_cmd_alloc_dm(f.ctx(), &attr, &mut dm, link.cmdb()),
                libc::ENOTTY
            );
        }
    }

    #[test]
    fn free_dm_names_the_handle_and_passes_errors() {
        let f = FakeCtx::new();
        // SAFETY: the DM outlives the calls.
        unsafe {
            let mut dm = verbs_dm::zeroed();
            dm.handle = 17;
            dm.dm.context = f.ctx();
            let rc = free_dm(
                &mut dm,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_DM, UVERBS_METHOD_DM_FREE)
                    );
                    assert!((*cb.cmdb()).next.is_null());
                    let a = cb.filled();
                    assert_eq!(a.len(), 1);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_FREE_DM_HANDLE, 0, M, 0, 17));
                    0
                }),
            );
            assert_eq!(rc, 0);
            assert_eq!(
                free_dm(&mut dm, &mut IoctlFake(|_, _: &mut CmdBuf| libc::EBUSY)),
                libc::EBUSY
            );
            assert_eq!(ibv_cmd_free_dm(&mut dm), libc::ENOTTY);
        }
    }

    #[test]
    fn reg_dm_mr_needs_zero_based_and_reads_keys() {
        let f = FakeCtx::new();
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut pd = ibv_pd::zeroed();
            pd.context = f.ctx();
            pd.handle = 3;
            let mut dm = verbs_dm::zeroed();
            dm.handle = 4;
            let mut vmr = verbs_mr::zeroed();
            let null = core::ptr::null_mut();
            let mut calls = 0;
            let rc = reg_dm_mr(
                &mut pd,
                &mut dm,
                0,
                64,
                IBV_ACCESS_LOCAL_WRITE,
                &mut vmr,
                null,
                &mut IoctlFake(|_, _: &mut CmdBuf| {
                    calls += 1;
                    0
                }),
            );
            assert_eq!((rc, calls), (libc::EINVAL, 0));

            let access = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_READ;
            let rc = reg_dm_mr(
                &mut pd,
                &mut dm,
                0x80,
                0x1000,
                access,
                &mut vmr,
                null,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_MR, UVERBS_METHOD_DM_MR_REG)
                    );
                    let a = cb.filled();
                    assert_eq!(a.len(), 8);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_REG_DM_MR_HANDLE, 0, M, 0, 0));
                    assert_eq!(
                        (a[1].attr_id, a[1].len),
                        (UVERBS_ATTR_REG_DM_MR_RESP_LKEY, 4)
                    );
                    assert_eq!(
                        (a[2].attr_id, a[2].len),
                        (UVERBS_ATTR_REG_DM_MR_RESP_RKEY, 4)
                    );
                    assert_eq!(key(&a[3]), (UVERBS_ATTR_REG_DM_MR_PD_HANDLE, 0, M, 0, 3));
                    assert_eq!(key(&a[4]), (UVERBS_ATTR_REG_DM_MR_DM_HANDLE, 0, M, 0, 4));
                    assert_eq!(key(&a[5]), (UVERBS_ATTR_REG_DM_MR_OFFSET, 8, M, 0, 0x80));
                    assert_eq!(key(&a[6]), (UVERBS_ATTR_REG_DM_MR_LENGTH, 8, M, 0, 0x1000));
                    assert_eq!(
                        key(&a[7]),
                        (
                            UVERBS_ATTR_REG_DM_MR_ACCESS_FLAGS,
                            4,
                            M,
                            0,
                            u32_data(access)
                        )
                    );
                    // The kernel fills the keys and the handle.
                    *(a[1].data as usize as *mut u32) = 0x1111;
                    *(a[2].data as usize as *mut u32) = 0x2222;
                    cb.set_data(0, 0x55);
                    0
                }),
            );
            assert_eq!(rc, 0);
            let m = &vmr.ibv_mr;
            assert_eq!(
                (m.handle, m.lkey, m.rkey, m.length),
                (0x55, 0x1111, 0x2222, 0x1000)
            );
            assert_eq!((m.context, m.pd), (f.ctx(), &mut pd as *mut ibv_pd));
            assert!(m.addr.is_null());
            assert_eq!(vmr.mr_type, IBV_MR_TYPE_MR);
        }
    }
}
