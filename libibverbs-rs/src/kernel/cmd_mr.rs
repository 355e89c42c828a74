//! The MR methods only the ioctl interface has (rdma-core's cmd_mr.c):
//! prefetch advice, querying an imported MR, registering a dma-buf.

use core::ffi::{c_int, c_uint};
use core::mem::size_of;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_buffer::CmdBuf;
use super::cmd_issue::{array_len, Issue, Kernel};
use verbs_rt::export;

/// # Safety
/// `pd` a live PD of a kernel context; `sg_list` `num_sge` entries.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_advise_mr(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { advise_mr(pd, advice, flags, sg_list, num_sge, &mut Kernel) }
    })
}

pub(crate) unsafe fn advise_mr(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_advise_mr`.
    unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_MR,
            UVERBS_METHOD_ADVISE_MR,
            4,
            core::ptr::null_mut(),
        );
        cb.in_obj(UVERBS_ATTR_ADVISE_MR_PD_HANDLE, (*pd).handle);
        cb.in_u64(UVERBS_ATTR_ADVISE_MR_ADVICE, advice as u64);
        cb.in_u32(UVERBS_ATTR_ADVISE_MR_FLAGS, flags);
        cb.in_ptr(
            UVERBS_ATTR_ADVISE_MR_SGE_LIST,
            sg_list.cast(),
            array_len(size_of::<ibv_sge>(), num_sge as usize),
        );
        k.ioctl((*pd).context, &mut cb)
    }
}

/// # Safety
/// `pd` a live PD of a kernel context; `vmr` the provider's MR object.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_query_mr(
    pd: *mut ibv_pd,
    vmr: *mut verbs_mr,
    mr_handle: u32,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { query_mr(pd, vmr, mr_handle, &mut Kernel) }
    })
}

pub(crate) unsafe fn query_mr(
    pd: *mut ibv_pd,
    vmr: *mut verbs_mr,
    mr_handle: u32,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_query_mr`; the kernel writes
    // the keys and length straight into the MR, as rdma-core has it.
    unsafe {
        let mr = core::ptr::addr_of_mut!((*vmr).ibv_mr);
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_MR,
            UVERBS_METHOD_QUERY_MR,
            4,
            core::ptr::null_mut(),
        );
        cb.in_obj(UVERBS_ATTR_QUERY_MR_HANDLE, mr_handle);
        cb.out_ptr(
            UVERBS_ATTR_QUERY_MR_RESP_LKEY,
            core::ptr::addr_of_mut!((*mr).lkey),
        );
        cb.out_ptr(
            UVERBS_ATTR_QUERY_MR_RESP_RKEY,
            core::ptr::addr_of_mut!((*mr).rkey),
        );
        cb.out_ptr(
            UVERBS_ATTR_QUERY_MR_RESP_LENGTH,
            core::ptr::addr_of_mut!((*mr).length),
        );
        let rc = k.ioctl((*pd).context, &mut cb);
        if rc != 0 {
            return rc;
        }
        (*mr).handle = mr_handle;
        (*mr).context = (*pd).context;
        (*mr).pd = pd;
        (*mr).addr = core::ptr::null_mut();
        (*vmr).mr_type = IBV_MR_TYPE_IMPORTED_MR;
    }
    0
}

/// # Safety
/// `pd` a live PD of a kernel context; `vmr` the provider's new MR.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
    vmr: *mut verbs_mr,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { reg_dmabuf_mr(pd, offset, length, iova, fd, access, vmr, &mut Kernel) }
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
    vmr: *mut verbs_mr,
    k: &mut impl Issue,
) -> c_int {
    let (mut lkey, mut rkey) = (0u32, 0u32);
    // SAFETY: per the contract of `ibv_cmd_reg_dmabuf_mr`; the keys
    // outlive the call.
    unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_MR,
            UVERBS_METHOD_REG_DMABUF_MR,
            9,
            core::ptr::null_mut(),
        );
        let handle = cb.out_obj(UVERBS_ATTR_REG_DMABUF_MR_HANDLE);
        cb.out_ptr(UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, &mut lkey);
        cb.out_ptr(UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY, &mut rkey);
        cb.in_obj(UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE, (*pd).handle);
        cb.in_u64(UVERBS_ATTR_REG_DMABUF_MR_OFFSET, offset);
        cb.in_u64(UVERBS_ATTR_REG_DMABUF_MR_LENGTH, length as u64);
        cb.in_u64(UVERBS_ATTR_REG_DMABUF_MR_IOVA, iova);
        cb.in_u32(UVERBS_ATTR_REG_DMABUF_MR_FD, fd as u32);
        cb.in_u32(UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS, access as u32);
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
        m.pd = pd;
        m.addr = offset as usize as *mut core::ffi::c_void;
        m.length = length;
        (*vmr).mr_type = IBV_MR_TYPE_DMABUF_MR;
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

    fn pd(f: &FakeCtx, handle: u32) -> ibv_pd {
        let mut p = ibv_pd::zeroed();
        p.context = f.ctx();
        p.handle = handle;
        p
    }

    #[test]
    fn advise_mr_attributes() {
        let f = FakeCtx::new();
        let mut pd = pd(&f, 5);
        let mut sge = [ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }; 2];
        let sp = sge.as_mut_ptr();
        // SAFETY: every object outlives the calls.
        unsafe {
            let rc = advise_mr(
                &mut pd,
                IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                IB_UVERBS_ADVISE_MR_FLAG_FLUSH,
                sp,
                2,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_MR, UVERBS_METHOD_ADVISE_MR)
                    );
                    let a = cb.filled();
                    assert_eq!(a.len(), 4);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_ADVISE_MR_PD_HANDLE, 0, M, 0, 5));
                    assert_eq!(key(&a[1]), (UVERBS_ATTR_ADVISE_MR_ADVICE, 8, M, 0, 1));
                    assert_eq!(
                        key(&a[2]),
                        (UVERBS_ATTR_ADVISE_MR_FLAGS, 4, M, 0, u32_data(1))
                    );
                    assert_eq!(
                        key(&a[3]),
                        (UVERBS_ATTR_ADVISE_MR_SGE_LIST, 32, M, 0, sp as u64)
                    );
                    libc::EOPNOTSUPP
                }),
            );
            assert_eq!(rc, libc::EOPNOTSUPP);
            assert_eq!(ibv_cmd_advise_mr(&mut pd, 0, 0, sp, 2), libc::ENOTTY);
        }
    }

    #[test]
    fn query_mr_fills_the_mr_in_place() {
        let f = FakeCtx::new();
        let mut pd = pd(&f, 5);
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut vmr = verbs_mr::zeroed();
            vmr.ibv_mr.addr = 8 as *mut core::ffi::c_void;
            let rc = query_mr(
                &mut pd,
                &mut vmr,
                0x99,
                &mut IoctlFake(|_, _: &mut CmdBuf| libc::ENOENT),
            );
            assert_eq!(rc, libc::ENOENT);
            assert_eq!(vmr.ibv_mr.handle, 0);
            let m = core::ptr::addr_of_mut!(vmr.ibv_mr);
            let rc = query_mr(
                &mut pd,
                &mut vmr,
                0x99,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_MR, UVERBS_METHOD_QUERY_MR)
                    );
                    let a = cb.filled();
                    assert_eq!(a.len(), 4);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_QUERY_MR_HANDLE, 0, M, 0, 0x99));
                    assert_eq!(
                        key(&a[1]),
                        (
                            UVERBS_ATTR_QUERY_MR_RESP_LKEY,
                            4,
                            M,
                            0,
                            core::ptr::addr_of!((*m).lkey) as u64
                        )
                    );
                    assert_eq!(
                        key(&a[2]),
                        (
                            UVERBS_ATTR_QUERY_MR_RESP_RKEY,
                            4,
                            M,
                            0,
                            core::ptr::addr_of!((*m).rkey) as u64
                        )
                    );
                    assert_eq!(
                        key(&a[3]),
                        (
                            UVERBS_ATTR_QUERY_MR_RESP_LENGTH,
                            8,
                            M,
                            0,
                            core::ptr::addr_of!((*m).length) as u64
                        )
                    );
                    *(a[1].data as usize as *mut u32) = 0xa;
                    *(a[2].data as usize as *mut u32) = 0xb;
                    *(a[3].data as usize as *mut u64) = 0xc000;
                    0
                }),
            );
            assert_eq!(rc, 0);
            let r = &vmr.ibv_mr;
            assert_eq!(
                (r.handle, r.lkey, r.rkey, r.length),
                (0x99, 0xa, 0xb, 0xc000)
            );
            assert_eq!((r.context, r.pd), (f.ctx(), &mut pd as *mut ibv_pd));
            assert!(r.addr.is_null());
            assert_eq!(vmr.mr_type, IBV_MR_TYPE_IMPORTED_MR);
            assert_eq!(ibv_cmd_query_mr(&mut pd, &mut vmr, 1), libc::ENOTTY);
        }
    }

    #[test]
    fn reg_dmabuf_mr_attributes_and_result() {
        let f = FakeCtx::new();
        let mut pd = pd(&f, 6);
        let access = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int;
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut vmr = verbs_mr::zeroed();
            let rc = reg_dmabuf_mr(
                &mut pd,
                0x2000,
                0x3000,
                0x7000_0000,
                11,
                access,
                &mut vmr,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_MR, UVERBS_METHOD_REG_DMABUF_MR)
                    );
                    let a = cb.filled();
                    assert_eq!(a.len(), 9);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_REG_DMABUF_MR_HANDLE, 0, M, 0, 0));
                    assert_eq!(
                        (a[1].attr_id, a[1].len),
                        (UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, 4)
                    );
                    assert_eq!(
                        (a[2].attr_id, a[2].len),
                        (UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY, 4)
                    );
                    assert_eq!(
                        key(&a[3]),
                        (UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE, 0, M, 0, 6)
                    );
                    assert_eq!(
                        key(&a[4]),
                        (UVERBS_ATTR_REG_DMABUF_MR_OFFSET, 8, M, 0, 0x2000)
                    );
                    assert_eq!(
                        key(&a[5]),
                        (UVERBS_ATTR_REG_DMABUF_MR_LENGTH, 8, M, 0, 0x3000)
                    );
                    assert_eq!(
                        key(&a[6]),
                        (UVERBS_ATTR_REG_DMABUF_MR_IOVA, 8, M, 0, 0x7000_0000)
                    );
                    assert_eq!(
                        key(&a[7]),
                        (UVERBS_ATTR_REG_DMABUF_MR_FD, 4, M, 0, u32_data(11))
                    );
                    assert_eq!(
                        key(&a[8]),
                        (
                            UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS,
                            4,
                            M,
                            0,
                            u32_data(access as u32)
                        )
                    );
                    *(a[1].data as usize as *mut u32) = 0x10;
                    *(a[2].data as usize as *mut u32) = 0x20;
                    cb.set_data(0, 0x30);
                    0
                }),
            );
            assert_eq!(rc, 0);
            let m = &vmr.ibv_mr;
            assert_eq!(
                (m.handle, m.lkey, m.rkey, m.length),
                (0x30, 0x10, 0x20, 0x3000)
            );
            assert_eq!(
                (m.addr as usize, m.pd, m.context),
                (0x2000, &mut pd as *mut ibv_pd, f.ctx())
            );
            assert_eq!(vmr.mr_type, IBV_MR_TYPE_DMABUF_MR);
            assert_eq!(
                ibv_cmd_reg_dmabuf_mr(&mut pd, 0, 1, 0, 3, 0, &mut vmr),
                libc::ENOTTY
            );
        }
    }
}
