//! UD on a RoCEv2-mode device (`RSW_ROCEV2`): each send is one RoCEv2
//! packet (`roce::ud`) to UDP port 4791 of the destination GID, each
//! packet received fills one receive, so rsw's UD QPs talk to rxe and to
//! RoCE NICs.
//!
//! The device's [`RocePort`] owns the socket on port 4791 of its address
//! (`transport::roce`), opened with the process's first UD QP on it and
//! kept until exit, and finds a packet's QP by the BTH's destination QPN.
//! The QP's own UDP socket (`datagram`) still holds its QPN, unused
//! otherwise. Sends leave from the caller's thread as in `datagram` (its
//! `pump` calls [`send_one`]); receives are taken by the progress thread.
//! A full socket buffer leaves the rest of the send queue waiting for the
//! QP's own socket to be writable, which it always is: the progress
//! thread retries until the kernel has room (a spin, short on a NIC that
//! drains; the port's socket cannot be watched per QP).
//! Dropped, as hardware drops them: malformed packets, other opcodes, a
//! bad ICRC (over IPv4 16 of its bits: the socket does not tell the
//! identification it covers, which is solved for), an unknown QPN, a
//! P_Key that is not the default partition's, a Q_Key that does not
//! match, a QP not receiving, no receive posted, a receive too small.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::raw::c_int;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use verbs_abi::*;

use super::roce_faults::{classes, WireFaults};
use super::ud_recv::{fail_recv, roce_header_type, write_recv};
use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::device::DeviceInfo;
use crate::gid::gid_as_ipv4;
use crate::progress::{engine, token, Kind, Target};
use crate::roce::icrc;
use crate::roce::opcode::Transport;
use crate::roce::packet::{self, Headers, Packet};
use crate::roce::ud::{self, Ips, UdSend, GRH_LEN};
use crate::transport::roce::{RoceDatagram, RoceSocket, PORT};
use crate::wire::Op;
use crate::{mr, place};
use verbs_rt::ForkFresh;

/// The largest payload a port sends (the largest IB MTU).
const MAX_PAYLOAD: usize = 4096;
/// Room for a whole packet: BTH, the largest extension headers (RC's
/// RETH and ImmDt; UD's DETH and ImmDt take less), payload, pad, ICRC.
const MAX_PACKET: usize = 12 + 16 + 4 + MAX_PAYLOAD + 3 + 4;
/// Packets taken in one go before other targets get the progress thread.
const RX_BATCH: usize = 256;
/// The default partition's P_Key, full or limited member.
const DEFAULT_PKEY: u16 = 0x7fff;

/// A RoCEv2-mode device's port 4791, shared by the process's UD QPs on
/// the device.
pub struct RocePort {
    sock: RoceSocket,
    /// Its UD and RC QPs by number.
    qps: Mutex<HashMap<u32, Weak<Qp>>>,
    /// Held by the thread reading the socket: one at a time, so that a
    /// QP's packets are taken in the order they came.
    reading: Mutex<()>,
    /// `RSW_FAULTS`' `roce:` rules, when there are any.
    faults: Option<WireFaults>,
}

/// The ports opened, by interface index; kept until exit (a forked child
/// opens its own, if the parent's address is free).
static PORTS: ForkFresh<Mutex<HashMap<u32, Arc<RocePort>>>> =
    ForkFresh::new(|| Mutex::new(HashMap::new()));

/// The device's port, opened on its first address if not yet; an errno
/// when it cannot be (`EADDRINUSE`: another process, or a kernel RoCE
/// device in this network namespace, holds port 4791 there).
pub fn port_for(dev: &DeviceInfo) -> Result<Arc<RocePort>, c_int> {
    let mut ports = PORTS.get().lock();
    if let Some(p) = ports.get(&dev.ifindex) {
        return Ok(p.clone());
    }
    let Some(addr) = dev.gids.first() else {
        return Err(libc::EADDRNOTAVAIL);
    };
    let sock = RoceSocket::open(addr, dev.ifindex).map_err(|e| {
        let ip: std::net::IpAddr = match gid_as_ipv4(addr) {
            Some(v4) => Ipv4Addr::from(v4).into(),
            None => Ipv6Addr::from(*addr).into(),
        };
        log::error!(
            "{}: cannot speak RoCEv2: UDP port {PORT} on {ip}: {e}{}",
            dev.name,
            if e.raw_os_error() == Some(libc::EADDRINUSE) {
                " (one process per address can: another holds it, or a kernel \
                 RoCE device in this network namespace)"
            } else {
                ""
            }
        );
        e.raw_os_error().unwrap_or(libc::EIO)
    })?;
    let port = Arc::new(RocePort {
        sock,
        qps: Mutex::new(HashMap::new()),
        reading: Mutex::new(()),
        faults: WireFaults::for_port(),
    });
    let eng = engine().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    let serial = crate::progress::new_serial();
    eng.register_qp(serial, &port);
    eng.add(
        port.sock.fd(),
        token(serial, Kind::Datagram),
        libc::EPOLLIN as u32,
    )
    .map_err(|e| {
        eng.unregister_qp(serial);
        e.raw_os_error().unwrap_or(libc::ENOMEM)
    })?;
    ports.insert(dev.ifindex, port.clone());
    Ok(port)
}

impl RocePort {
    /// Packets for `qp`'s number go to it from now on; false when a live
    /// QP of the process holds that number here already.
    pub fn attach(&self, qp: &Arc<Qp>) -> bool {
        self.attach_as(qp, qp.qpn)
    }

    /// Packets for number `n` go to `qp` (a UD QP created with a source
    /// QPN); false when a live QP holds `n` here already.
    pub fn attach_as(&self, qp: &Arc<Qp>, n: u32) -> bool {
        let mut m = self.qps.lock();
        if m.get(&n).is_some_and(|w| w.strong_count() > 0) {
            return false;
        }
        m.insert(n, Arc::downgrade(qp));
        true
    }

    /// `qp` is going: its numbers take no more packets.
    pub fn detach(&self, qp: &Qp) {
        self.qps.lock().retain(|_, w| !std::ptr::eq(w.as_ptr(), qp));
    }

    /// Takes the packets waiting, from a thread polling a CQ (see
    /// `Qp::drive_now`), unless another thread is at it. The caller holds
    /// no QP's lock.
    pub fn poll(&self) {
        if let Some(_reading) = self.reading.try_lock() {
            self.take_waiting();
        }
    }

    /// Takes the packets waiting, from the progress thread: after the
    /// poller reading now, if one is (a try that gave up would leave the
    /// socket readable and the progress thread spinning on it). The
    /// caller holds no QP's lock.
    pub fn receive(&self) {
        let _reading = self.reading.lock();
        self.take_waiting();
    }

    fn take_waiting(&self) {
        let mut buf = [0u8; MAX_PACKET];
        for _ in 0..RX_BATCH {
            match self.sock.recv(&mut buf) {
                Ok(d) if !d.truncated => self.deliver(&buf[..d.len], &d),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::warn!("RoCEv2 port: receive failed: {e}");
                    return;
                }
            }
        }
    }

    /// The IP facts of a packet received, as far as the ICRC can be
    /// checked with them; None for a bad ICRC. Over IPv4 the socket does
    /// not tell the identification the ICRC covers: it is solved for
    /// (`icrc::solve_ipv4_id`), which checks 16 bits of the ICRC and
    /// gives the GRH area its real identification.
    fn ips(&self, d: &RoceDatagram, ib: &[u8]) -> Option<Ips> {
        let (src, dst) = (&d.src, self.sock.addr());
        match (gid_as_ipv4(src), gid_as_ipv4(dst)) {
            (Some(s), Some(t)) => {
                let (s, t) = (Ipv4Addr::from(s), Ipv4Addr::from(t));
                let id = icrc::solve_ipv4_id(s, t, d.src_port, PORT, ib)?;
                Some(Ips::V4 { src: s, dst: t, id })
            }
            (None, None) => Some(Ips::V6 {
                src: Ipv6Addr::from(*src),
                dst: Ipv6Addr::from(*dst),
            }),
            _ => None,
        }
    }

    fn deliver(&self, ib: &[u8], d: &RoceDatagram) {
        let Some(ips) = self.ips(d, ib) else { return };
        // RC and UC packets go to `roce_rc`, ICRC checked here.
        if let Ok(p) = Packet::parse(ib) {
            if matches!(p.hdr.bth.opcode.transport(), Transport::Rc | Transport::Uc) {
                if matches!(ips, Ips::V6 { .. }) && ips.icrc(d.src_port, ib) != Ok(p.icrc) {
                    return;
                }
                if p.hdr.bth.pkey & DEFAULT_PKEY != DEFAULT_PKEY {
                    return;
                }
                let qp = self
                    .qps
                    .lock()
                    .get(&p.hdr.bth.dest_qp)
                    .and_then(Weak::upgrade);
                let Some(qp) = qp else { return };
                let mut g = qp.inner.lock();
                super::roce_rc_packet(&qp, &mut g, &p, &d.src);
                return;
            }
        }
        // IPv4's ICRC was checked in solving for the identification.
        let check = matches!(ips, Ips::V6 { .. }).then_some(&ips);
        let Ok((s, payload)) = ud::parse(ib, check, d.src_port) else {
            return;
        };
        if s.pkey & DEFAULT_PKEY != DEFAULT_PKEY {
            return;
        }
        let qp = self.qps.lock().get(&s.dest_qp).and_then(Weak::upgrade);
        let Some(qp) = qp else { return };
        let mut g = qp.inner.lock();
        let grh = ud::grh_area(&ips, d.tclass, d.ttl, ib.len());
        take(&qp, &mut g, &s, payload, &grh, self.sock.addr(), &d.src);
    }
}

/// The IP facts of a packet between two GIDs (both IPv4 or both IPv6:
/// a socket speaks one family).
fn ips_of(src: &[u8; 16], dst: &[u8; 16], id: u16) -> Ips {
    match (gid_as_ipv4(src), gid_as_ipv4(dst)) {
        (Some(s), Some(d)) => Ips::V4 {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d),
            id,
        },
        _ => Ips::V6 {
            src: Ipv6Addr::from(*src),
            dst: Ipv6Addr::from(*dst),
        },
    }
}

/// Delivers a UD SEND into the QP's next receive, or drops it.
fn take(
    qp: &Qp,
    g: &mut QpInner,
    s: &UdSend,
    payload: &[u8],
    grh: &[u8; GRH_LEN],
    dst: &[u8; 16],
    src: &[u8; 16],
) {
    if g.destroyed || !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) {
        return;
    }
    // A Q_Key that does not match: silently discarded (IBA 10.2.4).
    if s.qkey != g.attr.qkey || !qp.claim_recv(g) {
        return;
    }
    // Too large for the receive: dropped, the receive stays posted.
    if (GRH_LEN + payload.len()) as u64 > g.recv.room() {
        return;
    }
    if write_recv(g, GRH_LEN as u64, payload).is_err() || write_recv(g, 0, grh).is_err() {
        fail_recv(qp, g, IBV_WC_LOC_PROT_ERR);
        return;
    }
    let Some(wr_id) = qp.take_claimed(g) else {
        return;
    };
    let (op, imm) = match s.imm {
        Some(v) => (Op::SendImm, v.to_be()),
        None => (Op::Send, 0),
    };
    let Some(e) = place::recv_cqe(op, s.imm.is_some(), imm, s.solicited) else {
        return;
    };
    qp.complete_recv(
        g,
        Cqe {
            wr_id,
            byte_len: (GRH_LEN + payload.len()) as u32,
            src_qp: s.src_qp,
            wc_flags: IBV_WC_GRH | e.wc_flags,
            sl: roce_header_type(src, dst),
            ..e
        },
    );
}

impl RocePort {
    /// Sends one RC packet of these headers and payload to `dst` (a GID),
    /// its ICRC computed here; `ErrorKind::WouldBlock` when the socket
    /// buffer is full.
    pub fn send_ib(
        &self,
        dst: &[u8; 16],
        tclass: u8,
        hdr: &Headers,
        payload: &[u8],
    ) -> io::Result<usize> {
        if !self.sock.reaches(dst) {
            return Err(io::Error::from_raw_os_error(libc::ENETUNREACH));
        }
        let mut pkt = [0u8; MAX_PACKET];
        let n = packet::encode(hdr, payload, &mut pkt)
            .map_err(|_| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
        let crc = ips_of(self.sock.addr(), dst, 0)
            .icrc(PORT, &pkt[..n])
            .map_err(|_| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
        icrc::write(&mut pkt[..n], crc);
        self.transmit(dst, tclass, &pkt[..n], classes(hdr))
    }

    /// Sends one whole packet, through the faults when there are rules.
    fn transmit(
        &self,
        dst: &[u8; 16],
        tclass: u8,
        pkt: &[u8],
        classes: [&str; 2],
    ) -> io::Result<usize> {
        match &self.faults {
            Some(f) => f.send(&self.sock, dst, tclass, pkt, classes),
            None => self.sock.send(dst, tclass, pkt),
        }
    }
}

impl Target for RocePort {
    fn on_event(&self, _kind: Kind, _events: u32) {
        self.receive();
    }

    fn on_kick(&self) {
        self.receive();
    }

    fn on_timer(&self, _now: u64) {}
}

/// Sends the send WQE `seq` of `qp` as one packet (see `datagram::pump`,
/// which checked its opcode, size and memory; `g.attr.sq_psn` is its
/// PSN, counted on there).
pub fn send_one(port: &RocePort, qp: &Qp, g: &QpInner, seq: u64) -> io::Result<usize> {
    let w = g.sq.wqe(seq);
    let dst = &w.ud.dgid;
    // An address of the other family: nowhere to send it from, lost as
    // on a wire without a route.
    if !port.sock.reaches(dst) {
        return Err(io::Error::from_raw_os_error(libc::ENETUNREACH));
    }
    let len = w.len as usize;
    let mut data = [0u8; MAX_PAYLOAD];
    if len > MAX_PAYLOAD {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    if w.inline {
        let src = g.sq.inline_data(seq);
        data[..src.len()].copy_from_slice(src);
    } else if len > 0 {
        mr::table()
            .gather(g.sq.sges(seq), 0, qp.pd_id, &mut data[..len])
            .map_err(|_| io::Error::from_raw_os_error(libc::EFAULT))?;
    }
    let s = UdSend {
        dest_qp: w.ud.qpn,
        src_qp: g.source_qpn.unwrap_or(qp.qpn),
        qkey: w.ud.qkey,
        psn: g.attr.sq_psn,
        pkey: 0xffff,
        solicited: w.solicited,
        // The WQE holds the immediate as the application's big-endian
        // bytes.
        imm: (w.op == Op::SendImm).then(|| u32::from_be(w.imm)),
    };
    let mut pkt = [0u8; MAX_PACKET];
    let n = ud::encode(
        &s,
        &data[..len],
        &ips_of(port.sock.addr(), dst, 0),
        PORT,
        &mut pkt,
    )
    .map_err(|_| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
    port.transmit(dst, w.ud.tclass, &pkt[..n], ["ud"; 2])
}
