//! Small helpers shared by the verbs: errno, warnings, environment.

use core::ffi::c_int;
use std::ffi::OsString;

use std::sync::LazyLock;

#[cfg(test)]
pub(crate) use verbs_abi::errno::errno;
pub(crate) use verbs_abi::errno::set_errno;

/// True when the process is not running set-uid/set-gid: only then may the
/// environment redirect what we load or read (as rdma-core does).
pub(crate) fn env_trusted() -> bool {
    // SAFETY: the id getters have no preconditions.
    unsafe { libc::getuid() == libc::geteuid() && libc::getgid() == libc::getegid() }
}

/// An environment variable the caller may use to change what we load.
pub(crate) fn trusted_env(name: &str) -> Option<OsString> {
    if env_trusted() {
        std::env::var_os(name)
    } else {
        None
    }
}

static SHOW_WARNINGS: LazyLock<bool> =
    LazyLock::new(|| std::env::var_os("IBV_SHOW_WARNINGS").is_some());

/// Prints a diagnostic to stderr when `IBV_SHOW_WARNINGS` is set; silent
/// otherwise so a program's output is not polluted by configuration noise.
pub(crate) fn emit_warning(args: std::fmt::Arguments<'_>) {
    if *SHOW_WARNINGS {
        eprintln!("libibverbs: Warning: {args}");
    }
}

macro_rules! warning {
    ($($t:tt)*) => { $crate::util::emit_warning(format_args!($($t)*)) };
}
pub(crate) use warning;

/// The body of an exported verb, in one shape. The body is a block
/// returning a `Result` (so `?` works in it); the first word picks the C
/// convention: `int` (0 or a positive errno, also stored in errno), `ptr`
/// (the pointer, or NULL with errno set), `minus_one` (0, or -1 with
/// errno). Nothing unwinds out of it: the libraries are built with
/// `panic = "abort"`. The debug toolkit's tracer hooks in here.
macro_rules! entry {
    (int, $body:block) => {
        $crate::util::int_ret((|| $body)())
    };
    (ptr, $body:block) => {
        $crate::util::ptr_ret((|| $body)())
    };
    (minus_one, $body:block) => {
        $crate::util::minus_one_ret((|| $body)())
    };
}
pub(crate) use entry;

/// A provider's int return (0 or a positive errno) as a Result.
pub(crate) fn errno_result(rc: c_int) -> Result<(), c_int> {
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Maps an int verb's outcome to its C return: 0 or a positive errno. The
/// errno is also stored so `perror` after a failed call says something true.
pub(crate) fn int_ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

/// Maps a constructor's outcome to its C return: the pointer, or NULL with
/// errno set. A NULL from a provider keeps the errno the provider set.
pub(crate) fn ptr_ret<T>(r: Result<*mut T, c_int>) -> *mut T {
    match r {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            core::ptr::null_mut()
        }
    }
}

/// For verbs whose C convention is 0 / -1 with errno.
pub(crate) fn minus_one_ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}
