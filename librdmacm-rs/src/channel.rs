//! Event channels and events.
//!
//! A channel is a queue of events plus a real file descriptor (one end of
//! a socket pair, in `rdma_event_channel.fd`) that is readable exactly
//! while the queue is non-empty, so applications can `poll()` it, and
//! setting `O_NONBLOCK` on it makes `rdma_get_cm_event` fail with EAGAIN
//! instead of blocking, as with the kernel's CM device. A socket pair
//! rather than an eventfd, because a blocking `recv(MSG_PEEK)` waits for
//! readiness without consuming it and, like the kernel device's `read`, is
//! restarted after a signal handler installed with SA_RESTART.
//!
//! Events are boxed `rdma_cm_event`s followed by room for private data;
//! the pointer handed to the application is the box. Each event counts
//! against its *owner* id (the id the event is about, except for connect
//! requests, which count against the listener), so `rdma_destroy_id` and
//! `rdma_migrate_id` can wait until everything reported has been acked.

use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use verbs_rt::Handles;

use crate::error::{check, errno, Res};

/// What must happen when the application retrieves an event; done in the
/// retrieving thread, as rdma-core's librdmacm does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Post {
    None,
    /// A REP arrived: with a QP on the id, move it to RTS and answer RTU
    /// (the event becomes ESTABLISHED); without, it is CONNECT_RESPONSE.
    ConnectReply,
    /// The connection is gone: move the id's QP to the error state so
    /// posted work completes with IBV_WC_WR_FLUSH_ERR.
    QpToErr,
    /// A connect request left the listener's backlog.
    ConnectRequest,
    /// A multicast join: attach the id's QP to the group, as rdma-core
    /// does when the application takes the event.
    McastJoin,
    /// An event of the kernel's CM: `EventBox::ext` holds what the kernel
    /// reported, and the kernel backend does rdma-core's work on it.
    Kernel,
}

/// Longest private data any event carries (the REP's).
pub const EVENT_PDATA: usize = 256;

/// An id as events name it. The channel sits below the ids (an id holds
/// its channel), so it knows them only through this; every implementor is
/// a `CmId`, which the id layer gets back with `Arc::downcast`.
pub trait EventId: Any + Send + Sync {
    /// The C id the application finds in the event.
    fn c_id(&self) -> *mut rdma_cm_id;
    /// An event counted against this id went to the application.
    fn note_reported(&self);
}

/// Whether `a` and `b` are the same object.
fn same<A: ?Sized, B: ?Sized>(a: &Arc<A>, b: &Arc<B>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

#[repr(C)]
pub struct EventBox {
    /// Must stay first: the application's `rdma_cm_event *` is the box.
    pub ev: rdma_cm_event,
    pub pdata: [u8; EVENT_PDATA],
    pub owner: Arc<dyn EventId>,
    pub subject: Arc<dyn EventId>,
    pub post: Post,
    /// What a CM backend keeps with its event until it is retrieved.
    pub ext: Option<Box<dyn Any + Send>>,
}

// SAFETY: the raw pointers inside are only the C view handed to the
// application: ids (which this library never reaches through an event,
// using `owner`/`subject` instead) and `private_data`, which points into
// this same heap box and so stays valid wherever the box goes. Nothing in
// the box is tied to the thread that made it.
unsafe impl Send for EventBox {}

impl EventBox {
    pub fn new<I: EventId>(
        owner: &Arc<I>,
        subject: &Arc<I>,
        kind: rdma_cm_event_type,
        status: i32,
    ) -> Box<Self> {
        let mut ev = rdma_cm_event::zeroed();
        ev.id = subject.c_id();
        ev.event = kind;
        ev.status = status;
        Box::new(EventBox {
            ev,
            pdata: [0; EVENT_PDATA],
            owner: owner.clone(),
            subject: subject.clone(),
            post: Post::None,
            ext: None,
        })
    }

    /// Whether `id` is the event's subject.
    pub fn is_about<I: EventId>(&self, id: &Arc<I>) -> bool {
        same(&self.subject, id)
    }

    /// Copies `data` into the event as the fixed-size private data area of
    /// `area` bytes that the IB CM delivers (zero-padded past what the peer
    /// sent).
    pub fn set_pdata(&mut self, data: &[u8], area: usize) {
        let n = data.len().min(area).min(EVENT_PDATA);
        self.pdata[..n].copy_from_slice(&data[..n]);
        // Writing a union field is safe; `conn` is the member our
        // (connected) port space uses.
        self.ev.param.conn.private_data = self.pdata.as_ptr().cast();
        self.ev.param.conn.private_data_len = area as u8;
    }

    pub fn conn(&mut self) -> &mut rdma_conn_param {
        // SAFETY: as above; every member is plain data.
        unsafe { &mut self.ev.param.conn }
    }
}

/// The socket pair holds one byte exactly while `events` is non-empty
/// (until the channel is closed), so the byte's presence needs no flag.
struct Queue {
    events: VecDeque<Box<EventBox>>,
    closed: bool,
}

pub struct Channel {
    /// The application's end.
    fd: OwnedFd,
    /// Ours: one byte sits in the pair while events are queued.
    tx: OwnedFd,
    q: Mutex<Queue>,
    /// The C object (`ChannelBox`) applications hold.
    c_ptr: Mutex<usize>,
    /// A CM backend's own state for this channel (the kernel CM's device
    /// file), made on first use.
    backend: Mutex<Option<Arc<dyn Any + Send + Sync>>>,
}

/// The C `rdma_event_channel` with our channel behind it.
#[repr(C)]
pub struct ChannelBox {
    pub c: rdma_event_channel,
    pub chan: Arc<Channel>,
}

/// The channels handed out, by the C object's address.
static CHANNELS: Handles<Arc<Channel>> = Handles::new();

impl Channel {
    /// A new channel and its C object.
    pub fn create() -> Res<Arc<Channel>> {
        let mut sv = [0; 2];
        // SAFETY: `sv` has room for the two descriptors, owned right away.
        check(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        })?;
        // SAFETY: fresh descriptors from socketpair.
        let (fd, tx) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let chan = Arc::new(Channel {
            fd,
            tx,
            q: Mutex::new(Queue {
                events: VecDeque::new(),
                closed: false,
            }),
            c_ptr: Mutex::new(0),
            backend: Mutex::new(None),
        });
        let b = Box::into_raw(Box::new(ChannelBox {
            c: rdma_event_channel {
                fd: chan.fd.as_raw_fd(),
            },
            chan: chan.clone(),
        }));
        *chan.c_ptr.lock() = b as usize;
        CHANNELS.insert(b, chan.clone());
        Ok(chan)
    }

    pub fn lookup(p: *mut rdma_event_channel) -> Res<Arc<Channel>> {
        CHANNELS.get(p).ok_or(libc::EINVAL)
    }

    /// The backend state of type `T`, made by `make` the first time.
    pub fn backend<T: Any + Send + Sync>(&self, make: impl FnOnce() -> Res<Arc<T>>) -> Res<Arc<T>> {
        let mut slot = self.backend.lock();
        if let Some(b) = slot.as_ref() {
            return b.clone().downcast::<T>().map_err(|_| libc::EINVAL);
        }
        let b = make()?;
        *slot = Some(b.clone());
        Ok(b)
    }

    pub fn c_ptr(&self) -> *mut rdma_event_channel {
        *self.c_ptr.lock() as *mut rdma_event_channel
    }

    /// Closes the channel and frees its C object. Queued events are dropped;
    /// a thread still blocked on the descriptor stays blocked, as it would
    /// on the kernel's CM device.
    pub fn destroy(self: &Arc<Self>) {
        let p = std::mem::replace(&mut *self.c_ptr.lock(), 0);
        if p == 0 {
            return;
        }
        CHANNELS.remove(p as *const ChannelBox);
        let dropped: Vec<_> = {
            let mut q = self.q.lock();
            q.closed = true;
            q.events.drain(..).collect()
        };
        drop(dropped);
        // Ids still on the channel keep what they use of it.
        drop(self.backend.lock().take());
        // SAFETY: `p` came from Box::into_raw in `create` and is freed once
        // (the registry entry and c_ptr were removed above).
        drop(unsafe { Box::from_raw(p as *mut ChannelBox) });
    }

    /// The queue became non-empty. Called under the queue lock.
    fn raise(&self) {
        let b = 1u8;
        // SAFETY: one byte from a valid buffer; never blocks (the pair
        // holds at most this byte) and never raises SIGPIPE.
        unsafe {
            libc::send(
                self.tx.as_raw_fd(),
                &b as *const u8 as *const _,
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
    }

    /// The queue became empty. Called under the queue lock.
    fn lower(&self) {
        let mut b = 0u8;
        // SAFETY: one byte into a valid buffer; MSG_DONTWAIT keeps this
        // independent of the mode the application set on the descriptor.
        unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                &mut b as *mut u8 as *mut _,
                1,
                libc::MSG_DONTWAIT,
            )
        };
    }

    pub fn push(&self, ev: Box<EventBox>) {
        let mut q = self.q.lock();
        if q.closed {
            return;
        }
        q.events.push_back(ev);
        if q.events.len() == 1 {
            self.raise();
        }
    }

    /// Takes every queued event owned by `owner` (for destroy and migrate).
    // Events stay boxed: their private-data pointer points into the box.
    #[allow(clippy::vec_box)]
    pub fn take_for<I: EventId>(&self, owner: &Arc<I>) -> Vec<Box<EventBox>> {
        let mut q = self.q.lock();
        let had_events = !q.events.is_empty();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(q.events.len());
        for e in q.events.drain(..) {
            if same(&e.owner, owner) {
                taken.push(e);
            } else {
                kept.push_back(e);
            }
        }
        q.events = kept;
        if had_events && q.events.is_empty() {
            self.lower();
        }
        taken
    }

    pub fn has_events_for<I: EventId>(&self, id: &Arc<I>) -> bool {
        self.q.lock().events.iter().any(|e| e.is_about(id))
    }

    fn pop(&self) -> Res<Option<Box<EventBox>>> {
        let mut q = self.q.lock();
        if let Some(e) = q.events.pop_front() {
            e.owner.note_reported();
            if q.events.is_empty() {
                self.lower();
            }
            return Ok(Some(e));
        }
        if q.closed {
            return Err(libc::EBADF);
        }
        Ok(None)
    }

    /// The next event: blocks while there is none, unless the application
    /// made the descriptor non-blocking (then EAGAIN). A signal ends the
    /// wait with EINTR unless its handler asked for restarts.
    pub fn get(&self) -> Res<Box<EventBox>> {
        loop {
            if let Some(e) = self.pop()? {
                return Ok(e);
            }
            let mut b = 0u8;
            // SAFETY: peeks one byte into a valid buffer; honours the
            // descriptor's O_NONBLOCK.
            let r = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    &mut b as *mut u8 as *mut _,
                    1,
                    libc::MSG_PEEK,
                )
            };
            if r < 0 {
                return Err(errno());
            }
            if r == 0 {
                // Our end is gone: the channel was torn down under us.
                return Err(libc::EBADF);
            }
        }
    }
}

/// An event's name, for the log.
pub(crate) fn event_name(event: rdma_cm_event_type) -> &'static str {
    event_cstr(event).to_str().unwrap_or("?")
}

pub(crate) fn event_cstr(event: rdma_cm_event_type) -> &'static core::ffi::CStr {
    let s: &'static core::ffi::CStr = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s
}
