//! The UD engine: each send is one datagram, each datagram fills one
//! receive.
//!
//! Sends go out on the caller's thread inside `ibv_post_send` (a full socket
//! buffer leaves the rest for the progress thread) and complete as soon as
//! the datagram is handed to the kernel: UD is unacknowledged. Receives are
//! taken by the progress thread, or by `ibv_poll_cq` on an empty CQ, straight
//! into the posted buffer behind its 40-byte GRH area (one copy, from the
//! socket), then the GRH is written from the datagram's addresses as RoCE v2
//! lays it out. What cannot be delivered is dropped, as hardware drops it:
//! no receive posted, a Q_Key that does not match, a datagram for another
//! QP, or a QP not yet in RTR.

use std::io::ErrorKind;

use verbs_abi::*;

use super::ud_recv::{fail_recv, roce_header_type, write_recv};
use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::mr;
use crate::place;
use crate::transport::udp::{wire_group, Datagram, UdpEndpoint, MCAST_PORT};
use crate::transport::MAX_IOV;
use crate::util::iov;
use crate::wire::{DgramHeader, Op, DGRAM_HDR_LEN, DGRAM_MAGIC, FLAG_IMM, FLAG_SOLICITED};

/// Bytes in front of every UD receive's payload.
pub const GRH_LEN: usize = 40;
/// The destination QPN of a multicast datagram.
pub const MULTICAST_QPN: u32 = 0xff_ffff;
/// Datagrams taken in one go before other QPs get the progress thread.
const RX_BATCH: usize = 256;

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
    let mtu = qp.ctx.dev.mtu_bytes();
    let mut blocked = false;
    while g.state == IBV_QPS_RTS && !g.tx_blocked {
        let Some(seq) = g.sq.next_to_transmit() else {
            break;
        };
        let w = *g.sq.wqe(seq);
        // Larger than the port's MTU: "the CI shall not emit any packets
        // for this message ... shall not generate an error due to this
        // condition" (IBTA C10-93.1.1, as rxe does): it completes, unsent.
        if matches!(w.op, Op::Send | Op::SendImm) && w.len > mtu {
            g.sq.transmitted();
            g.sq.retire_oldest();
            qp.complete_send(g, &w, IBV_WC_SUCCESS);
            continue;
        }
        // An opcode UD cannot carry (RDMA, atomics, binds) or unreadable:
        // a local error, as the hardware reports it, and the QP fails.
        let local_err = if !matches!(w.op, Op::Send | Op::SendImm) {
            Some(IBV_WC_LOC_QP_OP_ERR)
        } else if !local_ok(qp, g, seq) {
            Some(IBV_WC_LOC_PROT_ERR)
        } else {
            None
        };
        if let Some(st) = local_err {
            g.sq.wqe_mut(seq).local_err = st;
            g.sq.transmitted();
            g.tx_blocked = true;
            qp.after_send_completions(g);
            return;
        }
        match send_one(qp, g, seq) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                blocked = true;
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                g.sq.wqe_mut(seq).local_err = IBV_WC_LOC_PROT_ERR;
                g.sq.transmitted();
                g.tx_blocked = true;
                qp.after_send_completions(g);
                return;
            }
            // Sent, or lost on the way (no route, nobody there): either
            // way the sender is done with it, as on an unreliable wire.
            _ => {
                if g.roce.is_some() {
                    g.attr.sq_psn = (g.attr.sq_psn + 1) & 0xff_ffff;
                }
                g.sq.transmitted();
                g.sq.retire_oldest();
                qp.complete_send(g, &w, IBV_WC_SUCCESS);
            }
        }
    }
    watch_out(qp, g, blocked);
}

/// Watches for room in the socket while sends wait for it.
fn watch_out(qp: &Qp, g: &mut QpInner, want_out: bool) {
    let Some(x) = g.dgram.as_mut() else { return };
    let fd = x.ep.fd();
    super::watch_datagram_socket(qp.serial, fd, &mut x.events, want_out);
}

fn local_ok(qp: &Qp, g: &QpInner, seq: u64) -> bool {
    let w = g.sq.wqe(seq);
    if w.inline {
        return true;
    }
    let t = mr::table();
    g.sq.sges(seq).iter().all(|s| {
        t.local(s.lkey, s.addr, s.length as u64, qp.pd_id, false)
            .is_ok()
    })
}

fn send_one(qp: &Qp, g: &QpInner, seq: u64) -> std::io::Result<usize> {
    if let Some(port) = g.roce.as_ref() {
        return super::roce_ud::send_one(port, qp, g, seq);
    }
    let Some(d) = g.dgram.as_ref() else {
        return Ok(0);
    };
    let w = g.sq.wqe(seq);
    let mut hdr = [0u8; DGRAM_HDR_LEN];
    let mut flags = 0;
    if w.op == Op::SendImm {
        flags |= FLAG_IMM;
    }
    if w.solicited {
        flags |= FLAG_SOLICITED;
    }
    let mcast = crate::gid::is_multicast(&w.ud.dgid);
    DgramHeader {
        op: w.op,
        flags,
        src_qpn: qp.qpn,
        dst_qpn: w.ud.qpn,
        qkey: w.ud.qkey,
        imm: w.imm,
        group: if mcast { w.ud.dgid } else { [0; 16] },
    }
    .encode(&mut hdr);
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    v[0] = iov(hdr.as_ptr(), DGRAM_HDR_LEN);
    let mut n = 1;
    let table;
    if w.len > 0 {
        if w.inline {
            let data = g.sq.inline_data(seq);
            v[1] = iov(data.as_ptr(), data.len());
            n = 2;
        } else {
            table = mr::table();
            n += table
                .sge_iovs(
                    g.sq.sges(seq),
                    0,
                    w.len as usize,
                    qp.pd_id,
                    false,
                    &mut v[1..],
                )
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EFAULT))?;
        }
    }
    // Multicast goes to the groups' port, where every member listens.
    let (dest, port) = if mcast {
        let loopback = qp.ctx.dev.is_loopback();
        (wire_group(&w.ud.dgid, loopback), MCAST_PORT as u32)
    } else {
        (w.ud.dgid, w.ud.qpn)
    };
    // SAFETY: the iovecs cover our header, the WQE's inline copy, or
    // registered memory checked under the MR table lock (held).
    unsafe {
        d.ep.send_to(
            &dest,
            port,
            qp.ctx.dev.ifindex,
            &w.ud.sgid,
            w.ud.tclass,
            &v[..n],
        )
    }
}

/// What became of one datagram taken off a socket.
enum Rx {
    /// None was waiting.
    Empty,
    /// Taken and delivered or dropped; look for the next.
    Next,
    /// The socket failed.
    Failed,
}

/// Takes waiting datagrams into posted receives (or drops them).
pub fn receive(qp: &Qp, g: &mut QpInner) {
    receive_from(qp, g, None);
}

/// As [`receive`], from the socket of the QP's multicast group with id
/// `id` (if it is still attached).
pub fn receive_group(qp: &Qp, g: &mut QpInner, id: usize) {
    if let Some(i) = g.mcast.iter().position(|m| m.id == id) {
        receive_from(qp, g, Some(i));
    }
}

/// Every socket of the QP, for a thread that polls (`ibv_poll_cq`).
pub fn receive_all(qp: &Qp, g: &mut QpInner) {
    receive_from(qp, g, None);
    for i in 0..g.mcast.len() {
        receive_from(qp, g, Some(i));
    }
}

fn receive_from(qp: &Qp, g: &mut QpInner, group: Option<usize>) {
    for _ in 0..RX_BATCH {
        match receive_one(qp, g, group) {
            Rx::Next => continue,
            Rx::Empty | Rx::Failed => return,
        }
    }
    // More may be waiting: the socket stays readable, so epoll (level
    // triggered) comes back to it after other QPs had their turn.
}

/// The largest payload any port sends (the largest IB MTU): a receive
/// with room for it behind its GRH takes every datagram a sender emits.
const MAX_PAYLOAD: u64 = 4096;

/// Receives one datagram from the QP's own socket, or from the multicast
/// socket `group` (an index into the QP's groups).
///
/// A datagram that is refused (a Q_Key that does not match, another
/// destination, larger than the receive) must leave the receive buffer
/// untouched and the receive posted, as on hardware. The kernel drops the
/// first two before they are queued (`filter_sockets`); the datagram goes
/// straight into the buffer (one syscall, one copy) when, beyond that,
/// the receive holds anything a port sends. Otherwise its header and
/// length are peeked first (one more syscall) and it is taken only if it
/// fits.
fn receive_one(qp: &Qp, g: &mut QpInner, group: Option<usize>) -> Rx {
    let sock = |g: &QpInner| -> Option<*const UdpEndpoint> {
        match group {
            None => g.dgram.as_ref().map(|d| &d.ep as *const UdpEndpoint),
            Some(i) => g.mcast.get(i).map(|m| &m.ep as *const UdpEndpoint),
        }
    };
    let Some(ep) = sock(g) else { return Rx::Failed };
    // SAFETY: the endpoint lives in `g`, which we hold for the whole call;
    // nothing below drops the QP's sockets before the last use of `ep`.
    let ep = unsafe { &*ep };
    if !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) || !qp.claim_recv(g) {
        // Not receiving yet, or no receive posted: dropped.
        return drop_next(ep);
    }
    let room = g.recv.room();
    if !ep.filtered() || room < GRH_LEN as u64 + MAX_PAYLOAD {
        if let Some(rx) = screen(qp, g, group, ep, room) {
            return rx;
        }
    }
    let mut hdr = [0u8; DGRAM_HDR_LEN];
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    v[0] = iov(hdr.as_mut_ptr(), DGRAM_HDR_LEN);
    let table = mr::table();
    let mut n = 1;
    if room > GRH_LEN as u64 {
        match place::scatter(
            &*table,
            g.recv.sges(),
            GRH_LEN as u64,
            (room - GRH_LEN as u64) as usize,
            g.recv.pd_id,
            &mut v[1..],
        ) {
            Some((k, _)) => n += k,
            None => {
                drop(table);
                let _ = ep.discard();
                fail_recv(qp, g, IBV_WC_LOC_PROT_ERR);
                return Rx::Next;
            }
        }
    }
    // SAFETY: the iovecs cover our header buffer and registered memory with
    // local write rights, checked under the MR table lock, held across the
    // call. What arrives here passed the kernel's filter and fits (or was
    // peeked and found acceptable): it is delivered.
    let r = unsafe { ep.recv(&v[..n]) };
    drop(table);
    let d = match r {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Rx::Empty,
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
            fail_recv(qp, g, IBV_WC_LOC_PROT_ERR);
            return Rx::Next;
        }
        Err(_) => return Rx::Failed,
    };
    complete_datagram(qp, g, group, &hdr, &d, room)
}

/// Looks at the next datagram before taking it, where the kernel's
/// filter does not vouch for it or the receive may be too small: Some
/// when it is not for this receive (dropped, the receive staying posted)
/// or none is there.
fn screen(qp: &Qp, g: &QpInner, group: Option<usize>, ep: &UdpEndpoint, room: u64) -> Option<Rx> {
    let mut head = [0u8; DGRAM_HDR_LEN];
    let d = match ep.peek(&mut head) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Some(Rx::Empty),
        Err(_) => return Some(Rx::Failed),
    };
    // Refused, or too large for the receive: dropped silently, and the
    // receive stays posted for the next datagram (IB class D).
    let fits = d.len >= DGRAM_HDR_LEN && (d.len - DGRAM_HDR_LEN + GRH_LEN) as u64 <= room;
    if !fits || accepted(qp, g, group, &head, &d).is_none() {
        return Some(drop_next(ep));
    }
    None
}

/// The datagram is in the receive: checked again, its GRH written, and
/// the receive completed.
fn complete_datagram(
    qp: &Qp,
    g: &mut QpInner,
    group: Option<usize>,
    hdr: &[u8; DGRAM_HDR_LEN],
    d: &Datagram,
    room: u64,
) -> Rx {
    // Checked again: a datagram the filter let through that is not ours
    // after all (a forged or foreign one, larger than any port sends) is
    // dropped, the receive staying posted.
    let Some(h) = accepted(qp, g, group, hdr, d) else {
        return Rx::Next;
    };
    let payload = d.len - DGRAM_HDR_LEN;
    if d.truncated || (payload + GRH_LEN) as u64 > room {
        return Rx::Next;
    }
    // The GRH area: written after the payload, from the datagram's
    // addresses (a failure here means the buffer vanished meanwhile).
    // A multicast datagram's destination is its group.
    let dst = if group.is_some() { h.group } else { d.dst };
    let grh = grh_bytes(&d.src, &dst, d.tclass, payload);
    if write_grh(g, &grh).is_err() {
        fail_recv(qp, g, IBV_WC_LOC_PROT_ERR);
        return Rx::Next;
    }
    let imm = h.flags & FLAG_IMM != 0;
    let Some(wr_id) = qp.take_claimed(g) else {
        return Rx::Next;
    };
    let op = if imm { Op::SendImm } else { Op::Send };
    let Some(e) = place::recv_cqe(op, imm, h.imm, h.flags & FLAG_SOLICITED != 0) else {
        return Rx::Next;
    };
    qp.complete_recv(
        g,
        Cqe {
            wr_id,
            byte_len: (payload + GRH_LEN) as u32,
            src_qp: h.src_qpn,
            wc_flags: IBV_WC_GRH | e.wc_flags,
            sl: roce_header_type(&d.src, &dst),
            ..e
        },
    );
    Rx::Next
}

/// Drops the next datagram of `ep`.
fn drop_next(ep: &UdpEndpoint) -> Rx {
    match ep.discard() {
        Ok(true) => Rx::Next,
        Ok(false) => Rx::Empty,
        Err(_) => Rx::Failed,
    }
}

/// The datagram's header if this QP takes it: well formed, addressed to
/// it (or to the group the socket is for), with its Q_Key, and not our own
/// multicast datagram on a QP that asked not to see those.
fn accepted(
    qp: &Qp,
    g: &QpInner,
    group: Option<usize>,
    hdr: &[u8; DGRAM_HDR_LEN],
    d: &Datagram,
) -> Option<DgramHeader> {
    if d.len < DGRAM_HDR_LEN {
        return None;
    }
    let h = DgramHeader::decode(hdr).ok()?;
    let for_us = match group.and_then(|i| g.mcast.get(i)) {
        None => h.dst_qpn == qp.qpn,
        Some(m) => h.dst_qpn == MULTICAST_QPN && h.group == m.gid,
    };
    // A Q_Key that does not match drops the datagram (IB spec, Q_Key
    // violation: silently discarded).
    if !for_us || h.qkey != g.attr.qkey {
        return None;
    }
    // Our own multicast datagram, looped back, on a QP that asked not to
    // see it (QPNs are this host's UDP ports: the number and a local
    // source say it is ours).
    if group.is_some() && g.block_self_mcast && h.src_qpn == qp.qpn && crate::gid::is_local(&d.src)
    {
        return None;
    }
    Some(h)
}

/// Has the kernel drop, on every socket of the QP, the datagrams
/// [`accepted`] would refuse for their header: another destination, a
/// Q_Key that does not match. Called when the Q_Key is set and when a
/// group is joined; a socket the kernel will not filter is peeked instead.
pub fn filter_sockets(qp: &Qp, g: &mut QpInner) {
    let magic = DGRAM_MAGIC.to_le_bytes();
    let qkey = g.attr.qkey.to_le_bytes();
    if let Some(d) = g.dgram.as_mut() {
        d.ep.filter(&[(0, magic), (12, qp.qpn.to_le_bytes()), (16, qkey)]);
    }
    for m in g.mcast.iter_mut() {
        let gid = m.gid;
        let word = |i: usize| -> [u8; 4] { [gid[i], gid[i + 1], gid[i + 2], gid[i + 3]] };
        m.ep.filter(&[
            (0, magic),
            (12, MULTICAST_QPN.to_le_bytes()),
            (16, qkey),
            (24, word(0)),
            (28, word(4)),
            (32, word(8)),
            (36, word(12)),
        ]);
    }
}

fn write_grh(g: &QpInner, grh: &[u8; GRH_LEN]) -> Result<(), ()> {
    write_recv(g, 0, grh)
}

/// RoCE v2 headers around a UD payload: UDP (8), BTH (12), DETH (8) in
/// front, ICRC (4) behind; counted in the IP lengths of the GRH.
const ROCE_OVERHEAD: usize = 8 + 12 + 8 + 4;

/// The 40-byte GRH area of a received datagram as RoCE v2 hardware writes
/// it: an IPv4 header in the last 20 bytes when both ends are IPv4, a
/// full IPv6 header otherwise.
pub fn grh_bytes(src: &[u8; 16], dst: &[u8; 16], tclass: u8, payload: usize) -> [u8; GRH_LEN] {
    let mut b = [0u8; GRH_LEN];
    match (crate::gid::gid_as_ipv4(src), crate::gid::gid_as_ipv4(dst)) {
        (Some(s), Some(d)) => {
            let h = &mut b[20..];
            h[0] = 0x45;
            h[1] = tclass;
            let total = (20 + ROCE_OVERHEAD + payload).min(u16::MAX as usize) as u16;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[6] = 0x40; // don't fragment
            h[8] = 64; // TTL
            h[9] = 17; // UDP
            h[12..16].copy_from_slice(&s);
            h[16..20].copy_from_slice(&d);
            let mut sum: u32 = 0;
            for pair in h.chunks(2) {
                sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
            }
            while sum >> 16 != 0 {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        _ => {
            b[0] = 0x60 | tclass >> 4;
            b[1] = tclass << 4;
            let plen = (ROCE_OVERHEAD + payload).min(u16::MAX as usize) as u16;
            b[4..6].copy_from_slice(&plen.to_be_bytes());
            b[6] = 17; // next header: UDP
            b[7] = 64; // hop limit
            b[8..24].copy_from_slice(src);
            b[24..40].copy_from_slice(dst);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::ipv4_mapped;

    #[test]
    fn grh_ipv4_has_a_valid_header_in_its_tail() {
        let b = grh_bytes(
            &ipv4_mapped([10, 0, 0, 1]),
            &ipv4_mapped([10, 0, 0, 2]),
            0xfc,
            100,
        );
        assert_eq!(&b[..20], &[0; 20]);
        let h = &b[20..];
        assert_eq!(h[0], 0x45);
        assert_eq!(h[1], 0xfc, "TOS: the traffic class");
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 152);
        assert_eq!(&h[12..16], &[10, 0, 0, 1]);
        assert_eq!(&h[16..20], &[10, 0, 0, 2]);
        // The checksum over the header, check field included, folds to 0.
        let mut sum: u32 = h
            .chunks(2)
            .map(|p| u32::from(u16::from_be_bytes([p[0], p[1]])))
            .sum();
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn grh_ipv6_carries_both_gids() {
        let mut s = [0u8; 16];
        s[15] = 1;
        let mut d = [0u8; 16];
        d[0] = 0xfe;
        d[1] = 0x80;
        d[15] = 2;
        let b = grh_bytes(&s, &d, 0xa7, 10);
        assert_eq!(b[0] >> 4, 6);
        let vtf = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!((vtf >> 20) & 0xff, 0xa7, "traffic class");
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), 42);
        assert_eq!(b[6], 17);
        assert_eq!(&b[8..24], &s);
        assert_eq!(&b[24..40], &d);
    }
}
