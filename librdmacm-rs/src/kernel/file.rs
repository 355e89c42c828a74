//! `/dev/infiniband/rdma_cm`: one open file per event channel (the kernel
//! delivers an id's events on the file that created it), commands written
//! to it, and its readiness watched by the CM thread.

use core::ffi::c_void;
use core::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use verbs_abi::uverbs::*;

use crate::channel::Channel;
use crate::engine::{self, Entry, FileTarget, EV_IN};
use crate::error::{errno, Res};

const DEVICE: &core::ffi::CStr = c"/dev/infiniband/rdma_cm";
const ABI_FILE: &str = "/sys/class/misc/rdma_cm/abi_version";

/// Whether ids may use the kernel's CM: its device opens, it speaks the ABI
/// we do, and `RDMACM_RS_KERNEL_CM=0` does not turn it off.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        if std::env::var("RDMACM_RS_KERNEL_CM").is_ok_and(|v| v.trim() == "0") {
            return false;
        }
        let abi = std::fs::read_to_string(ABI_FILE)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if abi.is_some_and(|v| v != RDMA_USER_CM_ABI_VERSION) {
            log::warn!(
                "kernel RDMA CM speaks ABI {abi:?}, not {RDMA_USER_CM_ABI_VERSION}: not used"
            );
            return false;
        }
        open_fd().is_ok_and(|fd| is_misc_device(&fd))
    })
}

/// Whether `fd` is a misc character device, as the kernel's rdma_cm is: a
/// stand-in bound over its name (rsw-run binds /dev/null there for
/// programs that only look for it) accepts every write and answers none.
fn is_misc_device(fd: &OwnedFd) -> bool {
    const MISC_MAJOR: u32 = 10;
    // SAFETY: fstat fills the zeroed struct for a descriptor we own.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && libc::major(st.st_rdev) == MISC_MAJOR
}

fn open_fd() -> Res<OwnedFd> {
    // Non-blocking: the CM thread reads events until EAGAIN; no other
    // command looks at the flag.
    // SAFETY: a constant NUL-terminated path.
    let fd = unsafe {
        libc::open(
            DEVICE.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A command as the kernel reads it: the header, then the command.
#[repr(C)]
struct Msg<T> {
    hdr: rdma_ucm_cmd_hdr,
    body: T,
}

pub struct KFile {
    fd: OwnedFd,
    token: AtomicU64,
}

impl KFile {
    fn open() -> Res<Arc<KFile>> {
        let f = Arc::new(KFile {
            fd: open_fd()?,
            token: AtomicU64::new(0),
        });
        // The CM thread drains it (`pump`, which implements `FileTarget`).
        let weak: Weak<KFile> = Arc::downgrade(&f);
        let target: Weak<dyn FileTarget> = weak;
        let token = engine::get()?.register(f.raw(), Entry::File(target), EV_IN)?;
        f.token.store(token, Ordering::Relaxed);
        Ok(f)
    }

    /// The file of `chan`, opened on first use.
    pub fn of(chan: &Channel) -> Res<Arc<KFile>> {
        chan.backend(KFile::open)
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Writes command `op`. A response goes where the command's `response`
    /// field points (`out` bytes of room, set by the caller).
    pub fn cmd<T: Copy>(&self, op: u32, body: &T, out: usize) -> Res<()> {
        let m = Msg {
            hdr: rdma_ucm_cmd_hdr {
                cmd: op,
                r#in: size_of::<T>() as u16,
                out: out as u16,
            },
            body: *body,
        };
        let n = size_of::<Msg<T>>();
        // SAFETY: writes `n` bytes of a local, fully initialised struct
        // (the padding the kernel does not read).
        let r = unsafe { libc::write(self.raw(), (&m as *const Msg<T>).cast::<c_void>(), n) };
        if r < 0 {
            return Err(errno());
        }
        if r as usize != n {
            return Err(libc::ENODATA);
        }
        Ok(())
    }
}

/// The address of a response buffer, as a command's `response` field.
pub fn resp_ptr<R>(r: &mut R) -> u64 {
    r as *mut R as u64
}

impl Drop for KFile {
    fn drop(&mut self) {
        let token = self.token.load(Ordering::Relaxed);
        if token == 0 {
            return;
        }
        if let Ok(e) = engine::get() {
            e.deregister(self.raw(), token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose commands land in a pipe, for reading back.
    fn piped() -> (KFile, OwnedFd) {
        let mut p = [0; 2];
        // SAFETY: room for two descriptors, owned right away.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors from pipe(2).
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        let f = KFile {
            fd: w,
            token: AtomicU64::new(0),
        };
        (f, r)
    }

    fn read_all(fd: &OwnedFd, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n + 64];
        // SAFETY: reads into a buffer of that size.
        let got = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), v.len()) };
        assert!(got >= 0);
        v.truncate(got as usize);
        v
    }

    #[test]
    fn a_command_is_its_header_then_its_body() {
        let (f, r) = piped();
        let mut resp = rdma_ucm_create_id_resp::default();
        let cmd = rdma_ucm_create_id {
            uid: 0x1122_3344_5566_7788,
            response: resp_ptr(&mut resp),
            ps: 0x0106,
            qp_type: 2,
            reserved: [0; 5],
        };
        f.cmd(
            RDMA_USER_CM_CMD_CREATE_ID,
            &cmd,
            size_of::<rdma_ucm_create_id_resp>(),
        )
        .unwrap();
        let b = read_all(&r, 32);
        assert_eq!(b.len(), 8 + 24);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 0);
        assert_eq!(u16::from_ne_bytes(b[4..6].try_into().unwrap()), 24);
        assert_eq!(u16::from_ne_bytes(b[6..8].try_into().unwrap()), 4);
        assert_eq!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), cmd.uid);
        assert_eq!(
            u64::from_ne_bytes(b[16..24].try_into().unwrap()),
            cmd.response
        );
        assert_eq!(u16::from_ne_bytes(b[24..26].try_into().unwrap()), 0x0106);
        assert_eq!(b[26], 2);
    }

    #[test]
    fn a_stand_in_is_not_the_kernels_device() {
        // rsw-run binds /dev/null over /dev/infiniband/rdma_cm.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(!is_misc_device(&OwnedFd::from(f)));
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(!is_misc_device(&OwnedFd::from(f)));
    }

    #[test]
    fn a_short_command_says_its_own_length() {
        // The kernel reads `in` bytes after the header, whatever the write's
        // length: a 4-byte body says 4, padding or not.
        let (f, r) = piped();
        f.cmd(
            RDMA_USER_CM_CMD_DISCONNECT,
            &rdma_ucm_disconnect { id: 7 },
            0,
        )
        .unwrap();
        let b = read_all(&r, 16);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 10);
        assert_eq!(u16::from_ne_bytes(b[4..6].try_into().unwrap()), 4);
        assert_eq!(u16::from_ne_bytes(b[6..8].try_into().unwrap()), 0);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 7);
    }

    #[test]
    fn a_failed_write_is_its_errno() {
        let (f, r) = piped();
        drop(r);
        // SAFETY: ignoring SIGPIPE for this test process; the write must
        // then fail with EPIPE instead of killing it.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let e = f.cmd(
            RDMA_USER_CM_CMD_LISTEN,
            &rdma_ucm_listen { id: 1, backlog: 2 },
            0,
        );
        assert_eq!(e, Err(libc::EPIPE));
    }
}
