//! Device contexts and their asynchronous event queue.
//!
//! The `ibv_context` programs see is the tail of a `verbs_context` we own;
//! `abi_compat` marks it as extended so the inline functions of verbs.h reach
//! `query_port`, `create_cq_ex`, `create_qp_ex` and `query_device_ex` in it.
//!
//! Async events live in a queue; a pipe carries one token byte per event so
//! `async_fd` is a real descriptor applications can `poll()` and make
//! non-blocking. Destroying an object removes its unread events (so a later
//! read never hands out a dangling pointer) and then waits until every event
//! already handed out for it is acknowledged, as the verbs API documents.

use std::collections::VecDeque;
use std::mem::offset_of;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use verbs_abi::*;

use crate::device::{device_attr, port_attr, DeviceInfo, CORE_CLOCK_KHZ};
use crate::event_count::EventCounter;
use crate::util::{event_pipe, read_record, set_errno, write_record};
use verbs_rt::ForkFresh;

struct QueuedEvent {
    element: usize,
    event_type: ibv_event_type,
    counter: Option<Arc<EventCounter>>,
}

pub struct AsyncQueue {
    q: Mutex<VecDeque<QueuedEvent>>,
    rd: OwnedFd,
    wr: OwnedFd,
}

impl AsyncQueue {
    fn new() -> std::io::Result<AsyncQueue> {
        let (rd, wr) = event_pipe()?;
        Ok(AsyncQueue {
            q: Mutex::new(VecDeque::new()),
            rd,
            wr,
        })
    }

    /// Queues an event about `element` (a QP or CQ pointer, or a port number).
    pub fn push(
        &self,
        element: usize,
        event_type: ibv_event_type,
        counter: Option<Arc<EventCounter>>,
    ) {
        let mut q = self.q.lock();
        q.push_back(QueuedEvent {
            element,
            event_type,
            counter,
        });
        write_record(self.wr.as_raw_fd(), &[1u8]);
    }

    /// Drops the not-yet-read events about `element` (its object is going
    /// away).
    pub fn purge(&self, element: usize) {
        self.q.lock().retain(|e| e.element != element);
    }

    pub fn fd(&self) -> c_int {
        self.rd.as_raw_fd()
    }

    /// Blocks (or fails with EAGAIN if the fd is non-blocking) for the next
    /// event.
    fn get(&self) -> Result<ibv_async_event, i32> {
        loop {
            let mut tok = [0u8; 1];
            if let Err(e) = read_record(self.rd.as_raw_fd(), &mut tok) {
                return Err(e.raw_os_error().unwrap_or(libc::EIO));
            }
            let mut q = self.q.lock();
            // An empty queue means this token belonged to a purged event.
            if let Some(ev) = q.pop_front() {
                // Counted under the queue lock so a concurrent destroy either
                // purged the event or sees it delivered.
                if let Some(c) = &ev.counter {
                    c.delivered();
                }
                let mut out = ibv_async_event::zeroed();
                if is_port_event(ev.event_type) {
                    out.element.port_num = ev.element as c_int;
                } else {
                    out.element.qp = ev.element as *mut ibv_qp;
                }
                out.event_type = ev.event_type;
                return Ok(out);
            }
        }
    }
}

fn is_port_event(t: ibv_event_type) -> bool {
    matches!(
        t,
        IBV_EVENT_PORT_ACTIVE
            | IBV_EVENT_PORT_ERR
            | IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE
            | IBV_EVENT_DEVICE_FATAL
    )
}

/// State shared by a context and every object created from it (objects keep
/// it alive so the async queue outlives a careless close order).
pub struct CtxShared {
    pub dev: DeviceInfo,
    pub async_q: AsyncQueue,
    /// The port is ACTIVE: the interface is up with its link (`port.rs`).
    pub port_up: AtomicBool,
    /// An injected port-down (`faults`) holds the QPs' requests back.
    pub port_held: AtomicBool,
}

/// Every open context, for port events.
static OPEN: ForkFresh<Mutex<Vec<Weak<CtxShared>>>> = ForkFresh::new(|| Mutex::new(Vec::new()));

/// The interface `ifindex` gained or lost its link: the port of every open
/// context on it changes state, with the event a NIC's port raises.
pub fn link_changed(ifindex: u32, up: bool) {
    let mut open = OPEN.get().lock();
    open.retain(|w| w.strong_count() > 0);
    for c in open.iter().filter_map(Weak::upgrade) {
        // An injected port-down outlasts the link coming back.
        let up = up && !(crate::faults::active() && fault_down(&c.dev.name));
        if c.dev.ifindex == ifindex && c.port_up.swap(up, Ordering::AcqRel) != up {
            let t = if up {
                IBV_EVENT_PORT_ACTIVE
            } else {
                IBV_EVENT_PORT_ERR
            };
            c.async_q.push(1, t, None);
        }
    }
}

/// Devices an injected fault took down (None: all of them).
static FAULT_DOWN: ForkFresh<Mutex<Vec<Option<String>>>> =
    ForkFresh::new(|| Mutex::new(Vec::new()));

fn fault_down(dev: &str) -> bool {
    FAULT_DOWN
        .get()
        .lock()
        .iter()
        .any(|d| d.as_deref().is_none_or(|d| d == dev))
}

/// An injected port event (`faults`, `port:` rules) for `device` (None:
/// every device): the port changes state with the event a NIC's port
/// raises, and while it is down the QPs send nothing (their retry timers
/// run, as on a real link loss).
pub fn port_fault(device: Option<&str>, up: bool) {
    {
        let mut f = FAULT_DOWN.get().lock();
        f.retain(|d| d.as_deref() != device);
        if !up {
            f.push(device.map(str::to_owned));
        }
    }
    log::info!(
        "injected: port 1 of {} {}",
        device.unwrap_or("every device"),
        if up { "up" } else { "down" }
    );
    let mut open = OPEN.get().lock();
    open.retain(|w| w.strong_count() > 0);
    for c in open.iter().filter_map(Weak::upgrade) {
        if device.is_some_and(|d| d != c.dev.name) {
            continue;
        }
        let down = fault_down(&c.dev.name);
        c.port_held.store(down, Ordering::Release);
        let up = !down && link_up(&c.dev.ifname);
        if c.port_up.swap(up, Ordering::AcqRel) != up {
            let t = if up {
                IBV_EVENT_PORT_ACTIVE
            } else {
                IBV_EVENT_PORT_ERR
            };
            c.async_q.push(1, t, None);
        }
    }
}

/// Whether the interface named `ifname` is up with its link now.
fn link_up(ifname: &str) -> bool {
    // SAFETY: a zeroed ifreq is valid; the name is copied in below (NUL
    // terminated: at most IFNAMSIZ - 1 bytes).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr
        .ifr_name
        .iter_mut()
        .zip(ifname.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    // SAFETY: plain socket creation; checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return true;
    }
    // SAFETY: SIOCGIFFLAGS fills ifr, which is ours; fd is closed after.
    let r = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) };
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    // SAFETY: SIOCGIFFLAGS wrote the flags member of the union.
    r != 0 || crate::port::is_up(unsafe { ifr.ifr_ifru.ifru_flags } as u16 as u32)
}

/// The context allocation. `vctx` comes first so the `ibv_context` at its
/// end is at a fixed offset from the start of this struct.
#[repr(C)]
pub struct Context {
    pub vctx: verbs_context,
    pub shared: Arc<CtxShared>,
}

impl Context {
    /// # Safety
    /// `ctx` must be an `ibv_context` returned by our `open_device` and not
    /// yet closed.
    pub unsafe fn from_ibv<'a>(ctx: *mut ibv_context) -> &'a Context {
        let off = offset_of!(verbs_context, context);
        // SAFETY: per the contract, ctx is the `context` field of the
        // `vctx` at offset 0 of a live Context.
        unsafe { &*((ctx as *mut u8).sub(off) as *const Context) }
    }

    /// # Safety
    /// As [`Context::from_ibv`].
    pub unsafe fn shared_of(ctx: *mut ibv_context) -> Arc<CtxShared> {
        // SAFETY: forwarded contract.
        unsafe { Context::from_ibv(ctx) }.shared.clone()
    }
}

// ---- queries on an open context ---------------------------------------

/// Copies the first `size` bytes of `val` to `dst` (the caller's struct may
/// be an older, shorter version) and zeroes nothing beyond.
///
/// # Safety
/// `dst` must be valid for `size` bytes of writes.
unsafe fn write_prefix<T>(dst: *mut T, val: &T, size: usize) {
    let n = size.min(std::mem::size_of::<T>());
    // SAFETY: caller guarantees dst has room for `size` >= n bytes; val is
    // a whole T so it has n bytes to read.
    unsafe { std::ptr::copy_nonoverlapping(val as *const T as *const u8, dst as *mut u8, n) };
}

pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    // SAFETY: input, when given, points to a valid input struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: context was created by open_device.
    let ctx = unsafe { Context::from_ibv(context) };
    let d = &ctx.shared.dev;
    let mut ex = ibv_device_attr_ex::zeroed();
    ex.orig_attr = device_attr(d);
    ex.completion_timestamp_mask = u64::MAX;
    ex.hca_core_clock = CORE_CLOCK_KHZ;
    ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags as u64;
    ex.phys_port_cnt_ex = 1;
    // ODP: every transport, implicit MRs too (see mr.rs).
    let all = IBV_ODP_SUPPORT_SEND
        | IBV_ODP_SUPPORT_RECV
        | IBV_ODP_SUPPORT_WRITE
        | IBV_ODP_SUPPORT_READ
        | IBV_ODP_SUPPORT_ATOMIC
        | IBV_ODP_SUPPORT_SRQ_RECV;
    ex.odp_caps.general_caps = (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) as u64;
    ex.odp_caps.per_transport_caps.rc_odp_caps = all;
    ex.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND
        | IBV_ODP_SUPPORT_RECV
        | IBV_ODP_SUPPORT_WRITE
        | IBV_ODP_SUPPORT_SRQ_RECV;
    ex.odp_caps.per_transport_caps.ud_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    ex.xrc_odp_caps = all;
    ex.max_dm_size = crate::device::MAX_DM_SIZE;
    // Raw packet QPs spread over WQs by Toeplitz (`flow`, `rwq`); no
    // stripping, FCS or checksum offloads.
    ex.rss_caps.supported_qpts = 1 << IBV_QPT_RAW_PACKET;
    ex.rss_caps.max_rwq_indirection_tables = crate::device::MAX_IND_TBLS;
    ex.rss_caps.max_rwq_indirection_table_size = 1 << crate::device::MAX_LOG_IND_TBL;
    ex.rss_caps.rx_hash_fields_mask = crate::flow::HASH_FIELDS;
    ex.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ as u8;
    ex.max_wq_type_rq = crate::device::MAX_WQS;
    ex.raw_packet_caps = 0;
    // Tag matching, in software (`tm`).
    ex.tm_caps = crate::device::tm_caps();
    // SAFETY: attr has room for attr_size bytes.
    unsafe { write_prefix(attr, &ex, attr_size) };
    0
}

pub(crate) unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    attr_size: usize,
) -> c_int {
    if port_num != 1 {
        return libc::EINVAL;
    }
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: context was created by open_device.
    let ctx = unsafe { Context::from_ibv(context) };
    let mut p = port_attr(&ctx.shared.dev);
    if !ctx.shared.port_up.load(Ordering::Acquire) {
        p.state = IBV_PORT_DOWN;
        // Disabled
        p.phys_state = 3;
    }
    // SAFETY: attr has room for attr_size bytes.
    unsafe { write_prefix(attr, &p, attr_size) };
    0
}

pub(crate) unsafe extern "C" fn query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    _flags: u32,
) -> c_int {
    if port_num != 1 || entry.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: context was created by open_device.
    let ctx = unsafe { Context::from_ibv(context) };
    let d = &ctx.shared.dev;
    // Past the table is EINVAL, as the kernel reports it; ENODATA would mean
    // an empty entry inside it (our table has none), which callers turn
    // into a zero GID.
    let Some(g) = d.gids.get(gid_index as usize) else {
        return libc::EINVAL;
    };
    let e = ibv_gid_entry {
        gid: ibv_gid::from_raw(*g),
        gid_index,
        port_num,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: d.ifindex,
    };
    // SAFETY: entry points to a caller-owned ibv_gid_entry.
    unsafe { entry.write(e) };
    0
}

pub(crate) unsafe extern "C" fn query_pkey(
    _context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if port_num != 1 || pkey.is_null() {
        return libc::EINVAL;
    }
    if index != 0 {
        return libc::EINVAL;
    }
    // SAFETY: pkey points to a caller-owned u16. The value is the default
    // full-membership P_Key, in network byte order like the kernel reports.
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

// ---- open and close ----------------------------------------------------

/// The entry points a context hands to programs (the data path inline in
/// `verbs.h` and the `verbs_context` extensions), given by the provider's
/// top layer (`lib.rs`) so this module needs none of the objects below.
pub struct DataPath {
    pub create_cq_ex:
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex,
    pub create_qp_ex:
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp,
    pub poll_cq: unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int,
    pub req_notify_cq: unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int,
    pub post_send:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int,
    pub post_recv:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    pub create_srq_ex:
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq,
    pub post_srq_recv:
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    pub post_srq_ops:
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int,
    pub get_srq_num: unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int,
    pub open_xrcd: unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd,
    pub close_xrcd: unsafe extern "C" fn(*mut ibv_xrcd) -> c_int,
    pub alloc_mw: unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw,
    pub bind_mw: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int,
    pub dealloc_mw: unsafe extern "C" fn(*mut ibv_mw) -> c_int,
    pub advise_mr:
        unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int,
    pub alloc_dm: unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm,
    pub free_dm: unsafe extern "C" fn(*mut ibv_dm) -> c_int,
    pub reg_dm_mr: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, u32) -> *mut ibv_mr,
    pub alloc_td: unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td,
    pub dealloc_td: unsafe extern "C" fn(*mut ibv_td) -> c_int,
    pub alloc_parent_domain:
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd,
    pub open_qp: unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp,
    /// Raw packet QPs' flows, work queues and RSS tables.
    pub create_flow: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow,
    pub destroy_flow: unsafe extern "C" fn(*mut ibv_flow) -> c_int,
    pub create_wq: unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq,
    pub modify_wq: unsafe extern "C" fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int,
    pub destroy_wq: unsafe extern "C" fn(*mut ibv_wq) -> c_int,
    pub create_rwq_ind_table: unsafe extern "C" fn(
        *mut ibv_context,
        *mut ibv_rwq_ind_table_init_attr,
    ) -> *mut ibv_rwq_ind_table,
    pub destroy_rwq_ind_table: unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int,
}

/// Opens a context on the device behind `handle` with the entry points of
/// `ops`.
///
/// # Safety
/// `device` is the libibverbs device being opened.
pub(crate) unsafe fn open_device(
    device: *mut ibv_device,
    handle: *mut c_void,
    ops: &DataPath,
) -> *mut ibv_context {
    let Some(dev) = crate::device::lookup(handle) else {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    };
    // A run meant to meet faults must not quietly meet none.
    if let Err(e) = crate::faults::config() {
        log::error!("RSW_FAULTS: {e}; refusing to open {}", dev.name);
        // Said on stderr too, once, whatever the log level: the variable
        // was set on purpose and nothing will work until it is fixed.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "rsw: RSW_FAULTS: {e}; no rsw device will open"
            );
        });
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let async_q = match AsyncQueue::new() {
        Ok(q) => q,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
            return std::ptr::null_mut();
        }
    };
    let held = crate::faults::active() && fault_down(&dev.name);
    let port_up = AtomicBool::new(!held && link_up(&dev.ifname));
    let shared = Arc::new(CtxShared {
        dev,
        async_q,
        port_up,
        port_held: AtomicBool::new(held),
    });
    OPEN.get().lock().push(Arc::downgrade(&shared));
    crate::port::watch(link_changed);
    if let Ok(Some(c)) = crate::faults::config() {
        crate::port::schedule_faults(&c.port, port_fault);
    }
    let mut vctx = verbs_context::zeroed();
    vctx.query_port = Some(query_port);
    vctx.query_device_ex = Some(query_device_ex);
    vctx.create_cq_ex = Some(ops.create_cq_ex);
    vctx.create_qp_ex = Some(ops.create_qp_ex);
    vctx.create_srq_ex = Some(ops.create_srq_ex);
    vctx.get_srq_num = Some(ops.get_srq_num);
    vctx.post_srq_ops = Some(ops.post_srq_ops);
    vctx.open_xrcd = Some(ops.open_xrcd);
    vctx.advise_mr = Some(ops.advise_mr);
    vctx.alloc_dm = Some(ops.alloc_dm);
    vctx.free_dm = Some(ops.free_dm);
    vctx.reg_dm_mr = Some(ops.reg_dm_mr);
    vctx.alloc_td = Some(ops.alloc_td);
    vctx.dealloc_td = Some(ops.dealloc_td);
    vctx.alloc_parent_domain = Some(ops.alloc_parent_domain);
    vctx.open_qp = Some(ops.open_qp);
    vctx.close_xrcd = Some(ops.close_xrcd);
    vctx.ibv_create_flow = Some(ops.create_flow);
    vctx.ibv_destroy_flow = Some(ops.destroy_flow);
    vctx.create_wq = Some(ops.create_wq);
    vctx.modify_wq = Some(ops.modify_wq);
    vctx.destroy_wq = Some(ops.destroy_wq);
    vctx.create_rwq_ind_table = Some(ops.create_rwq_ind_table);
    vctx.destroy_rwq_ind_table = Some(ops.destroy_rwq_ind_table);
    vctx.sz = std::mem::size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = device;
    c.cmd_fd = -1;
    c.async_fd = shared.async_q.fd();
    c.num_comp_vectors = 1;
    c.abi_compat = VERBS_ABI_IS_EXTENDED;
    c.ops.poll_cq = Some(ops.poll_cq);
    c.ops.req_notify_cq = Some(ops.req_notify_cq);
    c.ops.post_send = Some(ops.post_send);
    c.ops.post_recv = Some(ops.post_recv);
    c.ops.post_srq_recv = Some(ops.post_srq_recv);
    c.ops.alloc_mw = Some(ops.alloc_mw);
    c.ops.bind_mw = Some(ops.bind_mw);
    c.ops.dealloc_mw = Some(ops.dealloc_mw);
    let ctx = Box::into_raw(Box::new(Context { vctx, shared }));
    // SAFETY: ctx was just allocated; the returned pointer is its context
    // field, which lives as long as the allocation.
    unsafe { &raw mut (*ctx).vctx.context }
}

pub(crate) unsafe extern "C" fn close_device(context: *mut ibv_context) -> c_int {
    if verbs_rt::check::on() {
        crate::check::close_device(context);
    }
    let off = offset_of!(verbs_context, context);
    // SAFETY: context came from open_device, so it sits at `off` inside a
    // boxed Context that we now reclaim.
    drop(unsafe { Box::from_raw((context as *mut u8).sub(off) as *mut Context) });
    0
}

pub(crate) unsafe extern "C" fn get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: context came from open_device.
    let ctx = unsafe { Context::from_ibv(context) };
    match ctx.shared.async_q.get() {
        Ok(ev) => {
            if verbs_rt::check::on() {
                crate::check::async_delivered(context, &ev);
            }
            // SAFETY: event points to a caller-owned struct.
            unsafe { event.write(ev) };
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}
