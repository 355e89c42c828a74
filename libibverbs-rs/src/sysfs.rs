//! The historical sysfs helpers (exported because other rdma-core libraries
//! and old programs use them).
//!
//! They behave as in rdma-core on real `/sys` paths. Our devices have no
//! sysfs directory: the `dev_path`/`ibdev_path` we report do not exist, so
//! reading files below them fails with -1/ENOENT, which is what callers
//! such as ibv_devinfo already handle for optional attributes. Under
//! `rsw-run` (tools/rsw-run) they exist, written from what this library
//! reports, and read like a kernel device's.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::ffi::{CString, OsStr};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;

use std::sync::LazyLock;
use verbs_abi::IBV_SYSFS_PATH_MAX;

use crate::util::{set_errno, trusted_env};
use verbs_rt::export;

static SYSFS_PATH: LazyLock<CString> = LazyLock::new(|| {
    let bytes = match trusted_env("SYSFS_PATH") {
        Some(v) => sysfs_root(v.as_bytes()),
        None => b"/sys".to_vec(),
    };
    CString::new(bytes).unwrap_or_else(|_| c"/sys".to_owned())
});

/// `SYSFS_PATH` as rdma-core uses it: bounded, without trailing slashes.
pub(crate) fn sysfs_root(env: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = env
        .iter()
        .copied()
        .take(IBV_SYSFS_PATH_MAX)
        .take_while(|&b| b != 0)
        .collect();
    while v.last() == Some(&b'/') {
        v.pop();
    }
    v
}

/// Turns what `read` returned into the C result: a newline at the end is
/// replaced by the terminator; contents that fill the whole buffer with no
/// room for one are refused (the caller would get an unterminated string).
pub(crate) fn terminate(buf: &mut [u8], mut len: usize) -> Option<usize> {
    if len == 0 {
        return Some(0);
    }
    if buf[len - 1] == b'\n' {
        len -= 1;
        buf[len] = 0;
    } else if len < buf.len() {
        buf[len] = 0;
    } else {
        return None;
    }
    Some(len)
}

fn read_file(path: &[u8], buf: &mut [u8]) -> Result<usize, c_int> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(OsStr::from_bytes(path))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    // One read, as the kernel hands out a sysfs attribute in one go.
    let n = f
        .read(buf)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    terminate(buf, n).ok_or(libc::EINVAL)
}

#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    export!(raw::ptr, untraced, { SYSFS_PATH.as_ptr() })
}

/// # Safety
/// `dir` and `file` are NULL or C strings; `buf` is NULL or `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    export!(raw::minus_one, untraced, {
        if dir.is_null() || file.is_null() || (buf.is_null() && size != 0) {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: both are non-NULL C strings per the C contract.
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let mut path = dir.to_bytes().to_vec();
        path.push(b'/');
        path.extend_from_slice(file.to_bytes());
        let out: &mut [u8] = if size == 0 {
            &mut []
        } else {
            // SAFETY: the caller provides `size` writable bytes at `buf`.
            unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size) }
        };
        match read_file(&path, out) {
            Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

/// In C this is variadic (`fnfmt` is a printf format). It is only ever
/// called with a `struct verbs_sysfs_dev` of rdma-core's own providers,
/// which this library never creates (its devices have no sysfs node), so
/// the format arguments are never needed: a NULL device is EINVAL as in
/// rdma-core, any other has no files. On x86-64 a non-variadic definition
/// receives the fixed arguments of a variadic call unchanged.
///
/// # Safety
/// Arguments are not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
    _buf: *mut c_char,
    _size: usize,
    sysfs_dev: *mut c_void,
    _fnfmt: *const c_char,
) -> c_int {
    export!(raw::minus_one, untraced, {
        set_errno(if sysfs_dev.is_null() {
            libc::EINVAL
        } else {
            libc::ENOENT
        });
        -1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_trimming() {
        assert_eq!(sysfs_root(b"/sys///"), b"/sys");
        assert_eq!(sysfs_root(b"/"), b"");
        assert_eq!(sysfs_root(b"/tmp/x"), b"/tmp/x");
        assert_eq!(sysfs_root(&[b'a'; 300]).len(), IBV_SYSFS_PATH_MAX);
    }

    #[test]
    fn termination() {
        let mut b = *b"abc\n\0\0";
        assert_eq!(terminate(&mut b, 4), Some(3));
        assert_eq!(&b[..4], b"abc\0");
        let mut b = *b"abcd";
        assert_eq!(terminate(&mut b, 3), Some(3));
        assert_eq!(b[3], 0);
        let mut b = *b"abcd";
        assert_eq!(terminate(&mut b, 4), None);
        let mut b = *b"abc\n";
        assert_eq!(terminate(&mut b, 4), Some(3));
        assert_eq!(terminate(&mut [], 0), Some(0));
    }

    #[test]
    fn read_real_and_missing_files() {
        let dir = std::env::temp_dir().join(format!("ibv-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("node_guid"), "0002:c903:0000:1234\n").unwrap();
        let cdir = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let mut buf = [0 as c_char; 64];
        // SAFETY: valid strings and a 64-byte buffer.
        let n = unsafe {
            ibv_read_sysfs_file(
                cdir.as_ptr(),
                c"node_guid".as_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        assert_eq!(n, 19);
        // SAFETY: the call NUL-terminated the buffer.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(s.to_bytes(), b"0002:c903:0000:1234");
        // Too small to hold the contents and a terminator.
        let mut small = [0 as c_char; 8];
        // SAFETY: as above.
        let n = unsafe {
            ibv_read_sysfs_file(
                cdir.as_ptr(),
                c"node_guid".as_ptr(),
                small.as_mut_ptr(),
                small.len(),
            )
        };
        assert_eq!(n, -1);
        // SAFETY: as above.
        let n = unsafe {
            ibv_read_sysfs_file(cdir.as_ptr(), c"nope".as_ptr(), buf.as_mut_ptr(), buf.len())
        };
        assert_eq!(n, -1);
        assert_eq!(crate::util::errno(), libc::ENOENT);
        // SAFETY: NULL arguments are checked.
        let n = unsafe {
            ibv_read_sysfs_file(
                core::ptr::null(),
                c"x".as_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        assert_eq!(n, -1);
        assert_eq!(crate::util::errno(), libc::EINVAL);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
