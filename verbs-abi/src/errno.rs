//! The calling thread's `errno`, which every C entry point reports
//! failures through (constructors return NULL, librdmacm returns -1).
//! One copy for libibverbs, librdmacm and the providers.

use core::ffi::c_int;

/// Sets the calling thread's `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// A constructor's C result: the object, or NULL with `errno` set.
pub fn ptr_or_errno<T>(r: Result<*mut T, c_int>) -> *mut T {
    r.unwrap_or_else(|e| {
        set_errno(e);
        core::ptr::null_mut()
    })
}

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        set_errno(libc::EBUSY);
        assert_eq!(errno(), libc::EBUSY);
        set_errno(0);
        assert_eq!(errno(), 0);
        let p: *mut u8 = ptr_or_errno(Err(libc::ENOMEM));
        assert!(p.is_null());
        assert_eq!(errno(), libc::ENOMEM);
    }
}
