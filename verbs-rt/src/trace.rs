//! The verbs tracer: with `RDMA_TRACE=FILE` (or `stderr`) every traced verb
//! call, work request, completion, async event and CM event becomes one line
//! in FILE, as text (`RDMA_TRACE_FORMAT=text`, the default) or JSON lines
//! (`RDMA_TRACE_FORMAT=json`). `RDMA_TRACE_FILTER` keeps only the records
//! whose name (`ibv_create_qp`, `post_send`), kind (`verb`, `wr`, `wc`,
//! `event`, `cm`), object kind (`qp`, `cq`, `mr`, `pd`, `srq`, `ah`, `cm`)
//! or object handle (`0x...`) is in its comma-separated list.
//!
//! Off, a trace point costs one relaxed load and one predictable branch
//! ([`on`]); everything else is out of line and cold. libibverbs, librdmacm
//! and the provider each link their own copy of this module: each opens the
//! file itself with `O_APPEND` and writes every line with one `write(2)`,
//! so lines from the three libraries, from threads and from forked children
//! interleave whole. Timestamps are `CLOCK_MONOTONIC` nanoseconds (common
//! to all copies and processes); the header line each copy writes pairs one
//! with the wall clock.

use core::ffi::c_int;
use core::sync::atomic::{AtomicU8, Ordering};
use std::fmt::Write as _;
use std::sync::OnceLock;

use verbs_abi::ibv_sge;

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static SINK: OnceLock<Option<Sink>> = OnceLock::new();

struct Sink {
    fd: c_int,
    json: bool,
    filter: Vec<String>,
}

/// True when tracing is on. Off, this is one relaxed load and one
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

fn env_trusted() -> bool {
    // SAFETY: the id getters have no preconditions.
    unsafe { libc::getuid() == libc::geteuid() && libc::getgid() == libc::getegid() }
}

fn open_sink() -> Option<Sink> {
    if !env_trusted() {
        return None;
    }
    let path = std::env::var("RDMA_TRACE").ok().filter(|p| !p.is_empty())?;
    let fd = if path == "stderr" {
        2
    } else {
        crate::logging::open_append(path.as_bytes())?
    };
    let json = std::env::var("RDMA_TRACE_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let filter = std::env::var("RDMA_TRACE_FILTER")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    let sink = Sink { fd, json, filter };
    let mut line = String::new();
    let (mono, wall) = (mono_ns(), wall_ns());
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    if json {
        let _ = write!(
            line,
            "{{\"t_ns\":{mono},\"tid\":{},\"kind\":\"header\",\"name\":\"trace_start\",\"pid\":{pid},\"wall_ns\":{wall},\"lib\":\"{}\"}}",
            tid(),
            lib_name()
        );
    } else {
        let _ = write!(
            line,
            "{mono} tid={} header trace_start pid={pid} wall_ns={wall} lib={}",
            tid(),
            lib_name()
        );
    }
    line.push('\n');
    sink.write(&line);
    Some(sink)
}

/// The shared object this copy of the module lives in (its file name).
fn lib_name() -> String {
    // SAFETY: dladdr only reads the loader's tables; info is written by it.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(lib_name as *const libc::c_void, &mut info) != 0
            && !info.dli_fname.is_null()
        {
            let s = core::ffi::CStr::from_ptr(info.dli_fname).to_string_lossy();
            return s.rsplit('/').next().unwrap_or("").replace('"', "");
        }
    }
    String::new()
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is writable.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn wall_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is writable.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

impl Sink {
    fn write(&self, line: &str) {
        let mut b = line.as_bytes();
        while !b.is_empty() {
            // SAFETY: b is readable for its length.
            let n = unsafe { libc::write(self.fd, b.as_ptr().cast(), b.len()) };
            if n < 0 {
                // SAFETY: reads the calling thread's errno.
                if unsafe { *libc::__errno_location() } == libc::EINTR {
                    continue;
                }
                return;
            }
            b = &b[n as usize..];
        }
    }

    fn keeps(&self, kind: &str, name: &str, obj: usize) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let okind = object_kind(kind, name);
        self.filter.iter().any(|f| {
            f == name
                || f == kind
                || (!okind.is_empty() && f == okind)
                || (obj != 0
                    && f.strip_prefix("0x")
                        .and_then(|h| usize::from_str_radix(h, 16).ok())
                        == Some(obj))
        })
    }
}

/// The object kind a record is about, for the filter.
fn object_kind(kind: &str, name: &str) -> &'static str {
    if kind == "cm" || name.starts_with("rdma_") {
        return "cm";
    }
    if kind == "wr" || kind == "wc" {
        return "";
    }
    for k in [
        "srq", "qp", "cq", "mr", "mw", "pd", "ah", "xrcd", "wq", "dm", "flow",
    ] {
        if name.ends_with(&format!("_{k}")) || name.contains(&format!("_{k}_")) {
            return k;
        }
    }
    if name.contains("device") || name.contains("context") || name.contains("async") {
        return "context";
    }
    ""
}

/// One field of a record.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    U(u64),
    I(i64),
    Hex(u64),
    Str(&'a str),
    Sges(&'a [ibv_sge]),
}

macro_rules! val_from {
    ($v:ident as $t:ty: $($s:ty),*) => {$(
        impl From<$s> for Val<'_> {
            fn from(x: $s) -> Self { Val::$v(x as $t) }
        }
    )*};
}
val_from!(U as u64: u8, u16, u32, u64, usize);
val_from!(I as i64: i8, i16, i32, i64, isize);

impl<T> From<*mut T> for Val<'_> {
    fn from(p: *mut T) -> Self {
        Val::Hex(p as usize as u64)
    }
}
impl<T> From<*const T> for Val<'_> {
    fn from(p: *const T) -> Self {
        Val::Hex(p as usize as u64)
    }
}

fn push_val(line: &mut String, v: &Val<'_>, json: bool) {
    let _ = match *v {
        Val::U(x) => write!(line, "{x}"),
        Val::I(x) => write!(line, "{x}"),
        Val::Hex(x) if json => write!(line, "\"{x:#x}\""),
        Val::Hex(x) => write!(line, "{x:#x}"),
        Val::Str(s) if json => write!(line, "\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
        Val::Str(s) => write!(line, "{s}"),
        Val::Sges(sges) => {
            line.push('[');
            for (i, s) in sges.iter().enumerate() {
                if i > 0 {
                    line.push(if json { ',' } else { ' ' });
                }
                let _ = if json {
                    write!(
                        line,
                        "{{\"addr\":\"{:#x}\",\"length\":{},\"lkey\":\"{:#x}\"}}",
                        s.addr, s.length, s.lkey
                    )
                } else {
                    write!(line, "{:#x}/{}/{:#x}", s.addr, s.length, s.lkey)
                };
            }
            line.push(']');
            Ok(())
        }
    };
}

/// Writes one record: `kind` is `verb`, `wr`, `wc`, `event` or `cm`;
/// `name` the verb or trace point; `obj` the object it is about.
#[cold]
#[inline(never)]
pub fn record(kind: &str, name: &str, obj: usize, fields: &[(&str, Val<'_>)]) {
    let Some(Some(sink)) = SINK.get() else { return };
    if !sink.keeps(kind, name, obj) {
        return;
    }
    let mut line = String::with_capacity(160);
    let (t, tid) = (mono_ns(), tid());
    if sink.json {
        let _ = write!(line, "{{\"t_ns\":{t},\"tid\":{tid},\"kind\":\"{kind}\",\"name\":\"{name}\",\"obj\":\"{obj:#x}\"");
        for (k, v) in fields {
            let k = k.trim_start_matches('_');
            let _ = write!(line, ",\"{k}\":");
            push_val(&mut line, v, true);
        }
        line.push('}');
    } else {
        let _ = write!(line, "{t} tid={tid} {kind} {name} obj={obj:#x}");
        for (k, v) in fields {
            let k = k.trim_start_matches('_');
            let _ = write!(line, " {k}=");
            push_val(&mut line, v, false);
        }
    }
    line.push('\n');
    sink.write(&line);
}

/// The function name out of `type_name_of_val` of a fn item declared in
/// it, or the type name of a closure defined in it
/// (`crate::module::ibv_create_qp::__f` and
/// `crate::module::ibv_dereg_mr::{{closure}}::{{closure}}` give
/// `ibv_create_qp` and `ibv_dereg_mr`).
pub(crate) fn fn_name(path: &'static str) -> &'static str {
    path.rsplit("::")
        .skip(1)
        .find(|s| !s.starts_with("{{"))
        .unwrap_or(path)
}

/// What an exported call returns to C, for [`verb`].
pub trait TraceRet {
    fn ret(&self) -> Val<'static>;
}
impl TraceRet for () {
    fn ret(&self) -> Val<'static> {
        Val::I(0)
    }
}
impl<T> TraceRet for *mut T {
    fn ret(&self) -> Val<'static> {
        Val::Hex(*self as usize as u64)
    }
}

/// Records an exported call made through `export!` (a `Result` body): its arguments, its C
/// result (`conv` is the macro's convention) and errno on failure.
#[cold]
#[inline(never)]
pub fn verb<T: TraceRet>(
    path: &'static str,
    conv: &str,
    args: &[(&str, Val<'_>)],
    r: &Result<T, c_int>,
) {
    // Read first: a provider's constructor reports a failure as NULL with
    // errno set, which the body passes on as Ok(NULL).
    let errno_now = crate::errno::errno();
    let name = fn_name(path);
    let obj = match args.first() {
        Some((_, Val::Hex(p))) => *p as usize,
        _ => 0,
    };
    let mut f: Vec<(&str, Val<'_>)> = args.to_vec();
    match r {
        Ok(v) => {
            let ret = v.ret();
            f.push(("ret", ret));
            if conv == "ptr" && matches!(ret, Val::Hex(0)) {
                f.push(("errno", Val::I(errno_now as i64)));
                f.push(("err", Val::Str(errno_name(errno_now))));
            }
        }
        Err(e) => {
            f.push((
                "ret",
                match conv {
                    "ptr" => Val::Hex(0),
                    "minus_one" => Val::I(-1),
                    _ => Val::I(*e as i64),
                },
            ));
            f.push(("errno", Val::I(*e as i64)));
            f.push(("err", Val::Str(errno_name(*e))));
        }
    }
    record("verb", name, obj, &f);
}

/// A C result as an exported call or a provider entry returns it, for
/// [`verb_c`].
#[derive(Clone, Copy, Debug)]
pub enum CRet {
    /// 0, or a positive errno.
    Int(c_int),
    /// An object, or NULL with errno set.
    Ptr(usize),
    /// 0 (or another non-negative value), or -1 with errno set.
    MinusOne(c_int),
    /// A count or offset, or -1 with errno set (`ssize_t`, `off_t`).
    SSize(i64),
    /// A value that is not an error indication (a count, a flag).
    Value(i64),
    Void,
}

/// Records a call whose body returns its C result directly (see
/// `export!`'s `raw::` conventions): arguments, result, and errno when the result says failure.
#[cold]
#[inline(never)]
pub fn verb_c(path: &'static str, args: &[(&str, Val<'_>)], r: CRet) {
    let errno_now = crate::errno::errno();
    let name = fn_name(path);
    let obj = match args.first() {
        Some((_, Val::Hex(p))) => *p as usize,
        _ => 0,
    };
    let mut f: Vec<(&str, Val<'_>)> = args.to_vec();
    let failed = match r {
        CRet::Int(e) => {
            f.push(("ret", Val::I(e as i64)));
            (e != 0).then_some(e)
        }
        CRet::Ptr(p) => {
            f.push(("ret", Val::Hex(p as u64)));
            (p == 0).then_some(errno_now)
        }
        CRet::MinusOne(v) => {
            f.push(("ret", Val::I(v as i64)));
            (v == -1).then_some(errno_now)
        }
        CRet::SSize(v) => {
            f.push(("ret", Val::I(v)));
            (v == -1).then_some(errno_now)
        }
        CRet::Value(v) => {
            f.push(("ret", Val::I(v)));
            None
        }
        CRet::Void => None,
    };
    if let Some(e) = failed {
        f.push(("errno", Val::I(e as i64)));
        f.push(("err", Val::Str(errno_name(e))));
    }
    record("verb", name, obj, &f);
}

/// The symbolic name of the common errno values.
pub fn errno_name(e: c_int) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds() {
        fn __f() {}
        assert_eq!(
            fn_name(core::any::type_name_of_val(&__f)),
            "names_and_kinds"
        );
        // A closure in a closure (a helper handed one inside `export!`).
        let outer = || || ();
        assert_eq!(
            fn_name(core::any::type_name_of_val(&outer())),
            "names_and_kinds"
        );
        assert_eq!(object_kind("verb", "ibv_create_qp"), "qp");
        assert_eq!(object_kind("verb", "ibv_reg_mr_iova2"), "mr");
        assert_eq!(object_kind("verb", "ibv_modify_srq"), "srq");
        assert_eq!(object_kind("verb", "rdma_connect"), "cm");
        assert_eq!(object_kind("wr", "post_send"), "");
        let s = Sink {
            fd: -1,
            json: true,
            filter: vec!["qp".into(), "wc".into(), "0x10".into()],
        };
        assert!(s.keeps("verb", "ibv_modify_qp", 0));
        assert!(s.keeps("wc", "poll_cq", 0));
        assert!(!s.keeps("wr", "post_send", 0));
        assert!(s.keeps("wr", "post_send", 0x10));
        assert!(!s.keeps("verb", "ibv_alloc_pd", 0));
    }

    #[test]
    fn off_without_the_variable() {
        // The test harness does not set RDMA_TRACE.
        if std::env::var_os("RDMA_TRACE").is_none() {
            assert!(!on());
            assert!(!on());
        }
    }
}
