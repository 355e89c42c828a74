//! Memory regions.
//!
//! As in rdma-core the library, not the provider, records `context`, `pd`,
//! `addr` and `length` in the returned `ibv_mr`. There is no fork
//! bookkeeping to do (see fork.rs). dma-buf registration needs a kernel
//! exporter and importer, which software providers cannot be.

use core::ffi::{c_int, c_uint, c_void};

use verbs_abi::*;

use crate::device::{object_ops, release};
use crate::util::{ptr_ret, set_errno};
use verbs_rt::export;

/// # Safety
/// `pd` is NULL or a PD; `addr..addr+length` is the caller's memory.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    export!(ptr, (pd, addr, length, iova, access), {
        // SAFETY: forwarded contract.
        let (ops, ctx) = unsafe { object_ops(pd) }?;
        let reg = ops.reg_mr.ok_or(libc::EOPNOTSUPP)?;
        // Optional access bits are hints a device may ignore; rdma-core
        // drops them when the kernel does not advertise support, and we
        // never do.
        let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
        // SAFETY: the provider's own PD; memory validity is the caller's.
        let mr = unsafe { reg(pd, addr, length, iova, access) };
        if !mr.is_null() {
            // SAFETY: an MR the provider just returned.
            unsafe {
                (*mr).context = ctx;
                (*mr).pd = pd;
                (*mr).addr = addr;
                (*mr).length = length;
            }
            if verbs_rt::check::on() {
                crate::check::mr_registered();
            }
        }
        Ok(mr)
    })
}

/// # Safety
/// As for `ibv_reg_mr_iova2`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    export!(raw::ptr, (pd, addr, length, access), {
        // SAFETY: forwarded contract; the access bits are reinterpreted as C does.
        unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
    })
}

/// # Safety
/// As for `ibv_reg_mr_iova2`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    export!(raw::ptr, (pd, addr, length, iova, access), {
        // SAFETY: forwarded contract.
        unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
    })
}

/// # Safety
/// Not dereferenced beyond the PD check.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    export!(raw::ptr, (pd), {
        // SAFETY: forwarded contract.
        ptr_ret(unsafe { object_ops(pd) }.and(Err(libc::EOPNOTSUPP)))
    })
}

/// Returns 0 or one of the negative `IBV_REREG_MR_ERR_*` codes with errno
/// set, as rdma-core.
///
/// # Safety
/// `mr` is NULL or an MR; `pd` NULL or a PD; `addr..addr+length` is the
/// caller's memory.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    export!(raw::value, (mr, flags, pd, addr, length, access), {
        let input_error = |e| {
            set_errno(e);
            IBV_REREG_MR_ERR_INPUT
        };
        // SAFETY: forwarded contract.
        let ops = match unsafe { object_ops(mr) } {
            Ok((ops, _)) => ops,
            Err(e) => return input_error(e),
        };
        let flags_u = flags as c_uint;
        if flags_u & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (flags_u & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (addr.is_null() || length == 0))
            || (access != 0 && flags_u & IBV_REREG_MR_CHANGE_ACCESS == 0)
            || (flags_u & IBV_REREG_MR_CHANGE_PD != 0 && pd.is_null())
        {
            return input_error(libc::EINVAL);
        }
        let Some(rereg) = ops.rereg_mr else {
            set_errno(libc::EOPNOTSUPP);
            return IBV_REREG_MR_ERR_CMD;
        };
        // SAFETY: the provider's own MR; arguments validated above.
        match unsafe { rereg(mr, flags, pd, addr, length, access) } {
            0 => {
                // SAFETY: mr is live (the provider just changed it).
                unsafe {
                    if flags_u & IBV_REREG_MR_CHANGE_PD != 0 {
                        (*mr).pd = pd;
                    }
                    if flags_u & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
                        (*mr).addr = addr;
                        (*mr).length = length;
                    }
                }
                0
            }
            e => {
                set_errno(e);
                IBV_REREG_MR_ERR_CMD
            }
        }
    })
}

/// # Safety
/// `mr` is NULL or an MR.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        let rc = unsafe { release(mr, |ops| ops.dereg_mr) };
        if rc == 0 && verbs_rt::check::on() {
            crate::check::mr_deregistered();
        }
        rc
    })
}

/// MRs have no kernel handle to import (see `ibv_import_pd`).
///
/// # Safety
/// `pd` is NULL or a PD.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, _mr_handle: u32) -> *mut ibv_mr {
    export!(raw::ptr, (pd), {
        // SAFETY: forwarded contract.
        ptr_ret(unsafe { object_ops(pd) }.and(Err(libc::EOPNOTSUPP)))
    })
}

/// Nothing can have been imported.
///
/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {
    export!(raw::void, (), {})
}
