//! Creating and destroying QPs.

use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use super::{checked, Place, QPS};
use crate::context::Context;
use crate::cq::Cq;
use crate::device::{MAX_INLINE, MAX_QP_WR, MAX_SGE, MIN_INLINE};
use crate::engine::{Qp, QpInner};
use crate::event_count::EventCounter;
use crate::handles::UNKNOWN_BY_IOCTL;
use crate::pd::Pd;
use crate::progress::{engine, Kind};
use crate::rwq::IndTable;
use crate::srq::Srq;
use crate::transport::mailbox::Mailbox;
use crate::transport::Listener;
use crate::util::{ptr_or_errno, set_errno};
use crate::wq::raw::{Raw, Rss};
use crate::wq::{Builder, Dgram};
use crate::xrcd::Xrcd;

const SUPPORTED_SEND_OPS: u64 = (IBV_QP_EX_WITH_ATOMIC_WRITE
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) as u64;

/// What UC can carry: no READ, no atomics (no responses).
const UC_SEND_OPS: u64 = (IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;

/// What UD can carry: sends only.
const UD_SEND_OPS: u64 = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;

fn create(context: *mut ibv_context, a: &mut ibv_qp_init_attr_ex) -> Result<*mut ibv_qp, c_int> {
    let (create_flags, send_ops) = check_attr(a)?;
    let rss = rss_conf(context, a)?;
    let o = check_objects(context, a, send_ops, rss.is_some())?;
    let (tgt, has_rq) = (o.tgt, o.has_rq);
    // An RSS QP only receives, into its table's WQs.
    let no_sq = tgt || o.rss;
    let mut cap = queue_caps(&a.cap, o.srq.is_some(), has_rq, no_sq)?;
    // On a tag-matching SRQ: room for the rendezvous READs and FINs the
    // QP issues itself (`engine::rndv`).
    if o.srq.as_ref().is_some_and(|s| s.tm.is_some()) && !no_sq {
        cap.max_send_wr += 2 * crate::engine::rndv::RNDV_PER_QP;
        cap.max_send_sge = cap.max_send_sge.max(crate::tm::MAX_TM_SGE);
    }
    let roce = roce_port(context, a.qp_type)?;
    // Opened first: without CAP_NET_RAW this is EPERM.
    let raw = open_raw(context, a.qp_type, rss)?;
    // Every failure below gives the place back.
    let place = Place::take()?;
    let eng = engine().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    let (listener, dgram, qpn) = open_socket(a.qp_type)?;

    // SAFETY: context and the CQs come from this provider (checked above
    // for the queues this QP type has).
    let (ctx, send_cq, recv_cq) = unsafe {
        (
            Context::shared_of(context),
            (!no_sq).then(|| Cq::arc_from_ibv(a.send_cq)),
            has_rq.then(|| Cq::arc_from_ibv(a.recv_cq)),
        )
    };
    let pd_ptr = if tgt { std::ptr::null_mut() } else { a.pd };
    let serial = crate::progress::new_serial();
    let ibv = public_struct(context, a, &o, serial, qpn, send_ops.is_some());
    let (watch_fd, watch_kind) = match (&listener, &dgram, &raw) {
        (Some(l), _, _) => (l.fd(), Kind::Listener),
        (None, Some(d), _) => (d.fd(), Kind::Datagram),
        (None, None, Some(r)) => (r.fd(), Kind::Datagram),
        (None, None, None) => return Err(libc::EINVAL),
    };
    let pd = o.pd;
    let mut inner = QpInner::new(
        a.qp_type,
        a.sq_sig_all != 0,
        &cap,
        listener,
        dgram,
        pd.and_then(|p| p.allocator()),
    )?;
    inner.block_self_mcast = create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0;
    let source_qpn = source_qpn(a, create_flags, roce.is_some())?;
    inner.source_qpn = source_qpn;
    inner.raw = raw;
    inner.roce = roce.clone();
    let srq_box = srq_mailbox(o.srq.as_ref(), a.qp_type);
    let qp = Arc::new(Qp {
        ibv: UnsafeCell::new(ibv),
        serial,
        qpn,
        ctx,
        ibv_ctx: context,
        pd: pd_ptr,
        pd_id: pd.map_or(0, |p| p.id),
        send_cq,
        recv_cq,
        xrcd: o.xrcd,
        srq: o.srq,
        opened_from: None,
        foreign: false,
        mbox: inner.rq.mailbox().cloned().or(srq_box),
        inner: Mutex::new(inner),
        async_events: Arc::new(EventCounter::default()),
        builder: UnsafeCell::new(builder(&cap, send_ops.is_some())),
    });
    // A UD QP's number is a UDP port's, an RC QP's a TCP port's: on the
    // one RoCEv2 port the two could meet, and packets must not go astray.
    if roce.as_ref().is_some_and(|p| !p.attach(&qp)) {
        log::error!(
            "create_qp: QP number {:#x} is taken on the RoCEv2 port",
            qpn
        );
        return Err(libc::EADDRINUSE);
    }
    if let (Some(p), Some(n)) = (roce.as_ref(), source_qpn) {
        if !p.attach_as(&qp, n) {
            p.detach(&qp);
            log::error!("create_qp: QP {n} of the RoCEv2 port is another QP's");
            return Err(libc::EADDRINUSE);
        }
    }
    eng.register_qp(serial, &qp);
    if let Err(e) = eng.add(
        watch_fd,
        crate::progress::token(serial, watch_kind),
        libc::EPOLLIN as u32,
    ) {
        eng.unregister_qp(serial);
        if let Some(p) = roce.as_ref() {
            p.detach(&qp);
        }
        log::error!("create_qp: cannot watch the QP's socket: {e}");
        return Err(e.raw_os_error().unwrap_or(libc::ENOMEM));
    }
    attach(&qp, pd);
    attach_rss(&qp);
    a.cap = cap;
    place.keep();
    let weak = Arc::downgrade(&qp);
    let p = Arc::into_raw(qp) as *mut ibv_qp;
    QPS.insert(p, weak);
    Ok(p)
}

/// Raw packet QPs' numbers: above every port number, below the WQs'.
static RAW_QPN: AtomicU32 = AtomicU32::new(0x1_0000);

/// A connected QP's number is its listener's port; a UD QP's, its
/// datagram socket's; a raw packet QP's, the next of [`RAW_QPN`].
fn open_socket(qp_type: ibv_qp_type) -> Result<(Option<Listener>, Option<Dgram>, u32), c_int> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::ENOMEM);
    if qp_type == IBV_QPT_RAW_PACKET {
        let n = RAW_QPN.fetch_add(1, Ordering::Relaxed);
        return Ok((None, None, 0x1_0000 + n % 0xe0_0000));
    }
    if qp_type == IBV_QPT_UD {
        let (d, qpn) = Dgram::open().map_err(errno)?;
        Ok((None, Some(d), qpn))
    } else {
        let (l, qpn) = Listener::open().map_err(errno)?;
        Ok((Some(l), None, qpn))
    }
}

/// The port a UD, RC or UC QP on a RoCEv2-mode device speaks through;
/// None on other devices. XRC is not spoken in that mode yet:
/// EOPNOTSUPP, not a QP that would talk rsw's own protocol.
fn roce_port(
    context: *mut ibv_context,
    qp_type: ibv_qp_type,
) -> Result<Option<Arc<crate::engine::roce_ud::RocePort>>, c_int> {
    // SAFETY: context comes from this provider.
    let dev = &unsafe { Context::from_ibv(context) }.shared.dev;
    if !dev.speaks_rocev2() {
        return Ok(None);
    }
    match qp_type {
        IBV_QPT_UD | IBV_QPT_RC | IBV_QPT_UC => crate::engine::roce_ud::port_for(dev).map(Some),
        IBV_QPT_RAW_PACKET => Ok(None),
        _ => {
            log::warn!(
                "{}: RSW_ROCEV2 speaks RC, UC and UD only: a QP of type {qp_type} is not supported",
                dev.name
            );
            Err(libc::EOPNOTSUPP)
        }
    }
}

/// A raw packet QP's socket on the context's interface (EPERM without
/// CAP_NET_RAW); None for other types.
fn open_raw(
    context: *mut ibv_context,
    qp_type: ibv_qp_type,
    rss: Option<Rss>,
) -> Result<Option<Raw>, c_int> {
    if qp_type != IBV_QPT_RAW_PACKET {
        return Ok(None);
    }
    // SAFETY: context comes from this provider.
    let dev = &unsafe { Context::from_ibv(context) }.shared.dev;
    Raw::open(dev.ifindex, dev.if_mtu, rss).map(Some)
}

/// An RSS QP's hashing and table (`IBV_QP_INIT_ATTR_IND_TABLE` with
/// `IBV_QP_INIT_ATTR_RX_HASH`, raw packet QPs only): Toeplitz over the
/// fields this device hashes, with a key of the caller's.
fn rss_conf(context: *mut ibv_context, a: &ibv_qp_init_attr_ex) -> Result<Option<Rss>, c_int> {
    let both = IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    match a.comp_mask & both {
        0 => return Ok(None),
        m if m != both => return Err(libc::EINVAL),
        _ => {}
    }
    let h = &a.rx_hash_conf;
    if h.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ as u8
        || h.rx_hash_fields_mask & !crate::flow::HASH_FIELDS != 0
        || h.rx_hash_key_len == 0
        || h.rx_hash_key.is_null()
    {
        return Err(libc::EINVAL);
    }
    let table = IndTable::checked(a.rwq_ind_tbl, context)?;
    // SAFETY: the caller's key of the length it gives.
    let key = unsafe { std::slice::from_raw_parts(h.rx_hash_key, h.rx_hash_key_len as usize) };
    Ok(Some(Rss {
        key: key.to_vec(),
        fields: h.rx_hash_fields_mask,
        cqs: table.cqs(),
        table,
    }))
}

/// An RSS QP is driven by a poll of its WQs' CQs, and holds its table.
fn attach_rss(qp: &Arc<Qp>) {
    let g = qp.inner.lock();
    if let Some(r) = g.raw.as_ref().and_then(|r| r.rss.as_ref()) {
        r.table.users.fetch_add(1, Ordering::AcqRel);
        for cq in &r.cqs {
            cq.attach_qp(qp);
        }
    }
}

/// The attributes' masks, flags and type, as far as they need no object:
/// the create flags and the `ibv_wr_*` operations asked for.
fn check_attr(a: &ibv_qp_init_attr_ex) -> Result<(u32, Option<u64>), c_int> {
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_MAX_TSO_HEADER
        | IBV_QP_INIT_ATTR_IND_TABLE
        | IBV_QP_INIT_ATTR_RX_HASH
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER != 0
        || (a.comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH) != 0
            && a.qp_type != IBV_QPT_RAW_PACKET)
    {
        return Err(libc::EOPNOTSUPP);
    }
    let create_flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
        a.create_flags
    } else {
        0
    };
    // Blocking multicast loopback and a source QPN are UD matters; no
    // other flag is ours.
    if create_flags & !(IBV_QP_CREATE_BLOCK_SELF_MCAST_LB | IBV_QP_CREATE_SOURCE_QPN) != 0
        || (create_flags != 0 && a.qp_type != IBV_QPT_UD)
    {
        return Err(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        if a.send_ops_flags & !SUPPORTED_SEND_OPS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        Some(a.send_ops_flags)
    } else {
        None
    };
    if !matches!(
        a.qp_type,
        IBV_QPT_RC
            | IBV_QPT_UC
            | IBV_QPT_UD
            | IBV_QPT_XRC_SEND
            | IBV_QPT_XRC_RECV
            | IBV_QPT_RAW_PACKET
    ) {
        return Err(libc::EOPNOTSUPP);
    }
    Ok((create_flags, send_ops))
}

/// The wire number of a UD QP created with `IBV_QP_CREATE_SOURCE_QPN`:
/// only QP1 (the GSI, for a connection manager speaking MADs) and only on
/// a RoCEv2-mode device, where rsw owns the port's QP numbers; elsewhere
/// EOPNOTSUPP.
fn source_qpn(a: &ibv_qp_init_attr_ex, flags: u32, roce: bool) -> Result<Option<u32>, c_int> {
    if flags & IBV_QP_CREATE_SOURCE_QPN == 0 {
        return Ok(None);
    }
    if !roce || a.source_qpn != 1 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(Some(1))
}

/// The objects a QP is created with, checked.
struct Objects<'a> {
    /// An XRC receive QP (no queues of its own).
    tgt: bool,
    /// An RSS QP (no queues of its own: its table's WQs receive).
    rss: bool,
    has_rq: bool,
    xrcd: Option<Arc<crate::xrcd::Domain>>,
    pd: Option<&'a Pd>,
    srq: Option<Arc<Srq>>,
}

fn check_objects<'a>(
    context: *mut ibv_context,
    a: &ibv_qp_init_attr_ex,
    send_ops: Option<u64>,
    rss: bool,
) -> Result<Objects<'a>, c_int> {
    // An XRC receive QP belongs to a domain and has no queues (its
    // receives come from the XRC SRQs each request names); an XRC send QP
    // has no receive queue.
    let tgt = a.qp_type == IBV_QPT_XRC_RECV;
    let has_rq = !rss && !matches!(a.qp_type, IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV);
    let xrcd = if tgt {
        if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
            return Err(libc::EINVAL);
        }
        Some(Xrcd::domain_of(a.xrcd).ok_or(libc::EINVAL)?)
    } else {
        None
    };
    if !tgt && a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    // rdma-core 44 creates QPs by ioctl, naming the PD, CQs and SRQ by
    // handle in the context's command file: one the kernel does not know
    // there (overwritten, or of another context) is ENOENT.
    let pd = if tgt {
        None
    } else {
        Some(Pd::checked(a.pd, Some(context), UNKNOWN_BY_IOCTL)?)
    };
    if !tgt && !rss {
        Cq::checked(a.send_cq, context, UNKNOWN_BY_IOCTL)?;
    }
    if has_rq {
        Cq::checked(a.recv_cq, context, UNKNOWN_BY_IOCTL)?;
    }
    if !has_rq && !a.srq.is_null() {
        return Err(libc::EINVAL);
    }
    let allowed_ops = match a.qp_type {
        IBV_QPT_UC => UC_SEND_OPS,
        IBV_QPT_UD => UD_SEND_OPS,
        IBV_QPT_XRC_RECV => 0,
        IBV_QPT_RAW_PACKET => IBV_QP_EX_WITH_SEND as u64,
        _ => SUPPORTED_SEND_OPS,
    };
    if send_ops.is_some_and(|ops| ops & !allowed_ops != 0) {
        return Err(libc::EOPNOTSUPP);
    }
    let srq = if a.srq.is_null() {
        None
    } else {
        Some(Srq::checked(a.srq, context, UNKNOWN_BY_IOCTL)?)
    };
    Ok(Objects {
        tgt,
        rss,
        has_rq,
        xrcd,
        pd,
        srq,
    })
}

/// The queues' capabilities from those asked for (`c`), within the
/// device's limits.
fn queue_caps(c: &ibv_qp_cap, on_srq: bool, has_rq: bool, tgt: bool) -> Result<ibv_qp_cap, c_int> {
    if c.max_send_wr > MAX_QP_WR
        || c.max_recv_wr > MAX_QP_WR
        || c.max_send_sge > MAX_SGE
        || c.max_recv_sge > MAX_SGE
        || c.max_inline_data > MAX_INLINE
    {
        log::error!(
            "create_qp: capabilities over the device's limits (EINVAL): send_wr {} recv_wr {} (max {MAX_QP_WR}), send_sge {} recv_sge {} (max {MAX_SGE}), inline {} (max {MAX_INLINE})",
            c.max_send_wr,
            c.max_recv_wr,
            c.max_send_sge,
            c.max_recv_sge,
            c.max_inline_data
        );
        return Err(libc::EINVAL);
    }
    // A QP on an SRQ has no receive queue of its own.
    let own_rq = |n: u32| {
        if on_srq || !has_rq {
            0
        } else {
            n.max(1)
        }
    };
    let own_sq = |n: u32| if tgt { 0 } else { n.max(1) };
    Ok(ibv_qp_cap {
        max_send_wr: own_sq(c.max_send_wr),
        max_recv_wr: own_rq(c.max_recv_wr),
        max_send_sge: own_sq(c.max_send_sge),
        max_recv_sge: own_rq(c.max_recv_sge),
        max_inline_data: if tgt {
            0
        } else {
            c.max_inline_data.max(MIN_INLINE)
        },
    })
}

/// The public struct the application sees.
fn public_struct(
    context: *mut ibv_context,
    a: &ibv_qp_init_attr_ex,
    o: &Objects,
    serial: u64,
    qpn: u32,
    ex_ops: bool,
) -> ibv_qp_ex {
    let (tgt, has_rq) = (o.tgt, o.has_rq);
    let pd_ptr = if tgt { std::ptr::null_mut() } else { a.pd };
    let mut ibv = ibv_qp_ex::zeroed();
    ibv.qp_base.context = context;
    ibv.qp_base.qp_context = a.qp_context;
    ibv.qp_base.pd = pd_ptr;
    ibv.qp_base.send_cq = if tgt || o.rss {
        std::ptr::null_mut()
    } else {
        a.send_cq
    };
    ibv.qp_base.recv_cq = if has_rq {
        a.recv_cq
    } else {
        std::ptr::null_mut()
    };
    ibv.qp_base.srq = a.srq;
    ibv.qp_base.handle = serial as u32;
    ibv.qp_base.qp_num = qpn;
    ibv.qp_base.state = IBV_QPS_RESET;
    ibv.qp_base.qp_type = a.qp_type;
    if ex_ops {
        super::ex::fill_ops(&mut ibv);
    }
    ibv
}

/// On a basic SRQ, an RC or UC QP still has a mailbox: same-host peers
/// take the SRQ's receives and leave the completions here (a ring sized
/// from the SRQ's, bounded: a full one only makes peers wait).
fn srq_mailbox(srq: Option<&Arc<Srq>>, qp_type: ibv_qp_type) -> Option<Arc<Mailbox>> {
    match srq {
        Some(s) if s.xrc.is_none() && matches!(qp_type, IBV_QPT_RC | IBV_QPT_UC) => {
            let cap = s.inner.lock().rq.cap.clamp(16, 1024);
            Mailbox::new(cap, 0).map(Arc::new)
        }
        _ => None,
    }
}

/// The `ibv_wr_*` batch storage, for a QP created with its operations.
fn builder(cap: &ibv_qp_cap, ex_ops: bool) -> Builder {
    if ex_ops {
        Builder::new(
            cap.max_send_wr as usize,
            cap.max_send_sge as usize,
            cap.max_inline_data as usize,
        )
    } else {
        Builder::empty()
    }
}

/// The new QP counts as a user of its PD, SRQ, domain and CQs.
fn attach(qp: &Arc<Qp>, pd: Option<&Pd>) {
    if let Some(pd) = pd {
        pd.users.fetch_add(1, Ordering::AcqRel);
    }
    if let Some(s) = &qp.srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    if let Some(d) = &qp.xrcd {
        d.users.fetch_add(1, Ordering::AcqRel);
        // Other processes of the domain may open it.
        if let Some(r) = &d.reg {
            r.set_qp(qp.qpn, IBV_QPS_RESET);
        }
    }
    for cq in qp.cqs() {
        cq.qp_refs.fetch_add(1, Ordering::AcqRel);
        cq.attach_qp(qp);
    }
}

pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: attr points to the caller's init attributes.
    let a = unsafe { &mut *attr };
    let r = create(context, a);
    if let Err(e) = r {
        log::error!(
            "create_qp: type {} with comp_mask {:#x} refused (errno {e})",
            a.qp_type,
            a.comp_mask
        );
    }
    ptr_or_errno(r)
}

pub(crate) unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // Claiming it (the destroyed flag, under the QP's lock) makes a second
    // destroy, or a racing one, fail; it stays findable until its async
    // events are acknowledged, since acknowledging looks it up.
    let held = match checked(qp, UNKNOWN_BY_IOCTL) {
        Ok(q) => q,
        Err(e) => return e,
    };
    // Its flows hold it, as the kernel's hold a QP.
    if crate::flow::has_rules(held.serial) {
        return libc::EBUSY;
    }
    if verbs_rt::check::on() && held.opened_from.is_none() && !held.inner.lock().destroyed {
        if let Err(e) = super::check::qp_destroy(&held) {
            return e;
        }
    }
    {
        let mut g = held.inner.lock();
        if g.destroyed {
            return libc::EINVAL;
        }
        held.take_arrived(&mut g);
        g.destroyed = true;
        held.publish(&g);
    }
    drop(held);
    // SAFETY: qp came from create_qp_ex; this call claimed it, so only it
    // reclaims it.
    let q = unsafe { Qp::from_ibv(qp) };
    if q.opened_from.is_some() || q.foreign {
        return close_opened(qp, q);
    }
    if let Ok(e) = engine() {
        e.unregister_qp(q.serial);
    }
    let (rings, raw) = {
        let mut g = q.inner.lock();
        crate::stats::retire(&q.ctx.dev.name, &g.stats.snapshot());
        g.req.disconnect();
        g.resp.shut();
        g.dgram = None;
        g.mcast.clear();
        if let Some(p) = g.roce.take() {
            p.detach(q);
        }
        (g.take_extern_rings(), g.raw.take())
    };
    if let Some(r) = raw.as_ref().and_then(|r| r.rss.as_ref()) {
        for cq in &r.cqs {
            cq.detach_qp(q);
        }
        r.table.users.fetch_sub(1, Ordering::AcqRel);
    }
    drop(raw);
    // Back to the parent domain's allocator (`free`), outside the lock.
    drop(rings);
    q.ctx.async_q.purge(qp as usize);
    q.async_events.wait_all_acked();
    for cq in q.cqs() {
        cq.detach_qp(q);
        cq.qp_refs.fetch_sub(1, Ordering::AcqRel);
    }
    if let Some(s) = &q.srq {
        s.users.fetch_sub(1, Ordering::AcqRel);
    }
    if let Some(d) = &q.xrcd {
        d.users.fetch_sub(1, Ordering::AcqRel);
        if let Some(r) = &d.reg {
            r.remove_qp(q.qpn);
        }
    }
    if !q.pd.is_null() {
        // SAFETY: the PD outlives its QPs.
        unsafe { Pd::from_ibv(q.pd) }
            .users
            .fetch_sub(1, Ordering::AcqRel);
    }
    QPS.remove(qp);
    super::release();
    // SAFETY: reclaims the application's reference from create_qp_ex.
    drop(unsafe { Arc::from_raw(qp as *const Qp) });
    0
}

/// `ibv_open_qp`: another handle to an XRC receive QP of the domain,
/// found by number. For a QP of this process the handle forwards modify
/// and query to the QP; for another process's (found in the domain's
/// registry) query reports the QP's state and modify is EOPNOTSUPP. Either
/// closes with `ibv_destroy_qp` without touching the QP.
fn open(context: *mut ibv_context, a: &ibv_qp_open_attr) -> Result<*mut ibv_qp, c_int> {
    let need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if a.comp_mask & need != need || a.comp_mask & !(need | IBV_QP_OPEN_ATTR_CONTEXT) != 0 {
        return Err(libc::EINVAL);
    }
    if a.qp_type != IBV_QPT_XRC_RECV {
        return Err(libc::EINVAL);
    }
    let domain = Xrcd::domain_of(a.xrcd).ok_or(libc::EINVAL)?;
    let (target, state) = open_target(a, &domain)?;
    let serial = crate::progress::new_serial();
    let mut ibv = ibv_qp_ex::zeroed();
    ibv.qp_base.qp_num = a.qp_num;
    ibv.qp_base.state = state;
    ibv.qp_base.qp_type = IBV_QPT_XRC_RECV;
    ibv.qp_base.context = context;
    ibv.qp_base.qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
        a.qp_context
    } else {
        std::ptr::null_mut()
    };
    ibv.qp_base.handle = serial as u32;
    let none = ibv_qp_cap {
        max_send_wr: 0,
        max_recv_wr: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    let mut inner = QpInner::new(IBV_QPT_XRC_RECV, false, &none, None, None, None)?;
    domain.users.fetch_add(1, Ordering::AcqRel);
    inner.state = state;
    let handle = Arc::new(Qp {
        ibv: UnsafeCell::new(ibv),
        serial,
        qpn: a.qp_num,
        // SAFETY: context comes from this provider.
        ctx: unsafe { Context::shared_of(context) },
        ibv_ctx: context,
        pd: std::ptr::null_mut(),
        pd_id: 0,
        send_cq: None,
        recv_cq: None,
        xrcd: Some(domain),
        srq: None,
        foreign: target.is_none(),
        opened_from: target,
        mbox: None,
        inner: Mutex::new(inner),
        async_events: Arc::new(EventCounter::default()),
        builder: UnsafeCell::new(Builder::empty()),
    });
    let weak = Arc::downgrade(&handle);
    let p = Arc::into_raw(handle) as *mut ibv_qp;
    QPS.insert(p, weak);
    Ok(p)
}

/// The XRC receive QP `ibv_open_qp` names in `domain`: ours (this
/// process's), or another process's as the domain's registry knows it;
/// and its state.
fn open_target(
    a: &ibv_qp_open_attr,
    domain: &Arc<crate::xrcd::Domain>,
) -> Result<(Option<Arc<Qp>>, ibv_qp_state), c_int> {
    let target = QPS
        .find(|w| {
            w.upgrade().is_some_and(|q| {
                q.qpn == a.qp_num
                    && q.opened_from.is_none()
                    && !q.foreign
                    && q.xrcd.as_ref().is_some_and(|d| Arc::ptr_eq(d, domain))
            })
        })
        .and_then(|w| w.upgrade());
    match target {
        Some(t) => {
            if t.inner.lock().destroyed {
                return Err(libc::EINVAL);
            }
            // SAFETY: the target's public struct is ours; reading plain
            // fields.
            let state = unsafe { (*t.ibv.get()).qp_base.state };
            Ok((Some(t), state))
        }
        None => {
            let state = domain
                .reg
                .as_ref()
                .and_then(|r| r.find_qp(a.qp_num))
                .ok_or(libc::EINVAL)?;
            Ok((None, state))
        }
    }
}

pub(crate) unsafe extern "C" fn open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's attributes (non-NULL).
    ptr_or_errno(open(context, unsafe { &*attr }))
}

/// Closes a handle `ibv_open_qp` returned; the QP itself stays.
fn close_opened(qp: *mut ibv_qp, q: &Qp) -> c_int {
    if let Some(d) = &q.xrcd {
        d.users.fetch_sub(1, Ordering::AcqRel);
    }
    QPS.remove(qp);
    // SAFETY: reclaims the application's reference from open; out of the
    // table, so only this call does.
    drop(unsafe { Arc::from_raw(qp as *const Qp) });
    0
}
