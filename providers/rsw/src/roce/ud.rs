//! A UD SEND as one RoCEv2 packet, both ways, and the 40-byte GRH area a
//! receive gets in front of its payload. Pure, as the rest of the codec:
//! the engine (`engine::roce_ud`) brings the addresses and the bytes.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::headers::{Bth, Deth, ImmDt, ParseError};
use super::opcode::Opcode;
use super::packet::{self, EncodeError, Headers, Packet};
use super::{icrc, PORT};

/// The IP facts the ICRC covers: the two addresses and the UDP source
/// port (the destination port is RoCEv2's), and over IPv4 the
/// identification (0 from our sockets, see `icrc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ips {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        id: u16,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
    },
}

impl Ips {
    /// The ICRC of `ib` (BTH to ICRC) sent with these facts.
    pub(crate) fn icrc(&self, src_port: u16, ib: &[u8]) -> Result<u32, ParseError> {
        match *self {
            Ips::V4 { src, dst, id } => icrc::icrc_ipv4_with_id(src, dst, id, src_port, PORT, ib),
            Ips::V6 { src, dst } => icrc::icrc_ipv6(src, dst, src_port, PORT, ib),
        }
    }
}

/// The fields of a UD SEND ONLY (with immediate when `imm` is Some).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UdSend {
    pub(crate) dest_qp: u32,
    pub(crate) src_qp: u32,
    pub(crate) qkey: u32,
    pub(crate) psn: u32,
    pub(crate) pkey: u16,
    pub(crate) solicited: bool,
    /// The immediate as a number (the wire carries it big-endian).
    pub(crate) imm: Option<u32>,
}

impl UdSend {
    fn headers(&self) -> Headers {
        let op = if self.imm.is_some() {
            Opcode::UdSendOnlyImm
        } else {
            Opcode::UdSendOnly
        };
        let mut bth = Bth::new(op, self.dest_qp, self.psn);
        bth.pkey = self.pkey;
        bth.se = self.solicited;
        let mut h = Headers::new(bth);
        h.deth = Some(Deth {
            qkey: self.qkey,
            src_qp: self.src_qp & 0xff_ffff,
        });
        h.imm = self.imm.map(|imm| ImmDt { imm });
        h
    }
}

/// Bytes a UD SEND of `payload_len` bytes takes as a UDP payload.
pub(crate) fn wire_len(s: &UdSend, payload_len: usize) -> usize {
    packet::wire_len(&s.headers(), payload_len)
}

/// Writes the whole UDP payload of a UD SEND into `buf`, ICRC included,
/// as sent from `src_port` with `ips`; returns its length.
pub(crate) fn encode(
    s: &UdSend,
    payload: &[u8],
    ips: &Ips,
    src_port: u16,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let n = packet::encode(&s.headers(), payload, buf)?;
    let crc = ips
        .icrc(src_port, &buf[..n])
        .map_err(|_| EncodeError::BufferTooSmall { need: n })?;
    icrc::write(&mut buf[..n], crc);
    Ok(n)
}

/// Why a received packet is not a UD SEND we take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Malformed(ParseError),
    /// Another opcode (RC, UC: not spoken in this mode).
    NotUdSend,
    /// The ICRC does not match.
    BadIcrc,
}

/// Reads a UD SEND from a UDP payload and checks its ICRC against `ips`
/// (None: unchecked); the payload borrows from `ib`.
pub(crate) fn parse<'a>(
    ib: &'a [u8],
    ips: Option<&Ips>,
    src_port: u16,
) -> Result<(UdSend, &'a [u8]), Refused> {
    let p = Packet::parse(ib).map_err(Refused::Malformed)?;
    let h = p.hdr;
    if !matches!(h.bth.opcode, Opcode::UdSendOnly | Opcode::UdSendOnlyImm) {
        return Err(Refused::NotUdSend);
    }
    let Some(deth) = h.deth else {
        return Err(Refused::NotUdSend);
    };
    if let Some(ips) = ips {
        if ips.icrc(src_port, ib).map_err(Refused::Malformed)? != p.icrc {
            return Err(Refused::BadIcrc);
        }
    }
    let s = UdSend {
        dest_qp: h.bth.dest_qp,
        src_qp: deth.src_qp,
        qkey: deth.qkey,
        psn: h.bth.psn,
        pkey: h.bth.pkey,
        solicited: h.bth.se,
        imm: h.imm.map(|i| i.imm),
    };
    Ok((s, p.payload))
}

/// Bytes of the GRH area in front of a UD receive's payload.
pub(crate) const GRH_LEN: usize = 40;

/// The GRH area as RoCEv2 hardware (rxe too) writes it for a received
/// packet: the packet's IP header, IPv4's 20 bytes in the area's last 20
/// (the first 20 zero), IPv6's 40 in all of it. `udp_len` is the UDP
/// payload's length (BTH to ICRC); `ttl` the TTL or hop limit. An IPv4
/// header carries DF, no options, and its checksum.
pub(crate) fn grh_area(ips: &Ips, tclass: u8, ttl: u8, udp_len: usize) -> [u8; GRH_LEN] {
    let mut b = [0u8; GRH_LEN];
    match *ips {
        Ips::V4 { src, dst, id } => {
            let h = &mut b[20..];
            h[0] = 0x45;
            h[1] = tclass;
            let total = (20 + 8 + udp_len).min(u16::MAX as usize) as u16;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&id.to_be_bytes());
            h[6] = 0x40; // don't fragment
            h[8] = ttl;
            h[9] = 17; // UDP
            h[12..16].copy_from_slice(&src.octets());
            h[16..20].copy_from_slice(&dst.octets());
            let mut sum: u32 = h
                .chunks(2)
                .map(|p| u32::from(u16::from_be_bytes([p[0], p[1]])))
                .sum();
            while sum >> 16 != 0 {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        Ips::V6 { src, dst } => {
            b[0] = 0x60 | tclass >> 4;
            b[1] = tclass << 4;
            let plen = (8 + udp_len).min(u16::MAX as usize) as u16;
            b[4..6].copy_from_slice(&plen.to_be_bytes());
            b[6] = 17; // next header: UDP
            b[7] = ttl;
            b[8..24].copy_from_slice(&src.octets());
            b[24..40].copy_from_slice(&dst.octets());
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4() -> Ips {
        Ips::V4 {
            src: Ipv4Addr::new(10, 0, 8, 2),
            dst: Ipv4Addr::new(10, 0, 8, 1),
            id: 0,
        }
    }

    fn send(imm: Option<u32>) -> UdSend {
        UdSend {
            dest_qp: 0x11,
            src_qp: 0xabcd,
            qkey: 0x1111_1111,
            psn: 0x12_3456,
            pkey: 0xffff,
            solicited: imm.is_some(),
            imm,
        }
    }

    #[test]
    fn a_send_round_trips_and_its_icrc_is_checked() {
        for imm in [None, Some(0xdead_beef)] {
            for n in [0usize, 1, 3, 4, 1023] {
                let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
                let s = send(imm);
                let mut buf = vec![0u8; wire_len(&s, n)];
                let len = encode(&s, &data, &v4(), 0xc000, &mut buf).unwrap();
                assert_eq!(len, buf.len());
                assert_eq!(len, 12 + 8 + imm.map_or(0, |_| 4) + n.div_ceil(4) * 4 + 4);
                assert_eq!(buf[0], if imm.is_some() { 0x65 } else { 0x64 });
                assert_eq!(&buf[2..4], &[0xff, 0xff], "P_Key");
                let (got, payload) = parse(&buf, Some(&v4()), 0xc000).unwrap();
                assert_eq!(got, s);
                assert_eq!(payload, &data[..]);
                // Another source port, another address: the ICRC differs.
                assert_eq!(parse(&buf, Some(&v4()), 0xc001), Err(Refused::BadIcrc));
                let other = Ips::V4 {
                    src: Ipv4Addr::new(10, 0, 8, 3),
                    dst: Ipv4Addr::new(10, 0, 8, 1),
                    id: 0,
                };
                assert_eq!(parse(&buf, Some(&other), 0xc000), Err(Refused::BadIcrc));
                // A flipped payload or header bit, too.
                let mut bad = buf.clone();
                bad[13] ^= 1;
                assert_eq!(parse(&bad, Some(&v4()), 0xc000), Err(Refused::BadIcrc));
                assert!(parse(&bad, None, 0xc000).is_ok(), "unchecked");
            }
        }
    }

    #[test]
    fn other_opcodes_and_garbage_are_refused() {
        let mut h = Headers::new(Bth::new(Opcode::RcSendOnly, 1, 2));
        h.bth.pkey = 0xffff;
        let mut buf = [0u8; 64];
        let n = packet::encode(&h, b"abcd", &mut buf).unwrap();
        assert_eq!(parse(&buf[..n], None, 1), Err(Refused::NotUdSend));
        assert_eq!(
            parse(&buf[..7], None, 1),
            Err(Refused::Malformed(ParseError::TooShort))
        );
    }

    #[test]
    fn grh_area_holds_the_ip_header() {
        let ips = Ips::V4 {
            src: Ipv4Addr::new(10, 0, 8, 1),
            dst: Ipv4Addr::new(10, 0, 8, 2),
            id: 0x1234,
        };
        let b = grh_area(&ips, 0x48, 63, 96);
        assert_eq!(&b[..20], &[0; 20]);
        let h = &b[20..];
        assert_eq!(h[0], 0x45);
        assert_eq!(h[1], 0x48);
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 124);
        assert_eq!(&h[4..6], &[0x12, 0x34]);
        assert_eq!(h[8], 63);
        assert_eq!(&h[12..16], &[10, 0, 8, 1]);
        assert_eq!(&h[16..20], &[10, 0, 8, 2]);
        let mut sum: u32 = h
            .chunks(2)
            .map(|p| u32::from(u16::from_be_bytes([p[0], p[1]])))
            .sum();
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "the checksum folds to all ones");
        let s6: Ipv6Addr = "fe80::1".parse().unwrap();
        let d6: Ipv6Addr = "fe80::2".parse().unwrap();
        let b = grh_area(&Ips::V6 { src: s6, dst: d6 }, 0xa7, 255, 36);
        assert_eq!(b[0] >> 4, 6);
        let vtf = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!((vtf >> 20) & 0xff, 0xa7);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), 44);
        assert_eq!((b[6], b[7]), (17, 255));
        assert_eq!(&b[8..24], &s6.octets());
        assert_eq!(&b[24..40], &d6.octets());
    }
}
