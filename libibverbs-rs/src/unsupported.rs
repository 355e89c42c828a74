//! Verbs that need hardware or kernel objects a software provider does not
//! have: device memory (DM) and its import, DMA handles, dma-buf backed
//! buffers, completion counters, port speed from the kernel. The
//! IBVERBS_1.15..1.18 calls come from rdma-core releases newer than 44 and
//! exist so programs built against them load.
//!
//! Each fails honestly with EOPNOTSUPP in its own C convention:
//! constructors return NULL with errno, int calls return the positive
//! errno (or -1 with errno where the call returns a descriptor), and the
//! release calls have nothing to release. A NULL object is EINVAL.

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use verbs_abi::*;

use crate::device::{context_ops, object_ops};
use crate::util::{int_ret, ptr_ret, set_errno};

type Opaque = *mut c_void;

/// EINVAL for NULL / foreign contexts, EOPNOTSUPP otherwise.
///
/// # Safety
/// `ctx` is NULL or an open context.
unsafe fn ctx_unsupported(ctx: *mut ibv_context) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { context_ops(ctx) } {
        Ok(_) => libc::EOPNOTSUPP,
        Err(e) => e,
    }
}

/// As `ctx_unsupported` for an object that starts with its context.
///
/// # Safety
/// `obj` is NULL or a verbs object.
unsafe fn obj_unsupported<T>(obj: *mut T) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { object_ops(obj) } {
        Ok(_) => libc::EOPNOTSUPP,
        Err(e) => e,
    }
}

/// EINVAL for NULL, else EOPNOTSUPP: for objects that cannot exist here,
/// whose context pointer we therefore cannot trust.
fn null_or_unsupported<T>(p: *mut T) -> c_int {
    if p.is_null() {
        libc::EINVAL
    } else {
        libc::EOPNOTSUPP
    }
}

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(context: *mut ibv_context, _dm_handle: u32) -> *mut ibv_dm {
    // SAFETY: forwarded contract.
    ptr_ret(Err(unsafe { ctx_unsupported(context) }))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut ibv_dm) {}

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_dmah(context: *mut ibv_context, _attr: Opaque) -> Opaque {
    // SAFETY: forwarded contract.
    ptr_ret(Err(unsafe { ctx_unsupported(context) }))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_dmah(dmah: Opaque) -> c_int {
    int_ret(Err(null_or_unsupported(dmah)))
}

/// # Safety
/// `pd` is NULL or a PD.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_ex(pd: *mut ibv_pd, _mr_init_attr: Opaque) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    ptr_ret(Err(unsafe { obj_unsupported(pd) }))
}

/// Returns a descriptor, so failure is -1 with errno.
///
/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_dm_export_dmabuf_fd(dm: *mut ibv_dm) -> c_int {
    set_errno(null_or_unsupported(dm));
    -1
}

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port_speed(
    context: *mut ibv_context,
    _port_num: u32,
    port_speed: *mut u64,
) -> c_int {
    if port_speed.is_null() {
        return int_ret(Err(libc::EINVAL));
    }
    // SAFETY: forwarded contract.
    int_ret(Err(unsafe { ctx_unsupported(context) }))
}

/// # Safety
/// `pd` is NULL or a PD; `buf` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_buf(
    pd: *mut ibv_pd,
    _size: usize,
    buf: *mut Opaque,
) -> *mut c_void {
    if !buf.is_null() {
        // SAFETY: the caller's out slot.
        unsafe { *buf = null_mut() };
    }
    // SAFETY: forwarded contract.
    ptr_ret(Err(unsafe { obj_unsupported(pd) }))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_buf(_buf: Opaque) {}

/// # Safety
/// `pd` is NULL or a PD.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_buf_mr(
    pd: *mut ibv_pd,
    _buf: Opaque,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    ptr_ret(Err(unsafe { obj_unsupported(pd) }))
}

/// Returns a descriptor, so failure is -1 with errno.
///
/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_export_buf_dmabuf_fd(buf: Opaque) -> c_int {
    set_errno(null_or_unsupported(buf));
    -1
}

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_comp_cntr_caps(
    context: *mut ibv_context,
    caps: Opaque,
    caps_size: usize,
) -> c_int {
    if !caps.is_null() {
        // SAFETY: the caller's buffer of caps_size bytes; zeroed as the C
        // call does before asking the provider.
        unsafe { core::ptr::write_bytes(caps.cast::<u8>(), 0, caps_size) };
    }
    // SAFETY: forwarded contract.
    int_ret(Err(unsafe { ctx_unsupported(context) }))
}

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_cntr(
    context: *mut ibv_context,
    _cc_attr: Opaque,
) -> Opaque {
    // SAFETY: forwarded contract.
    ptr_ret(Err(unsafe { ctx_unsupported(context) }))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_cntr(comp_cntr: Opaque) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_set_comp_cntr(comp_cntr: Opaque, _value: u64) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_set_err_comp_cntr(comp_cntr: Opaque, _value: u64) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_inc_comp_cntr(comp_cntr: Opaque, _amount: u64) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_inc_err_comp_cntr(comp_cntr: Opaque, _amount: u64) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_comp_cntr(comp_cntr: Opaque, _value: *mut u64) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_err_comp_cntr(comp_cntr: Opaque, _value: *mut u64) -> c_int {
    int_ret(Err(null_or_unsupported(comp_cntr)))
}

/// # Safety
/// `qp` is NULL or a QP.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_attach_comp_cntr(
    qp: *mut ibv_qp,
    comp_cntr: Opaque,
    _attr: Opaque,
) -> c_int {
    if comp_cntr.is_null() {
        return int_ret(Err(libc::EINVAL));
    }
    // SAFETY: forwarded contract.
    int_ret(Err(unsafe { obj_unsupported(qp) }))
}
