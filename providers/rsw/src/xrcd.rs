//! XRC domains: `ibv_open_xrcd` / `ibv_close_xrcd`.
//!
//! A domain opened with a file descriptor is named by the file's inode, as
//! the kernel names it: opening the same file again (with `O_CREAT`, or
//! without once it exists) gives the same domain, `O_EXCL` refuses an
//! existing one, and a file with no domain yet needs `O_CREAT`. `fd` -1
//! opens a new, unnamed domain, this process's only.
//!
//! A named domain is the same domain in every process of the host that
//! opens the file: the processes find each other, and each other's XRC
//! SRQs and receive QPs, in the domain's registry (`xrc_registry`), so
//! `O_EXCL`/`EAGAIN` answer for the whole host, an XRC receive QP of one
//! process delivers SENDs into another's XRC SRQ (`remote_srq`), and
//! `ibv_open_qp` finds another process's receive QP. Within a process the
//! domain is one object however often it is opened.

use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use verbs_abi::*;

use crate::handles::Ctx;
use crate::util::set_errno;
use verbs_rt::ForkFresh;
use verbs_rt::Handles;

/// The domain behind one or more open handles.
pub struct Domain {
    pub id: u64,
    /// XRC SRQs and receive QPs in the domain: close is refused while any
    /// exist.
    pub users: AtomicU32,
    /// The file's (device, inode), for named domains.
    key: Option<(u64, u64)>,
    /// Named domains: our membership of the host-wide domain (None when
    /// the registry cannot be had: then the domain is this process's).
    pub reg: Option<crate::xrc_registry::Registry>,
    /// Other processes' SRQs requests named lately.
    remote: crate::remote_srq::Known,
}

impl Drop for Domain {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            let mut m = NAMED.get().lock();
            if m.get(&k).is_some_and(|w| w.strong_count() == 0) {
                m.remove(&k);
            }
        }
    }
}

impl Domain {
    /// The SRQ numbered `num` in another process of the domain, if it
    /// exists there and can be reached (`remote_srq`).
    pub fn remote_srq(&self, num: u32) -> Option<Arc<crate::remote_srq::RemoteSrq>> {
        self.remote.find(self.reg.as_ref()?, num)
    }
}

/// Named domains by the file's (device, inode).
type Named = HashMap<(u64, u64), Weak<Domain>>;
static NAMED: ForkFresh<Mutex<Named>> = ForkFresh::new(|| Mutex::new(HashMap::new()));
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One handle `ibv_open_xrcd` returned.
#[repr(C)]
pub struct Xrcd {
    pub ibv: ibv_xrcd,
    pub domain: Arc<Domain>,
}

/// The XRCD handles open.
pub static XRCDS: Handles<Ctx> = Handles::new();

impl Xrcd {
    /// The domain behind a live handle.
    pub fn domain_of(x: *mut ibv_xrcd) -> Option<Arc<Domain>> {
        XRCDS.get(x)?;
        // SAFETY: the handle is live (in the table); ibv is the first field
        // of a boxed Xrcd.
        Some(unsafe { &*(x as *const Xrcd) }.domain.clone())
    }
}

fn file_key(fd: c_int) -> Result<(u64, u64), c_int> {
    // SAFETY: a zeroed stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into st; fd is the caller's.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(libc::EBADF);
    }
    Ok((st.st_dev, st.st_ino))
}

fn new_domain(key: Option<(u64, u64)>, reg: Option<crate::xrc_registry::Registry>) -> Arc<Domain> {
    Arc::new(Domain {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        users: AtomicU32::new(0),
        key,
        reg,
        remote: Default::default(),
    })
}

fn open(a: &ibv_xrcd_init_attr) -> Result<Arc<Domain>, c_int> {
    if a.comp_mask & !(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS) != 0
        || a.comp_mask & IBV_XRCD_INIT_ATTR_FD == 0
        || a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS == 0
    {
        return Err(libc::EINVAL);
    }
    if a.oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
        return Err(libc::EINVAL);
    }
    if a.fd == -1 {
        return Ok(new_domain(None, None));
    }
    let key = file_key(a.fd)?;
    let mut m = NAMED.get().lock();
    match m.get(&key).and_then(Weak::upgrade) {
        Some(_) if a.oflags & libc::O_EXCL != 0 => Err(libc::EINVAL),
        Some(d) => Ok(d),
        None => {
            // Not open in this process: the registry answers for the
            // host (no domain anywhere: only O_CREAT makes one).
            let reg = match crate::xrc_registry::Registry::join(key, a.oflags) {
                Ok(r) => Some(r),
                Err(e @ (libc::EAGAIN | libc::EINVAL)) => return Err(e),
                Err(e) => {
                    log::warn!(
                        "xrcd: no host-wide registry ({}): the domain is this process's",
                        std::io::Error::from_raw_os_error(e)
                    );
                    if a.oflags & libc::O_CREAT == 0 {
                        return Err(libc::EAGAIN);
                    }
                    None
                }
            };
            let d = new_domain(Some(key), reg);
            m.insert(key, Arc::downgrade(&d));
            Ok(d)
        }
    }
}

pub(crate) unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: attr is the caller's (non-NULL).
    match open(unsafe { &*attr }) {
        Ok(domain) => {
            let x = Box::into_raw(Box::new(Xrcd {
                ibv: ibv_xrcd { context },
                domain,
            })) as *mut ibv_xrcd;
            XRCDS.insert(x, Ctx(context));
            x
        }
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    let taken = XRCDS.remove_if(xrcd, |_| {
        // SAFETY: the handle is live (in the table, locked).
        let x = unsafe { &*(xrcd as *const Xrcd) };
        // The last handle of a domain still holding objects stays open.
        let last =
            Arc::strong_count(&x.domain) == 1 + x.domain.users.load(Ordering::Acquire) as usize;
        if last && x.domain.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: out of the table now, so only this call reclaims it.
    drop(unsafe { Box::from_raw(xrcd as *mut Xrcd) });
    0
}
