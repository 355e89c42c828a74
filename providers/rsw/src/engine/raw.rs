//! The raw packet engine: each send is one Ethernet frame, the SGEs
//! holding it from its L2 header on; each frame a flow steers to the QP
//! fills one receive (no GRH in front, `byte_len` the frame's length).
//!
//! Sends go out on the caller's thread inside `ibv_post_send` (a full
//! socket buffer leaves the rest for the progress thread) and complete
//! once the kernel has the frame. Frames are read by the progress thread
//! (the socket is watched) or by `ibv_poll_cq` on an empty CQ, into the
//! QP's buffer, matched against the installed flows (`flow`) and copied
//! into the receive; an RSS QP's go to the WQ the frame's hash picks
//! (`rwq`). What no flow steers here, what finds no receive posted and
//! what arrives before RTR is dropped, as a NIC drops it.

use std::io::ErrorKind;

use verbs_abi::*;

use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::flow::{self, Headers};
use crate::guard;
use crate::mr;
use crate::place;
use crate::ring::RecvWqe;
use crate::transport::MAX_IOV;
use crate::util::iov;
use crate::wire::Op;

/// Frames taken in one go before other QPs get the progress thread.
const RX_BATCH: usize = 256;
/// The shortest frame: an Ethernet header.
const ETH_HLEN: u32 = 14;

/// Readiness of the QP's socket.
pub fn on_event(qp: &Qp, g: &mut QpInner, events: u32) {
    if events & libc::EPOLLOUT as u32 != 0 {
        pump(qp, g);
    }
    if events & (libc::EPOLLIN | libc::EPOLLERR) as u32 != 0 {
        receive(qp, g);
    }
}

/// Sends what is queued, as far as the socket takes it.
pub fn pump(qp: &Qp, g: &mut QpInner) {
    let mut blocked = false;
    while g.state == IBV_QPS_RTS && !g.tx_blocked {
        let Some(seq) = g.sq.next_to_transmit() else {
            break;
        };
        let w = *g.sq.wqe(seq);
        let local_err = if w.op != Op::Send {
            Some(IBV_WC_LOC_QP_OP_ERR)
        } else if w.len < ETH_HLEN {
            Some(IBV_WC_LOC_LEN_ERR)
        } else {
            match send_one(qp, g, seq) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    blocked = true;
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Some(IBV_WC_LOC_PROT_ERR),
                // Longer than the interface carries.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::EINVAL)) => {
                    Some(IBV_WC_LOC_LEN_ERR)
                }
                // Sent, or lost on the way (the link is down): either way
                // the sender is done with it, as on a wire.
                _ => None,
            }
        };
        if let Some(st) = local_err {
            // The WQE fails and the QP with it, as a NIC's error CQE
            // takes its QP to ERR.
            g.sq.wqe_mut(seq).local_err = st;
            g.sq.transmitted();
            g.tx_blocked = true;
            qp.after_send_completions(g);
            return;
        }
        g.sq.transmitted();
        g.sq.retire_oldest();
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
    }
    watch_out(qp, g, blocked);
}

/// Watches for room in the socket while sends wait for it.
fn watch_out(qp: &Qp, g: &mut QpInner, want_out: bool) {
    let Some(x) = g.raw.as_mut() else { return };
    let fd = x.fd();
    super::watch_datagram_socket(qp.serial, fd, &mut x.events, want_out);
}

fn send_one(qp: &Qp, g: &QpInner, seq: u64) -> std::io::Result<usize> {
    let Some(r) = g.raw.as_ref() else {
        return Ok(0);
    };
    let w = g.sq.wqe(seq);
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let n;
    let table;
    if w.inline {
        let data = g.sq.inline_data(seq);
        v[0] = iov(data.as_ptr(), data.len());
        n = 1;
    } else {
        table = mr::table();
        n = table
            .sge_iovs(g.sq.sges(seq), 0, w.len as usize, qp.pd_id, false, &mut v)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EFAULT))?;
    }
    // SAFETY: the iovecs cover the WQE's inline copy, or registered memory
    // checked under the MR table lock (held until the send returns).
    unsafe { r.sock.send(&v[..n]) }
}

/// Takes waiting frames into posted receives (or drops them).
pub fn receive(qp: &Qp, g: &mut QpInner) {
    let Some(r) = g.raw.as_mut() else { return };
    // Out of the QP's state while a frame is placed (placing needs it).
    let mut buf = std::mem::take(&mut r.buf);
    for _ in 0..RX_BATCH {
        let Some(r) = g.raw.as_ref() else { break };
        let f = match r.sock.recv(&mut buf) {
            Ok(f) => f,
            Err(_) => break,
        };
        // Longer than the interface carries: not a frame of this link.
        if f.truncated {
            continue;
        }
        let frame = &buf[..f.len];
        let h = Headers::parse(frame);
        if !flow::steers_to(r.ifindex, qp.serial, &h) {
            continue;
        }
        if r.rss.is_some() {
            deliver_rss(g, frame, &h);
        } else {
            deliver(qp, g, frame);
        }
    }
    if let Some(r) = g.raw.as_mut() {
        r.buf = buf;
    }
}

/// Copies `frame` into the scatter list of `w`: false when a key refuses.
fn place_frame(w: &RecvWqe, frame: &[u8]) -> bool {
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let table = mr::table();
    let Some((n, _)) = place::scatter(&*table, w.sges(), 0, frame.len(), w.pd_id, &mut v) else {
        return false;
    };
    let mut off = 0;
    for piece in &v[..n] {
        // SAFETY: registered, locally writable memory checked under the MR
        // table lock (held); the source is the frame we read; a fault is
        // caught.
        let r = unsafe {
            guard::copy(
                piece.iov_base as *mut u8,
                frame.as_ptr().add(off),
                piece.iov_len,
            )
        };
        if r.is_err() {
            return false;
        }
        off += piece.iov_len;
    }
    true
}

/// A frame steered to a plain raw QP: into its next receive.
fn deliver(qp: &Qp, g: &mut QpInner, frame: &[u8]) {
    if !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) || !qp.claim_recv(g) {
        return;
    }
    let status = if frame.len() as u64 > g.recv.room() {
        IBV_WC_LOC_LEN_ERR
    } else if !place_frame(&g.recv, frame) {
        IBV_WC_LOC_PROT_ERR
    } else {
        IBV_WC_SUCCESS
    };
    if status != IBV_WC_SUCCESS {
        qp.fail_claimed(g, status);
        qp.enter_error(
            g,
            &format_args!(
                "a frame's receive failed with {}",
                crate::trace::wc_status_name(status)
            ),
        );
        return;
    }
    let Some(wr_id) = qp.take_claimed(g) else {
        return;
    };
    qp.complete_recv(
        g,
        Cqe {
            wr_id,
            status,
            opcode: IBV_WC_RECV,
            byte_len: frame.len() as u32,
            ..Cqe::default()
        },
    );
}

/// A frame steered to an RSS QP: into the next receive of the WQ its
/// hash picks from the indirection table.
fn deliver_rss(g: &QpInner, frame: &[u8], h: &Headers) {
    let Some(rss) = g.raw.as_ref().and_then(|r| r.rss.as_ref()) else {
        return;
    };
    let hash = flow::toeplitz(&rss.key, &flow::hash_input(h, rss.fields));
    let wqs = &rss.table.wqs;
    let wq = &wqs[hash as usize & (wqs.len() - 1)];
    let mut w = RecvWqe::EMPTY;
    if !wq.take(&mut w) {
        return;
    }
    let (status, byte_len) = if frame.len() as u64 > w.room() {
        (IBV_WC_LOC_LEN_ERR, 0)
    } else if !place_frame(&w, frame) {
        (IBV_WC_LOC_PROT_ERR, 0)
    } else {
        (IBV_WC_SUCCESS, frame.len() as u32)
    };
    wq.complete(Cqe {
        wr_id: w.wr_id,
        status,
        byte_len,
        ..Cqe::default()
    });
}
