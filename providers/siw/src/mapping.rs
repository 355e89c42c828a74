//! A queue the kernel shares with us: siw allocates every SQ, RQ, SRQ and
//! CQ in the kernel and hands out a key; mapping the device's command file
//! at that key (as the offset) shows the queue in this process.

use core::ffi::c_int;
use core::ptr::NonNull;

/// A shared mapping of `len` bytes, unmapped when dropped.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, valid from any thread; what
// lives in it is synchronised by its users (atomic flags, their locks).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of the queue `key` of the command file `fd`.
    pub fn new(fd: c_int, key: u64, len: usize) -> Result<Self, c_int> {
        if len == 0 {
            return Err(libc::EINVAL);
        }
        let off = libc::off_t::try_from(key).map_err(|_| libc::EINVAL)?;
        // SAFETY: a fresh mapping chosen by the kernel; nothing of ours is
        // replaced.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(verbs_rt::errno::errno());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(libc::ENOMEM)?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; its users are gone (they
        // borrow it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
impl Mapping {
    /// Anonymous memory standing in for a kernel queue.
    pub fn anonymous(len: usize) -> Self {
        // SAFETY: a fresh private mapping.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Mapping {
            ptr: NonNull::new(p.cast()).expect("mapped"),
            len,
        }
    }
}
