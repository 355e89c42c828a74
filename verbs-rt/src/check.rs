//! The misuse checker's core: `RDMA_CHECK=1` (also `on`, `yes`, `report`)
//! reports each misuse the libraries can see, once per object and kind;
//! `RDMA_CHECK=abort` aborts the process (SIGABRT) after the first report,
//! for CI. Reports go to stderr, or appended to `RDMA_CHECK_FILE` (`%p`
//! becomes the pid). The checks themselves live beside the objects they
//! watch (the provider's `check` module for the data path, libibverbs' for
//! fork, librdmacm's for CM events); this module owns the switch, the
//! sink, the once-only bookkeeping and the call site.
//!
//! A finding is written as one block (one `write(2)`, so blocks of threads
//! and libraries do not interleave):
//!
//! ```text
//! rdma_check: <kind> <object> <handle>[ qpn=<n>]: <what went wrong>
//! rdma_check:   spec: <what the spec or man page says>
//! rdma_check:   at: <frame> (<file:line>)
//! ```
//!
//! The frames are the application's: those inside our libraries, the Rust
//! runtime and the C start-up code are trimmed.
//!
//! Off, a check point costs one relaxed load and one predictable branch
//! ([`on`], or [`hooks_on`] where the tracer and the checker share one
//! point); the checks are out of line and cold.

use core::ffi::c_int;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static HOOKS: AtomicU8 = AtomicU8::new(UNKNOWN);
static SINK: OnceLock<Option<Sink>> = OnceLock::new();
static SEEN: Mutex<Option<HashSet<(&'static str, usize)>>> = Mutex::new(None);
static FINDINGS: AtomicUsize = AtomicUsize::new(0);

struct Sink {
    fd: c_int,
    abort: bool,
}

/// True when the checker is on. Off, this is one relaxed load and one
/// predictable branch; the first call reads the environment.
#[inline(always)]
pub fn on() -> bool {
    STATE.load(Ordering::Relaxed) != OFF && slow_on()
}

#[cold]
#[inline(never)]
fn slow_on() -> bool {
    let on = SINK.get_or_init(open_sink).is_some();
    STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
    on
}

/// True when the tracer or the checker is on: the one branch a data-path
/// call pays for both when both are off.
#[inline(always)]
pub fn hooks_on() -> bool {
    HOOKS.load(Ordering::Relaxed) != OFF && slow_hooks()
}

#[cold]
#[inline(never)]
fn slow_hooks() -> bool {
    let on = crate::trace::on() || on();
    HOOKS.store(if on { ON } else { OFF }, Ordering::Relaxed);
    on
}

/// True when the checker aborts on the first finding.
pub fn aborts() -> bool {
    on() && matches!(SINK.get(), Some(Some(s)) if s.abort)
}

/// What `RDMA_CHECK` asks for: None (off), Some(false) (report) or
/// Some(true) (abort).
fn mode(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "off" | "no" => None,
        "abort" => Some(true),
        _ => Some(false),
    }
}

fn open_sink() -> Option<Sink> {
    // SAFETY: the id getters have no preconditions.
    let trusted = unsafe { libc::getuid() == libc::geteuid() && libc::getgid() == libc::getegid() };
    if !trusted {
        return None;
    }
    let abort = mode(&std::env::var("RDMA_CHECK").ok()?)?;
    let fd = match std::env::var("RDMA_CHECK_FILE") {
        Ok(p) if !p.is_empty() => crate::logging::open_append(p.as_bytes()).unwrap_or(2),
        _ => 2,
    };
    Some(Sink { fd, abort })
}

fn write_all(fd: c_int, s: &str) {
    let mut b = s.as_bytes();
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

/// The object a finding is about: its type (`qp`, `cq`, `mr`, `pd`,
/// `srq`, `channel`, `context`, `cm_id`, `process`), its handle (the
/// application's pointer) and, for a QP, its number.
#[derive(Clone, Copy, Debug)]
pub struct Obj {
    pub kind: &'static str,
    pub handle: usize,
    pub qpn: Option<u32>,
}

impl Obj {
    pub fn new(kind: &'static str, handle: usize) -> Obj {
        Obj {
            kind,
            handle,
            qpn: None,
        }
    }

    pub fn qp(handle: usize, qpn: u32) -> Obj {
        Obj {
            kind: "qp",
            handle,
            qpn: Some(qpn),
        }
    }
}

impl core::fmt::Display for Obj {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.kind == "process" {
            return write!(f, "process {}", self.handle);
        }
        write!(f, "{} {:#x}", self.kind, self.handle)?;
        if let Some(n) = self.qpn {
            write!(f, " qpn={n}")?;
        }
        Ok(())
    }
}

/// True the first time `kind` is reported for `obj`'s handle (and marks
/// it reported): for checks that are costly to evaluate again.
pub fn first(kind: &'static str, obj: &Obj) -> bool {
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashSet::new)
        .insert((kind, obj.handle))
}

/// The object at `handle` is gone: a new one at the same address gets its
/// own findings.
pub fn forget(handle: usize) {
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(set) = g.as_mut() {
        set.retain(|&(_, h)| h != handle);
    }
}

/// Reports a finding once per `kind` and object: `what` went wrong, what
/// the `spec` (IB spec, man page) says; the call site is the current
/// stack. With `RDMA_CHECK=abort` the process aborts after writing it.
#[cold]
#[inline(never)]
pub fn report(kind: &'static str, obj: Obj, what: &str, spec: &str) {
    let Some(Some(sink)) = SINK.get() else { return };
    if !first(kind, &obj) {
        return;
    }
    FINDINGS.fetch_add(1, Ordering::Relaxed);
    let mut b = String::with_capacity(512);
    let _ = writeln!(b, "rdma_check: {kind} {obj}: {what}");
    let _ = writeln!(b, "rdma_check:   spec: {spec}");
    let frames = call_site();
    if frames.is_empty() {
        b.push_str("rdma_check:   at: (no application frame: found by a library thread)\n");
    }
    for f in frames {
        let _ = writeln!(b, "rdma_check:   at: {f}");
    }
    write_all(sink.fd, &b);
    if sink.abort {
        write_all(
            sink.fd,
            "rdma_check: aborting on the first finding (RDMA_CHECK=abort)\n",
        );
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
}

/// Writes one line of the exit summary (`rdma_check: exit: ...`).
pub fn summary(line: &str) {
    if let Some(Some(sink)) = SINK.get() {
        write_all(sink.fd, &format!("rdma_check: exit: {line}\n"));
    }
}

/// How many findings this library reported.
pub fn findings() -> usize {
    FINDINGS.load(Ordering::Relaxed)
}

/// Whether a symbol belongs to our libraries, the Rust runtime or the
/// C start-up code (trimmed from a call site).
fn ours(sym: &str) -> bool {
    const PREFIXES: [&str; 18] = [
        "__run_prefork_handlers",
        "__libc_fork",
        "verbs_abi::",
        "verbs_rt::",
        "rsw::",
        "ibverbs::",
        "rdmacm::",
        "std::",
        "core::",
        "alloc::",
        "parking_lot",
        "<",
        "__rust",
        "rust_",
        "ibv_",
        "rdma_",
        "__ibv_",
        "verbs_rs_",
    ];
    sym != "<unknown>" && PREFIXES.iter().any(|p| sym.starts_with(p))
}

fn startup(sym: &str) -> bool {
    sym.starts_with("__libc_start")
        || sym == "_start"
        || sym.starts_with("start_thread")
        || sym.starts_with("clone")
}

/// The application's frames of the current stack: everything after the
/// last frame inside our libraries, at most eight, each `symbol (file:line)`.
fn call_site() -> Vec<String> {
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    // Display gives "  N: symbol" lines, each followed by "at file:line"
    // lines when debug information has them.
    let mut frames: Vec<(String, Option<String>)> = Vec::new();
    for line in bt.lines() {
        let t = line.trim();
        if let Some(at) = t.strip_prefix("at ") {
            if let Some(f) = frames.last_mut() {
                if f.1.is_none() {
                    f.1 = Some(at.to_string());
                }
            }
        } else if let Some((n, sym)) = t.split_once(": ") {
            if n.chars().all(|c| c.is_ascii_digit()) {
                frames.push((sym.to_string(), None));
            }
        }
    }
    let start = frames
        .iter()
        .rposition(|(s, _)| ours(s))
        .map_or(0, |i| i + 1);
    let app: Vec<&(String, Option<String>)> = frames[start..]
        .iter()
        .filter(|(s, _)| !startup(s))
        .take(8)
        .collect();
    if app.iter().any(|(s, _)| s == "<unknown>") {
        // A program without symbols: name its frames by object and offset
        // instead (`addr2line -e OBJECT OFFSET` finds the line).
        return raw_call_site();
    }
    app.into_iter()
        .map(|(s, at)| match at {
            Some(at) => format!("{s} ({at})"),
            None => s.clone(),
        })
        .collect()
}

extern "C" {
    /// glibc's `backtrace(3)` (execinfo).
    fn backtrace(buffer: *mut *mut libc::c_void, size: c_int) -> c_int;
}

/// The application's frames from the raw return addresses: each
/// `object+0xoffset`, with the dynamic symbol when there is one. Frames
/// in our three libraries (and libc's fork handlers) are trimmed.
fn raw_call_site() -> Vec<String> {
    let mut ips = [core::ptr::null_mut::<libc::c_void>(); 64];
    // SAFETY: the buffer holds 64 entries.
    let n = unsafe { backtrace(ips.as_mut_ptr(), 64) }.max(0) as usize;
    let mut frames: Vec<(String, Option<String>, usize)> = Vec::new();
    for &ip in &ips[..n] {
        // A return address: look up the call instruction before it.
        let pc = (ip as usize).saturating_sub(1);
        // SAFETY: dladdr only reads the loader's tables into `info`.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(pc as *const libc::c_void, &mut info) } == 0
            || info.dli_fname.is_null()
        {
            frames.push(("?".into(), None, pc));
            continue;
        }
        // SAFETY: dladdr's strings are NUL-terminated and live while the
        // object is loaded.
        let obj = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned();
        let sym = (!info.dli_sname.is_null()).then(|| {
            // SAFETY: as above.
            let c = unsafe { core::ffi::CStr::from_ptr(info.dli_sname) };
            c.to_string_lossy().into_owned()
        });
        frames.push((obj, sym, pc - info.dli_fbase as usize));
    }
    let lib = |o: &str| {
        let base = o.rsplit('/').next().unwrap_or(o);
        ["libibverbs.so", "librdmacm.so", "librsw"]
            .iter()
            .any(|p| base.starts_with(p))
    };
    let start = frames
        .iter()
        .rposition(|(o, s, _)| lib(o) || s.as_deref().is_some_and(ours))
        .map_or(0, |i| i + 1);
    // The C start-up code (libc's, then the program's `_start`) ends it.
    let libc = |o: &str| o.rsplit('/').next().unwrap_or(o).starts_with("libc.so");
    frames[start..]
        .iter()
        .take_while(|(o, _, _)| !libc(o))
        .take(8)
        .map(|(o, s, off)| match s {
            Some(s) => format!("{s} ({o}+{off:#x})"),
            None => format!("{o}+{off:#x}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(mode(""), None);
        assert_eq!(mode("0"), None);
        assert_eq!(mode("off"), None);
        assert_eq!(mode("1"), Some(false));
        assert_eq!(mode("report"), Some(false));
        assert_eq!(mode("ABORT"), Some(true));
    }

    #[test]
    fn objects_and_frames() {
        assert_eq!(Obj::qp(0x10, 7).to_string(), "qp 0x10 qpn=7");
        assert_eq!(Obj::new("cq", 0x20).to_string(), "cq 0x20");
        assert!(ours("rsw::qp::post::post_send"));
        assert!(ours("ibv_destroy_cq"));
        assert!(!ours("main"));
        assert!(startup("__libc_start_call_main"));
    }

    #[test]
    fn once_per_kind_and_object() {
        let o = Obj::new("cq", 0x1234_5678);
        assert!(first("test_kind", &o));
        assert!(!first("test_kind", &o));
        assert!(first("other_kind", &o));
        forget(o.handle);
        assert!(first("test_kind", &o));
    }
}
