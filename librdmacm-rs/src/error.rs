//! errno plumbing: librdmacm reports failure as -1 with `errno` set.

use core::ffi::c_int;

/// Internal results carry a positive errno value.
pub type Res<T> = Result<T, i32>;

pub use verbs_abi::errno::{errno, set_errno};

/// The body of an exported call: `entry!(c, { ... })` runs a block
/// returning `Res<()>` (`?` works in it) and gives librdmacm's C
/// convention, 0 or -1 with errno. Nothing unwinds out of it: the library
/// is built with `panic = "abort"`. The debug toolkit's tracer hooks in
/// here.
macro_rules! entry {
    (c, $body:block) => {
        $crate::error::to_c((|| $body)())
    };
}
pub(crate) use entry;

/// The C convention of librdmacm: 0, or -1 with errno.
pub fn to_c(r: Res<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Turns a libc return value (-1 on failure) into a `Res`.
pub fn check(ret: c_int) -> Res<c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// `RDMACM_RS_DEBUG=1` traces the CM's decisions on stderr.
pub static DEBUG: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("RDMACM_RS_DEBUG").is_some_and(|v| v != "0"));

macro_rules! trace {
    ($($arg:tt)*) => {
        if *$crate::error::DEBUG {
            eprintln!("rdmacm[{}]: {}", std::process::id(), format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;
