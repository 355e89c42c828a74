//! Protection domains, XRC domains, memory regions and windows. (rdma-core's `ibv_cmd_*` helpers; see `cmd`.)

use core::ffi::{c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};

use verbs_abi::driver::*;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd::{payload, Ptr};
use super::cmd_issue::{destroy_err, req_buf, HDR};
use super::write::{legacy_with_resp, ptr_u64, run};
use verbs_rt::export;

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
    export!(raw::int, untraced, {
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
    })
}

/// # Safety
/// `pd` is a live PD of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    export!(raw::int, untraced, {
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
    })
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
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let a = &*attr;
            if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
                return libc::EOPNOTSUPP;
            }
            if a.comp_mask & IBV_XRCD_INIT_ATTR_FD == 0
                || a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS == 0
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
    })
}

/// # Safety
/// `xrcd` is a live XRCD of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_close_xrcd(xrcd: *mut verbs_xrcd) -> c_int {
    export!(raw::int, untraced, {
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
    })
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
    export!(raw::int, untraced, {
        // SAFETY: per the contract.
        unsafe {
            let buf = req_buf(cmd, cmd_size, HDR + size_of::<ib_uverbs_reg_mr>());
            let (cmd, cmd_size) = (buf.ptr, buf.size);
            let p = payload::<ib_uverbs_reg_mr>(cmd);
            p.start = ptr_u64(addr);
            p.length = length as u64;
            if access as c_uint & IBV_ACCESS_ON_DEMAND != 0 {
                if length == usize::MAX && !addr.is_null() {
                    verbs_rt::errno::set_errno(libc::EINVAL);
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
    })
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
    export!(raw::int, untraced, {
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
    })
}

/// # Safety
/// `vmr` is a live MR of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int {
    export!(raw::int, untraced, {
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
    })
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
    export!(raw::int, untraced, {
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
    })
}

/// # Safety
/// `mw` is a live MW of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    export!(raw::int, untraced, {
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
    })
}
