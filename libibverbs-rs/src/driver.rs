//! Finding and loading providers.
//!
//! Driver files (`driver NAME` lines) in the configuration directory and the
//! `RDMAV_DRIVERS` list name providers; each is `dlopen`ed. Ours export the
//! [`ProviderOps`] table named by [`PROVIDER_ENTRY_SYMBOL`]; rdma-core's own
//! providers (Debian's `ibverbs-providers`) register themselves from a
//! constructor instead and drive kernel devices (`crate::kernel`). A
//! library that does neither is skipped with a warning. Providers are
//! looked up beside this library, then in the distribution's provider
//! directory, where rdma-core installs them.
//!
//! Loading happens once, on the first `ibv_get_device_list`; providers are
//! never unloaded because devices and contexts point into them for the
//! life of the process.

use core::ffi::{c_char, c_void, CStr};
use core::mem::{offset_of, size_of, MaybeUninit};
use core::sync::atomic::{AtomicBool, Ordering};
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::sync::LazyLock;
use verbs_abi::provider::{ProviderOps, PROVIDER_ABI_VERSION, PROVIDER_ENTRY_SYMBOL};

use crate::util::{trusted_env, warning};

/// File name suffix of a provider for this private ABI generation
/// (the same `-rdmav34.so` convention rdma-core uses).
const PROVIDER_SUFFIX: &str = "-rdmav34.so";

/// A loaded provider. `ops` is our own full-size copy of its table, so an
/// older provider's missing trailing entries read as `None`.
pub(crate) struct Provider {
    pub ops: &'static ProviderOps,
    pub name: String,
}

/// Lets rdma-core's destroy helpers treat EIO after a device disassociation
/// as success. Exported data (a C `bool`); kept for ABI, read by nobody here.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

/// The environment switches rdma-core reads when it initialises, before
/// the providers load (its `ibverbs_init`).
fn init_from_env() {
    verbs_rt::logging::init();
    crate::fork::init_from_env();
    let on = std::env::var_os("RDMAV_ALLOW_DISASSOC_DESTROY").is_some_and(|v| v != "0");
    verbs_allow_disassociate_destroy.store(on, Ordering::Relaxed);
}

static PROVIDERS: LazyLock<Vec<Provider>> = LazyLock::new(|| {
    init_from_env();
    load_all()
});

/// The providers, loading them on first use (thread-safe, once).
pub(crate) fn providers() -> &'static [Provider] {
    &PROVIDERS
}

/// What a driver file says: provider names, and the lines we could not use.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct DriverFile {
    pub names: Vec<String>,
    pub bad: Vec<String>,
}

/// Parses one driver file. Blank lines and `#` comments are skipped;
/// `driver NAME` names a provider; anything else is reported as bad.
pub(crate) fn parse_driver_file(text: &str) -> DriverFile {
    let mut out = DriverFile::default();
    for line in text.lines() {
        let line = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
        match (words.next(), words.next()) {
            (Some("driver"), Some(name)) => out.names.push(name.to_owned()),
            _ => out.bad.push(line.to_owned()),
        }
    }
    out
}

/// Splits an `RDMAV_DRIVERS` value (`:` or `;` separated) into names.
pub(crate) fn parse_driver_list(value: &OsStr) -> Vec<String> {
    value
        .as_bytes()
        .split(|&b| b == b':' || b == b';')
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// The directory holding driver files.
fn config_dir() -> PathBuf {
    if let Some(dir) = trusted_env("IBV_CONFIG_DIR") {
        return PathBuf::from(dir);
    }
    match option_env!("RSV_SYSCONFDIR") {
        Some(etc) => Path::new(etc).join("libibverbs.d"),
        None => PathBuf::from("/etc/libibverbs.d"),
    }
}

/// Reads every regular file of the configuration directory, in name order
/// so the device order does not depend on the file system.
fn read_config(dir: &Path) -> Vec<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            warning!("couldn't open config directory '{}': {e}", dir.display());
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mut names = Vec::new();
    for path in files {
        // metadata() follows symlinks: a link to a driver file counts.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => continue,
            Err(e) => {
                warning!("couldn't stat config file '{}': {e}", path.display());
                continue;
            }
        }
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) => {
                warning!("couldn't read config file {}: {e}", path.display());
                continue;
            }
        };
        let parsed = parse_driver_file(&String::from_utf8_lossy(&text));
        for bad in &parsed.bad {
            warning!(
                "ignoring bad config directive '{bad}' in file '{}'",
                path.display()
            );
        }
        names.extend(parsed.names);
    }
    names
}

/// The `libibverbs/` directory beside the libibverbs.so.1 that is running,
/// so an unpacked build finds its own providers without configuration. If
/// the library was loaded through a symlink into another directory, both
/// the link's directory and the target's are tried, in that order.
fn own_provider_dirs() -> Vec<PathBuf> {
    let mut info = MaybeUninit::<libc::Dl_info>::zeroed();
    // Any function of this library names its file.
    let probe = own_provider_dirs as fn() -> Vec<PathBuf> as *const c_void;
    // SAFETY: dladdr only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(probe, info.as_mut_ptr()) };
    if found == 0 {
        return Vec::new();
    }
    // SAFETY: dladdr succeeded, so `info` is initialised.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return Vec::new();
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) };
    let file = Path::new(OsStr::from_bytes(file.to_bytes()));
    let mut dirs = Vec::new();
    for f in [Some(file.to_path_buf()), std::fs::canonicalize(file).ok()]
        .into_iter()
        .flatten()
    {
        if let Some(parent) = f.parent() {
            let d = parent.join("libibverbs");
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// rdma-core's provider directory on this distribution (Debian's
/// multiarch layout), searched after our own.
pub(crate) fn system_provider_dir() -> &'static Path {
    if let Some(d) = option_env!("RSV_SYSTEM_PROVIDER_DIR") {
        return Path::new(d);
    }
    #[cfg(target_arch = "x86_64")]
    let d = "/usr/lib/x86_64-linux-gnu/libibverbs";
    #[cfg(target_arch = "aarch64")]
    let d = "/usr/lib/aarch64-linux-gnu/libibverbs";
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let d = "/usr/lib/libibverbs";
    Path::new(d)
}

/// Where to look for provider NAME, in order.
pub(crate) fn candidates(
    name: &str,
    own_dirs: &[PathBuf],
    build_dir: Option<&Path>,
) -> Vec<PathBuf> {
    if name.starts_with('/') {
        // A path names the file itself; rdma-core's convention of leaving
        // the suffix off is accepted as well.
        return vec![
            PathBuf::from(name),
            PathBuf::from(format!("{name}{PROVIDER_SUFFIX}")),
        ];
    }
    let file = format!("lib{name}{PROVIDER_SUFFIX}");
    let mut out = Vec::new();
    let system = Some(system_provider_dir());
    for dir in own_dirs
        .iter()
        .map(PathBuf::as_path)
        .chain(build_dir)
        .chain(system)
    {
        let p = dir.join(&file);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    // Bare name: the dynamic loader's search path decides.
    out.push(PathBuf::from(file));
    out
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated thread-local string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".to_owned()
    } else {
        // SAFETY: checked non-NULL above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// dlopens the first candidate that loads.
fn open_library(name: &str, paths: &[PathBuf]) -> Option<*mut c_void> {
    let mut last_error = String::new();
    for path in paths {
        // Absolute candidates that do not exist are not worth a dlopen.
        if path.is_absolute() && !path.exists() {
            continue;
        }
        let Ok(cpath) = CString::new(path.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: cpath is a valid C string; RTLD_NOW makes missing symbols
        // fail here rather than at the first call.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW) };
        if !handle.is_null() {
            return Some(handle);
        }
        last_error = dlerror_text();
    }
    if last_error.is_empty() {
        last_error = "no such file".to_owned();
    }
    warning!("couldn't load driver '{name}': {last_error}");
    None
}

/// Checks a provider's table and makes our own full-size copy of it.
///
/// # Safety
/// `table` must point to at least `size_of::<u32>() * 2` readable bytes and,
/// if its `size` field says more, to that many.
unsafe fn adopt_table(name: &str, table: *const ProviderOps) -> Option<&'static ProviderOps> {
    // SAFETY: the two leading u32 fields are readable per the contract.
    let (abi, size) = unsafe { ((*table).abi_version, (*table).size as usize) };
    if abi != PROVIDER_ABI_VERSION {
        warning!(
            "driver '{name}' has provider ABI {abi}, expected {PROVIDER_ABI_VERSION}; skipped"
        );
        return None;
    }
    let needed = offset_of!(ProviderOps, open_device) + size_of::<usize>();
    if size < needed {
        warning!("driver '{name}' has a truncated provider table ({size} bytes); skipped");
        return None;
    }
    let mut copy = Box::new(MaybeUninit::<ProviderOps>::zeroed());
    let len = size.min(size_of::<ProviderOps>());
    // SAFETY: the provider promises `size` readable bytes; we copy no more
    // than that and no more than our table holds. All-zero bytes are a
    // valid ProviderOps (NULL name, every entry None), so the tail an older
    // provider lacks reads as absent.
    let ops: &'static ProviderOps = unsafe {
        core::ptr::copy_nonoverlapping(table.cast::<u8>(), copy.as_mut_ptr().cast::<u8>(), len);
        Box::leak(copy).assume_init_ref()
    };
    if ops.discover.is_none() || ops.open_device.is_none() {
        warning!("driver '{name}' lacks discover or open_device; skipped");
        return None;
    }
    Some(ops)
}

/// Whether `RDMAV_C_PROVIDERS` (a `:`/`,` list of provider names, or
/// `all`) asks for rdma-core's C provider where we ship a Rust twin.
pub(crate) fn c_provider_wanted(name: &str, setting: Option<&OsStr>) -> bool {
    let Some(v) = setting else {
        return false;
    };
    let v = v.to_string_lossy();
    v.split([':', ',', ';'])
        .map(str::trim)
        .any(|w| w == "all" || w == "1" || w == name)
}

/// Our Rust twin of rdma-core provider NAME (`lib<name>-rs-rdmav34.so`),
/// where one is installed: it takes precedence over the C provider of the
/// same name, which is then not loaded at all.
fn rust_twin(name: &str, own_dirs: &[PathBuf], build_dir: Option<&Path>) -> Option<PathBuf> {
    if name.contains('/') || name == "rsw" {
        return None;
    }
    let setting = trusted_env("RDMAV_C_PROVIDERS");
    if c_provider_wanted(name, setting.as_deref()) {
        return None;
    }
    let file = format!("lib{name}-rs{PROVIDER_SUFFIX}");
    own_dirs
        .iter()
        .map(PathBuf::as_path)
        .chain(build_dir)
        .chain(Some(system_provider_dir()))
        .map(|d| d.join(&file))
        .find(|p| p.exists())
}

fn load_one(name: &str, own_dirs: &[PathBuf], seen: &mut Vec<usize>) -> Option<Provider> {
    let build_dir = option_env!("RSV_PROVIDER_DIR").map(Path::new);
    let registered = crate::kernel::registry::count();
    let paths = match rust_twin(name, own_dirs, build_dir) {
        Some(twin) => vec![twin],
        None => candidates(name, own_dirs, build_dir),
    };
    let handle = open_library(name, &paths)?;
    // SAFETY: handle is a live dlopen handle; the symbol name is a C string.
    let sym = unsafe { libc::dlsym(handle, PROVIDER_ENTRY_SYMBOL.as_ptr()) };
    if sym.is_null() && crate::kernel::registry::count() > registered {
        // An rdma-core provider: its constructor registered it for the
        // kernel devices it can drive.
        log::debug!("driver '{name}': rdma-core provider, for kernel devices");
        return None;
    }
    if sym.is_null() {
        warning!(
            "driver '{name}' is not a provider for this libibverbs (no {} symbol); skipped",
            PROVIDER_ENTRY_SYMBOL.to_string_lossy()
        );
        // The library stays loaded: its constructors already ran and may
        // have left pointers to it in other libraries.
        return None;
    }
    // The same library named twice (file and environment) loads once.
    if seen.contains(&(sym as usize)) {
        return None;
    }
    seen.push(sym as usize);
    // SAFETY: the symbol is the provider's ProviderOps static, which by the
    // provider contract is readable for its declared size.
    let ops = unsafe { adopt_table(name, sym as *const ProviderOps) }?;
    let display = if ops.name.is_null() {
        name.to_owned()
    } else {
        // SAFETY: the contract makes `name` a static NUL-terminated string.
        unsafe { CStr::from_ptr(ops.name as *const c_char) }
            .to_string_lossy()
            .into_owned()
    };
    log::debug!("driver '{name}': loaded provider '{display}'");
    Some(Provider { ops, name: display })
}

fn load_all() -> Vec<Provider> {
    let mut names = Vec::new();
    // Environment first, like rdma-core, then the configuration directory.
    if let Some(list) = trusted_env("RDMAV_DRIVERS").or_else(|| trusted_env("IBV_DRIVERS")) {
        names.extend(parse_driver_list(&list));
    }
    names.extend(read_config(&config_dir()));

    let own_dirs = own_provider_dirs();
    let mut seen = Vec::new();
    let mut loaded_names: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for name in &names {
        if loaded_names.contains(&name.as_str()) {
            continue;
        }
        loaded_names.push(name);
        if let Some(p) = load_one(name, &own_dirs, &mut seen) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_file_parsing() {
        let text = "# comment\n\n  \t\ndriver rsw\n\tdriver   other  trailing\n  # indented comment\nbogus line\ndriver\n";
        let f = parse_driver_file(text);
        assert_eq!(f.names, vec!["rsw".to_owned(), "other".to_owned()]);
        assert_eq!(f.bad, vec!["bogus line".to_owned(), "driver".to_owned()]);
    }

    #[test]
    fn driver_file_crlf_and_empty() {
        assert_eq!(parse_driver_file(""), DriverFile::default());
        let f = parse_driver_file("driver a\r\ndriver\tb\r\n");
        assert_eq!(f.names, vec!["a".to_owned(), "b".to_owned()]);
        assert!(f.bad.is_empty());
    }

    #[test]
    fn driver_list_parsing() {
        let v = parse_driver_list(OsStr::new("rsw:/opt/x/libfoo;bar::"));
        assert_eq!(v, vec!["rsw", "/opt/x/libfoo", "bar"]);
        assert!(parse_driver_list(OsStr::new("")).is_empty());
    }

    #[test]
    fn candidate_order() {
        let own = vec![PathBuf::from("/a/lib/libibverbs")];
        let build = Path::new("/b/prov");
        let c = candidates("rsw", &own, Some(build));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/a/lib/libibverbs/librsw-rdmav34.so"),
                PathBuf::from("/b/prov/librsw-rdmav34.so"),
                system_provider_dir().join("librsw-rdmav34.so"),
                PathBuf::from("librsw-rdmav34.so"),
            ]
        );
        let c = candidates("rsw", &own, Some(Path::new("/a/lib/libibverbs")));
        assert_eq!(c.len(), 3);
        let c = candidates("/x/librsw.so", &[], None);
        assert_eq!(c[0], PathBuf::from("/x/librsw.so"));
        assert_eq!(c[1], PathBuf::from("/x/librsw.so-rdmav34.so"));
    }

    #[test]
    fn c_provider_switch() {
        assert!(!c_provider_wanted("rxe", None));
        assert!(c_provider_wanted("rxe", Some(OsStr::new("all"))));
        assert!(c_provider_wanted("rxe", Some(OsStr::new("1"))));
        assert!(c_provider_wanted("siw", Some(OsStr::new("rxe,siw"))));
        assert!(c_provider_wanted("rxe", Some(OsStr::new("mlx5:rxe"))));
        assert!(!c_provider_wanted("siw", Some(OsStr::new("rxe"))));
        assert!(!c_provider_wanted("rxe", Some(OsStr::new(""))));
        let dir = std::env::temp_dir().join(format!("twin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(rust_twin("zz", std::slice::from_ref(&dir), None), None);
        std::fs::write(dir.join("libzz-rs-rdmav34.so"), b"").unwrap();
        assert_eq!(
            rust_twin("zz", std::slice::from_ref(&dir), None),
            Some(dir.join("libzz-rs-rdmav34.so"))
        );
        assert_eq!(rust_twin("rsw", std::slice::from_ref(&dir), None), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn table_checks() {
        // A table from a future ABI, and one too short to hold open_device,
        // are refused; a short but sufficient one is padded with None.
        // SAFETY: all-zero is a valid ProviderOps.
        let mut t: ProviderOps = unsafe { MaybeUninit::zeroed().assume_init() };
        t.abi_version = PROVIDER_ABI_VERSION + 1;
        t.size = size_of::<ProviderOps>() as u32;
        // SAFETY: t is a full table.
        assert!(unsafe { adopt_table("t", &t) }.is_none());
        t.abi_version = PROVIDER_ABI_VERSION;
        // SAFETY: as above; entries are None so it is refused.
        assert!(unsafe { adopt_table("t", &t) }.is_none());

        unsafe extern "C" fn disc(_: *mut verbs_abi::provider::ProviderDevice, _: usize) -> isize {
            0
        }
        unsafe extern "C" fn open(
            _: *mut verbs_abi::ibv_device,
            _: *mut c_void,
        ) -> *mut verbs_abi::ibv_context {
            core::ptr::null_mut()
        }
        unsafe extern "C" fn close(_: *mut verbs_abi::ibv_context) -> core::ffi::c_int {
            0
        }
        t.discover = Some(disc);
        t.open_device = Some(open);
        t.close_device = Some(close);
        t.size = (offset_of!(ProviderOps, open_device) + size_of::<usize>()) as u32;
        // SAFETY: t is larger than the declared size.
        let ops = unsafe { adopt_table("t", &t) }.expect("short table accepted");
        assert!(ops.discover.is_some() && ops.open_device.is_some());
        assert!(
            ops.close_device.is_none(),
            "entry beyond size must read as None"
        );
        t.size = offset_of!(ProviderOps, open_device) as u32;
        // SAFETY: as above.
        assert!(unsafe { adopt_table("t", &t) }.is_none());
    }
}
