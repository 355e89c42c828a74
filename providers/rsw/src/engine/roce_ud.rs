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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use verbs_abi::*;

use super::roce_faults::{classes, WireFaults};
use super::roce_tx::{Sink, TxQueue};
use super::ud_recv::{fail_recv, roce_header_type, write_recv};
use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::device::DeviceInfo;
use crate::gid::gid_as_ipv4;
use crate::progress::{engine, token, Kind, Target};
use crate::roce::headers::Syndrome;
use crate::roce::icrc;
use crate::roce::opcode::{Opcode, Transport};
use crate::roce::packet::{self, Headers, Packet};
use crate::roce::ud::{self, Ips, UdSend, GRH_LEN};
use crate::transport::roce::{Outgoing, RecvBatch, RoceDatagram, RoceSocket, PORT, RECV_BATCH};
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

/// What the thread reading the port holds: the buffers one `recvmmsg`
/// fills, and the QPs the packets it took went to, whose replies are
/// flushed once all are taken.
struct Reader {
    batch: RecvBatch,
    touched: Vec<Arc<Qp>>,
}

/// The port's receive counters (its QPs count what they send).
#[derive(Default)]
struct RxCounts {
    pkts: AtomicU64,
    calls: AtomicU64,
    batches: AtomicU64,
}

/// A RoCEv2-mode device's port 4791, shared by the process's UD QPs on
/// the device.
pub struct RocePort {
    sock: RoceSocket,
    /// Its UD and RC QPs by number.
    qps: Mutex<HashMap<u32, Weak<Qp>>>,
    /// Held by the thread reading the socket: one at a time, so that a
    /// QP's packets are taken in the order they came.
    reading: Mutex<Reader>,
    /// `RSW_FAULTS`' `roce:` rules, when there are any.
    faults: Option<WireFaults>,
    /// The device's name, for `rsw-stat`.
    device: String,
    rx: RxCounts,
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
        reading: Mutex::new(Reader {
            batch: RecvBatch::new(MAX_PACKET),
            touched: Vec::with_capacity(RECV_BATCH),
        }),
        faults: WireFaults::for_port(),
        device: dev.name.clone(),
        rx: RxCounts::default(),
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

/// Each open port's device and receive counters, for `rsw-stat`.
pub fn port_counters() -> Vec<(String, Vec<(&'static str, u64)>)> {
    PORTS
        .get()
        .lock()
        .values()
        .map(|p| (p.device.clone(), p.rx_counters().to_vec()))
        .collect()
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
        if let Some(mut r) = self.reading.try_lock() {
            self.take_waiting(&mut r);
        }
    }

    /// Takes the packets waiting, from the progress thread: after the
    /// poller reading now, if one is (a try that gave up would leave the
    /// socket readable and the progress thread spinning on it). The
    /// caller holds no QP's lock.
    pub fn receive(&self) {
        let mut r = self.reading.lock();
        self.take_waiting(&mut r);
    }

    /// Up to [`RX_BATCH`] packets, [`RECV_BATCH`] a system call; after
    /// each call's, the replies of the RC QPs they went to are sent.
    fn take_waiting(&self, r: &mut Reader) {
        let mut left = RX_BATCH;
        while left > 0 {
            let ask = left.min(RECV_BATCH);
            let n = match self.sock.recv_many(&mut r.batch, ask) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::warn!("RoCEv2 port: receive failed: {e}");
                    return;
                }
            };
            self.rx.calls.fetch_add(1, Ordering::Relaxed);
            self.rx.pkts.fetch_add(n as u64, Ordering::Relaxed);
            if n > 1 {
                self.rx.batches.fetch_add(1, Ordering::Relaxed);
            }
            for i in 0..n {
                let (d, ib) = r.batch.get(i);
                if !d.truncated {
                    if let Some(qp) = self.deliver(ib, d) {
                        if !r.touched.iter().any(|t| Arc::ptr_eq(t, &qp)) {
                            r.touched.push(qp);
                        }
                    }
                }
            }
            for qp in r.touched.drain(..) {
                let mut g = qp.inner.lock();
                super::roce_rc_flush(&qp, &mut g);
            }
            // Fewer than asked: the socket is empty (level-triggered, the
            // progress thread hears of any that come meanwhile).
            if n < ask {
                return;
            }
            left -= n;
        }
    }

    /// The port's receive counters, named as `rsw-stat` shows them.
    pub fn rx_counters(&self) -> [(&'static str, u64); 3] {
        let c = &self.rx;
        [
            ("roce_rx_pkts", c.pkts.load(Ordering::Relaxed)),
            ("roce_rx_calls", c.calls.load(Ordering::Relaxed)),
            ("roce_rx_batches", c.batches.load(Ordering::Relaxed)),
        ]
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

    /// Hands one packet to its QP; an RC or UC QP it went to is returned
    /// (its replies wait for [`roce_rc::flush`](super::roce_rc::flush)).
    fn deliver(&self, ib: &[u8], d: &RoceDatagram) -> Option<Arc<Qp>> {
        let ips = self.ips(d, ib)?;
        // RC and UC packets go to `roce_rc`, ICRC checked here.
        if let Ok(p) = Packet::parse(ib) {
            if matches!(p.hdr.bth.opcode.transport(), Transport::Rc | Transport::Uc) {
                if matches!(ips, Ips::V6 { .. }) && ips.icrc(d.src_port, ib) != Ok(p.icrc) {
                    return None;
                }
                if p.hdr.bth.pkey & DEFAULT_PKEY != DEFAULT_PKEY {
                    return None;
                }
                let qp = self
                    .qps
                    .lock()
                    .get(&p.hdr.bth.dest_qp)
                    .and_then(Weak::upgrade)?;
                let mut g = qp.inner.lock();
                super::roce_rc_packet(&qp, &mut g, &p, &d.src);
                drop(g);
                return Some(qp);
            }
        }
        // IPv4's ICRC was checked in solving for the identification.
        let check = matches!(ips, Ips::V6 { .. }).then_some(&ips);
        let (s, payload) = ud::parse(ib, check, d.src_port).ok()?;
        if s.pkey & DEFAULT_PKEY != DEFAULT_PKEY {
            return None;
        }
        let qp = self.qps.lock().get(&s.dest_qp).and_then(Weak::upgrade)?;
        let mut g = qp.inner.lock();
        let grh = ud::grh_area(&ips, d.tclass, d.ttl, ib.len());
        take(&qp, &mut g, &s, payload, &grh, self.sock.addr(), &d.src);
        None
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
    /// Queues one RC or UC packet of these headers and payload for `dst`
    /// (a GID) on `q`, its ICRC computed here; true where it replaced
    /// the ACK it followed (`roce_tx`). `ENETUNREACH` for a destination
    /// of the other family.
    pub fn queue_ib(
        &self,
        q: &mut TxQueue,
        dst: &[u8; 16],
        tclass: u8,
        hdr: &Headers,
        payload: &[u8],
    ) -> io::Result<bool> {
        if !self.sock.reaches(dst) {
            return Err(io::Error::from_raw_os_error(libc::ENETUNREACH));
        }
        let ack = hdr.bth.opcode == Opcode::RcAck
            && hdr
                .aeth
                .is_some_and(|a| matches!(a.syndrome, Syndrome::Ack { .. }));
        let ips = ips_of(self.sock.addr(), dst, 0);
        let len = packet::wire_len(hdr, payload.len());
        let size = io::Error::from_raw_os_error(libc::EMSGSIZE);
        q.push((dst, tclass, classes(hdr), ack), len, |buf| {
            let n = packet::encode(hdr, payload, buf).map_err(|_| size)?;
            let crc = ips
                .icrc(PORT, &buf[..n])
                .map_err(|_| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
            icrc::write(&mut buf[..n], crc);
            Ok(())
        })
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

impl Sink for RocePort {
    /// With one `sendmmsg`; through the faults one packet a call when
    /// there are rules (each one's fate is decided as it leaves).
    fn send_many<'a>(
        &self,
        mut pkts: impl Iterator<Item = (Outgoing<'a>, [&'static str; 2])>,
    ) -> io::Result<usize> {
        let Some(f) = &self.faults else {
            return self.sock.send_many(pkts.map(|(o, _)| o));
        };
        match pkts.next() {
            Some((o, classes)) => f
                .send(&self.sock, o.dst, o.tclass, o.pkt, classes)
                .map(|_| 1),
            None => Ok(0),
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
