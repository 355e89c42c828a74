//! Small helpers shared by the verbs: errno, warnings, environment.

use core::ffi::c_int;
use std::ffi::OsString;

#[cfg(test)]
pub(crate) use verbs_rt::errno::errno;
pub(crate) use verbs_rt::errno::set_errno;

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

/// A warning of libibverbs (driver loading, configuration): logged at
/// warning level (`VERBS_LOG_LEVEL` >= 2), and printed to stderr as
/// `libibverbs: Warning: ...` under `IBV_SHOW_WARNINGS` whatever the level
/// (`verbs_rt::logging`).
macro_rules! warning {
    ($($t:tt)*) => {{
        ::verbs_rt::logging::init();
        ::log::warn!($($t)*)
    }};
}
pub(crate) use warning;

/// A provider's int return (0 or a positive errno) as a Result.
pub(crate) fn errno_result(rc: c_int) -> Result<(), c_int> {
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

// The C return conventions, under the names the verbs use.
pub(crate) use verbs_rt::errno::{
    int_or_errno as int_ret, minus_one_or_errno as minus_one_ret, ptr_or_errno as ptr_ret,
};
