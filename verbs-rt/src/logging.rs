//! rdma-core's logging scheme, through the `log` crate.
//!
//! rdma-core's providers log with `verbs_err`/`verbs_warn`/`verbs_info`/
//! `verbs_debug`, filtered by `VERBS_LOG_LEVEL` (0 none, the default; 1
//! error; 2 warning; 3 info; 4 debug; read with `strtol(.., 0)`) and written
//! to `VERBS_LOG_FILE` (appended to; stderr when unset or when it cannot be
//! opened). Each of our shared objects (libibverbs, librdmacm, the rsw
//! provider) carries its own copy of this module and of `log`'s statics, so
//! each installs its own logger, once, on first use ([`init`]: the exported
//! calls' `export!` macro, device discovery, provider load).
//!
//! Until [`init`] has run, and afterwards when the level is 0, `log`'s
//! maximum level is `Off`: every `log::error!`..`debug!` is one relaxed load
//! and a branch, with no formatting and no allocation. Nothing logs on a
//! data path's success path anyway.
//!
//! Extras, per library:
//! - libibverbs: `IBV_SHOW_WARNINGS` (rdma-core's) prints its warnings to
//!   stderr as `libibverbs: Warning: ...`, whatever the level.
//! - librdmacm: `RDMACM_RS_DEBUG` (non-empty, not `0`) raises its level to
//!   debug (4), which shows the CM's decisions.
//!
//! A line is `<lib>: <level>: <module>: <message>`, written with one
//! `write(2)` to a descriptor opened with `O_APPEND`, so lines of threads,
//! libraries and forked children stay whole. The file is opened at the first
//! line written: with the level at 0 no file is created. `errno` is kept
//! across a logging call, so error paths may log before returning.

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::fmt::Write as _;
use std::sync::{Once, OnceLock};

use log::{Level, LevelFilter, Log, Metadata, Record};

static INIT: Once = Once::new();
/// The level of `VERBS_LOG_LEVEL` (raised by `RDMACM_RS_DEBUG`), 0..=5.
static FILE_LEVEL: AtomicU8 = AtomicU8::new(0);
static SHOW_WARNINGS: AtomicBool = AtomicBool::new(false);
static LIB: OnceLock<&'static str> = OnceLock::new();
/// The log file's descriptor (2 for stderr).
static FD: OnceLock<c_int> = OnceLock::new();

struct Logger;
static LOGGER: Logger = Logger;

/// Sets up this library's logger from the environment; later calls return
/// at once (one acquire load).
#[inline]
pub fn init() {
    if !INIT.is_completed() {
        init_slow();
    }
}

#[cold]
#[inline(never)]
fn init_slow() {
    INIT.call_once(|| {
        let lib = *LIB.get_or_init(lib_name);
        let mut level = std::env::var("VERBS_LOG_LEVEL").map_or(0, |v| parse_level(&v));
        if lib == "librdmacm"
            && std::env::var_os("RDMACM_RS_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
        {
            level = level.max(4);
        }
        let show = lib == "libibverbs" && std::env::var_os("IBV_SHOW_WARNINGS").is_some();
        FILE_LEVEL.store(level, Ordering::Relaxed);
        SHOW_WARNINGS.store(show, Ordering::Relaxed);
        let mut max = filter_of(level);
        if show {
            max = max.max(LevelFilter::Warn);
        }
        // Fails only if a logger is already installed in this object (a
        // test binary's): then that one is used.
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(max);
        }
    });
}

/// `VERBS_LOG_LEVEL` as rdma-core reads it: `strtol(value, NULL, 0)`, so
/// decimal, `0x` hex or leading-`0` octal, garbage reading as 0; clamped to
/// 0..=5 (5 and above: everything).
pub(crate) fn parse_level(v: &str) -> u8 {
    let s = v.trim_start();
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (16, h)
    } else if s.len() > 1 && s.starts_with('0') {
        (8, &s[1..])
    } else {
        (10, s)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let n =
        u64::from_str_radix(&digits[..end], radix).unwrap_or(if end == 0 { 0 } else { u64::MAX });
    if neg || n == 0 {
        0
    } else {
        n.min(5) as u8
    }
}

fn filter_of(level: u8) -> LevelFilter {
    match level {
        0 => LevelFilter::Off,
        1 => LevelFilter::Error,
        2 => LevelFilter::Warn,
        3 => LevelFilter::Info,
        4 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// The short name of the shared object this copy of the module lives in.
fn lib_name() -> &'static str {
    // SAFETY: dladdr only reads the loader's tables; info is written by it.
    let file = unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(lib_name as *const libc::c_void, &mut info) != 0
            && !info.dli_fname.is_null()
        {
            core::ffi::CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        }
    };
    let base = file.rsplit('/').next().unwrap_or("");
    if base.starts_with("libibverbs") {
        "libibverbs"
    } else if base.starts_with("librdmacm") {
        "librdmacm"
    } else if base.starts_with("librsw") {
        "rsw"
    } else {
        // A test binary: the crate the first record comes from names it.
        "verbs"
    }
}

fn open_file() -> c_int {
    let Some(path) = std::env::var_os("VERBS_LOG_FILE").filter(|p| !p.is_empty()) else {
        return 2;
    };
    // As the loader's variables: not in set-uid/set-gid programs.
    // SAFETY: the id getters have no preconditions.
    if unsafe { libc::getuid() != libc::geteuid() || libc::getgid() != libc::getegid() } {
        return 2;
    }
    use std::os::unix::ffi::OsStrExt;
    // rdma-core falls back to stderr when the file cannot be opened.
    open_append(path.as_bytes()).unwrap_or(2)
}

/// Opens (creating) a diagnostics file for appending, close-on-exec: the
/// log's, the tracer's and the checker's. `%p` in the path becomes the
/// process id.
pub(crate) fn open_append(path: &[u8]) -> Option<c_int> {
    let pid = std::process::id().to_string();
    let mut p = Vec::with_capacity(path.len() + 8);
    let mut i = 0;
    while i < path.len() {
        if path[i..].starts_with(b"%p") {
            p.extend_from_slice(pid.as_bytes());
            i += 2;
        } else {
            p.push(path[i]);
            i += 1;
        }
    }
    let c = std::ffi::CString::new(p).ok()?;
    // SAFETY: a NUL-terminated path; O_CREAT takes the mode argument.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    (fd >= 0).then_some(fd)
}

fn write_all(fd: c_int, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: b is readable for its length.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if n < 0 {
            if crate::errno::errno() == libc::EINTR {
                continue;
            }
            return;
        }
        b = &b[n as usize..];
    }
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= filter_of(FILE_LEVEL.load(Ordering::Relaxed))
            || (m.level() <= Level::Warn && SHOW_WARNINGS.load(Ordering::Relaxed))
    }

    fn log(&self, r: &Record<'_>) {
        let to_file = r.level() <= filter_of(FILE_LEVEL.load(Ordering::Relaxed));
        let to_stderr = r.level() <= Level::Warn && SHOW_WARNINGS.load(Ordering::Relaxed);
        if !to_file && !to_stderr {
            return;
        }
        let saved = crate::errno::errno();
        let lib = LIB.get().copied().unwrap_or("verbs");
        let mut line = String::with_capacity(128);
        if to_file {
            // The module path without the crate's name.
            let target = r.target();
            let module = target.split_once("::").map_or(target, |(_, m)| m);
            let level = match r.level() {
                Level::Error => "error",
                Level::Warn => "warning",
                Level::Info => "info",
                Level::Debug => "debug",
                Level::Trace => "trace",
            };
            let _ = writeln!(line, "{lib}: {level}: {module}: {}", r.args());
            let fd = *FD.get_or_init(open_file);
            write_all(fd, line.as_bytes());
            if fd == 2 {
                // Already on stderr: IBV_SHOW_WARNINGS adds nothing.
                crate::errno::set_errno(saved);
                return;
            }
        }
        if to_stderr {
            // rdma-core's own form for IBV_SHOW_WARNINGS.
            line.clear();
            let _ = writeln!(line, "{lib}: Warning: {}", r.args());
            write_all(2, line.as_bytes());
        }
        crate::errno::set_errno(saved);
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_as_strtol() {
        assert_eq!(parse_level(""), 0);
        assert_eq!(parse_level("junk"), 0);
        assert_eq!(parse_level("2"), 2);
        assert_eq!(parse_level(" 3x"), 3);
        assert_eq!(parse_level("0x4"), 4);
        assert_eq!(parse_level("04"), 4);
        assert_eq!(parse_level("99"), 5);
        assert_eq!(parse_level("-1"), 0);
        assert_eq!(filter_of(0), LevelFilter::Off);
        assert_eq!(filter_of(2), LevelFilter::Warn);
    }
}
