//! Ids on the kernel's CM: the kernel's handle for each, found by the C id
//! or by the `uid` the kernel echoes in events, and rdma-core's verbs over
//! them.

use core::mem::size_of;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::convert;
use super::file::{resp_ptr, KFile};
use crate::device::{self, Local};
use crate::error::Res;
use crate::ffi;
use crate::id::CmId;

/// A multicast group joined through the kernel.
pub struct Mc {
    pub uid: u64,
    pub addr: SocketAddr,
    pub handle: u32,
    pub context: usize,
    pub join_flags: u16,
    pub mgid: ibv_gid,
    pub mlid: u16,
}

pub struct KSt {
    pub handle: u32,
    pub file: Arc<KFile>,
    pub dev: Option<usize>,
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// The QP could not be brought up after a REP: the REJ and DISCONNECT
    /// the kernel reports next are not the program's (rdma-core drops them).
    pub connect_error: bool,
    /// A wildcard listener also listening through the TCP CM.
    pub dual: bool,
    /// A connect request's new id whose event is still queued.
    pub unretrieved: bool,
    pub children: Vec<Weak<KId>>,
    pub mcs: Vec<Mc>,
}

pub struct KId {
    pub uid: u64,
    pub id: Weak<CmId>,
    pub st: Mutex<KSt>,
}

/// What an event's `uid` names.
pub enum Target {
    Id(Arc<KId>),
    Mc(Arc<KId>, u64),
}

static BY_ID: LazyLock<Mutex<HashMap<usize, Arc<KId>>>> = LazyLock::new(Default::default);
/// By uid: the id, and whether the uid names one of its multicast groups.
type Uids = HashMap<u64, (Weak<KId>, bool)>;
static BY_UID: LazyLock<Mutex<Uids>> = LazyLock::new(Default::default);
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

fn new_uid() -> u64 {
    NEXT_UID.fetch_add(1, Ordering::Relaxed)
}

/// The kernel side of `id`, if it is on the kernel's CM.
pub fn lookup(id: &CmId) -> Option<Arc<KId>> {
    BY_ID.lock().get(&(id.c() as usize)).cloned()
}

pub fn target(uid: u64) -> Option<Target> {
    let (w, mc) = BY_UID.lock().get(&uid).cloned()?;
    let k = w.upgrade()?;
    Some(if mc {
        Target::Mc(k, uid)
    } else {
        Target::Id(k)
    })
}

/// An id by the kernel's handle on `file` (events that carry no uid).
pub fn by_handle(file: &Arc<KFile>, handle: u32) -> Option<Arc<KId>> {
    BY_ID
        .lock()
        .values()
        .find(|k| {
            let st = k.st.lock();
            st.handle == handle && Arc::ptr_eq(&st.file, file)
        })
        .cloned()
}

fn register(id: &Arc<CmId>, uid: u64, handle: u32, file: Arc<KFile>) -> Arc<KId> {
    let k = Arc::new(KId {
        uid,
        id: Arc::downgrade(id),
        st: Mutex::new(KSt {
            handle,
            file,
            dev: None,
            initiator_depth: 0,
            responder_resources: 0,
            connect_error: false,
            dual: false,
            unretrieved: false,
            children: Vec::new(),
            mcs: Vec::new(),
        }),
    });
    BY_ID.lock().insert(id.c() as usize, k.clone());
    BY_UID.lock().insert(k.uid, (Arc::downgrade(&k), false));
    k
}

fn unregister(id: &CmId, k: &KId) {
    BY_ID.lock().remove(&(id.c() as usize));
    let mut u = BY_UID.lock();
    u.remove(&k.uid);
    for m in &k.st.lock().mcs {
        u.remove(&m.uid);
    }
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> Res<()> {
    // SAFETY: the id's QP is live while the program uses the id.
    match unsafe { ffi::ibv_modify_qp(qp, a, mask as i32) } {
        0 => Ok(()),
        e => Err(e),
    }
}

fn qp_to(qp: *mut ibv_qp, state: ibv_qp_state) -> Res<()> {
    if qp.is_null() {
        return Ok(());
    }
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = state;
    modify(qp, &mut a, IBV_QP_STATE)
}

pub fn qp_to_err(qp: *mut ibv_qp) {
    let _ = qp_to(qp, IBV_QPS_ERR);
}

fn conn_to_kern(
    p: Option<&rdma_conn_param>,
    qp_num: u32,
    srq: u8,
    rr: u8,
    idepth: u8,
) -> rdma_ucm_conn_param {
    let mut d = rdma_ucm_conn_param {
        qp_num,
        srq,
        responder_resources: rr,
        initiator_depth: idepth,
        valid: 1,
        ..Default::default()
    };
    match p {
        Some(p) => {
            d.flow_control = p.flow_control;
            d.retry_count = p.retry_count;
            d.rnr_retry_count = p.rnr_retry_count;
            if !p.private_data.is_null() && p.private_data_len > 0 {
                let n = p.private_data_len as usize;
                // SAFETY: the program's private data, readable for its length.
                let src = unsafe { core::slice::from_raw_parts(p.private_data.cast::<u8>(), n) };
                d.private_data[..n].copy_from_slice(src);
                d.private_data_len = p.private_data_len;
            }
        }
        None => {
            d.retry_count = 7;
            d.rnr_retry_count = 7;
        }
    }
    d
}

/// The QP number and SRQ flag a connect or accept names.
fn qp_of(qp: *mut ibv_qp, p: Option<&rdma_conn_param>) -> (u32, u8) {
    if qp.is_null() {
        return p.map_or((0, 0), |p| (p.qp_num, p.srq));
    }
    // SAFETY: the id's QP is live.
    unsafe { ((*qp).qp_num, u8::from(!(*qp).srq.is_null())) }
}

impl KId {
    fn fh(&self) -> (Arc<KFile>, u32) {
        let st = self.st.lock();
        (st.file.clone(), st.handle)
    }

    fn dev(&self) -> Res<&'static device::Device> {
        let d = self.st.lock().dev.ok_or(libc::EINVAL)?;
        Ok(device::get(d))
    }

    fn is_iwarp(&self) -> bool {
        self.dev().is_ok_and(|d| d.transport == IBV_TRANSPORT_IWARP)
    }

    pub fn is_ib_transport(&self) -> bool {
        self.dev().is_ok_and(|d| d.transport == IBV_TRANSPORT_IB)
    }

    pub fn dual(&self) -> bool {
        self.st.lock().dual
    }

    /// Reads the id's addresses, route and device from the kernel into the
    /// C id (rdma-core's `ucma_query_route`).
    pub fn query_route(&self, id: &CmId) -> Res<()> {
        let (f, h) = self.fh();
        let mut r = rdma_ucm_query_route_resp {
            ibdev_index: u32::MAX,
            ..Default::default()
        };
        let cmd = rdma_ucm_query {
            response: resp_ptr(&mut r),
            id: h,
            option: RDMA_USER_CM_QUERY_ADDR,
        };
        f.cmd(
            RDMA_USER_CM_CMD_QUERY_ROUTE,
            &cmd,
            size_of::<rdma_ucm_query_route_resp>(),
        )?;
        if r.node_guid != 0 && self.st.lock().dev.is_none() {
            let dev = device::by_guid(r.node_guid).ok_or(libc::ENODEV)?;
            let port = r.port_num.max(1);
            let gid_index = device::get(dev)
                .gids(port)
                .iter()
                .position(|g| *g == r.ib_route[0].sgid)
                .unwrap_or(0) as u8;
            id.adopt_device(Local {
                dev,
                port,
                gid_index,
            })?;
            self.st.lock().dev = Some(dev);
        }
        id.with_c(|c, _| {
            if !c.route.path_rec.is_null() {
                // SAFETY: allocated with calloc below (or by the TCP CM).
                unsafe { libc::free(c.route.path_rec.cast()) };
                c.route.path_rec = core::ptr::null_mut();
                c.route.num_paths = 0;
            }
            let n = (r.num_paths as usize).min(r.ib_route.len());
            if n > 0 {
                // SAFETY: calloc of `n` zeroed records; freed with the id.
                let p = unsafe { libc::calloc(n, size_of::<ibv_sa_path_rec>()) }
                    .cast::<ibv_sa_path_rec>();
                if !p.is_null() {
                    for (i, rec) in r.ib_route[..n].iter().enumerate() {
                        // SAFETY: `p` has room for `n` records.
                        unsafe { p.add(i).write(convert::path_rec(rec)) };
                    }
                    c.route.path_rec = p;
                    c.route.num_paths = n as i32;
                }
            }
            c.route.addr.addr.ibaddr.sgid = ibv_gid::from_raw(r.ib_route[0].sgid);
            c.route.addr.addr.ibaddr.dgid = ibv_gid::from_raw(r.ib_route[0].dgid);
            c.route.addr.addr.ibaddr.pkey = r.ib_route[0].pkey;
            c.route.addr.src.src_storage = convert::in6_to_c(&r.src_addr);
            c.route.addr.dst.dst_storage = convert::in6_to_c(&r.dst_addr);
        });
        Ok(())
    }

    pub fn bind(&self, a: &SocketAddr) -> Res<()> {
        let (f, h) = self.fh();
        let cmd = rdma_ucm_bind_ip {
            response: 0,
            addr: convert::to_in6(a),
            id: h,
        };
        f.cmd(RDMA_USER_CM_CMD_BIND_IP, &cmd, 0)
    }

    pub fn resolve_addr(
        &self,
        id: &CmId,
        src: Option<SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: i32,
    ) -> Res<()> {
        let (f, h) = self.fh();
        let cmd = rdma_ucm_resolve_ip {
            src_addr: src.map(|s| convert::to_in6(&s)).unwrap_or_default(),
            dst_addr: convert::to_in6(dst),
            id: h,
            timeout_ms: timeout_ms.max(0) as u32,
        };
        f.cmd(RDMA_USER_CM_CMD_RESOLVE_IP, &cmd, 0)?;
        let (ss, _) = crate::addr::to_c(dst);
        id.with_c(|c, _| c.route.addr.dst.dst_storage = ss);
        Ok(())
    }

    pub fn resolve_route(&self, timeout_ms: i32) -> Res<()> {
        let (f, h) = self.fh();
        let cmd = rdma_ucm_resolve_route {
            id: h,
            timeout_ms: timeout_ms.max(0) as u32,
        };
        f.cmd(RDMA_USER_CM_CMD_RESOLVE_ROUTE, &cmd, 0)
    }

    pub fn listen(&self, id: &CmId, backlog: i32) -> Res<()> {
        let (f, h) = self.fh();
        let cmd = rdma_ucm_listen {
            id: h,
            backlog: backlog.max(0) as u32,
        };
        f.cmd(RDMA_USER_CM_CMD_LISTEN, &cmd, 0)?;
        self.query_route(id)
    }

    /// `rdma_init_qp_attr`: the kernel's attributes for moving the QP to
    /// `state`.
    pub fn init_qp_attr(&self, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
        let (f, h) = self.fh();
        let mut r = ib_uverbs_qp_attr::default();
        let cmd = rdma_ucm_init_qp_attr {
            response: resp_ptr(&mut r),
            id: h,
            qp_state: state,
        };
        f.cmd(
            RDMA_USER_CM_CMD_INIT_QP_ATTR,
            &cmd,
            size_of::<ib_uverbs_qp_attr>(),
        )?;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = state;
        convert::qp_attr(&mut a, &r);
        Ok((a, r.qp_attr_mask))
    }

    /// A new QP's first steps: INIT from the kernel's attributes, and for
    /// UD on to RTS (rdma-core's `ucma_init_conn_qp`/`ucma_init_ud_qp`).
    pub fn init_qp(&self, qp: *mut ibv_qp, ud: bool) -> Res<()> {
        let (mut a, mask) = self.init_qp_attr(IBV_QPS_INIT)?;
        modify(qp, &mut a, mask)?;
        if ud {
            qp_to(qp, IBV_QPS_RTR)?;
            let mut a = ibv_qp_attr::zeroed();
            a.qp_state = IBV_QPS_RTS;
            a.sq_psn = 0;
            modify(qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN)?;
        }
        Ok(())
    }

    fn qp_to_rtr(&self, qp: *mut ibv_qp, rr: u8) -> Res<()> {
        if qp.is_null() {
            return Ok(());
        }
        // The QP may have been reset since: INIT again from the kernel's
        // values first, as rdma-core does.
        let (mut a, mask) = self.init_qp_attr(IBV_QPS_INIT)?;
        modify(qp, &mut a, mask)?;
        let (mut a, mut mask) = self.init_qp_attr(IBV_QPS_RTR)?;
        if self.link_layer_ib() {
            // rdma_ucm reports RoCE-only bits (21-23) on InfiniBand too.
            mask &= !0x00e0_0000;
        }
        if rr != RDMA_MAX_RESP_RES {
            a.max_dest_rd_atomic = rr;
        }
        modify(qp, &mut a, mask)
    }

    fn qp_to_rts(&self, qp: *mut ibv_qp, idepth: u8) -> Res<()> {
        if qp.is_null() {
            return Ok(());
        }
        let (mut a, mask) = self.init_qp_attr(IBV_QPS_RTS)?;
        if idepth != RDMA_MAX_INIT_DEPTH {
            a.max_rd_atomic = idepth;
        }
        modify(qp, &mut a, mask)
    }

    fn link_layer_ib(&self) -> bool {
        let Ok(d) = self.dev() else { return false };
        d.port_attr(1)
            .is_ok_and(|p| p.link_layer == IBV_LINK_LAYER_INFINIBAND)
    }

    /// rdma-core's `ucma_valid_param`.
    fn valid_param(&self, id: &CmId, p: Option<&rdma_conn_param>) -> Res<()> {
        let (ps, qp) = id.with_c(|c, _| (c.ps, c.qp));
        if ps != RDMA_PS_TCP {
            return Ok(());
        }
        let Some(p) = p else {
            return if qp.is_null() {
                Err(libc::EINVAL)
            } else {
                Ok(())
            };
        };
        let d = self.dev()?;
        if (p.responder_resources != RDMA_MAX_RESP_RES
            && p.responder_resources > d.max_responder_resources)
            || (p.initiator_depth != RDMA_MAX_INIT_DEPTH
                && p.initiator_depth > d.max_initiator_depth)
        {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    pub fn connect(&self, id: &CmId, p: Option<&rdma_conn_param>) -> Res<()> {
        self.valid_param(id, p)?;
        let d = self.dev()?;
        let idepth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => d.max_initiator_depth,
        };
        let rr = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => d.max_responder_resources,
        };
        {
            let mut st = self.st.lock();
            st.initiator_depth = idepth;
            st.responder_resources = rr;
        }
        let qp = id.with_c(|c, _| c.qp);
        let (qpn, srq) = qp_of(qp, p);
        let (f, h) = self.fh();
        let (vendor_id, attr_mod) = id.ece.lock().local;
        let cmd = rdma_ucm_connect {
            conn_param: conn_to_kern(p, qpn, srq, rr, idepth),
            id: h,
            ece: rdma_ucm_ece {
                vendor_id,
                attr_mod,
            },
            ..Default::default()
        };
        f.cmd(RDMA_USER_CM_CMD_CONNECT, &cmd, 0)
    }

    pub fn accept(&self, id: &CmId, p: Option<&rdma_conn_param>) -> Res<()> {
        self.valid_param(id, p)?;
        let d = self.dev()?;
        let (idepth, rr) = {
            let mut st = self.st.lock();
            st.initiator_depth = match p {
                Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
                _ => st.initiator_depth.min(d.max_initiator_depth),
            };
            st.responder_resources = match p {
                Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
                _ => st.responder_resources.min(d.max_responder_resources),
            };
            (st.initiator_depth, st.responder_resources)
        };
        let (qp, ud) = id.with_c(|c, _| (c.qp, c.qp_type == IBV_QPT_UD));
        if qp.is_null() && p.is_none() {
            return Err(libc::EINVAL);
        }
        if !ud {
            self.qp_to_rtr(qp, rr)?;
            self.qp_to_rts(qp, idepth)?;
        }
        let (qpn, srq) = qp_of(qp, p);
        let (f, h) = self.fh();
        // As rdma-core: the vendor the request named, our options.
        let e = *id.ece.lock();
        let cmd = rdma_ucm_accept {
            uid: self.uid,
            conn_param: conn_to_kern(p, qpn, srq, rr, idepth),
            id: h,
            ece: rdma_ucm_ece {
                vendor_id: e.remote.0,
                attr_mod: e.local.1,
            },
            ..Default::default()
        };
        f.cmd(RDMA_USER_CM_CMD_ACCEPT, &cmd, 0)
            .inspect_err(|_| qp_to_err(qp))
    }

    /// The active side after a REP: QP to RTR and RTS, then the RTU
    /// (rdma-core's `ucma_process_conn_resp`; `rdma_establish` without a QP).
    pub fn connect_reply(&self, qp: *mut ibv_qp) -> Res<()> {
        let r = self
            .qp_to_rtr(qp, RDMA_MAX_RESP_RES)
            .and_then(|_| self.qp_to_rts(qp, RDMA_MAX_INIT_DEPTH))
            .and_then(|_| {
                let (f, h) = self.fh();
                let cmd = rdma_ucm_accept {
                    id: h,
                    ..Default::default()
                };
                f.cmd(RDMA_USER_CM_CMD_ACCEPT, &cmd, 0)
            });
        if r.is_err() {
            qp_to_err(qp);
        }
        r
    }

    pub fn reject(&self, pdata: &[u8], reason: u16) -> Res<()> {
        let (f, h) = self.fh();
        let mut cmd = rdma_ucm_reject {
            id: h,
            reason: reason as u8,
            ..Default::default()
        };
        let n = pdata.len().min(cmd.private_data.len());
        cmd.private_data[..n].copy_from_slice(&pdata[..n]);
        cmd.private_data_len = n as u8;
        f.cmd(RDMA_USER_CM_CMD_REJECT, &cmd, 0)
    }

    pub fn disconnect(&self, id: &CmId) -> Res<()> {
        let qp = id.with_c(|c, _| c.qp);
        if self.is_iwarp() {
            qp_to(qp, IBV_QPS_SQD)?;
        } else {
            qp_to(qp, IBV_QPS_ERR)?;
        }
        let (f, h) = self.fh();
        f.cmd(
            RDMA_USER_CM_CMD_DISCONNECT,
            &rdma_ucm_disconnect { id: h },
            0,
        )
    }

    pub fn notify(&self, event: ibv_event_type) -> Res<()> {
        let (f, h) = self.fh();
        let cmd = rdma_ucm_notify { id: h, event };
        f.cmd(RDMA_USER_CM_CMD_NOTIFY, &cmd, 0)
    }

    pub fn set_option(&self, level: i32, name: i32, val: &[u8]) -> Res<()> {
        let (f, h) = self.fh();
        let cmd = rdma_ucm_set_option {
            optval: val.as_ptr() as u64,
            id: h,
            level: level as u32,
            optname: name as u32,
            optlen: val.len() as u32,
        };
        f.cmd(RDMA_USER_CM_CMD_SET_OPTION, &cmd, 0)
    }

    pub fn join(self: &Arc<Self>, addr: SocketAddr, join_flags: u16, context: usize) -> Res<()> {
        let uid = new_uid();
        let (f, h) = self.fh();
        let (ss, len) = convert::to_storage(&addr);
        let mut r = rdma_ucm_create_id_resp::default();
        let cmd = rdma_ucm_join_mcast {
            response: resp_ptr(&mut r),
            uid,
            id: h,
            addr_size: len,
            join_flags,
            addr: ss,
        };
        // Known before the command: the join's event may come at once.
        BY_UID.lock().insert(uid, (Arc::downgrade(self), true));
        if let Err(e) = f.cmd(
            RDMA_USER_CM_CMD_JOIN_MCAST,
            &cmd,
            size_of::<rdma_ucm_create_id_resp>(),
        ) {
            BY_UID.lock().remove(&uid);
            return Err(e);
        }
        self.st.lock().mcs.push(Mc {
            uid,
            addr,
            handle: r.id,
            context,
            join_flags,
            mgid: ibv_gid::zeroed(),
            mlid: 0,
        });
        Ok(())
    }

    pub fn leave(&self, id: &CmId, addr: SocketAddr) -> Res<()> {
        let mc = {
            let mut st = self.st.lock();
            let i = st
                .mcs
                .iter()
                .position(|m| m.addr == addr)
                .ok_or(libc::EADDRNOTAVAIL)?;
            st.mcs.remove(i)
        };
        BY_UID.lock().remove(&mc.uid);
        let qp = id.with_c(|c, _| c.qp);
        if !qp.is_null() && mc.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER as u16 {
            // SAFETY: the id's QP is live.
            unsafe { ffi::ibv_detach_mcast(qp, &mc.mgid, mc.mlid) };
        }
        let (f, _) = self.fh();
        let mut r = rdma_ucm_destroy_id_resp::default();
        let cmd = rdma_ucm_destroy_id {
            response: resp_ptr(&mut r),
            id: mc.handle,
            reserved: 0,
        };
        f.cmd(
            RDMA_USER_CM_CMD_LEAVE_MCAST,
            &cmd,
            size_of::<rdma_ucm_destroy_id_resp>(),
        )
    }

    /// The group a join event is about: its context, and where to keep
    /// the group's GID and LID.
    pub fn with_mc<R>(&self, uid: u64, f: impl FnOnce(&mut Mc) -> R) -> Option<R> {
        self.st.lock().mcs.iter_mut().find(|m| m.uid == uid).map(f)
    }

    /// Moves the kernel's id to the file of the id's channel now (after the
    /// id itself moved).
    pub fn follow_channel(&self, id: &CmId) -> Res<()> {
        let chan = id.with_c(|_, st| st.chan.clone());
        let new = KFile::of(&chan)?;
        let (old, h) = self.fh();
        if Arc::ptr_eq(&old, &new) {
            return Ok(());
        }
        let mut r = rdma_ucm_migrate_resp::default();
        let cmd = rdma_ucm_migrate_id {
            response: resp_ptr(&mut r),
            id: h,
            fd: old.raw() as u32,
        };
        new.cmd(
            RDMA_USER_CM_CMD_MIGRATE_ID,
            &cmd,
            size_of::<rdma_ucm_migrate_resp>(),
        )?;
        self.st.lock().file = new;
        Ok(())
    }

    fn destroy_kernel(&self) {
        let (f, h) = self.fh();
        destroy_handle(&f, h);
    }
}

/// A new kernel id for `id`, on the file of its channel, with the options
/// the program set before the kernel took it.
pub fn create(id: &Arc<CmId>) -> Res<Arc<KId>> {
    let (chan, ps, qp_type) = id.with_c(|c, st| (st.chan.clone(), c.ps, c.qp_type));
    let file = KFile::of(&chan)?;
    let uid = new_uid();
    let mut r = rdma_ucm_create_id_resp::default();
    let cmd = rdma_ucm_create_id {
        uid,
        response: resp_ptr(&mut r),
        ps: ps as u16,
        qp_type: qp_type as u8,
        reserved: [0; 5],
    };
    file.cmd(
        RDMA_USER_CM_CMD_CREATE_ID,
        &cmd,
        size_of::<rdma_ucm_create_id_resp>(),
    )?;
    let k = register(id, uid, r.id, file);
    for (level, name, val) in id.options() {
        if let Err(e) = k.set_option(level, name, &val) {
            destroy(id, &k);
            return Err(e);
        }
    }
    Ok(k)
}

/// The id a connect request made, on the listener's file.
pub fn new_child(listener: &Arc<CmId>, lk: &Arc<KId>, file: &Arc<KFile>, handle: u32) -> Arc<CmId> {
    let (chan, ps, ctx, qp_type) =
        listener.with_c(|c, st| (st.chan.clone(), c.ps, c.context, c.qp_type));
    let child = CmId::new(ps, chan, false, ctx);
    child.with_c(|c, _| c.qp_type = qp_type);
    let k = register(&child, new_uid(), handle, file.clone());
    k.st.lock().unretrieved = true;
    lk.st.lock().children.push(Arc::downgrade(&k));
    child
}

/// Forgets the kernel side of `id` and destroys the kernel's id (the
/// connect requests it never handed out too).
pub fn destroy(id: &CmId, k: &KId) {
    let children: Vec<Arc<KId>> =
        k.st.lock()
            .children
            .drain(..)
            .filter_map(|w| w.upgrade())
            .collect();
    for c in children {
        if c.st.lock().unretrieved {
            c.destroy_kernel();
            if let Some(cid) = c.id.upgrade() {
                unregister(&cid, &c);
            }
        }
    }
    k.destroy_kernel();
    unregister(id, k);
}

/// Destroys a connect request's kernel id that no id will hold.
pub fn destroy_handle(file: &KFile, handle: u32) {
    let mut r = rdma_ucm_destroy_id_resp::default();
    let cmd = rdma_ucm_destroy_id {
        response: resp_ptr(&mut r),
        id: handle,
        reserved: 0,
    };
    let _ = file.cmd(
        RDMA_USER_CM_CMD_DESTROY_ID,
        &cmd,
        size_of::<rdma_ucm_destroy_id_resp>(),
    );
}
