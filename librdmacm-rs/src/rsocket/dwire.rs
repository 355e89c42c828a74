//! rdma-core's datagram rsocket protocol, as its `librdmacm/rsocket.c`
//! (v44) puts it on the wire. Facts only; `dgram` runs the protocol.
//!
//! A datagram travels as a UD SEND (Q_Key `RDMA_UDP_QKEY`) whose payload
//! starts with a `struct ds_header`: the sender's socket address (its IP
//! and UDP port), which the receiver reports as the datagram's source.
//! Until a sender knows the destination's QP it sends over the rsocket's
//! UDP socket instead, behind a `struct ds_udp_header` with op `DATA`
//! naming the sender's QP; the receiver answers every such datagram with
//! a bare `ds_udp_header` of op `CTRL` naming its own QP, and both sides
//! then make an address handle to the other's address.
//!
//! Multi-byte fields are big-endian; offsets in bytes.
//!
//! `struct ds_header` (after the 40-byte GRH of a UD receive):
//! ```text
//!  0 version   4 | 6
//!  1 length    8 | 24 (the header's own length; the payload follows)
//!  2 port      u16, the sender's UDP port
//!  4 IPv4: address (4)       IPv6: sin6_flowinfo (4), address (16) at 8
//! ```
//! `struct ds_udp_header` (at the start of a UDP datagram):
//! ```text
//!  0 tag       u32 0x55555555
//!  4 version   4 | 6, the family the receiver sees the datagram come from
//!  5 op        0 DATA (a datagram follows) | 7 CTRL (nothing follows)
//!  6 length    16 | 28
//!  7 reserved  0
//!  8 qpn       u32, the sender's QP number (the top byte 0 and ignored)
//! 12 address   4 | 16 bytes, the address the sender's QP is bound to
//! ```
//! A receive buffer holds 2048 bytes after the GRH (header included), as
//! does the UDP receive; rdma-core does not check a send's length.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `RDMA_UDP_QKEY`: the Q_Key of every datagram rsocket's QP.
pub const QKEY: u32 = 0x0123_4567;
/// `RS_SNDLOWAT`: a receive buffer's size, so the largest message (header
/// included) a peer accepts.
pub const MSG_MAX: usize = 2048;
/// `DS_IPV4_HDR_LEN`, `DS_IPV6_HDR_LEN`.
pub const HDR4: usize = 8;
pub const HDR6: usize = 24;
/// `DS_UDP_TAG`.
pub const UDP_TAG: u32 = 0x5555_5555;
/// `DS_UDP_IPV4_HDR_LEN`, `DS_UDP_IPV6_HDR_LEN`.
pub const UDP_HDR4: usize = 16;
pub const UDP_HDR6: usize = 28;
/// `RS_OP_DATA`: a datagram follows the UDP header.
pub const OP_DATA: u8 = 0;
/// `RS_OP_CTRL`: "my QP is the one named here".
pub const OP_CTRL: u8 = 7;

/// A `struct ds_header` for the sender address `a`: its bytes and length.
pub fn ds_header(a: &SocketAddr) -> ([u8; HDR6], usize) {
    let mut h = [0u8; HDR6];
    h[2..4].copy_from_slice(&a.port().to_be_bytes());
    match a {
        SocketAddr::V4(v4) => {
            h[0] = 4;
            h[1] = HDR4 as u8;
            h[4..8].copy_from_slice(&v4.ip().octets());
            (h, HDR4)
        }
        SocketAddr::V6(v6) => {
            h[0] = 6;
            h[1] = HDR6 as u8;
            // sin6_flowinfo as the sockaddr holds it (network order).
            h[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            h[8..24].copy_from_slice(&v6.ip().octets());
            (h, HDR6)
        }
    }
}

/// The sender address and header length of a received message (after
/// the GRH), as `ds_valid_recv` accepts it.
pub fn parse_ds_header(b: &[u8]) -> Option<(SocketAddr, usize)> {
    if b.len() < HDR4 {
        return None;
    }
    let port = u16::from_be_bytes([b[2], b[3]]);
    match (b[0], b[1] as usize) {
        (4, HDR4) => {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some((SocketAddr::V4(SocketAddrV4::new(ip, port)), HDR4))
        }
        (6, HDR6) if b.len() >= HDR6 => {
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?);
            Some((SocketAddr::V6(SocketAddrV6::new(ip, port, flow, 0)), HDR6))
        }
        _ => None,
    }
}

/// A `struct ds_udp_header`: `op`, the sender's QP number and the IP
/// address its QP is bound to.
pub fn udp_header(op: u8, qpn: u32, ip: IpAddr) -> ([u8; UDP_HDR6], usize) {
    let mut h = [0u8; UDP_HDR6];
    h[0..4].copy_from_slice(&UDP_TAG.to_be_bytes());
    h[5] = op;
    h[8..12].copy_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
    match ip {
        IpAddr::V4(v4) => {
            h[4] = 4;
            h[6] = UDP_HDR4 as u8;
            h[12..16].copy_from_slice(&v4.octets());
            (h, UDP_HDR4)
        }
        IpAddr::V6(v6) => {
            h[4] = 6;
            h[6] = UDP_HDR6 as u8;
            h[12..28].copy_from_slice(&v6.octets());
            (h, UDP_HDR6)
        }
    }
}

/// A received UDP message's header, as `udp_svc_valid_udp_hdr` accepts it
/// (its version must match the family the datagram came from): op, QP
/// number, header length.
pub fn parse_udp_header(b: &[u8], from_v6: bool) -> Option<(u8, u32, usize)> {
    if b.len() < UDP_HDR4 || u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != UDP_TAG {
        return None;
    }
    let len = match (b[4], from_v6, b[6] as usize) {
        (4, false, UDP_HDR4) => UDP_HDR4,
        (6, true, UDP_HDR6) => UDP_HDR6,
        _ => return None,
    };
    if b.len() < len {
        return None;
    }
    let qpn = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) & 0xff_ffff;
    Some((b[5], qpn, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ds_header_is_rdma_cores_layout() {
        let a: SocketAddr = "10.0.0.1:7174".parse().unwrap();
        let (h, n) = ds_header(&a);
        assert_eq!(&h[..n], &[4, 8, 0x1c, 0x06, 10, 0, 0, 1]);
        assert_eq!(parse_ds_header(&h[..n]), Some((a, HDR4)));
        let b: SocketAddr = "[fe80::1]:9".parse().unwrap();
        let (h, n) = ds_header(&b);
        assert_eq!((n, h[0], h[1], &h[2..4]), (HDR6, 6, 24, &[0u8, 9][..]));
        assert_eq!(h[23], 1);
        assert_eq!(parse_ds_header(&h[..n]), Some((b, HDR6)));
        assert_eq!(parse_ds_header(&[4, 24, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(parse_ds_header(&[6, 24, 0, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn udp_header_is_rdma_cores_layout() {
        let (h, n) = udp_header(OP_DATA, 0x12_3456, "10.0.0.2".parse().unwrap());
        assert_eq!(
            &h[..n],
            &[0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0x12, 0x34, 0x56, 10, 0, 0, 2]
        );
        assert_eq!(
            parse_udp_header(&h[..n], false),
            Some((OP_DATA, 0x12_3456, 16))
        );
        assert_eq!(parse_udp_header(&h[..n], true), None);
        let (h, n) = udp_header(OP_CTRL, 0xab00_0007, "::1".parse().unwrap());
        assert_eq!((n, h[4], h[5], h[6], h[11], h[27]), (28, 6, 7, 28, 7, 1));
        assert_eq!(parse_udp_header(&h[..n], true), Some((OP_CTRL, 7, 28)));
        assert_eq!(parse_udp_header(&h[..n - 1], true), None);
    }

    #[test]
    fn ipv6_headers_byte_exact() {
        let a = SocketAddr::V6(SocketAddrV6::new(
            "2001:db8::a:b".parse().unwrap(),
            0x1234,
            0x000a_bcde,
            3,
        ));
        let (h, n) = ds_header(&a);
        #[rustfmt::skip]
        let want: [u8; 24] = [
            6, 24, 0x12, 0x34,
            0x00, 0x0a, 0xbc, 0xde,
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0, 0x0b,
        ];
        assert_eq!(&h[..n], &want);
        // The scope id does not travel.
        let SocketAddr::V6(v6) = a else {
            unreachable!()
        };
        let back = SocketAddr::V6(SocketAddrV6::new(*v6.ip(), 0x1234, 0x000a_bcde, 0));
        assert_eq!(parse_ds_header(&want), Some((back, HDR6)));
        assert_eq!(parse_ds_header(&want[..23]), None);

        let (h, n) = udp_header(OP_DATA, 0x00ab_cdef, "2001:db8::a:b".parse().unwrap());
        #[rustfmt::skip]
        let want: [u8; 28] = [
            0x55, 0x55, 0x55, 0x55, 6, 0, 28, 0,
            0, 0xab, 0xcd, 0xef,
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0, 0x0b,
        ];
        assert_eq!(&h[..n], &want);
        assert_eq!(
            parse_udp_header(&want, true),
            Some((OP_DATA, 0xab_cdef, 28))
        );
        assert_eq!(parse_udp_header(&want, false), None);
    }

    #[test]
    fn udp_header_rejects_what_rdma_core_drops() {
        let ok = [
            0x55, 0x55, 0x55, 0x55, 4, 7, 16, 0, 0xff, 0, 0, 9, 10, 0, 0, 1,
        ];
        // The top byte of the QP number is not part of it.
        assert_eq!(parse_udp_header(&ok, false), Some((OP_CTRL, 9, 16)));
        let mut bad_tag = ok;
        bad_tag[3] = 0x54;
        assert_eq!(parse_udp_header(&bad_tag, false), None);
        let mut bad_len = ok;
        bad_len[6] = 28;
        assert_eq!(parse_udp_header(&bad_len, false), None);
        let mut bad_ver = ok;
        bad_ver[4] = 5;
        assert_eq!(parse_udp_header(&bad_ver, false), None);
        assert_eq!(parse_udp_header(&ok[..15], false), None);
        // Bytes after the header are the datagram's.
        let mut with_data = ok.to_vec();
        with_data.extend_from_slice(b"payload");
        assert_eq!(parse_udp_header(&with_data, false), Some((OP_CTRL, 9, 16)));
    }
}
