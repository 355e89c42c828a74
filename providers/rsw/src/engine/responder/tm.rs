//! The responder's side of tag matching (`crate::tm`): a SEND to a QP on
//! a tag-matching SRQ has its first 16 bytes (the tag-matching header)
//! read before anything else ([`receive_header`]); then the SRQ's list
//! decides where it goes ([`on_send`]): a matched tag's buffer, or an
//! ordinary receive of the SRQ (an RNR stall when there is none, after
//! which it is matched again). The rest of the payload comes into the
//! bounce buffer (`QpInner::xrc_bounce`), and [`place`] scatters it from
//! there once it is all in, through `place::scatter` like every receive;
//! [`completion`] makes the receive's completion a tag-matching one.

use std::io::ErrorKind;

use verbs_abi::*;

use super::{closed_by, copy_out, fail_recv, finish_request, stall, Step};
use crate::cq::Cqe;
use crate::engine::{Qp, QpInner};
use crate::mr;
use crate::place;
use crate::tm::{Decision, Incoming, Rvh, Tmh, RVH_LEN, TMH_LEN};
use crate::transport::MAX_IOV;
use crate::util::iov;
use crate::wire::{Header, Syndrome};
use crate::wq::conn::{Rx, TAIL};

/// How many of a message's first bytes are its header (all of a message
/// shorter than one).
fn header_len(h: &Header) -> usize {
    (h.length as usize).min(TMH_LEN)
}

/// A SEND (its wire header just read, or its tag-matching header, or a
/// receive posted after an RNR stall) for a QP on a tag-matching SRQ.
pub(super) fn on_send(qp: &Qp, g: &mut QpInner, h: Header, reliable: bool) {
    let Some(srq) = qp.srq.clone() else { return };
    let Some(tm) = srq.tm.as_ref() else { return };
    if g.tm.msn != Some(h.msn) {
        g.tm = Incoming {
            msn: Some(h.msn),
            ..Incoming::default()
        };
    }
    let want = header_len(&h);
    if g.tm.got < want {
        if let Some(inc) = g.resp.inc.as_mut() {
            inc.rx = Rx::Tmh(h);
        }
        return;
    }
    let tmh = (want == TMH_LEN).then(|| Tmh::decode(&g.tm.hdr));
    let d = tm.decide(tmh);
    match d {
        Decision::Eager { tag, .. } | Decision::Rndv { tag, .. } => {
            g.recv.set(tag.wr_id, srq.pd_id, tag.sge.as_slice());
            g.claimed = true;
        }
        Decision::Ordinary { .. } => {
            if !qp.claim_recv(g) {
                if reliable {
                    stall(qp, g, h);
                } else if let Some(inc) = g.resp.inc.as_mut() {
                    // UC drops what finds no receive.
                    let left = h.length - want as u32;
                    inc.rx = if left > 0 {
                        Rx::Discard(left)
                    } else {
                        Rx::Header
                    };
                    g.tm = Incoming::default();
                }
                return;
            }
        }
    }
    g.tm.decision = Some(d);
    // A rendezvous request's buffer is checked when it is read.
    let need = match d {
        Decision::Eager { .. } => h.length as u64 - TMH_LEN as u64,
        Decision::Ordinary { .. } => h.length as u64,
        Decision::Rndv { .. } => 0,
    };
    if need > g.recv.room() {
        fail_recv(qp, g, h.msn, IBV_WC_LOC_LEN_ERR, Syndrome::RemInvReq);
        g.tm = Incoming::default();
        return;
    }
    // The whole message comes into the bounce buffer, its header first.
    g.xrc_bounce
        .resize(h.length as usize, std::cell::Cell::new(0));
    for (c, b) in g.xrc_bounce.iter().zip(&g.tm.hdr[..want]) {
        c.set(*b);
    }
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    // The header's bytes that fall in the tail (the last `TAIL`, read
    // into the connection's tail buffer) are there already.
    let bulk = h.length - h.length.min(TAIL);
    for p in bulk as usize..want {
        inc.tail[p - bulk as usize] = g.tm.hdr[p];
    }
    if want as u32 == h.length {
        finish_request(qp, g, h);
        return;
    }
    inc.rx = Rx::Payload(h, want as u32);
}

/// Reads more of a message's tag-matching header; once it is in, the
/// message is matched.
pub(super) fn receive_header(qp: &Qp, g: &mut QpInner, h: Header) -> Step {
    let want = header_len(&h);
    let QpInner { resp, tm, .. } = g;
    let Some(inc) = resp.inc.as_mut() else {
        return Step::Closed;
    };
    let got = tm.got;
    let v = [iov(tm.hdr[got..want].as_ptr(), want - got)];
    // SAFETY: the iovec covers the unfilled part of our header buffer.
    match unsafe { inc.conn.recv_iov(&v) } {
        Ok(0) => return Step::Closed,
        Ok(k) => tm.got += k,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Blocked,
        Err(e) => return closed_by(&e),
    }
    if tm.got < want {
        return Step::More;
    }
    inc.rx = Rx::Header;
    let reliable = g.reliable();
    on_send(qp, g, h, reliable);
    Step::More
}

/// The message is all in (its tail in `tail_bytes`): it goes from the
/// bounce buffer into the matched tag's buffer (the payload after the
/// header) or the ordinary receive (all of it); false if their buffers
/// refuse. A rendezvous request's data is read later (`rndv`).
pub(super) fn place(
    qp: &Qp,
    g: &mut QpInner,
    bulk: u32,
    tail: u32,
    tail_bytes: &[u8; TAIL as usize],
) -> bool {
    let end = (bulk + tail) as usize;
    super::bounce_tail(g, bulk, tail, tail_bytes);
    let from = match g.tm.decision {
        Some(Decision::Eager { .. }) => TMH_LEN,
        Some(Decision::Ordinary { .. }) => 0,
        Some(Decision::Rndv { tag, tmh }) => {
            let ok = rndv(qp, g, end, tag, tmh);
            return ok;
        }
        None => return true,
    };
    scatter_bounce(g, from, end)
}

/// Bytes `from..end` of the bounce buffer into the claimed receive (from
/// its start); false if its buffers refuse.
fn scatter_bounce(g: &QpInner, from: usize, end: usize) -> bool {
    let len = end.saturating_sub(from);
    if len == 0 || g.xrc_bounce.len() < end {
        return len == 0;
    }
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let t = mr::table();
    let Some((n, _)) = place::scatter(&*t, g.recv.sges(), 0, len, g.recv.pd_id, &mut v) else {
        return false;
    };
    // SAFETY: the bounce buffer holds `end` bytes (checked), our own.
    let src =
        unsafe { std::slice::from_raw_parts(g.xrc_bounce.as_ptr().add(from) as *const u8, len) };
    // SAFETY: the iovecs cover registered, locally writable memory
    // checked under the key table's lock (held); a fault is caught.
    unsafe { copy_out(&v[..n], src) }.is_ok()
}

/// A matched rendezvous request (`end` bytes, in the bounce buffer):
/// the QP reads the requester's buffer into the tag's (`crate::tm`); when
/// it cannot, the request's headers go into the tag's buffer for software
/// to finish (`IBV_WC_TM_RNDV_INCOMPLETE`). False if the buffer refuses.
fn rndv(qp: &Qp, g: &mut QpInner, end: usize, tag: crate::tm::Tag, tmh: Tmh) -> bool {
    let rvh = (end >= TMH_LEN + RVH_LEN).then(|| {
        let mut b = [0u8; RVH_LEN];
        for (d, c) in b.iter_mut().zip(&g.xrc_bounce[TMH_LEN..TMH_LEN + RVH_LEN]) {
            *d = c.get();
        }
        Rvh::decode(&b)
    });
    if let Some(Some(rvh)) = rvh {
        if rvh.len as u64 <= g.recv.room() && crate::engine::rndv::start(qp, g, tag, tmh, rvh) {
            return true;
        }
    }
    // Software finishes it: the headers (as much of the request as the
    // buffer holds) land in the tag's buffer.
    g.tm.rndv_incomplete = true;
    let room = g.recv.room() as usize;
    scatter_bounce(g, 0, end.min(room))
}

/// The claimed receive's completion `e`, made a tag-matching one as the
/// message's decision says (none: `e` as it is).
pub(super) fn completion(qp: &Qp, g: &mut QpInner, mut e: Cqe) -> Cqe {
    let Some(d) = g.tm.decision.take() else {
        return e;
    };
    let incomplete = g.tm.rndv_incomplete;
    g.tm = Incoming::default();
    match d {
        Decision::Eager { tmh, .. } => {
            e.opcode = IBV_WC_TM_RECV;
            e.wc_flags |= IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
            e.byte_len = e.byte_len.saturating_sub(TMH_LEN as u32);
            e.tm_tag = tmh.tag;
            e.tm_priv = tmh.app_ctx;
        }
        Decision::Rndv { tmh, .. } => {
            e.opcode = IBV_WC_TM_RECV;
            e.tm_tag = tmh.tag;
            e.tm_priv = tmh.app_ctx;
            if incomplete {
                // Left to software (see `rndv`): one completion.
                e.status = IBV_WC_TM_RNDV_INCOMPLETE;
                e.wc_flags |= IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
                e.byte_len = e.byte_len.min(g.recv.room() as u32);
            } else {
                // The tag is consumed; the data comes later.
                e.wc_flags |= IBV_WC_TM_MATCH;
                e.byte_len = 0;
            }
        }
        Decision::Ordinary { opcode } => {
            e.opcode = opcode;
            if opcode == IBV_WC_TM_RECV
                && qp
                    .srq
                    .as_ref()
                    .and_then(|s| s.tm.as_ref())
                    .is_some_and(|t| t.unexpected_delivered())
            {
                e.wc_flags |= IBV_WC_TM_SYNC_REQ;
            }
        }
    }
    e
}
