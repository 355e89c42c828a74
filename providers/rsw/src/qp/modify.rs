//! The QP state machine: `ibv_modify_qp` and `ibv_query_qp`.

use std::os::raw::c_int;

use verbs_abi::*;

use super::checked_target;
use crate::device::MAX_RD_ATOM;
use crate::engine::{datagram, raw, requester, responder, roce_rc};
use crate::engine::{Qp, QpInner};
use crate::handles::UNKNOWN_BY_WRITE;
use crate::transport::RemoteAddr;

/// Required and optional attribute masks of each legal transition of a QP
/// of type `ty` (InfiniBand spec, QP state transition table); None when
/// illegal.
fn transition(ty: ibv_qp_type, cur: ibv_qp_state, new: ibv_qp_state) -> Option<(u32, u32)> {
    match ty {
        IBV_QPT_UC => transition_uc(cur, new),
        IBV_QPT_UD => transition_ud(cur, new),
        IBV_QPT_RAW_PACKET => transition_raw(cur, new),
        // The XRC send side has no responder: its RTR is UC's.
        IBV_QPT_XRC_SEND if (cur, new) == (IBV_QPS_INIT, IBV_QPS_RTR) => transition_uc(cur, new),
        // The XRC receive side has no requester: RTS needs no retry or
        // READ/atomic resources.
        IBV_QPT_XRC_RECV if (cur, new) == (IBV_QPS_RTR, IBV_QPS_RTS) => Some((
            IBV_QP_TIMEOUT | IBV_QP_SQ_PSN,
            IBV_QP_CUR_STATE
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_ALT_PATH
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE,
        )),
        _ => transition_rc(cur, new),
    }
}

/// UC: RC's table without the attributes of acknowledgement, retry, RNR
/// and RDMA READ/atomic resources.
fn transition_uc(cur: ibv_qp_state, new: ibv_qp_state) -> Option<(u32, u32)> {
    const ALT_PATH: u32 = IBV_QP_ALT_PATH;
    const MOD: u32 = IBV_QP_ACCESS_FLAGS | ALT_PATH | IBV_QP_PATH_MIG_STATE;
    Some(match (cur, new) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (
            IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
            ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        ),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | MOD),
        (IBV_QPS_RTS, IBV_QPS_RTS) | (IBV_QPS_SQD, IBV_QPS_RTS) => (0, IBV_QP_CUR_STATE | MOD),
        (IBV_QPS_RTS, IBV_QPS_SQD) => (0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
        (IBV_QPS_SQD, IBV_QPS_SQD) => (0, IBV_QP_PKEY_INDEX | IBV_QP_AV | MOD),
        (IBV_QPS_SQE, IBV_QPS_RTS) => (0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS),
        _ => return None,
    })
}

/// UD: no peer, so no path, PSN of the peer or access flags; the Q_Key
/// instead.
fn transition_ud(cur: ibv_qp_state, new: ibv_qp_state) -> Option<(u32, u32)> {
    Some(match (cur, new) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY),
        (IBV_QPS_RTS, IBV_QPS_RTS) | (IBV_QPS_SQD, IBV_QPS_RTS) | (IBV_QPS_SQE, IBV_QPS_RTS) => {
            (0, IBV_QP_CUR_STATE | IBV_QP_QKEY)
        }
        (IBV_QPS_RTS, IBV_QPS_SQD) => (0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
        (IBV_QPS_SQD, IBV_QPS_SQD) => (0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
        _ => return None,
    })
}

/// Raw packet: the port, nothing else (as the kernel's table has it).
fn transition_raw(cur: ibv_qp_state, new: ibv_qp_state) -> Option<(u32, u32)> {
    Some(match (cur, new) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PORT, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, IBV_QP_PORT),
        (IBV_QPS_INIT, IBV_QPS_RTR) | (IBV_QPS_RTR, IBV_QPS_RTS) => (0, 0),
        (IBV_QPS_RTS, IBV_QPS_RTS) | (IBV_QPS_SQE, IBV_QPS_RTS) => (0, IBV_QP_CUR_STATE),
        _ => return None,
    })
}

/// RC: the full table.
fn transition_rc(cur: ibv_qp_state, new: ibv_qp_state) -> Option<(u32, u32)> {
    const ALT_PATH: u32 = IBV_QP_ALT_PATH;
    Some(match (cur, new) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        ),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (
            IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC,
            IBV_QP_CUR_STATE
                | ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE,
        ),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (
            0,
            IBV_QP_CUR_STATE
                | IBV_QP_ACCESS_FLAGS
                | ALT_PATH
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_MIN_RNR_TIMER,
        ),
        (IBV_QPS_RTS, IBV_QPS_SQD) => (0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
        (IBV_QPS_SQD, IBV_QPS_RTS) => (
            0,
            IBV_QP_CUR_STATE
                | ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE,
        ),
        (IBV_QPS_SQD, IBV_QPS_SQD) => (
            0,
            IBV_QP_PKEY_INDEX
                | IBV_QP_PORT
                | IBV_QP_AV
                | ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC
                | IBV_QP_MAX_DEST_RD_ATOMIC,
        ),
        (IBV_QPS_SQE, IBV_QPS_RTS) => (0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS),
        _ => return None,
    })
}

/// What `qp_access_flags` may hold: the rights, and flags of MR access
/// that programs pass along (on-demand paging) and that change nothing
/// for a QP.
const QP_ACCESS_OK: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Checks attribute values (not masks) of a modify.
fn check_values(qp: &Qp, a: &ibv_qp_attr, mask: u32) -> Result<(), c_int> {
    let bad = |c: bool| if c { Err(libc::EINVAL) } else { Ok(()) };
    if mask & IBV_QP_PORT != 0 {
        bad(a.port_num != 1)?;
    }
    if mask & IBV_QP_PKEY_INDEX != 0 {
        bad(a.pkey_index != 0)?;
    }
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        bad(a.qp_access_flags & !QP_ACCESS_OK != 0)?;
    }
    if mask & IBV_QP_PATH_MTU != 0 {
        bad(!(IBV_MTU_256..=IBV_MTU_4096).contains(&a.path_mtu))?;
    }
    if mask & IBV_QP_AV != 0 && a.ah_attr.is_global != 0 {
        let n = qp.ctx.dev.gids.len();
        bad(a.ah_attr.grh.sgid_index as usize >= n)?;
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        bad(a.max_rd_atomic as u32 > MAX_RD_ATOM)?;
    }
    if mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        bad(a.max_dest_rd_atomic as u32 > MAX_RD_ATOM)?;
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 {
        bad(a.min_rnr_timer > 31)?;
    }
    if mask & IBV_QP_TIMEOUT != 0 {
        bad(a.timeout > 31)?;
    }
    if mask & IBV_QP_RETRY_CNT != 0 {
        bad(a.retry_cnt > 7)?;
    }
    if mask & IBV_QP_RNR_RETRY != 0 {
        bad(a.rnr_retry > 7)?;
    }
    if mask & IBV_QP_DEST_QPN != 0 {
        bad(a.dest_qp_num >= 1 << 24)?;
    }
    if mask & IBV_QP_PATH_MIG_STATE != 0 {
        bad(a.path_mig_state > IBV_MIG_ARMED)?;
    }
    Ok(())
}

/// Records the attributes of a successful modify for query_qp.
fn store(g: &mut QpInner, a: &ibv_qp_attr, mask: u32) {
    let s = &mut g.attr;
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        s.qp_access_flags = a.qp_access_flags;
    }
    if mask & IBV_QP_PKEY_INDEX != 0 {
        s.pkey_index = a.pkey_index;
    }
    if mask & IBV_QP_PORT != 0 {
        s.port_num = a.port_num;
    }
    if mask & IBV_QP_AV != 0 {
        s.ah_attr = a.ah_attr;
    }
    if mask & IBV_QP_PATH_MTU != 0 {
        s.path_mtu = a.path_mtu;
    }
    if mask & IBV_QP_DEST_QPN != 0 {
        s.dest_qp_num = a.dest_qp_num;
    }
    if mask & IBV_QP_RQ_PSN != 0 {
        s.rq_psn = a.rq_psn & 0xff_ffff;
    }
    if mask & IBV_QP_SQ_PSN != 0 {
        s.sq_psn = a.sq_psn & 0xff_ffff;
    }
    if mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        s.max_rd_atomic = a.max_rd_atomic;
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 {
        s.min_rnr_timer = a.min_rnr_timer;
    }
    if mask & IBV_QP_TIMEOUT != 0 {
        s.timeout = a.timeout;
    }
    if mask & IBV_QP_RETRY_CNT != 0 {
        s.retry_cnt = a.retry_cnt;
    }
    if mask & IBV_QP_RNR_RETRY != 0 {
        s.rnr_retry = a.rnr_retry;
    }
    if mask & IBV_QP_ALT_PATH != 0 {
        s.alt_ah_attr = a.alt_ah_attr;
        s.alt_pkey_index = a.alt_pkey_index;
        s.alt_port_num = a.alt_port_num;
        s.alt_timeout = a.alt_timeout;
    }
    if mask & IBV_QP_PATH_MIG_STATE != 0 {
        s.path_mig_state = a.path_mig_state;
    }
    if mask & IBV_QP_EN_SQD_ASYNC_NOTIFY != 0 {
        s.en_sqd_async_notify = a.en_sqd_async_notify;
    }
    if mask & IBV_QP_QKEY != 0 {
        s.qkey = a.qkey;
    }
}

fn modify(qp: &Qp, a: &ibv_qp_attr, mask: u32) -> Result<(), c_int> {
    let mut g = qp.inner.lock();
    if g.destroyed {
        return Err(libc::EINVAL);
    }
    let cur = g.state;
    if mask & IBV_QP_CUR_STATE != 0 && a.cur_qp_state != cur {
        return Err(libc::EINVAL);
    }
    let new = if mask & IBV_QP_STATE != 0 {
        a.qp_state
    } else {
        cur
    };
    if new > IBV_QPS_ERR {
        return Err(libc::EINVAL);
    }
    let (req, opt) = transition(g.qp_type, cur, new).ok_or(libc::EINVAL)?;
    let given = mask & !IBV_QP_STATE;
    if given & req != req || given & !(req | opt) != 0 {
        return Err(libc::EINVAL);
    }
    check_values(qp, a, mask)?;
    let saved = g.attr;
    store(&mut g, a, mask);
    if mask & IBV_QP_QKEY != 0 && g.dgram.is_some() {
        crate::engine::datagram::filter_sockets(qp, &mut g);
    }
    match new {
        IBV_QPS_RESET => {
            qp.reset(&mut g);
            if verbs_rt::check::on() {
                crate::check::qp_reset(qp.qpn);
            }
        }
        IBV_QPS_ERR => qp.enter_error_quietly(&mut g),
        IBV_QPS_INIT => qp.set_state(&mut g, IBV_QPS_INIT),
        IBV_QPS_RTR => {
            qp.set_state(&mut g, IBV_QPS_RTR);
            if cur == IBV_QPS_INIT && g.dgram.is_none() && g.raw.is_none() {
                if let Err(e) = to_rtr(qp, &mut g) {
                    // No socket for the connection: the modify fails and
                    // the QP stays in INIT, as a failed command leaves it.
                    g.attr = saved;
                    g.remote = None;
                    g.req.disconnect();
                    qp.set_state(&mut g, IBV_QPS_INIT);
                    return Err(e);
                }
            }
        }
        IBV_QPS_RTS => {
            qp.set_state(&mut g, IBV_QPS_RTS);
            g.sqd_notify = false;
            if g.dgram.is_some() {
                datagram::pump(qp, &mut g);
            } else if g.raw.is_some() {
                raw::pump(qp, &mut g);
            } else if g.roce.is_some() {
                if cur == IBV_QPS_RTR {
                    roce_rc::at_rts(&mut g);
                }
                roce_rc::pump(qp, &mut g);
            } else {
                requester::apply_timeouts(&g);
                requester::pump(qp, &mut g);
            }
        }
        IBV_QPS_SQD => {
            qp.set_state(&mut g, IBV_QPS_SQD);
            if cur == IBV_QPS_RTS {
                g.sqd_notify = a.en_sqd_async_notify != 0 && mask & IBV_QP_EN_SQD_ASYNC_NOTIFY != 0;
                qp.after_send_completions(&mut g);
            }
        }
        _ => qp.set_state(&mut g, new),
    }
    // The access flags may change without a state change.
    qp.publish(&g);
    Ok(())
}

/// Entering RTR: the peer is known, so open our outgoing connection and let
/// a peer connection that arrived early through.
fn to_rtr(qp: &Qp, g: &mut QpInner) -> Result<(), c_int> {
    let dev = &qp.ctx.dev;
    let first = dev.gids.first().copied().unwrap_or([0; 16]);
    let ah = g.attr.ah_attr;
    g.local_gid = if ah.is_global != 0 {
        dev.gids
            .get(ah.grh.sgid_index as usize)
            .copied()
            .unwrap_or(first)
    } else {
        first
    };
    // Without a GRH there is no address: LID 0 can only mean this host, so
    // the peer is reached through our own first GID.
    let gid = if ah.is_global != 0 {
        ah.grh.dgid.raw()
    } else {
        first
    };
    g.remote = Some(RemoteAddr {
        gid,
        qpn: g.attr.dest_qp_num,
        ifindex: dev.ifindex,
        global: ah.is_global != 0,
    });
    // RoCEv2: packets through the device's port, no connections.
    if g.roce.is_some() {
        roce_rc::start(g);
        return Ok(());
    }
    g.resp.unbind();
    // An XRC receive QP sends nothing: no outgoing connection.
    if g.qp_type != IBV_QPT_XRC_RECV {
        requester::start(qp, g)?;
    }
    responder::promote_pending(qp, g);
    Ok(())
}

pub(crate) unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let q = match checked_target(qp, UNKNOWN_BY_WRITE) {
        Ok(q) => q,
        Err(e) => return e,
    };
    // Another process's QP: its state machine is not ours to drive.
    if q.foreign {
        return libc::EOPNOTSUPP;
    }
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: attr points to the caller's attributes (checked non-null).
    let a = unsafe { &*attr };
    match modify(&q, a, mask as u32) {
        Ok(()) => 0,
        Err(e) => {
            log::error!(
                "modify_qp qp {:#x}: attributes {:#x} toward state {} refused (errno {e})",
                q.qpn,
                mask,
                a.qp_state
            );
            e
        }
    }
}

pub(crate) unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let q = match checked_target(qp, UNKNOWN_BY_WRITE) {
        Ok(q) => q,
        Err(e) => return e,
    };
    // Another process's QP: its state as its domain's registry has it
    // (EINVAL once it is destroyed).
    if q.foreign {
        let st = q
            .xrcd
            .as_ref()
            .and_then(|d| d.reg.as_ref())
            .and_then(|r| r.find_qp(q.qpn));
        match st {
            Some(st) => q.inner.lock().state = st,
            None => return libc::EINVAL,
        }
    }
    let g = q.inner.lock();
    if g.destroyed {
        return libc::EINVAL;
    }
    let mut a = g.attr;
    a.qp_state = g.state;
    a.cur_qp_state = g.state;
    a.cap = g.caps();
    a.sq_draining = (g.state == IBV_QPS_SQD && g.sq.in_flight()) as u8;
    if !attr.is_null() {
        // SAFETY: out-pointer supplied by the caller.
        unsafe { attr.write(a) };
    }
    if !init_attr.is_null() {
        // SAFETY: the public struct is ours; reading its fixed fields.
        let b = unsafe { &(*q.ibv.get()).qp_base };
        let ia = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: g.caps(),
            qp_type: g.qp_type,
            sq_sig_all: g.sq_sig_all as c_int,
        };
        // SAFETY: out-pointer supplied by the caller.
        unsafe { init_attr.write(ia) };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_table() {
        assert!(transition_rc(IBV_QPS_RESET, IBV_QPS_RTR).is_none());
        assert!(transition_rc(IBV_QPS_INIT, IBV_QPS_RTS).is_none());
        assert!(transition_rc(IBV_QPS_ERR, IBV_QPS_RTS).is_none());
        let (req, _) = transition_rc(IBV_QPS_RESET, IBV_QPS_INIT).unwrap();
        assert_eq!(req, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        assert_eq!(transition_rc(IBV_QPS_RTS, IBV_QPS_ERR), Some((0, 0)));
        assert_eq!(transition_rc(IBV_QPS_SQD, IBV_QPS_RESET), Some((0, 0)));
    }
}
