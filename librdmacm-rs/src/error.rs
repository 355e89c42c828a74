//! errno plumbing: librdmacm reports failure as -1 with `errno` set.

use core::ffi::c_int;

/// Internal results carry a positive errno value.
pub type Res<T> = Result<T, i32>;

pub use verbs_rt::errno::{errno, set_errno};

/// The C convention of librdmacm: 0, or -1 with errno.
pub use verbs_rt::errno::minus_one_or_errno as to_c;

/// Turns a libc return value (-1 on failure) into a `Res`.
pub fn check(ret: c_int) -> Res<c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// The CM's decisions, logged at debug level: shown with
/// `VERBS_LOG_LEVEL=4`, or `RDMACM_RS_DEBUG=1` which raises librdmacm's
/// level to debug (`verbs_rt::logging`).
macro_rules! trace {
    ($($arg:tt)*) => {
        ::log::debug!($($arg)*)
    };
}
pub(crate) use trace;
