//! Verbs that need hardware or kernel objects a software provider does not
//! have: device memory (DM) and its import, DMA handles, dma-buf backed
//! buffers, completion counters, port speed from the kernel. The
//! IBVERBS_1.15..1.18 calls come from rdma-core releases newer than 44 and
//! exist so programs built against them load.
//!
//! Each fails honestly with EOPNOTSUPP in its own C convention:
//! constructors return NULL with errno, int calls return the positive
//! errno (or -1 with errno where the call returns a descriptor), and the
//! release calls have nothing to release. A NULL, unknown or closed target
//! is EINVAL, so a program learns about its own bug first.

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use verbs_abi::provider::VerbsObject;
use verbs_abi::*;

use crate::device::{context_ops, object_ops};
use crate::util::{int_ret, ptr_ret};
use verbs_rt::export;

type Opaque = *mut c_void;

// The three target checks share one signature so that the stub macro can
// call any of them; only `on_object` reads through its pointer.

/// EINVAL unless `ctx` is an open context.
///
/// # Safety
/// None beyond the shared signature: the pointer is not dereferenced.
unsafe fn on_context(ctx: *mut ibv_context) -> c_int {
    context_ops(ctx).err().unwrap_or(libc::EOPNOTSUPP)
}

/// EINVAL unless `obj` belongs to an open context.
///
/// # Safety
/// `obj` is NULL or a verbs object (which starts with its context).
unsafe fn on_object<T: VerbsObject>(obj: *mut T) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { object_ops(obj) }.err().unwrap_or(libc::EOPNOTSUPP)
}

/// For objects that cannot exist here, whose context pointer therefore
/// cannot be trusted: only NULL is told apart.
///
/// # Safety
/// None beyond the shared signature: the pointer is not dereferenced.
unsafe fn on_handle<T>(p: *mut T) -> c_int {
    if p.is_null() {
        libc::EINVAL
    } else {
        libc::EOPNOTSUPP
    }
}

/// `CONV fn name(CHECK target: T, rest...) -> R;` defines an exported stub
/// that reports `CHECK(target)` in convention CONV (`export!`'s): `ptr`
/// (NULL + errno), `int` (positive errno) or `minus_one` (-1 + errno).
macro_rules! unsupported {
    ($(
        $conv:ident fn $name:ident(
            $check:ident $target:ident: $tty:ty $(, $arg:ident: $ty:ty)* $(,)?
        ) -> $ret:ty;
    )*) => {$(
        /// # Safety
        /// The first argument is NULL or an object of its type; the others
        /// are not dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name($target: $tty $(, $arg: $ty)*) -> $ret {
            export!($conv, untraced, {
                let _ = ($($arg,)*);
                // SAFETY: forwarded contract.
                Err(unsafe { $check($target) })
            })
        }
    )*};
}

unsupported! {
    ptr fn ibv_import_dm(on_context context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm;
    ptr fn ibv_alloc_dmah(on_context context: *mut ibv_context, attr: Opaque) -> Opaque;
    ptr fn ibv_create_comp_cntr(on_context context: *mut ibv_context, cc_attr: Opaque) -> Opaque;
    ptr fn ibv_reg_mr_ex(on_object pd: *mut ibv_pd, mr_init_attr: Opaque) -> *mut ibv_mr;
    ptr fn ibv_reg_buf_mr(
        on_object pd: *mut ibv_pd, buf: Opaque, addr: *mut c_void, length: usize, access: c_int,
    ) -> *mut ibv_mr;
    int fn ibv_dealloc_dmah(on_handle dmah: Opaque) -> c_int;
    int fn ibv_destroy_comp_cntr(on_handle comp_cntr: Opaque) -> c_int;
    int fn ibv_set_comp_cntr(on_handle comp_cntr: Opaque, value: u64) -> c_int;
    int fn ibv_set_err_comp_cntr(on_handle comp_cntr: Opaque, value: u64) -> c_int;
    int fn ibv_inc_comp_cntr(on_handle comp_cntr: Opaque, amount: u64) -> c_int;
    int fn ibv_inc_err_comp_cntr(on_handle comp_cntr: Opaque, amount: u64) -> c_int;
    int fn ibv_read_comp_cntr(on_handle comp_cntr: Opaque, value: *mut u64) -> c_int;
    int fn ibv_read_err_comp_cntr(on_handle comp_cntr: Opaque, value: *mut u64) -> c_int;
    minus_one fn ibv_dm_export_dmabuf_fd(on_handle dm: *mut ibv_dm) -> c_int;
    minus_one fn ibv_export_buf_dmabuf_fd(on_handle buf: Opaque) -> c_int;
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut ibv_dm) {
    export!(raw::void, (), {})
}

/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_buf(_buf: Opaque) {
    export!(raw::void, untraced, {})
}

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port_speed(
    context: *mut ibv_context,
    _port_num: u32,
    port_speed: *mut u64,
) -> c_int {
    export!(raw::value, (context, port_speed), {
        if port_speed.is_null() {
            return int_ret(Err(libc::EINVAL));
        }
        // SAFETY: forwarded contract.
        int_ret(Err(unsafe { on_context(context) }))
    })
}

/// The out handle is cleared so a caller that reads it after the failure
/// sees no buffer.
///
/// # Safety
/// `pd` is NULL or a PD; `buf` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_buf(
    pd: *mut ibv_pd,
    _size: usize,
    buf: *mut Opaque,
) -> *mut c_void {
    export!(raw::ptr, untraced, {
        if !buf.is_null() {
            // SAFETY: the caller's out slot.
            unsafe { *buf = null_mut() };
        }
        // SAFETY: forwarded contract.
        ptr_ret(Err(unsafe { on_object(pd) }))
    })
}

/// # Safety
/// `context` is NULL or an open context; `caps` NULL or `caps_size`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_comp_cntr_caps(
    context: *mut ibv_context,
    caps: Opaque,
    caps_size: usize,
) -> c_int {
    export!(raw::value, (context, caps_size), {
        if !caps.is_null() {
            // SAFETY: the caller's buffer of caps_size bytes; zeroed as the C
            // call does before asking the provider.
            unsafe { core::ptr::write_bytes(caps.cast::<u8>(), 0, caps_size) };
        }
        // SAFETY: forwarded contract.
        int_ret(Err(unsafe { on_context(context) }))
    })
}

/// # Safety
/// `qp` is NULL or a QP.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_attach_comp_cntr(
    qp: *mut ibv_qp,
    comp_cntr: Opaque,
    _attr: Opaque,
) -> c_int {
    export!(raw::value, (qp), {
        if comp_cntr.is_null() {
            return int_ret(Err(libc::EINVAL));
        }
        // SAFETY: forwarded contract.
        int_ret(Err(unsafe { on_object(qp) }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::errno;

    #[test]
    fn each_convention_reports_its_way() {
        let mut handle = 0u64;
        let h: Opaque = (&mut handle as *mut u64).cast();
        // SAFETY: NULL and unknown targets are checked before any use; the
        // handle stubs never dereference their argument.
        unsafe {
            assert!(ibv_import_dm(null_mut(), 1).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert!(ibv_reg_mr_ex(null_mut(), null_mut()).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(ibv_destroy_comp_cntr(null_mut()), libc::EINVAL);
            assert_eq!(ibv_inc_comp_cntr(h, 1), libc::EOPNOTSUPP);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(ibv_export_buf_dmabuf_fd(h), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(ibv_dm_export_dmabuf_fd(null_mut()), -1);
            assert_eq!(errno(), libc::EINVAL);
        }
    }
}
