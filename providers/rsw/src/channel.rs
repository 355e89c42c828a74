//! Completion event channels.
//!
//! A channel is a pipe: `channel->fd` is the read end, so applications can
//! `poll()` it and set O_NONBLOCK on it, which `get_cq_event` then honours
//! (EAGAIN). Each event is one 8-byte record naming the CQ by serial number,
//! not by pointer: a CQ destroyed with an event still in the pipe is simply
//! not found and the event skipped, instead of handing out a dangling CQ.
//!
//! Every other event is handed out, whatever its CQ holds by then: as with
//! rdma-core and hardware, an event the CQ raised is the program's, and a
//! program that polled the completion before reading the event (seeing
//! the descriptor readable, say) still gets it.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use parking_lot::Mutex;
use verbs_abi::*;

use crate::handles::Ctx;
use crate::util::{event_pipe, read_record, set_errno, write_record};
use verbs_rt::ForkFresh;
use verbs_rt::Handles;

/// The completion channels handed out and not destroyed.
pub static CHANNELS: Handles<Ctx> = Handles::new();

#[repr(C)]
pub struct Channel {
    /// Written by the application too (it may read `fd`/`refcnt`), hence
    /// the cell.
    pub ibv: UnsafeCell<ibv_comp_channel>,
    rd: OwnedFd,
    wr: OwnedFd,
    /// CQs bound to this channel; destroy is refused while any exist.
    pub cqs: AtomicI32,
}

impl Channel {
    /// # Safety
    /// `ch` must come from our `create_comp_channel` and not be destroyed.
    pub unsafe fn from_ibv<'a>(ch: *mut ibv_comp_channel) -> &'a Channel {
        // SAFETY: ibv is the first field of a live, boxed Channel.
        unsafe { &*(ch as *const Channel) }
    }

    pub fn write_fd(&self) -> RawFd {
        self.wr.as_raw_fd()
    }

    pub fn attach(&self) {
        let n = self.cqs.fetch_add(1, Ordering::AcqRel) + 1;
        // The public refcnt mirrors ours for programs that look at it.
        // SAFETY: the field is plain data inside our allocation.
        unsafe { std::ptr::write_volatile(&raw mut (*self.ibv.get()).refcnt, n) };
    }

    pub fn detach(&self) {
        let n = self.cqs.fetch_sub(1, Ordering::AcqRel) - 1;
        // SAFETY: as in attach.
        unsafe { std::ptr::write_volatile(&raw mut (*self.ibv.get()).refcnt, n) };
    }
}

/// Sends one completion event for the CQ with `serial` down a channel pipe.
pub fn notify(write_fd: RawFd, serial: u64) {
    write_record(write_fd, &serial.to_ne_bytes());
}

/// What a channel event names: a CQ, registered from above (`cq.rs`) so
/// this module needs no CQ type.
pub trait EventSource: Send + Sync {
    /// An event is handed to the application.
    fn delivered(&self);
    /// The public CQ and its `cq_context`.
    fn public(&self) -> (*mut ibv_cq, *mut c_void);
    /// The misuse checker's look at an event being delivered.
    fn checked_delivery(&self) {}
}

/// A registered CQ. The CQ outlives its registration: destroy unregisters
/// first, then waits for its events to be acknowledged.
#[derive(Clone, Copy)]
struct Source(*const dyn EventSource);
// SAFETY: the pointee is Send + Sync and alive while registered.
unsafe impl Send for Source {}

/// Live CQs by serial, for resolving channel events.
static CQS: ForkFresh<Mutex<HashMap<u64, Source>>> = ForkFresh::new(|| Mutex::new(HashMap::new()));

pub fn register_cq(serial: u64, cq: *const dyn EventSource) {
    CQS.get().lock().insert(serial, Source(cq));
}

pub fn unregister_cq(serial: u64) {
    CQS.get().lock().remove(&serial);
}

pub(crate) unsafe extern "C" fn create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    let (rd, wr) = match event_pipe() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return std::ptr::null_mut();
        }
    };
    let ch = Box::new(Channel {
        ibv: UnsafeCell::new(ibv_comp_channel {
            context,
            fd: rd.as_raw_fd(),
            refcnt: 0,
        }),
        rd,
        wr,
        cqs: AtomicI32::new(0),
    });
    let p = Box::into_raw(ch) as *mut ibv_comp_channel;
    CHANNELS.insert(p, Ctx(context));
    p
}

pub(crate) unsafe extern "C" fn destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    let taken = CHANNELS.remove_if(channel, |_| {
        // SAFETY: a live channel of ours (in the table, locked).
        let cqs = unsafe { Channel::from_ibv(channel) }
            .cqs
            .load(Ordering::Acquire);
        if verbs_rt::check::on() {
            crate::check::channel_destroy(channel, cqs);
        }
        if cqs > 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: a boxed Channel with no CQ left referring to it, out of the
    // table, so only this call reclaims it.
    drop(unsafe { Box::from_raw(channel as *mut Channel) });
    0
}

pub(crate) unsafe extern "C" fn get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: channel came from create_comp_channel.
    let ch = unsafe { Channel::from_ibv(channel) };
    loop {
        let mut rec = [0u8; 8];
        if let Err(e) = read_record(ch.rd.as_raw_fd(), &mut rec) {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
        let serial = u64::from_ne_bytes(rec);
        let cqs = CQS.get().lock();
        let Some(&Source(p)) = cqs.get(&serial) else {
            // The CQ was destroyed after this event was queued.
            continue;
        };
        // SAFETY: registered CQs are alive; destroy unregisters first and
        // then waits for the events counted here to be acknowledged.
        let c = unsafe { &*p };
        c.delivered();
        drop(cqs);
        if verbs_rt::check::on() {
            c.checked_delivery();
        }
        let (ibv, ctx) = c.public();
        // SAFETY: out-pointers supplied by the caller.
        unsafe {
            *cq = ibv;
            *cq_context = ctx;
        }
        return 0;
    }
}
