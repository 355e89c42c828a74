//! Our packets against a live rxe: a UD SEND ONLY built by this codec,
//! ICRC and all, sent from an ordinary unconnected UDP socket to the QP of
//! Debian's `ibv_ud_pingpong` server on rxe. rxe drops a packet whose
//! ICRC it computes differently, so the server's reply (it sends one only
//! after a receive completes) proves rxe accepted ours. With
//! `RSW_ROCE_BAD_FIRST` a copy with a wrong ICRC goes first; the script
//! checks rxe dropped it (its `rcvd_pkts` counts only packets whose ICRC
//! matched and must grow by 1), so the check is known to be on.
//!
//! Needs the VM test bed: `ctests/vm/roce/ud_to_rxe.sh` sets up rxe, the
//! server and a network namespace for this socket (port 4791 is rxe's in
//! its own namespace) and runs this test there, hence `#[ignore]`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::Duration;

use rustix::net::sockopt::{set_ip_mtu_discover, Ipv4PathMtuDiscovery};

use super::headers::{Bth, Deth};
use super::opcode::Opcode;
use super::packet::{self, Headers, Packet};
use super::{icrc, PORT};

/// `ibv_ud_pingpong`'s Q_Key and its exchange port.
const QKEY: u32 = 0x1111_1111;
const EXCHANGE_PORT: u16 = 18515;
/// The QPN and PSN we claim; nothing on our side checks them.
const OUR_QPN: u32 = 0x000abc;
const OUR_PSN: u32 = 0x000123;

fn env_addr(name: &str) -> Ipv4Addr {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} not set: run ctests/vm/roce/ud_to_rxe.sh"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// rdma-core's pingpong exchange as its client does it: our
/// "LID:QPN:PSN:GID" line (NUL-terminated, 52 bytes), theirs back, then
/// "done". Returns the server's QPN.
fn exchange(peer: Ipv4Addr, local: Ipv4Addr) -> u32 {
    let mut s = TcpStream::connect_timeout(
        &SocketAddrV4::new(peer, EXCHANGE_PORT).into(),
        Duration::from_secs(10),
    )
    .expect("connect to ibv_ud_pingpong's exchange port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let gid: String = local
        .to_ipv6_mapped()
        .octets()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut msg = format!("0000:{OUR_QPN:06x}:{OUR_PSN:06x}:{gid}").into_bytes();
    msg.push(0);
    assert_eq!(msg.len(), 52);
    s.write_all(&msg).unwrap();
    let mut theirs = [0u8; 52];
    s.read_exact(&mut theirs).expect("the server's address");
    s.write_all(b"done\0").unwrap();
    let text = std::str::from_utf8(&theirs[..51]).unwrap();
    let qpn = text.split(':').nth(1).expect("LID:QPN:PSN:GID");
    u32::from_str_radix(qpn, 16).unwrap()
}

#[test]
#[ignore = "needs rxe in the VM test bed: ctests/vm/roce/ud_to_rxe.sh"]
fn rxe_accepts_our_ud_send() {
    let local = env_addr("RSW_ROCE_LOCAL");
    let peer = env_addr("RSW_ROCE_PEER");
    let size: usize = std::env::var("RSW_ROCE_SIZE").map_or(64, |s| s.parse().unwrap());

    let sock = UdpSocket::bind(SocketAddrV4::new(local, PORT)).expect("bind port 4791");
    // DF on an unconnected socket: the kernel's IP ID is 0, as icrc_ipv4
    // assumes.
    set_ip_mtu_discover(&sock, Ipv4PathMtuDiscovery::DO).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    let server_qpn = exchange(peer, local);
    eprintln!("server QPN {server_qpn:#x}");

    let mut hdr = Headers::new(Bth::new(Opcode::UdSendOnly, server_qpn, 0x42));
    hdr.deth = Some(Deth {
        qkey: QKEY,
        src_qp: OUR_QPN,
    });
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut buf = [0u8; 4096];
    let len = packet::encode(&hdr, &payload, &mut buf).unwrap();
    let c = icrc::icrc_ipv4(local, peer, PORT, PORT, &buf[..len]).unwrap();
    let to = SocketAddrV4::new(peer, PORT);
    if std::env::var_os("RSW_ROCE_BAD_FIRST").is_some() {
        // The script checks that rxe logged this one as a bad ICRC.
        icrc::write(&mut buf[..len], c ^ 1);
        sock.send_to(&buf[..len], to).unwrap();
    }
    icrc::write(&mut buf[..len], c);
    sock.send_to(&buf[..len], to).unwrap();

    // The pong: rxe's UD SEND ONLY back to the QP we claimed.
    let mut rx = [0u8; 4096];
    let (n, from) = sock
        .recv_from(&mut rx)
        .expect("no reply: rxe dropped our packet");
    eprintln!("reply from {from}: {n} bytes");
    let p = Packet::parse(&rx[..n]).expect("rxe's reply parses");
    assert_eq!(p.hdr.bth.opcode, Opcode::UdSendOnly);
    assert_eq!(p.hdr.bth.dest_qp, OUR_QPN);
    let deth = p.hdr.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (QKEY, server_qpn));
    assert_eq!(p.payload.len(), size);
}
