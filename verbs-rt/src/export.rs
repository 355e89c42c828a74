//! The one way a C function is exported: `export!`, the whole body of
//! every `#[no_mangle]` function of libibverbs and librdmacm.
//!
//! ```ignore
//! #[no_mangle]
//! pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
//!     export!(ptr, (context), { ... Ok(pd) })
//! }
//! ```
//!
//! `export!(CONV, TRACE, BODY)`:
//!
//! * CONV, the C convention. `int`, `ptr` or `minus_one`: BODY is a
//!   `Result<_, c_int>` (so `?` works in it) turned into 0 or a positive
//!   errno (also stored in errno), the pointer or NULL with errno set, 0 or
//!   -1 with errno. `raw::int`, `raw::ptr`, `raw::minus_one`, `raw::ssize`,
//!   `raw::value`, `raw::void`: BODY is already the C result (a provider's,
//!   passed through, or a value that is not an error indication), as in
//!   [`crate::trace::CRet`].
//! * TRACE: `(arg, ...)`, the call's arguments (plain identifiers: pointers
//!   and integers), for a traced call: the logger is installed
//!   ([`crate::logging::init`]) and the tracer ([`crate::trace`]) records
//!   the function's name, the arguments, the result and errno; off, one
//!   predictable branch. `untraced` for the calls that are not recorded
//!   (rdma-core's provider interface `ibv_cmd_*`, string tables, calls that
//!   record themselves through a helper): nothing but BODY and the guard.
//! * BODY: a block or expression; `return` in it returns from the call.
//!
//! Nothing unwinds into C: BODY runs under `catch_unwind`, and a panic
//! that gets there returns the convention's error with errno `EIO` (`int`:
//! `EIO`; `ptr`: NULL; `minus_one`, `ssize`: -1; `value`: 0 or NULL;
//! `void`: nothing). The libraries are built with `panic = "abort"`, where
//! a panic aborts the process before that and the guard costs nothing; it
//! matters in builds that unwind (the crates' own tests).
use core::ffi::c_int;

use crate::errno::set_errno;

/// What a call returns when its body panicked in a build that unwinds
/// (see the module text).
#[doc(hidden)]
pub mod on_panic {
    use super::*;

    pub fn result<T>() -> Result<T, c_int> {
        Err(libc::EIO)
    }
    pub fn int() -> c_int {
        set_errno(libc::EIO);
        libc::EIO
    }
    pub fn minus_one<T: MinusOne>() -> T {
        set_errno(libc::EIO);
        T::minus_one()
    }
    pub fn ptr<T: Zero>() -> T {
        set_errno(libc::EIO);
        T::zero()
    }
    pub fn value<T: Zero>() -> T {
        T::zero()
    }
    pub fn void() {}

    /// -1, as the C type holds it (`(size_t)-1` for an unsigned one).
    pub trait MinusOne {
        fn minus_one() -> Self;
    }
    macro_rules! minus_one {
        ($($t:ty: $v:expr),*) => {$(
            impl MinusOne for $t {
                fn minus_one() -> Self {
                    $v
                }
            }
        )*};
    }
    minus_one!(i32: -1, i64: -1, isize: -1, u64: u64::MAX, usize: usize::MAX);

    /// 0 or NULL.
    pub trait Zero {
        fn zero() -> Self;
    }
    impl<T> Zero for *mut T {
        fn zero() -> Self {
            core::ptr::null_mut()
        }
    }
    impl<T> Zero for *const T {
        fn zero() -> Self {
            core::ptr::null()
        }
    }
    macro_rules! zero_int {
        ($($t:ty),*) => {$(
            impl Zero for $t {
                fn zero() -> Self {
                    0
                }
            }
        )*};
    }
    zero_int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
}

/// Runs an exported call's body; a panic becomes `fallback()` (see the
/// module text). Inlined: under `panic = "abort"` it is the body alone.
#[doc(hidden)]
#[inline(always)]
pub fn guard<R>(body: impl FnOnce() -> R, fallback: fn() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|_| fallback())
}

/// The body of every exported C function; see the [module](self) text.
#[macro_export]
macro_rules! export {
    // A Result body, traced.
    ($conv:ident, ($($arg:ident),* $(,)?), $body:expr) => {{
        $crate::logging::init();
        let r = $crate::export::guard(
            // The closure is what lets `?` and `return` leave the body.
            || $body,
            $crate::export::on_panic::result,
        );
        if $crate::trace::on() {
            fn __entry() {}
            $crate::trace::verb(
                ::core::any::type_name_of_val(&__entry),
                stringify!($conv),
                &[$((stringify!($arg), $crate::trace::Val::from($arg))),*],
                &r,
            );
        }
        $crate::export!(@ret $conv, r)
    }};
    // A Result body, untraced.
    ($conv:ident, untraced, $body:expr) => {{
        let r = $crate::export::guard(|| $body, $crate::export::on_panic::result);
        $crate::export!(@ret $conv, r)
    }};
    // A body that returns the C result, traced.
    (raw::$conv:ident, ($($arg:ident),* $(,)?), $body:expr) => {{
        $crate::logging::init();
        let r = $crate::export::guard(|| $body, $crate::export!(@panic $conv));
        if $crate::trace::on() {
            fn __entry() {}
            $crate::trace::verb_c(
                ::core::any::type_name_of_val(&__entry),
                &[$((stringify!($arg), $crate::trace::Val::from($arg))),*],
                $crate::export!(@c $conv, r),
            );
        }
        r
    }};
    // A body that returns the C result, untraced.
    (raw::$conv:ident, untraced, $body:expr) => {
        $crate::export::guard(|| $body, $crate::export!(@panic $conv))
    };
    (@ret int, $r:ident) => { $crate::errno::int_or_errno($r) };
    (@ret ptr, $r:ident) => { $crate::errno::ptr_or_errno($r) };
    (@ret minus_one, $r:ident) => { $crate::errno::minus_one_or_errno($r) };
    (@panic int) => { $crate::export::on_panic::int };
    (@panic ptr) => { $crate::export::on_panic::ptr };
    (@panic minus_one) => { $crate::export::on_panic::minus_one };
    (@panic ssize) => { $crate::export::on_panic::minus_one };
    (@panic value) => { $crate::export::on_panic::value };
    (@panic void) => { $crate::export::on_panic::void };
    (@c int, $r:ident) => { $crate::trace::CRet::Int($r) };
    (@c ptr, $r:ident) => { $crate::trace::CRet::Ptr($r as usize) };
    (@c minus_one, $r:ident) => { $crate::trace::CRet::MinusOne($r) };
    (@c ssize, $r:ident) => { $crate::trace::CRet::SSize($r as i64) };
    (@c value, $r:ident) => { $crate::trace::CRet::Value($r as i64) };
    (@c void, $r:ident) => {{ let () = $r; $crate::trace::CRet::Void }};
}

#[cfg(test)]
mod tests {
    use crate::errno::errno;

    #[test]
    fn conventions() {
        assert_eq!(crate::export!(int, (), { Ok(()) }), 0);
        assert_eq!(crate::export!(minus_one, (), { Err(libc::EBUSY) }), -1);
        assert_eq!(errno(), libc::EBUSY);
        let p: *mut u8 = crate::export!(ptr, untraced, { Err(libc::ENOMEM) });
        assert!(p.is_null());
        assert_eq!(errno(), libc::ENOMEM);
        assert_eq!(crate::export!(raw::value, untraced, 7), 7);
    }

    #[test]
    fn a_panic_is_the_conventions_error() {
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let boom = || -> bool { panic!("boom") };
        assert_eq!(
            crate::export!(int, (), {
                if boom() {
                    return Ok(());
                }
                Ok(())
            }),
            libc::EIO
        );
        assert_eq!(errno(), libc::EIO);
        let r: isize = crate::export!(raw::ssize, untraced, {
            if boom() {
                return 1;
            }
            0
        });
        assert_eq!(r, -1);
        let p: *const u8 = crate::export!(raw::ptr, untraced, {
            if boom() {
                return core::ptr::null();
            }
            core::ptr::null()
        });
        assert!(p.is_null());
        crate::export!(raw::void, untraced, {
            boom();
        });
        std::panic::set_hook(quiet);
    }
}
