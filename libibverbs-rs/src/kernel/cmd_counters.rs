//! Counters objects (rdma-core's cmd_counters.c): create, destroy, read.
//! Only the ioctl interface has them; the provider's driver attributes
//! come linked (`link`).

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_buffer::CmdBuf;
use super::cmd_issue::{array_len, destroy_err, Issue, Kernel};
use verbs_rt::export;

/// # Safety
/// `ctx` a kernel context; `init_attr` readable; `vcounters` the
/// provider's new object; `link` NULL or its command buffers.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_counters(
    ctx: *mut ibv_context,
    init_attr: *mut ibv_counters_init_attr,
    vcounters: *mut verbs_counters,
    link: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { create_counters(ctx, init_attr, vcounters, link, &mut Kernel) }
    })
}

pub(crate) unsafe fn create_counters(
    ctx: *mut ibv_context,
    init_attr: *mut ibv_counters_init_attr,
    vcounters: *mut verbs_counters,
    link: *mut ibv_command_buffer,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_create_counters`.
    unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_COUNTERS,
            UVERBS_METHOD_COUNTERS_CREATE,
            1,
            link,
        );
        let handle = cb.out_obj(UVERBS_ATTR_CREATE_COUNTERS_HANDLE);
        // No creation attribute is defined yet.
        if (*init_attr).comp_mask != 0 {
            return libc::EOPNOTSUPP;
        }
        let rc = k.ioctl(ctx, &mut cb);
        if rc != 0 {
            return rc;
        }
        (*vcounters).counters.context = ctx;
        (*vcounters).handle = cb.read_obj(handle);
    }
    0
}

/// # Safety
/// `vcounters` is a live counters object of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_counters(vcounters: *mut verbs_counters) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { destroy_counters(vcounters, &mut Kernel) }
    })
}

pub(crate) unsafe fn destroy_counters(vcounters: *mut verbs_counters, k: &mut impl Issue) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_destroy_counters`.
    let mut rc = unsafe {
        let mut cb = CmdBuf::new(
            UVERBS_OBJECT_COUNTERS,
            UVERBS_METHOD_COUNTERS_DESTROY,
            1,
            core::ptr::null_mut(),
        );
        cb.in_obj(UVERBS_ATTR_DESTROY_COUNTERS_HANDLE, (*vcounters).handle);
        k.ioctl((*vcounters).counters.context, &mut cb)
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

/// # Safety
/// `vcounters` a live counters object of a kernel context;
/// `counters_value` room for `ncounters` values; `link` NULL or the
/// provider's command buffers.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_read_counters(
    vcounters: *mut verbs_counters,
    counters_value: *mut u64,
    ncounters: u32,
    flags: u32,
    link: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe {
            read_counters(
                vcounters,
                counters_value,
                ncounters,
                flags,
                link,
                &mut Kernel,
            )
        }
    })
}

pub(crate) unsafe fn read_counters(
    vcounters: *mut verbs_counters,
    counters_value: *mut u64,
    ncounters: u32,
    flags: u32,
    link: *mut ibv_command_buffer,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_read_counters`.
    unsafe {
        let mut cb = CmdBuf::new(UVERBS_OBJECT_COUNTERS, UVERBS_METHOD_COUNTERS_READ, 3, link);
        cb.in_obj(UVERBS_ATTR_READ_COUNTERS_HANDLE, (*vcounters).handle);
        cb.out(
            UVERBS_ATTR_READ_COUNTERS_BUFF,
            counters_value.cast(),
            array_len(size_of::<u64>(), ncounters as usize),
        );
        cb.in_u32(UVERBS_ATTR_READ_COUNTERS_FLAGS, flags);
        k.ioctl((*vcounters).counters.context, &mut cb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_buffer::key;
    use crate::kernel::cmd_issue::testing::{FakeCtx, IoctlFake};
    use crate::kernel::ioctl::UVERBS_ATTR_F_MANDATORY as M;

    #[test]
    fn create_counters_checks_mask_chains_and_reads_handle() {
        let f = FakeCtx::new();
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut link = CmdBuf::new(
                UVERBS_OBJECT_COUNTERS,
                UVERBS_METHOD_COUNTERS_CREATE,
                1,
                core::ptr::null_mut(),
            );
            link.in_u64(0x1000, 0xabc);
            let lp = link.cmdb();
            let mut vc = verbs_counters::zeroed();
            let mut ia = ibv_counters_init_attr { comp_mask: 1 };
            let mut calls = 0;
            let rc = create_counters(
                f.ctx(),
                &mut ia,
                &mut vc,
                lp,
                &mut IoctlFake(|_, _: &mut CmdBuf| {
                    calls += 1;
                    0
                }),
            );
            assert_eq!((rc, calls), (libc::EOPNOTSUPP, 0));

            ia.comp_mask = 0;
            let rc = create_counters(
                f.ctx(),
                &mut ia,
                &mut vc,
                lp,
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_COUNTERS, UVERBS_METHOD_COUNTERS_CREATE)
                    );
                    assert_eq!((*cb.cmdb()).next, lp);
                    let a = cb.filled();
                    assert_eq!(a.len(), 1);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_CREATE_COUNTERS_HANDLE, 0, M, 0, 0));
                    cb.set_data(0, 21);
                    0
                }),
            );
            assert_eq!(rc, 0);
            assert_eq!((vc.handle, vc.counters.context), (21, f.ctx()));
            // Through the pipe: the linked attribute travelled, ENOTTY back.
            let mut got = Vec::new();
            let rc = create_counters(
                f.ctx(),
                &mut ia,
                &mut vc,
                lp,
                &mut IoctlFake(|ctx, cb: &mut CmdBuf| {
                    let rc = cb.execute(ctx);
                    let n = cb.hdr().num_attrs as usize;
                    got = cb.array(n);
                    rc
                }),
            );
            assert_eq!(rc, libc::ENOTTY);
            assert_eq!(got.len(), 2);
            assert_eq!(key(&got[1]), key(&link.filled()[0]));
        }
    }

    #[test]
    fn destroy_and_read_counters() {
        let f = FakeCtx::new();
        // SAFETY: every object outlives the calls.
        unsafe {
            let mut vc = verbs_counters::zeroed();
            vc.handle = 8;
            vc.counters.context = f.ctx();
            let rc = destroy_counters(
                &mut vc,
                &mut IoctlFake(|ctx, cb: &mut CmdBuf| {
                    assert_eq!(ctx, f.ctx());
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_COUNTERS, UVERBS_METHOD_COUNTERS_DESTROY)
                    );
                    let a = cb.filled();
                    assert_eq!(a.len(), 1);
                    assert_eq!(
                        key(&a[0]),
                        (UVERBS_ATTR_DESTROY_COUNTERS_HANDLE, 0, M, 0, 8)
                    );
                    0
                }),
            );
            assert_eq!(rc, 0);
            assert_eq!(ibv_cmd_destroy_counters(&mut vc), libc::ENOTTY);

            let mut vals = [0u64; 3];
            let vp = vals.as_mut_ptr();
            let rc = read_counters(
                &mut vc,
                vp,
                3,
                IB_UVERBS_READ_COUNTERS_PREFER_CACHED,
                core::ptr::null_mut(),
                &mut IoctlFake(|_, cb: &mut CmdBuf| {
                    let h = cb.hdr();
                    assert_eq!(
                        (h.object_id, h.method_id),
                        (UVERBS_OBJECT_COUNTERS, UVERBS_METHOD_COUNTERS_READ)
                    );
                    let a = cb.filled();
                    assert_eq!(a.len(), 3);
                    assert_eq!(key(&a[0]), (UVERBS_ATTR_READ_COUNTERS_HANDLE, 0, M, 0, 8));
                    assert_eq!(
                        key(&a[1]),
                        (UVERBS_ATTR_READ_COUNTERS_BUFF, 24, M, 0, vp as u64)
                    );
                    assert_eq!(
                        (a[2].attr_id, a[2].len),
                        (UVERBS_ATTR_READ_COUNTERS_FLAGS, 4)
                    );
                    assert_eq!(a[2].data as u32, IB_UVERBS_READ_COUNTERS_PREFER_CACHED);
                    *vp.add(2) = 99;
                    0
                }),
            );
            assert_eq!((rc, vals[2]), (0, 99));
            // More counters than an attribute can describe: refused whole.
            let rc = read_counters(
                &mut vc,
                vp,
                1 << 14,
                0,
                core::ptr::null_mut(),
                &mut crate::kernel::cmd_issue::Kernel,
            );
            assert_eq!(rc, libc::EINVAL);
            assert_eq!(
                ibv_cmd_read_counters(&mut vc, vp, 3, 0, core::ptr::null_mut()),
                libc::ENOTTY
            );
        }
    }
}
