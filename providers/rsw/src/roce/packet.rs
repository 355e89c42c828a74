//! A whole RoCEv2 UDP payload: the BTH, the extension headers its opcode
//! names, the payload, the pad and the ICRC. Parsing borrows the payload
//! from the datagram; encoding writes into the caller's buffer. Nothing
//! allocates.

use super::headers::{Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Ieth, ImmDt, ParseError, Reth};
use super::opcode::Ext;

/// Bytes of the invariant CRC that ends every packet.
pub(crate) const ICRC_LEN: usize = 4;

/// The BTH and the extension headers of one packet. An extension header
/// is `Some` exactly when the BTH's opcode carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Headers {
    pub(crate) bth: Bth,
    pub(crate) deth: Option<Deth>,
    pub(crate) reth: Option<Reth>,
    pub(crate) atomic: Option<AtomicEth>,
    pub(crate) aeth: Option<Aeth>,
    pub(crate) atomic_ack: Option<AtomicAckEth>,
    pub(crate) imm: Option<ImmDt>,
    pub(crate) ieth: Option<Ieth>,
}

/// Why headers could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EncodeError {
    /// The buffer holds fewer than `need` bytes.
    BufferTooSmall { need: usize },
    /// The opcode carries this header but it is `None`.
    MissingHeader(Ext),
    /// This header is `Some` but the opcode does not carry it.
    UnexpectedHeader(Ext),
    /// A payload for an opcode that carries none.
    PayloadNotAllowed,
}

/// Copies `src` to the start of `dst`, which the caller sized.
fn put(dst: &mut [u8], src: &[u8]) {
    dst[..src.len()].copy_from_slice(src);
}

/// The `N` bytes at `at`; the caller checked the length.
fn take<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..at + N]
        .try_into()
        .expect("length checked by the caller")
}

impl Headers {
    /// The BTH alone; the caller fills the extension headers its opcode
    /// carries.
    pub(crate) fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            deth: None,
            reth: None,
            atomic: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
        }
    }

    /// Bytes from the BTH to the payload.
    pub(crate) fn len(&self) -> usize {
        self.bth.opcode.header_len()
    }

    fn present(&self, ext: Ext) -> bool {
        match ext {
            Ext::Deth => self.deth.is_some(),
            Ext::Reth => self.reth.is_some(),
            Ext::AtomicEth => self.atomic.is_some(),
            Ext::Aeth => self.aeth.is_some(),
            Ext::AtomicAckEth => self.atomic_ack.is_some(),
            Ext::ImmDt => self.imm.is_some(),
            Ext::Ieth => self.ieth.is_some(),
        }
    }

    /// Writes the BTH and the extension headers to the start of `buf`, as
    /// given (the pad count too); returns the bytes written.
    pub(crate) fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let op = self.bth.opcode;
        for ext in [
            Ext::Deth,
            Ext::Reth,
            Ext::AtomicEth,
            Ext::Aeth,
            Ext::AtomicAckEth,
            Ext::ImmDt,
            Ext::Ieth,
        ] {
            match (op.has(ext), self.present(ext)) {
                (true, false) => return Err(EncodeError::MissingHeader(ext)),
                (false, true) => return Err(EncodeError::UnexpectedHeader(ext)),
                _ => {}
            }
        }
        let len = self.len();
        if buf.len() < len {
            return Err(EncodeError::BufferTooSmall { need: len });
        }
        put(buf, &self.bth.encode());
        let mut at = Bth::LEN;
        for &ext in op.exts() {
            let rest = &mut buf[at..];
            match ext {
                Ext::Deth => self.deth.map(|h| put(rest, &h.encode())),
                Ext::Reth => self.reth.map(|h| put(rest, &h.encode())),
                Ext::AtomicEth => self.atomic.map(|h| put(rest, &h.encode())),
                Ext::Aeth => self.aeth.map(|h| put(rest, &h.encode())),
                Ext::AtomicAckEth => self.atomic_ack.map(|h| put(rest, &h.encode())),
                Ext::ImmDt => self.imm.map(|h| put(rest, &h.encode())),
                Ext::Ieth => self.ieth.map(|h| put(rest, &h.encode())),
            };
            at += ext.len();
        }
        Ok(at)
    }

    /// Reads the BTH and the extension headers its opcode names from the
    /// start of `b`.
    pub(crate) fn parse(b: &[u8]) -> Result<Headers, ParseError> {
        if b.len() < Bth::LEN {
            return Err(ParseError::TooShort);
        }
        let bth = Bth::parse(take(b, 0))?;
        if b.len() < bth.opcode.header_len() {
            return Err(ParseError::TooShort);
        }
        let mut h = Headers::new(bth);
        let mut at = Bth::LEN;
        for &ext in bth.opcode.exts() {
            match ext {
                Ext::Deth => h.deth = Some(Deth::parse(take(b, at))),
                Ext::Reth => h.reth = Some(Reth::parse(take(b, at))),
                Ext::AtomicEth => h.atomic = Some(AtomicEth::parse(take(b, at))),
                Ext::Aeth => h.aeth = Some(Aeth::parse(take(b, at))?),
                Ext::AtomicAckEth => h.atomic_ack = Some(AtomicAckEth::parse(take(b, at))),
                Ext::ImmDt => h.imm = Some(ImmDt::parse(take(b, at))),
                Ext::Ieth => h.ieth = Some(Ieth::parse(take(b, at))),
            }
            at += ext.len();
        }
        Ok(h)
    }
}

/// A parsed packet; `payload` borrows from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Packet<'a> {
    pub(crate) hdr: Headers,
    pub(crate) payload: &'a [u8],
    /// The ICRC as carried: the last 4 bytes, least significant first
    /// (see `icrc`).
    pub(crate) icrc: u32,
}

impl<'a> Packet<'a> {
    /// Parses a UDP payload: headers, then payload = the rest less the
    /// pad and the ICRC. The ICRC is read, not checked (`icrc` checks it
    /// where the IP header is known).
    pub(crate) fn parse(b: &'a [u8]) -> Result<Packet<'a>, ParseError> {
        let hdr = Headers::parse(b)?;
        let hlen = hdr.len();
        if b.len() < hlen + ICRC_LEN {
            return Err(ParseError::TooShort);
        }
        if !b.len().is_multiple_of(4) {
            return Err(ParseError::BadLength);
        }
        let body = b.len() - hlen - ICRC_LEN;
        let pad = hdr.bth.pad;
        if !hdr.bth.opcode.carries_payload() {
            if pad != 0 {
                return Err(ParseError::BadPad(pad));
            }
            if body != 0 {
                return Err(ParseError::BadLength);
            }
        }
        if pad as usize > body {
            return Err(ParseError::BadPad(pad));
        }
        let end = b.len() - ICRC_LEN;
        Ok(Packet {
            hdr,
            payload: &b[hlen..end - pad as usize],
            icrc: u32::from_le_bytes(*take(b, end)),
        })
    }
}

/// The pad count that rounds `len` up to a multiple of 4.
pub(crate) fn pad_for(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

/// Bytes a packet of these headers and this payload takes on the wire
/// (the UDP payload).
pub(crate) fn wire_len(hdr: &Headers, payload_len: usize) -> usize {
    hdr.len() + payload_len + pad_for(payload_len) as usize + ICRC_LEN
}

/// Writes a whole packet into `buf`: the headers with the BTH's pad count
/// set from the payload's length, the payload, zero pad bytes and a zero
/// ICRC for `icrc::write` to fill once the IP header's facts are known.
/// Returns the bytes written.
pub(crate) fn encode(hdr: &Headers, payload: &[u8], buf: &mut [u8]) -> Result<usize, EncodeError> {
    if !payload.is_empty() && !hdr.bth.opcode.carries_payload() {
        return Err(EncodeError::PayloadNotAllowed);
    }
    let need = wire_len(hdr, payload.len());
    if buf.len() < need {
        return Err(EncodeError::BufferTooSmall { need });
    }
    let mut h = *hdr;
    h.bth.pad = pad_for(payload.len());
    let at = h.encode(buf)?;
    put(&mut buf[at..], payload);
    buf[at + payload.len()..need].fill(0);
    Ok(need)
}

#[cfg(test)]
mod tests {
    use super::super::headers::{NakCode, Syndrome};
    use super::super::opcode::Opcode;
    use super::*;

    /// Headers for `op` with every extension header it carries filled with
    /// values that differ per field, so a swap shows.
    pub(crate) fn sample(op: Opcode) -> Headers {
        let mut bth = Bth::new(op, 0x00ab_cdef, 0x0012_3456);
        bth.se = op as u8 & 1 == 1;
        bth.ack_req = op as u8 & 2 == 2;
        bth.pkey = 0x8000 | op as u16;
        let mut h = Headers::new(bth);
        for &ext in op.exts() {
            match ext {
                Ext::Deth => {
                    h.deth = Some(Deth {
                        qkey: 0x1111_2222,
                        src_qp: 0x33_4455,
                    })
                }
                Ext::Reth => {
                    h.reth = Some(Reth {
                        va: 0x0001_0203_0405_0607,
                        rkey: 0x0809_0a0b,
                        dma_len: 0x0000_1234,
                    })
                }
                Ext::AtomicEth => {
                    h.atomic = Some(AtomicEth {
                        va: 0x1000_0000_0000_0008,
                        rkey: 0x5555_6666,
                        swap_add: 0x7777_8888_9999_aaaa,
                        compare: 0xbbbb_cccc_dddd_eeee,
                    })
                }
                Ext::Aeth => {
                    h.aeth = Some(Aeth {
                        syndrome: Syndrome::Nak(NakCode::RemoteOperationalError),
                        msn: 0x00fe_dcba,
                    })
                }
                Ext::AtomicAckEth => {
                    h.atomic_ack = Some(AtomicAckEth {
                        orig: 0x0f0e_0d0c_0b0a_0908,
                    })
                }
                Ext::ImmDt => h.imm = Some(ImmDt { imm: 0xdead_beef }),
                Ext::Ieth => h.ieth = Some(Ieth { rkey: 0x0bad_cafe }),
            }
        }
        h
    }

    #[test]
    fn every_opcode_round_trips_with_every_pad() {
        let data: Vec<u8> = (0..40u8).collect();
        for &op in Opcode::ALL {
            let lens: &[usize] = if op.carries_payload() {
                &[0, 1, 2, 3, 4, 5, 37, 40]
            } else {
                &[0]
            };
            for &n in lens {
                let hdr = sample(op);
                let mut buf = [0xa5u8; 128];
                let len = encode(&hdr, &data[..n], &mut buf).unwrap();
                assert_eq!(len, wire_len(&hdr, n));
                assert_eq!(len % 4, 0, "{op:?} {n}");
                assert_eq!(len, op.header_len() + n + pad_for(n) as usize + ICRC_LEN);
                // Pad and ICRC slot are zeros.
                assert!(
                    buf[op.header_len() + n..len].iter().all(|&b| b == 0),
                    "{op:?} {n}"
                );
                let p = Packet::parse(&buf[..len]).unwrap();
                let mut want = hdr;
                want.bth.pad = pad_for(n);
                assert_eq!(p.hdr, want, "{op:?} {n}");
                assert_eq!(p.payload, &data[..n]);
                assert_eq!(p.icrc, 0);
                // Headers alone re-encode to the same bytes.
                let mut again = [0u8; 64];
                let hl = p.hdr.encode(&mut again).unwrap();
                assert_eq!(&again[..hl], &buf[..hl], "{op:?}");
            }
        }
    }

    #[test]
    fn headers_sit_where_the_table_says() {
        // A WRITE ONLY with immediate: BTH, RETH, ImmDt, payload.
        let hdr = sample(Opcode::RcWriteOnlyImm);
        let mut buf = [0u8; 64];
        let len = encode(&hdr, b"xyz", &mut buf).unwrap();
        assert_eq!(len, 12 + 16 + 4 + 3 + 1 + 4);
        assert_eq!(buf[0], 0x0b);
        assert_eq!(buf[1] >> 4 & 3, 1, "pad of a 3-byte payload");
        assert_eq!(&buf[12..20], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(&buf[28..32], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&buf[32..35], b"xyz");
        // An atomic ACK: BTH, AETH, AtomicAckETH.
        let hdr = sample(Opcode::RcAtomicAck);
        let len = encode(&hdr, &[], &mut buf).unwrap();
        assert_eq!(len, 12 + 4 + 8 + 4);
        assert_eq!(&buf[12..16], &[0x63, 0xfe, 0xdc, 0xba]);
        assert_eq!(
            &buf[16..24],
            &[0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08]
        );
        // UD with immediate: BTH, DETH, ImmDt.
        let hdr = sample(Opcode::UdSendOnlyImm);
        encode(&hdr, b"abcd", &mut buf).unwrap();
        assert_eq!(&buf[12..16], &[0x11, 0x11, 0x22, 0x22]);
        assert_eq!(&buf[16..20], &[0, 0x33, 0x44, 0x55]);
        assert_eq!(&buf[20..24], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&buf[24..28], b"abcd");
    }

    #[test]
    fn encode_refuses_what_the_opcode_does_not_match() {
        let mut buf = [0u8; 128];
        let mut hdr = sample(Opcode::RcWriteFirst);
        hdr.reth = None;
        assert_eq!(
            hdr.encode(&mut buf),
            Err(EncodeError::MissingHeader(Ext::Reth))
        );
        let mut hdr = sample(Opcode::RcSendOnly);
        hdr.imm = Some(ImmDt { imm: 1 });
        assert_eq!(
            encode(&hdr, b"a", &mut buf),
            Err(EncodeError::UnexpectedHeader(Ext::ImmDt))
        );
        let hdr = sample(Opcode::RcAck);
        assert_eq!(
            encode(&hdr, b"a", &mut buf),
            Err(EncodeError::PayloadNotAllowed)
        );
        let hdr = sample(Opcode::RcCompareSwap);
        assert_eq!(
            encode(&hdr, &[], &mut buf[..43]),
            Err(EncodeError::BufferTooSmall { need: 44 })
        );
        assert_eq!(
            hdr.encode(&mut buf[..39]),
            Err(EncodeError::BufferTooSmall { need: 40 })
        );
        assert_eq!(encode(&hdr, &[], &mut buf[..44]), Ok(44));
    }

    fn encoded(op: Opcode, payload: &[u8]) -> Vec<u8> {
        let hdr = sample(op);
        let mut buf = vec![0u8; wire_len(&hdr, payload.len())];
        encode(&hdr, payload, &mut buf).unwrap();
        buf
    }

    #[test]
    fn malformed_packets_are_refused_with_their_reason() {
        // Too short: nothing, a partial BTH, a partial extension header,
        // headers without the ICRC.
        assert_eq!(Packet::parse(&[]), Err(ParseError::TooShort));
        let write = encoded(Opcode::RcWriteFirst, b"");
        assert_eq!(Packet::parse(&write[..11]), Err(ParseError::TooShort));
        assert_eq!(Packet::parse(&write[..20]), Err(ParseError::TooShort));
        assert_eq!(Packet::parse(&write[..28]), Err(ParseError::TooShort));
        assert!(Packet::parse(&write).is_ok());
        // A version other than 0, an unknown opcode.
        let mut p = encoded(Opcode::RcSendOnly, b"abcd");
        p[1] |= 2;
        assert_eq!(Packet::parse(&p), Err(ParseError::BadVersion(2)));
        for op in [0x15u8, 0x40, 0x81, 0xa0, 0xff] {
            let mut p = encoded(Opcode::RcSendOnly, b"abcd");
            p[0] = op;
            assert_eq!(Packet::parse(&p), Err(ParseError::UnknownOpcode(op)));
        }
        // A pad larger than what follows the headers.
        let mut p = encoded(Opcode::RcSendOnly, b"");
        p[1] |= 1 << 4;
        assert_eq!(Packet::parse(&p), Err(ParseError::BadPad(1)));
        let mut p = encoded(Opcode::RcSendOnly, b"ab"); // 2 bytes, pad 2
        p[1] = (p[1] & !0x30) | 3 << 4;
        let q = Packet::parse(&p).unwrap();
        assert_eq!(q.payload, b"a", "pad 3 of 4 bytes leaves 1");
        // A pad or bytes on an opcode without payload.
        let mut p = encoded(Opcode::RcAck, b"");
        p[1] |= 1 << 4;
        assert_eq!(Packet::parse(&p), Err(ParseError::BadPad(1)));
        let mut p = encoded(Opcode::RcReadRequest, b"");
        p.extend_from_slice(&[0; 4]);
        assert_eq!(Packet::parse(&p), Err(ParseError::BadLength));
        // A length that is not a multiple of 4.
        let mut p = encoded(Opcode::UdSendOnly, b"abcd");
        p.push(0);
        assert_eq!(Packet::parse(&p), Err(ParseError::BadLength));
        // A reserved AETH syndrome.
        let mut p = encoded(Opcode::RcAck, b"");
        p[12] = 0x45;
        assert_eq!(Packet::parse(&p), Err(ParseError::BadSyndrome(0x45)));
    }

    #[test]
    fn pads() {
        assert_eq!([0, 1, 2, 3, 4, 5, 4095].map(pad_for), [0, 3, 2, 1, 0, 3, 1]);
    }
}
