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

/// An int verb's C result: 0, or a positive errno (also stored in `errno`,
/// so `perror` after a failed call says something true).
pub fn int_or_errno(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

/// The 0 / -1-with-errno convention (librdmacm, a few verbs).
pub fn minus_one_or_errno(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The body of an exported call, in one shape for every library. The body
/// is a block returning a `Result` (so `?` works in it); the first word
/// picks the C convention: `int` (0 or a positive errno, also stored in
/// errno), `ptr` (the pointer, or NULL with errno set), `minus_one` (0, or
/// -1 with errno). An optional parenthesised list of the call's arguments
/// (plain identifiers: pointers and integers) goes to the tracer
/// ([`crate::trace`]), which also records the function's name, the result
/// and errno; off, the tracer costs one predictable branch here. Nothing
/// unwinds out of it: the libraries are built with `panic = "abort"`.
#[macro_export]
macro_rules! entry {
    ($conv:ident, $body:block) => {
        $crate::entry!($conv, (), $body)
    };
    ($conv:ident, ($($arg:ident),* $(,)?), $body:block) => {{
        $crate::logging::init();
        // The closure is what lets `?` in the body return early.
        #[allow(clippy::redundant_closure_call)]
        let r = (|| $body)();
        if $crate::trace::on() {
            fn __entry() {}
            $crate::trace::verb(
                ::core::any::type_name_of_val(&__entry),
                stringify!($conv),
                &[$((stringify!($arg), $crate::trace::Val::from($arg))),*],
                &r,
            );
        }
        $crate::entry!(@ret $conv, r)
    }};
    (@ret int, $r:ident) => { $crate::errno::int_or_errno($r) };
    (@ret ptr, $r:ident) => { $crate::errno::ptr_or_errno($r) };
    (@ret minus_one, $r:ident) => { $crate::errno::minus_one_or_errno($r) };
}

/// Traces an exported call whose body already returns its C result
/// (`$conv`: `int`, `ptr`, `minus_one`, `ssize`, `value` or `void`, as in
/// [`crate::trace::CRet`]), with its arguments; off, one predictable
/// branch. For calls that predate `entry!` or pass a provider's result
/// through unchanged.
#[macro_export]
macro_rules! traced {
    ($conv:ident, ($($arg:ident),* $(,)?), $body:expr) => {{
        $crate::logging::init();
        let r = $body;
        if $crate::trace::on() {
            fn __entry() {}
            $crate::trace::verb_c(
                ::core::any::type_name_of_val(&__entry),
                &[$((stringify!($arg), $crate::trace::Val::from($arg))),*],
                $crate::traced!(@ret $conv, r),
            );
        }
        r
    }};
    (@ret int, $r:ident) => { $crate::trace::CRet::Int($r) };
    (@ret ptr, $r:ident) => { $crate::trace::CRet::Ptr($r as usize) };
    (@ret minus_one, $r:ident) => { $crate::trace::CRet::MinusOne($r) };
    (@ret ssize, $r:ident) => { $crate::trace::CRet::SSize($r as i64) };
    (@ret value, $r:ident) => { $crate::trace::CRet::Value($r as i64) };
    (@ret void, $r:ident) => {{ let () = $r; $crate::trace::CRet::Void }};
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
        assert_eq!(int_or_errno(Err(libc::EINVAL)), libc::EINVAL);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(minus_one_or_errno(Err(libc::EAGAIN)), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(crate::entry!(int, { Ok(()) }), 0);
        assert_eq!(crate::entry!(minus_one, { Err(libc::EBUSY) }), -1);
        assert_eq!(errno(), libc::EBUSY);
    }
}
