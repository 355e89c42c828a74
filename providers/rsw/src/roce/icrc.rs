//! The invariant CRC (IBA Annex A17, RoCEv2): CRC-32 over the packet from
//! the IP header to the end of the payload and pad, with the fields a
//! router may change replaced by ones, and 8 bytes of ones in front where
//! InfiniBand has its LRH:
//!
//! * IPv4: TOS, TTL and the header checksum (the header is 20 bytes: the
//!   pseudo header has no room for options, and RoCEv2 senders use none);
//! * IPv6: traffic class, flow label and hop limit;
//! * UDP: the checksum;
//! * BTH: byte 4, FECN, BECN and the 6 reserved bits before the QPN.
//!
//! The CRC is inverted and sent least significant byte first, like the
//! Ethernet FCS (rxe stores its CPU-order `crc32_le` on a little-endian
//! host; the captured packets in `rxe_captures` agree).
//!
//! A sender on an ordinary UDP socket knows every unmasked field: the
//! addresses and ports it sends from and to, the lengths, protocol 17,
//! and for IPv4 the identification and flags — on a socket with
//! `IP_MTU_DISCOVER` = `IP_PMTUDISC_DO` that is not connected, Linux sets
//! DF and an ID of 0 (`ip_select_ident_segs`: DF without `ignore_df`
//! gives 0; `IP_PMTUDISC_WANT`, the default, sets `ignore_df` and so a
//! hashed ID, and a connected socket counts its own IDs). [`icrc_ipv4`]
//! and [`icrc_ipv6`] take those facts.
//!
//! A receiver on a UDP socket is not told the IPv4 identification, which
//! the ICRC covers, and rxe sends hashed, non-zero IDs
//! (`__ip_select_ident`). The CRC being linear, [`solve_ipv4_id`] finds
//! the one identification (if any) that makes the carried ICRC right:
//! that checks 16 of its 32 bits, the rest guarded by each link's
//! Ethernet FCS and the parser's length and pad checks (not by the UDP
//! checksum: rxe sends 0), and gives the GRH area its real ID. Over IPv6
//! it verifies with [`icrc_ipv6`] (the destination address from
//! `IPV6_RECVPKTINFO`, or the socket's own) and
//! drops a mismatch. rxe's UDP checksum is 0 on IPv6 too, which a UDP
//! socket drops (as `Udp6InCsumErrors`; measured in the VM test bed)
//! unless `UDP_NO_CHECK6_RX` is set. [`icrc_of_ip_packet`] checks a whole
//! captured packet (raw sockets, tests).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::crc32;
use super::headers::ParseError;
use super::opcode::BTH_LEN;
use super::packet::ICRC_LEN;

/// The CRC state after the 8 bytes of ones that stand for the masked LRH
/// (rxe's seed 0xdebb20e3).
const SEED: u32 = crc32::update_bytewise(!0, &[0xff; 8]);

const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const UDP_PROTO: u8 = 17;
/// IPv4 flags and fragment offset: DF, no offset.
const DONT_FRAGMENT: u16 = 0x4000;

/// The UDP header (checksum masked) and the IB part of the packet, whose
/// last [`ICRC_LEN`] bytes are not covered. `crc` covers the IP header.
fn finish(crc: u32, src_port: u16, dst_port: u16, ib: &[u8]) -> Result<u32, ParseError> {
    if ib.len() < BTH_LEN + ICRC_LEN {
        return Err(ParseError::TooShort);
    }
    let udp_len = u16::try_from(UDP_LEN + ib.len()).map_err(|_| ParseError::BadLength)?;
    let mut udp = [0xff; UDP_LEN];
    udp[0..2].copy_from_slice(&src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let mut bth = [0; BTH_LEN];
    bth.copy_from_slice(&ib[..BTH_LEN]);
    bth[4] = 0xff;
    let crc = crc32::update(crc, &udp);
    let crc = crc32::update(crc, &bth);
    let crc = crc32::update(crc, &ib[BTH_LEN..ib.len() - ICRC_LEN]);
    Ok(!crc)
}

/// The ICRC of `ib` (a UDP payload from the BTH to the ICRC's 4 bytes,
/// whose value does not matter) sent over IPv4 with this identification
/// and DF set.
pub(crate) fn icrc_ipv4_with_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    id: u16,
    src_port: u16,
    dst_port: u16,
    ib: &[u8],
) -> Result<u32, ParseError> {
    let total = u16::try_from(IPV4_LEN + UDP_LEN + ib.len()).map_err(|_| ParseError::BadLength)?;
    let mut ip = [0xff; IPV4_LEN];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6..8].copy_from_slice(&DONT_FRAGMENT.to_be_bytes());
    ip[9] = UDP_PROTO;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    finish(crc32::update(SEED, &ip), src_port, dst_port, ib)
}

/// The ICRC of `ib` as an unconnected UDP socket with `IP_PMTUDISC_DO`
/// sends it over IPv4: DF set, identification 0.
pub(crate) fn icrc_ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    ib: &[u8],
) -> Result<u32, ParseError> {
    icrc_ipv4_with_id(src, dst, 0, src_port, dst_port, ib)
}

/// The ICRC of `ib` sent over IPv6 (no extension headers).
pub(crate) fn icrc_ipv6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    src_port: u16,
    dst_port: u16,
    ib: &[u8],
) -> Result<u32, ParseError> {
    let payload = u16::try_from(UDP_LEN + ib.len()).map_err(|_| ParseError::BadLength)?;
    let mut ip = [0xff; IPV6_LEN];
    ip[0] = 0x6f;
    ip[4..6].copy_from_slice(&payload.to_be_bytes());
    ip[6] = UDP_PROTO;
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    finish(crc32::update(SEED, &ip), src_port, dst_port, ib)
}

/// Stores `icrc` in the last 4 bytes of the packet `ib`.
pub(crate) fn write(ib: &mut [u8], icrc: u32) {
    if let Some(at) = ib.len().checked_sub(ICRC_LEN) {
        ib[at..].copy_from_slice(&icrc.to_le_bytes());
    }
}

/// The IPv4 identification with which `ib` (BTH to ICRC) carries the
/// right ICRC, sent with DF set from `src` to `dst`; None when no
/// identification gives it: the ICRC is bad. What a receiver on a UDP
/// socket, which is not told the identification, can check: 16 of the
/// ICRC's 32 bits. The CRC is linear: the difference between the ICRC
/// computed with identification 0 and the one carried walks back, through
/// the bytes after the identification, to what its two bytes made.
pub(crate) fn solve_ipv4_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    ib: &[u8],
) -> Option<u16> {
    let carried = read(ib)?;
    let zero = icrc_ipv4(src, dst, src_port, dst_port, ib).ok()?;
    // After the identification: the rest of the IP header, the UDP
    // header, the IB part up to the ICRC.
    let after = (IPV4_LEN - 6) + UDP_LEN + ib.len() - ICRC_LEN;
    let mut d = zero ^ carried;
    for _ in 0..after {
        d = crc32::unshift(d);
    }
    crc32::two_bytes_of(d).map(|(hi, lo)| u16::from_be_bytes([hi, lo]))
}

/// The ICRC `ib` carries.
pub(crate) fn read(ib: &[u8]) -> Option<u32> {
    let at = ib.len().checked_sub(ICRC_LEN)?;
    Some(u32::from_le_bytes(ib[at..].try_into().ok()?))
}

/// Why a captured IP packet could not be checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IpError {
    /// Not IPv4 or IPv6, or shorter than its headers.
    NotIp,
    /// Not UDP (IPv6: no extension headers are followed).
    NotUdp,
    /// IPv4 options, which the pseudo header has no room for.
    Ipv4Options,
    /// The IP or UDP length disagrees with the bytes captured.
    BadLength,
    /// A fragment.
    Fragment,
    /// The IB part is shorter than a BTH and an ICRC.
    TooShort,
}

/// A captured packet's ICRC, computed and carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Checked<'a> {
    pub(crate) computed: u32,
    pub(crate) carried: u32,
    /// The UDP payload: the BTH to the ICRC.
    pub(crate) ib: &'a [u8],
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
}

impl Checked<'_> {
    pub(crate) fn ok(&self) -> bool {
        self.computed == self.carried
    }
}

/// Computes the ICRC of a whole captured IP packet (from the IP header;
/// trailing bytes past the IP length, like Ethernet padding, are
/// ignored) and reads the one it carries.
pub(crate) fn icrc_of_ip_packet(ip: &[u8]) -> Result<Checked<'_>, IpError> {
    let (crc, udp) = match ip.first().map(|b| b >> 4) {
        Some(4) => {
            if ip.len() < IPV4_LEN {
                return Err(IpError::NotIp);
            }
            if ip[0] & 0x0f != 5 {
                return Err(IpError::Ipv4Options);
            }
            if ip[9] != UDP_PROTO {
                return Err(IpError::NotUdp);
            }
            if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return Err(IpError::Fragment);
            }
            let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            if total < IPV4_LEN + UDP_LEN || total > ip.len() {
                return Err(IpError::BadLength);
            }
            let mut h = [0; IPV4_LEN];
            h.copy_from_slice(&ip[..IPV4_LEN]);
            h[1] = 0xff;
            h[8] = 0xff;
            h[10] = 0xff;
            h[11] = 0xff;
            (crc32::update(SEED, &h), &ip[IPV4_LEN..total])
        }
        Some(6) => {
            if ip.len() < IPV6_LEN {
                return Err(IpError::NotIp);
            }
            if ip[6] != UDP_PROTO {
                return Err(IpError::NotUdp);
            }
            let end = IPV6_LEN + u16::from_be_bytes([ip[4], ip[5]]) as usize;
            if end < IPV6_LEN + UDP_LEN || end > ip.len() {
                return Err(IpError::BadLength);
            }
            let mut h = [0; IPV6_LEN];
            h.copy_from_slice(&ip[..IPV6_LEN]);
            h[0] |= 0x0f;
            h[1..4].fill(0xff);
            h[7] = 0xff;
            (crc32::update(SEED, &h), &ip[IPV6_LEN..end])
        }
        _ => return Err(IpError::NotIp),
    };
    if u16::from_be_bytes([udp[4], udp[5]]) as usize != udp.len() {
        return Err(IpError::BadLength);
    }
    let src_port = u16::from_be_bytes([udp[0], udp[1]]);
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    let ib = &udp[UDP_LEN..];
    let computed = finish(crc, src_port, dst_port, ib).map_err(|_| IpError::TooShort)?;
    Ok(Checked {
        computed,
        carried: read(ib).ok_or(IpError::TooShort)?,
        ib,
        src_port,
        dst_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_is_rxes() {
        assert_eq!(SEED, 0xdebb_20e3);
    }

    /// An IPv4 RoCEv2 packet as a sender builds it, around `ib`.
    fn ipv4_packet(id: u16, tos: u8, ttl: u8, ib: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, tos];
        p.extend_from_slice(&((20 + 8 + ib.len()) as u16).to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&[0x40, 0, ttl, 17, 0x12, 0x34, 10, 0, 0, 2, 10, 0, 0, 1]);
        p.extend_from_slice(&[0xc0, 0x01, 0x12, 0xb7]);
        p.extend_from_slice(&((8 + ib.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0xab, 0xcd]);
        p.extend_from_slice(ib);
        p
    }

    fn some_ib() -> Vec<u8> {
        // A UD SEND ONLY of 4 bytes, ICRC slot last.
        let mut ib = vec![0x64, 0, 0xff, 0xff, 0, 0, 0, 0x15, 0, 0, 0, 7];
        ib.extend_from_slice(&[0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x16]);
        ib.extend_from_slice(b"ping");
        ib.extend_from_slice(&[0; 4]);
        ib
    }

    #[test]
    fn the_sender_facts_give_the_whole_packet_crc() {
        let ib = some_ib();
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
        let c = icrc_ipv4(src, dst, 0xc001, 4791, &ib).unwrap();
        let p = ipv4_packet(0, 0, 64, &ib);
        assert_eq!(icrc_of_ip_packet(&p).unwrap().computed, c);
        // Masked fields do not matter; the identification does.
        assert_eq!(
            icrc_of_ip_packet(&ipv4_packet(0, 0x8a, 1, &ib))
                .unwrap()
                .computed,
            c
        );
        let with_id = icrc_of_ip_packet(&ipv4_packet(0x4ab9, 0, 64, &ib))
            .unwrap()
            .computed;
        assert_ne!(with_id, c);
        assert_eq!(
            icrc_ipv4_with_id(src, dst, 0x4ab9, 0xc001, 4791, &ib).unwrap(),
            with_id
        );
        // So do addresses, ports, and every covered byte of the IB part,
        // but neither BTH byte 4's FECN/BECN/reserved bits nor the ICRC.
        assert_ne!(icrc_ipv4(dst, src, 0xc001, 4791, &ib).unwrap(), c);
        assert_ne!(icrc_ipv4(src, dst, 0xc002, 4791, &ib).unwrap(), c);
        for i in 0..ib.len() {
            let mut b = ib.clone();
            b[i] ^= 0x80;
            let changed = icrc_ipv4(src, dst, 0xc001, 4791, &b).unwrap() != c;
            assert_eq!(changed, i != 4 && i < ib.len() - 4, "byte {i}");
        }
        let mut b = ib.clone();
        b[4] = 0xff;
        assert_eq!(icrc_ipv4(src, dst, 0xc001, 4791, &b).unwrap(), c);
    }

    #[test]
    fn ipv6_masks_class_flow_and_hops() {
        let ib = some_ib();
        let src: Ipv6Addr = "fd00:9::2".parse().unwrap();
        let dst: Ipv6Addr = "fd00:9::1".parse().unwrap();
        let c = icrc_ipv6(src, dst, 0xc121, 4791, &ib).unwrap();
        let mut p = vec![0x6a, 0xbc, 0xde, 0xf0];
        p.extend_from_slice(&((8 + ib.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[17, 3]);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(&[0xc1, 0x21, 0x12, 0xb7]);
        p.extend_from_slice(&((8 + ib.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&ib);
        let got = icrc_of_ip_packet(&p).unwrap();
        assert_eq!(got.computed, c);
        assert_eq!((got.src_port, got.dst_port), (0xc121, 4791));
        assert_eq!(got.ib, &ib[..]);
        assert_ne!(icrc_ipv6(dst, src, 0xc121, 4791, &ib).unwrap(), c);
    }

    #[test]
    fn write_then_read_then_check() {
        let mut ib = some_ib();
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
        let c = icrc_ipv4(src, dst, 0xc001, 4791, &ib).unwrap();
        write(&mut ib, c);
        assert_eq!(&ib[ib.len() - 4..], &c.to_le_bytes());
        assert_eq!(read(&ib), Some(c));
        let p = ipv4_packet(0, 0, 64, &ib);
        let got = icrc_of_ip_packet(&p).unwrap();
        assert!(got.ok());
        let mut bad = p.clone();
        let last = bad.len() - 5;
        bad[last] ^= 1;
        assert!(!icrc_of_ip_packet(&bad).unwrap().ok());
        // Bytes after the IP length (Ethernet padding) are not the packet.
        let mut padded = p.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(icrc_of_ip_packet(&padded).unwrap(), got);
    }

    #[test]
    fn captured_packets_that_cannot_be_checked() {
        let ib = some_ib();
        let p = ipv4_packet(0, 0, 64, &ib);
        assert_eq!(icrc_of_ip_packet(&[]), Err(IpError::NotIp));
        assert_eq!(icrc_of_ip_packet(&p[..19]), Err(IpError::NotIp));
        let mut q = p.clone();
        q[0] = 0x55;
        assert_eq!(icrc_of_ip_packet(&q), Err(IpError::NotIp));
        let mut q = p.clone();
        q[0] = 0x46;
        assert_eq!(icrc_of_ip_packet(&q), Err(IpError::Ipv4Options));
        let mut q = p.clone();
        q[9] = 6;
        assert_eq!(icrc_of_ip_packet(&q), Err(IpError::NotUdp));
        let mut q = p.clone();
        q[6] = 0x20; // more fragments
        assert_eq!(icrc_of_ip_packet(&q), Err(IpError::Fragment));
        assert_eq!(
            icrc_of_ip_packet(&p[..p.len() - 1]),
            Err(IpError::BadLength)
        );
        let mut q = p.clone();
        q[25] += 4; // UDP length
        assert_eq!(icrc_of_ip_packet(&q), Err(IpError::BadLength));
        let short = ipv4_packet(0, 0, 64, &ib[..12]);
        assert_eq!(icrc_of_ip_packet(&short), Err(IpError::TooShort));
        assert_eq!(
            icrc_ipv4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1, 2, &ib[..15]),
            Err(ParseError::TooShort)
        );
        let huge = vec![0u8; 65536];
        assert_eq!(
            icrc_ipv6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 1, 2, &huge),
            Err(ParseError::BadLength)
        );
    }
}
