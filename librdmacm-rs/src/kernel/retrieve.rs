//! What rdma-core's `rdma_get_cm_event` does with a kernel event, done
//! when the program takes it, in its thread: read the route after address
//! resolution, make the new id of a connect request usable, bring the QP
//! up and answer with the RTU after a REP, attach to a joined group.

use std::sync::Arc;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::convert;
use super::id::{self, qp_to_err, KId};
use crate::channel::EventBox;
use crate::ffi;
use crate::id::{cm_id, CmId};

/// What the kernel reported, kept with the event until it is retrieved.
pub struct Raw {
    pub resp: rdma_ucm_event_resp,
    /// The group of a multicast event (its uid).
    pub mc: Option<u64>,
}

fn copy_conn(ev: &mut EventBox, p: &rdma_ucm_conn_param) {
    let n = p.private_data_len as usize;
    if n > 0 {
        ev.set_pdata(&p.private_data[..n], n);
    }
    let c = ev.conn();
    c.responder_resources = p.responder_resources;
    c.initiator_depth = p.initiator_depth;
    c.flow_control = p.flow_control;
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.srq = p.srq;
    c.qp_num = p.qp_num;
}

fn copy_ud(ev: &mut EventBox, p: &rdma_ucm_ud_param) {
    let n = (p.private_data_len as usize).min(ev.pdata.len());
    ev.pdata[..n].copy_from_slice(&p.private_data[..n]);
    let data = ev.pdata.as_ptr();
    // SAFETY: `ud` is the member datagram events use; all plain data.
    let u = unsafe { &mut ev.ev.param.ud };
    u.private_data_len = n as u8;
    u.private_data = if n > 0 {
        data.cast()
    } else {
        core::ptr::null()
    };
    u.ah_attr = convert::ah_attr(&p.ah_attr);
    u.qp_num = p.qp_num;
    u.qkey = p.qkey;
}

fn copy_param(ev: &mut EventBox, id: &CmId, r: &rdma_ucm_event_resp) {
    // SAFETY: the kernel fills the member the id's QP type implies.
    unsafe {
        if id.is_datagram() {
            copy_ud(ev, &r.param.ud);
        } else {
            copy_conn(ev, &r.param.conn);
        }
    }
}

fn fail(ev: &mut EventBox, kind: rdma_cm_event_type, e: i32) {
    ev.ev.event = kind;
    ev.ev.status = -e;
}

/// Does rdma-core's work on a kernel event; false when the event is not
/// the program's (rdma-core reads the next one instead).
pub fn on_retrieve(ev: &mut EventBox) -> bool {
    let Some(raw) = ev.ext.take().and_then(|b| b.downcast::<Raw>().ok()) else {
        return true;
    };
    let r = raw.resp;
    let (Some(owner), Some(subject)) = (cm_id(&ev.owner), cm_id(&ev.subject)) else {
        return true;
    };
    let Some(k) = id::lookup(&subject) else {
        return true;
    };
    match r.event {
        RDMA_CM_EVENT_ADDR_RESOLVED => {
            if let Err(e) = k.query_route(&subject) {
                fail(ev, RDMA_CM_EVENT_ADDR_ERROR, e);
            }
        }
        RDMA_CM_EVENT_ROUTE_RESOLVED => {
            if k.is_ib_transport() {
                if let Err(e) = k.query_route(&subject) {
                    fail(ev, RDMA_CM_EVENT_ROUTE_ERROR, e);
                }
            }
        }
        RDMA_CM_EVENT_CONNECT_REQUEST => {
            subject.ece.lock().remote = (r.ece.vendor_id, r.ece.attr_mod);
            copy_param(ev, &owner, &r);
            ev.ev.listen_id = owner.c();
            if let Err(e) = new_request(&owner, &subject, &k, ev) {
                log::warn!("connect request dropped: errno {e}");
                id::destroy(&subject, &k);
                subject.destroy();
                return false;
            }
        }
        RDMA_CM_EVENT_CONNECT_RESPONSE => {
            subject.ece.lock().remote = (r.ece.vendor_id, r.ece.attr_mod);
            copy_conn(ev, &ev_conn(&r));
            let qp = subject.with_c(|c, _| c.qp);
            if !qp.is_null() {
                let reply = (r.ece.vendor_id, r.ece.attr_mod);
                let up = subject
                    .ece_from_reply(qp, reply)
                    .and_then(|()| k.connect_reply(qp))
                    .and_then(|()| subject.ece_after_reply(qp));
                match up {
                    Ok(()) => ev.ev.event = RDMA_CM_EVENT_ESTABLISHED,
                    Err(e) => {
                        qp_to_err(qp);
                        fail(ev, RDMA_CM_EVENT_CONNECT_ERROR, e);
                        k.st.lock().connect_error = true;
                    }
                }
            }
        }
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_DISCONNECTED => {
            if k.st.lock().connect_error {
                return false;
            }
            copy_conn(ev, &ev_conn(&r));
            if r.event == RDMA_CM_EVENT_REJECTED {
                qp_to_err(subject.with_c(|c, _| c.qp));
            }
        }
        RDMA_CM_EVENT_MULTICAST_JOIN | RDMA_CM_EVENT_MULTICAST_ERROR => {
            joined(ev, &subject, &k, &r, raw.mc);
        }
        _ => copy_param(ev, &subject, &r),
    }
    true
}

fn ev_conn(r: &rdma_ucm_event_resp) -> rdma_ucm_conn_param {
    // SAFETY: connected events carry `conn`; all plain data.
    unsafe { r.param.conn }
}

/// The new id of a connect request becomes the program's.
fn new_request(
    listener: &Arc<CmId>,
    child: &Arc<CmId>,
    k: &Arc<KId>,
    ev: &mut EventBox,
) -> crate::error::Res<()> {
    {
        let c = ev.conn();
        let (idepth, rr) = (c.initiator_depth, c.responder_resources);
        let mut st = k.st.lock();
        st.unretrieved = false;
        st.initiator_depth = idepth;
        st.responder_resources = rr;
    }
    if listener.with_c(|_, st| st.sync) {
        child.migrate(None)?;
        k.follow_channel(child)?;
    }
    k.query_route(child)
}

fn joined(ev: &mut EventBox, id: &CmId, k: &KId, r: &rdma_ucm_event_resp, mc: Option<u64>) {
    let Some(uid) = mc else { return };
    let Some((context, flags)) = k.with_mc(uid, |m| (m.context, m.join_flags)) else {
        return;
    };
    if r.event == RDMA_CM_EVENT_MULTICAST_JOIN {
        // SAFETY: join events carry `ud`; all plain data.
        copy_ud(ev, unsafe { &r.param.ud });
    }
    // SAFETY: as above.
    let u = unsafe { &mut ev.ev.param.ud };
    u.private_data = context as *const core::ffi::c_void;
    if r.event != RDMA_CM_EVENT_MULTICAST_JOIN {
        return;
    }
    let (mgid, mlid) = (u.ah_attr.grh.dgid, u.ah_attr.dlid);
    k.with_mc(uid, |m| {
        m.mgid = mgid;
        m.mlid = mlid;
    });
    let qp = id.with_c(|c, _| c.qp);
    if qp.is_null() || flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER as u16 {
        return;
    }
    // SAFETY: the id's QP is live.
    let e = unsafe { ffi::ibv_attach_mcast(qp, &mgid, mlid) };
    if e != 0 {
        fail(ev, RDMA_CM_EVENT_MULTICAST_ERROR, e);
    }
}
