//! QP1 of an rsw device in RoCEv2 mode: where the IB CM's MADs (`mad`)
//! come in and go out, so ids on that device connect to the kernel's CM
//! (rxe, RoCE NICs) and to each other.
//!
//! The GSI is a UD QP created through libibverbs with
//! `IBV_QP_CREATE_SOURCE_QPN` and source QPN 1: the rsw provider then
//! sends it from, and delivers to it what arrives at, QP 1 of the
//! device's RoCEv2 port. Only a RoCEv2-mode rsw device accepts that, which
//! is also the test of whether a device speaks this CM (the answer is
//! kept per port). Its receive CQ's completion channel is watched by the
//! CM thread; each MAD is handed to the id it names (by comm ID), or for
//! a REQ to the listener of its service ID. Ids sit above this module and
//! are reached through [`MadTarget`].

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use core::ffi::c_int;
use core::ptr::null_mut;
use parking_lot::Mutex;
use verbs_abi::*;
use verbs_rt::ForkFresh;

use crate::device::{self, Local};
use crate::engine::{self, Entry, FileTarget, EV_IN};
use crate::error::{errno, Res};
use crate::ffi;
use crate::mad::{Cm, GSI_QKEY, MAD_LEN};
use crate::verbs::{self, Mr};

const GRH_LEN: usize = 40;
const RSLOTS: usize = 64;
const SSLOTS: usize = 64;
const RSLOT: usize = GRH_LEN + MAD_LEN;

/// Who sent a MAD, and through which port it came.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub gid: [u8; 16],
    pub loc: Local,
}

/// What the GSI calls on an id (or a listener, for a REQ).
pub trait MadTarget: Send + Sync {
    fn on_mad(self: Arc<Self>, from: Peer, tid: u64, msg: Cm);
}

pub struct Gsi {
    pub loc: Local,
    inner: Mutex<Inner>,
}

struct Inner {
    pd: *mut ibv_pd,
    qp: *mut ibv_qp,
    rcq: *mut ibv_cq,
    scq: *mut ibv_cq,
    cc: *mut ibv_comp_channel,
    buf: Box<[u8]>,
    mr: Mr,
    ahs: HashMap<[u8; 16], usize>,
    next_send: usize,
    in_flight: usize,
}

// SAFETY: the verbs objects are only used under the mutex, and libibverbs'
// calls are thread-safe; they live for the life of the process.
unsafe impl Send for Inner {}

/// The process's tables; a forked child starts with empty ones (its
/// parent's ids are not its own, and its CM thread and RoCEv2 ports are
/// its own too, so it opens its own QP1).
type Table<K, V> = ForkFresh<Mutex<HashMap<K, V>>>;

/// Each port's GSI, or None where the device does not speak this CM.
static GSIS: Table<(usize, u8), Option<Arc<Gsi>>> = ForkFresh::new(|| Mutex::new(HashMap::new()));
/// Ids by their local comm ID.
static BY_COMM_ID: Table<u32, Weak<dyn MadTarget>> = ForkFresh::new(|| Mutex::new(HashMap::new()));
/// Passive ids by the requester's GID and comm ID (a repeated REQ).
static BY_REMOTE: Table<([u8; 16], u32), Weak<dyn MadTarget>> =
    ForkFresh::new(|| Mutex::new(HashMap::new()));
/// Listeners by service ID.
static LISTENERS: Table<u64, Weak<dyn MadTarget>> = ForkFresh::new(|| Mutex::new(HashMap::new()));

/// The GSI of `loc`'s port, opened on first use; None when the device is
/// not an rsw device in RoCEv2 mode.
pub fn for_local(loc: Local) -> Option<Arc<Gsi>> {
    let dev = device::get(loc.dev);
    if dev.kernel || !is_ethernet(dev, loc.port) {
        return None;
    }
    let mut g = GSIS.get().lock();
    if let Some(x) = g.get(&(loc.dev, loc.port)) {
        return x.clone();
    }
    let gsi = match Gsi::open(loc) {
        Ok(gsi) => Some(gsi),
        Err(e) => {
            log::debug!(
                "device {} port {}: no QP1 (errno {e}): the TCP CM serves it",
                loc.dev,
                loc.port
            );
            None
        }
    };
    g.insert((loc.dev, loc.port), gsi.clone());
    gsi
}

fn is_ethernet(dev: &device::Device, port: u8) -> bool {
    dev.port_attr(port)
        .is_ok_and(|p| p.link_layer == IBV_LINK_LAYER_ETHERNET)
}

/// Opens the GSI of every port of the process's rsw devices that speaks
/// this CM (a wildcard listener's requests may come through any).
pub fn open_all() {
    let Ok(devs) = device::all() else { return };
    for (dev, d) in devs.iter().enumerate() {
        for port in 1..=d.port_cnt {
            let _ = for_local(Local {
                dev,
                port,
                gid_index: 0,
            });
        }
    }
}

pub fn register(comm_id: u32, t: Weak<dyn MadTarget>) {
    BY_COMM_ID.get().lock().insert(comm_id, t);
}

pub fn unregister(comm_id: u32) {
    BY_COMM_ID.get().lock().remove(&comm_id);
}

/// A fresh local comm ID no id of the process holds.
pub fn new_comm_id() -> u32 {
    let m = BY_COMM_ID.get().lock();
    loop {
        let mut v = 0u32;
        // SAFETY: writes at most 4 bytes into `v`.
        unsafe { libc::getrandom(&mut v as *mut u32 as *mut _, 4, libc::GRND_NONBLOCK) };
        if v != 0 && !m.contains_key(&v) {
            return v;
        }
    }
}

pub fn register_remote(gid: [u8; 16], comm_id: u32, t: Weak<dyn MadTarget>) {
    BY_REMOTE.get().lock().insert((gid, comm_id), t);
}

pub fn unregister_remote(gid: [u8; 16], comm_id: u32) {
    BY_REMOTE.get().lock().remove(&(gid, comm_id));
}

/// Requests for `sid` go to `t`; false when a live listener has it.
pub fn listen(sid: u64, t: Weak<dyn MadTarget>) -> bool {
    let mut m = LISTENERS.get().lock();
    if m.get(&sid).is_some_and(|w| w.strong_count() > 0) {
        return false;
    }
    m.insert(sid, t);
    true
}

pub fn unlisten(sid: u64) {
    LISTENERS.get().lock().remove(&sid);
}

/// The target of a received MAD: the id it names, the id a repeated REQ
/// made, or the listener of a new one.
fn target_of(from: &Peer, msg: &Cm) -> Option<Arc<dyn MadTarget>> {
    match msg {
        Cm::Req(r) => {
            let known = BY_REMOTE
                .get()
                .lock()
                .get(&(from.gid, r.local_comm_id))
                .and_then(Weak::upgrade);
            known.or_else(|| {
                LISTENERS
                    .get()
                    .lock()
                    .get(&r.service_id)
                    .and_then(Weak::upgrade)
            })
        }
        Cm::SidrReq { service_id, .. } => LISTENERS
            .get()
            .lock()
            .get(service_id)
            .and_then(Weak::upgrade),
        m => BY_COMM_ID
            .get()
            .lock()
            .get(&m.remote_comm_id()?)
            .and_then(Weak::upgrade),
    }
}

impl Gsi {
    fn open(loc: Local) -> Res<Arc<Gsi>> {
        let ctx = device::get(loc.dev).ctx;
        // SAFETY: the context is open for the life of the process. Each
        // object made here is kept with the GSI, which is never closed.
        unsafe {
            let pd = ffi::ibv_alloc_pd(ctx);
            if pd.is_null() {
                return Err(errno());
            }
            let cc = ffi::ibv_create_comp_channel(ctx);
            if cc.is_null() {
                let e = errno();
                verbs::dealloc_pd(pd);
                return Err(e);
            }
            let rcq = ffi::ibv_create_cq(ctx, RSLOTS as c_int, null_mut(), cc, 0);
            let scq = ffi::ibv_create_cq(ctx, SSLOTS as c_int, null_mut(), null_mut(), 0);
            let mut a = ibv_qp_init_attr_ex::zeroed();
            a.qp_type = IBV_QPT_UD;
            a.send_cq = scq;
            a.recv_cq = rcq;
            a.cap.max_send_wr = SSLOTS as u32;
            a.cap.max_recv_wr = RSLOTS as u32;
            a.cap.max_send_sge = 1;
            a.cap.max_recv_sge = 1;
            a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
            a.pd = pd;
            a.create_flags = IBV_QP_CREATE_SOURCE_QPN;
            a.source_qpn = 1;
            let qp = if rcq.is_null() || scq.is_null() {
                null_mut()
            } else {
                ffi::create_qp_ex(ctx, &mut a)
            };
            if qp.is_null() {
                let e = errno();
                if !rcq.is_null() {
                    ffi::ibv_destroy_cq(rcq);
                }
                if !scq.is_null() {
                    ffi::ibv_destroy_cq(scq);
                }
                ffi::ibv_destroy_comp_channel(cc);
                verbs::dealloc_pd(pd);
                return Err(if e == 0 { libc::EOPNOTSUPP } else { e });
            }
            let mut buf = vec![0u8; RSLOTS * RSLOT + SSLOTS * MAD_LEN].into_boxed_slice();
            let made = Mr::new(
                pd,
                buf.as_mut_ptr(),
                buf.len(),
                IBV_ACCESS_LOCAL_WRITE as c_int,
            )
            .and_then(|mr| to_rts(qp, loc.port).map(|()| mr));
            let mr = match made {
                Ok(mr) => mr,
                Err(e) => {
                    ffi::ibv_destroy_qp(qp);
                    ffi::ibv_destroy_cq(rcq);
                    ffi::ibv_destroy_cq(scq);
                    ffi::ibv_destroy_comp_channel(cc);
                    verbs::dealloc_pd(pd);
                    return Err(e);
                }
            };
            let fl = libc::fcntl((*cc).fd, libc::F_GETFL);
            libc::fcntl((*cc).fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            let gsi = Arc::new(Gsi {
                loc,
                inner: Mutex::new(Inner {
                    pd,
                    qp,
                    rcq,
                    scq,
                    cc,
                    buf,
                    mr,
                    ahs: HashMap::new(),
                    next_send: 0,
                    in_flight: 0,
                }),
            });
            {
                let mut g = gsi.inner.lock();
                for i in 0..RSLOTS {
                    g.post_recv(i)?;
                }
                verbs::arm_cq(rcq);
            }
            let w = Arc::downgrade(&gsi);
            let target: Weak<dyn FileTarget> = w;
            engine::get()?.register((*cc).fd, Entry::File(target), EV_IN)?;
            log::info!(
                "device {} port {}: the IB CM speaks on QP1",
                loc.dev,
                loc.port
            );
            Ok(gsi)
        }
    }

    /// Sends one MAD to QP1 of `gid`. Best effort, as MADs are: a loss is
    /// made up for by the sender's retries.
    pub fn send(&self, gid: &[u8; 16], tclass: u8, tid: u64, msg: &Cm) {
        let mad = msg.encode(tid);
        self.send_raw(gid, tclass, &mad);
    }

    pub fn send_raw(&self, gid: &[u8; 16], tclass: u8, mad: &[u8; MAD_LEN]) {
        let mut g = self.inner.lock();
        if let Err(e) = g.send(self.loc, gid, tclass, mad) {
            log::warn!("GSI: a MAD to {gid:02x?} not sent: errno {e}");
        }
    }
}

impl Inner {
    fn slot(&mut self, at: usize) -> *mut u8 {
        // SAFETY: callers pass offsets inside `buf`.
        unsafe { self.buf.as_mut_ptr().add(at) }
    }

    fn post_recv(&mut self, i: usize) -> Res<()> {
        let sge = ibv_sge {
            addr: self.slot(i * RSLOT) as u64,
            length: RSLOT as u32,
            lkey: self.mr.lkey(),
        };
        // SAFETY: our live QP; the slot stays registered for ever.
        unsafe { verbs::post_recv(self.qp, i as u64, Some(sge)) }
    }

    fn ah(&mut self, loc: Local, gid: &[u8; 16], tclass: u8) -> Res<*mut ibv_ah> {
        if let Some(&ah) = self.ahs.get(gid) {
            return Ok(ah as *mut ibv_ah);
        }
        let mut a = ibv_ah_attr::zeroed();
        a.is_global = 1;
        a.port_num = loc.port;
        a.grh.dgid = ibv_gid::from_raw(*gid);
        a.grh.sgid_index = loc.gid_index;
        a.grh.hop_limit = 64;
        a.grh.traffic_class = tclass;
        // SAFETY: our live PD and a complete attribute.
        let ah = unsafe { verbs::ibv_create_ah(self.pd, &mut a) };
        if ah.is_null() {
            return Err(errno());
        }
        self.ahs.insert(*gid, ah as usize);
        Ok(ah)
    }

    fn reap_sends(&mut self) {
        let mut wc = [ibv_wc::zeroed(); 16];
        // SAFETY: our live send CQ.
        while let Ok(n) = unsafe { verbs::poll_cq(self.scq, &mut wc) } {
            if n == 0 {
                break;
            }
            self.in_flight = self.in_flight.saturating_sub(n);
        }
    }

    fn send(&mut self, loc: Local, gid: &[u8; 16], tclass: u8, mad: &[u8; MAD_LEN]) -> Res<()> {
        self.reap_sends();
        if self.in_flight >= SSLOTS {
            return Err(libc::ENOBUFS);
        }
        let ah = self.ah(loc, gid, tclass)?;
        let i = self.next_send;
        self.next_send = (i + 1) % SSLOTS;
        let at = RSLOTS * RSLOT + i * MAD_LEN;
        self.buf[at..at + MAD_LEN].copy_from_slice(mad);
        let mut sge = ibv_sge {
            addr: self.slot(at) as u64,
            length: MAD_LEN as u32,
            lkey: self.mr.lkey(),
        };
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = (RSLOTS + i) as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.ud = ibv_send_wr_ud {
            ah,
            remote_qpn: 1,
            remote_qkey: GSI_QKEY,
        };
        // SAFETY: our live QP; `wr` and `sge` live through the call, the
        // slot until its completion is reaped.
        unsafe { verbs::post_send(self.qp, &mut wr) }?;
        self.in_flight += 1;
        Ok(())
    }

    /// Takes the MADs received, reposting their receives.
    fn take(&mut self, loc: Local, out: &mut Vec<(Peer, u64, Cm)>) {
        let mut wc = [ibv_wc::zeroed(); 16];
        loop {
            // SAFETY: our live receive CQ.
            let n = match unsafe { verbs::poll_cq(self.rcq, &mut wc) } {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            for w in &wc[..n] {
                let i = w.wr_id as usize;
                if i >= RSLOTS {
                    continue;
                }
                if w.status == IBV_WC_SUCCESS && w.byte_len as usize >= GRH_LEN + MAD_LEN {
                    let at = i * RSLOT;
                    let b = &self.buf[at..at + RSLOT];
                    let from = sender(&b[..GRH_LEN]);
                    match (from, Cm::decode(&b[GRH_LEN..])) {
                        (Some(gid), Some((tid, msg))) => out.push((Peer { gid, loc }, tid, msg)),
                        _ => log::debug!("GSI: a MAD dropped (not the CM's, or no sender)"),
                    }
                }
                let _ = self.post_recv(i);
            }
        }
    }
}

/// The sender's GID from a receive's first 40 bytes: a GRH (IPv6), or
/// an IPv4 header in its last 20 bytes as RoCEv2 over IPv4 delivers it.
fn sender(grh: &[u8]) -> Option<[u8; 16]> {
    if grh[0] >> 4 == 6 {
        return grh[8..24].try_into().ok();
    }
    if grh[20] >> 4 == 4 {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&grh[32..36]);
        return Some(g);
    }
    None
}

fn to_rts(qp: *mut ibv_qp, port: u8) -> Res<()> {
    let step = |a: &mut ibv_qp_attr, mask: ibv_qp_attr_mask| -> Res<()> {
        // SAFETY: our live QP; `a` lives through the call.
        match unsafe { ffi::ibv_modify_qp(qp, a, mask as c_int) } {
            0 => Ok(()),
            e => Err(e),
        }
    };
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qkey = GSI_QKEY;
    step(
        &mut a,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
    )?;
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_RTR;
    step(&mut a, IBV_QP_STATE)?;
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    step(&mut a, IBV_QP_STATE | IBV_QP_SQ_PSN)
}

impl FileTarget for Gsi {
    fn on_ready(self: Arc<Self>) {
        let mut got = Vec::new();
        {
            let mut g = self.inner.lock();
            // SAFETY: our live channel; its CQ is the receive CQ.
            unsafe { verbs::drain_cq_events(g.cc) };
            g.take(self.loc, &mut got);
            // SAFETY: our live receive CQ; armed before the last poll so
            // nothing arriving in between is missed.
            unsafe { verbs::arm_cq(g.rcq) };
            g.take(self.loc, &mut got);
        }
        for (from, tid, msg) in got {
            log::trace!("GSI: from {:02x?}: {:?}", &from.gid[12..], msg);
            match target_of(&from, &msg) {
                Some(t) => t.on_mad(from, tid, msg),
                None => self.unclaimed(&from, tid, &msg),
            }
        }
    }
}

impl Gsi {
    /// A MAD nobody here takes: a REQ is rejected (nobody listens on its
    /// service ID), a SIDR_REQ answered with status 1 (the same), a DREQ
    /// answered (the connection is gone already), anything else dropped.
    fn unclaimed(&self, from: &Peer, tid: u64, msg: &Cm) {
        match msg {
            Cm::Req(r) => self.send(
                &from.gid,
                0,
                tid,
                &Cm::Rej {
                    local: 0,
                    remote: r.local_comm_id,
                    rejected: 0,
                    reason: crate::wire::REJ_INVALID_SERVICE_ID,
                    pdata: Vec::new(),
                },
            ),
            Cm::SidrReq {
                request_id,
                service_id,
                ..
            } => self.send(
                &from.gid,
                0,
                tid,
                &Cm::SidrRep {
                    request_id: *request_id,
                    status: crate::wire::SIDR_UNSUPPORTED,
                    qpn: 0,
                    service_id: *service_id,
                    qkey: 0,
                    pdata: Vec::new(),
                },
            ),
            Cm::Dreq { local, remote, .. } => self.send(
                &from.gid,
                0,
                tid,
                &Cm::Drep {
                    local: *remote,
                    remote: *local,
                },
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sender;

    #[test]
    fn the_sender_of_ipv4_and_ipv6_receives() {
        let mut v4 = [0u8; 40];
        v4[20] = 0x45;
        v4[32..36].copy_from_slice(&[10, 0, 8, 1]);
        let want: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 8, 1];
        assert_eq!(sender(&v4), Some(want));
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[8] = 0xfd;
        v6[23] = 1;
        let mut want = [0u8; 16];
        want[0] = 0xfd;
        want[15] = 1;
        assert_eq!(sender(&v6), Some(want));
        assert_eq!(sender(&[0u8; 40]), None);
    }
}
