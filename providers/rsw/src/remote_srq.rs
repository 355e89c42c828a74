//! Another process's XRC SRQ, as an XRC receive QP of ours delivers into
//! it: the domain's registry (`xrc_registry`) says where its owner keeps
//! its receive ring and completion ring (a mailbox, `transport::mailbox`)
//! and its key table (`transport::local`). The responder takes the oldest
//! receive from the ring by compare-and-swap, receives the payload into a
//! buffer of its own, checks the receive's scatter list against the
//! owner's key table (the SRQ's PD), writes the bytes into the owner's
//! memory with `process_vm_writev` and leaves the completion (with our
//! QP's number) in the SRQ's completion ring, which the owner's
//! `ibv_poll_cq` moves to the SRQ's CQ; when that CQ is armed the SRQ's
//! eventfd is rung, so the owner's progress thread moves it and raises
//! the completion event. The owner's application and CPU do nothing on
//! the way.
//!
//! When the kernel refuses cross-process access (Yama, another user), or
//! the owner has no same-host path (`RSW_TRANSPORT=tcp`), the SRQ cannot
//! be reached: a request naming it is refused as an invalid request and a
//! warning is logged.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::device::MAX_SGE;
use crate::place;
use crate::ring::RecvWqe;
use crate::transport::local::Peer;
use crate::transport::mailbox::{Delivered, PeerBox};
use crate::xrc_registry::{Registry, SrqEntry};

pub struct RemoteSrq {
    pub entry: SrqEntry,
    /// The registry's generation the entry was last seen in.
    gen: AtomicU64,
    /// The owner process (readable once it exits).
    pidfd: Option<OwnedFd>,
    peer: Arc<Peer>,
    ring: PeerBox,
    /// The SRQ's eventfd in its owner, opened here.
    kick: Option<OwnedFd>,
}

/// The other processes' SRQs one domain's requests named lately: what
/// was found stays known while the registry is unchanged and the owner
/// lives, so a request then costs no lock and one system call.
#[derive(Default)]
pub struct Known(Mutex<HashMap<u32, Arc<RemoteSrq>>>);

impl Known {
    /// The SRQ numbered `num` in another process of the domain whose
    /// registry is `reg`, if it exists there and can be reached.
    pub fn find(&self, reg: &Registry, num: u32) -> Option<Arc<RemoteSrq>> {
        let gen = reg.generation();
        if let Some(r) = self.0.lock().get(&num) {
            if r.gen.load(Ordering::Acquire) == gen && r.owner_alive() {
                return Some(r.clone());
            }
        }
        let e = reg.find_srq(num);
        let mut cache = self.0.lock();
        let Some(e) = e else {
            cache.remove(&num);
            return None;
        };
        if let Some(r) = cache.get(&num).filter(|r| r.entry == e) {
            r.gen.store(gen, Ordering::Release);
            return Some(r.clone());
        }
        match reach(e, gen) {
            Ok(r) => {
                cache.insert(num, r.clone());
                Some(r)
            }
            Err(why) => {
                cache.remove(&num);
                log::warn!(
                    "xrc srq {num:#x} of pid {}: unreachable, requests naming it are refused: {why}",
                    e.owner.pid
                );
                None
            }
        }
    }
}

fn reach(e: SrqEntry, gen: u64) -> Result<Arc<RemoteSrq>, String> {
    let (fd, token) = e
        .table
        .ok_or("its process has no same-host path (RSW_TRANSPORT=tcp?)")?;
    let off = e.mbox.ok_or("its receive queue is not shared")?;
    let peer = Peer::open(e.owner.pid as u64, fd, token)?;
    let ring = peer.mailbox_at(off).ok_or("its mailbox is out of reach")?;
    let pidfd = rustix::process::Pid::from_raw(e.owner.pid as i32).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    // An eventfd cannot be opened through /proc: take a duplicate (this
    // needs the ptrace permission the copies need anyway).
    let kick = e.kick_fd.and_then(|k| {
        let pidfd = pidfd.as_ref()?;
        rustix::process::pidfd_getfd(pidfd, k as i32, rustix::process::PidfdGetfdFlags::empty())
            .inspect_err(|err| {
                log::warn!(
                    "xrc srq {:#x}: cannot reach pid {}'s eventfd ({err}): its armed CQ learns of completions when polled",
                    e.num,
                    e.owner.pid
                )
            })
            .ok()
    });
    Ok(Arc::new(RemoteSrq {
        entry: e,
        gen: AtomicU64::new(gen),
        pidfd,
        peer,
        ring,
        kick,
    }))
}

/// What [`RemoteSrq::claim`] found.
pub enum Claim {
    Taken,
    /// None posted (or no room for the completion): RNR.
    Empty,
    /// The SRQ no longer shares its ring (resized).
    Closed,
}

impl RemoteSrq {
    /// Whether the owner still runs: a process that died without closing
    /// leaves its rings mapped here, and nothing must be taken from them.
    fn owner_alive(&self) -> bool {
        match &self.pidfd {
            Some(p) => {
                let mut fds = [rustix::event::PollFd::new(p, rustix::event::PollFlags::IN)];
                rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default()))
                    .is_ok_and(|n| n == 0)
            }
            None => false,
        }
    }

    /// Whether the SRQ stopped sharing its ring (resized, destroyed).
    pub fn closed(&self) -> bool {
        matches!(self.ring.peek(), Err(true))
    }

    /// Takes the oldest posted receive into `w`.
    pub fn claim(&self, w: &mut RecvWqe) -> Claim {
        loop {
            match self.ring.peek() {
                Ok(o) => {
                    if self.ring.commit(&o) {
                        w.set(o.wr_id, self.entry.pd, &o.sges[..o.nsge]);
                        return Claim::Taken;
                    }
                }
                Err(true) => return Claim::Closed,
                Err(false) => return Claim::Empty,
            }
        }
    }

    /// The owner's addresses of the first `len` bytes of `w`'s scatter
    /// list, if its keys allow writing them (as the owner's responder
    /// would check them).
    fn dest(
        &self,
        w: &RecvWqe,
        len: u64,
        out: &mut [libc::iovec; MAX_SGE as usize],
    ) -> Option<usize> {
        match place::scatter(&*self.peer, w.sges(), 0, len as usize, w.pd_id, out)? {
            (n, 0) => Some(n),
            _ => None,
        }
    }

    /// Whether `len` bytes may be written into `w`.
    pub fn check(&self, w: &RecvWqe, len: u64) -> bool {
        let mut v = [crate::util::iov(std::ptr::null(), 0); MAX_SGE as usize];
        self.dest(w, len, &mut v).is_some()
    }

    /// Writes `len` bytes at `src` into `w`'s buffers in the owner.
    ///
    /// # Safety
    /// `src` must be `len` readable bytes of ours.
    pub unsafe fn write(&self, w: &RecvWqe, src: *const u8, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        let mut v = [crate::util::iov(std::ptr::null(), 0); MAX_SGE as usize];
        let Some(n) = self.dest(w, len as u64, &mut v) else {
            return false;
        };
        let local = [crate::util::iov(src, len)];
        // SAFETY: the caller vouches for src; the remote iovecs are
        // checked by the kernel against the owner's address space.
        let ok = unsafe { self.peer.write_v(&local, &v[..n], len) };
        if !ok {
            log::warn!(
                "xrc srq {:#x}: process_vm_writev into pid {}: {}",
                self.entry.num,
                self.peer.pid(),
                std::io::Error::last_os_error()
            );
        }
        ok
    }

    /// Leaves a completion in the SRQ's completion ring; rings the owner
    /// if its CQ is armed.
    pub fn complete(&self, d: &Delivered) {
        if self.ring.deliver(d, None) {
            if let Some(k) = &self.kick {
                let _ = rustix::io::write(k, &1u64.to_ne_bytes());
            }
        }
    }
}
