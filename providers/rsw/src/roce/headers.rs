//! The IB transport headers RoCEv2 carries after the UDP header: the BTH
//! and the extension headers, each parsed from and encoded into its fixed
//! number of big-endian bytes. Reserved bits are written as zeros and
//! ignored when read.

use super::opcode::{Opcode, BTH_LEN};

/// What can be wrong in a received packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Fewer bytes than the headers and the ICRC the opcode needs.
    TooShort,
    /// A BTH transport version other than 0.
    BadVersion(u8),
    /// A BTH opcode this codec does not know (RD, XRC, CNP, reserved).
    UnknownOpcode(u8),
    /// A pad count larger than the bytes after the headers, or a pad on
    /// an opcode that carries no payload.
    BadPad(u8),
    /// A length that is not a multiple of 4, or bytes after the headers
    /// of an opcode that carries no payload.
    BadLength,
    /// An AETH syndrome the IBA reserves.
    BadSyndrome(u8),
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// 24 bits: QPNs, PSNs and MSNs.
const MASK24: u32 = 0x00ff_ffff;

/// Base transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bth {
    pub(crate) opcode: Opcode,
    /// Solicited event.
    pub(crate) se: bool,
    pub(crate) migreq: bool,
    /// Bytes (0-3) after the payload that round it up to 4.
    pub(crate) pad: u8,
    /// Transport header version; 0 is the only one.
    pub(crate) tver: u8,
    pub(crate) pkey: u16,
    pub(crate) fecn: bool,
    pub(crate) becn: bool,
    /// 24 bits.
    pub(crate) dest_qp: u32,
    pub(crate) ack_req: bool,
    /// 24 bits.
    pub(crate) psn: u32,
}

impl Bth {
    pub(crate) const LEN: usize = BTH_LEN;

    /// A BTH with the default partition, version 0 and every flag clear.
    pub(crate) fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            se: false,
            migreq: false,
            pad: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & MASK24,
            ack_req: false,
            psn: psn & MASK24,
        }
    }

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> Result<Bth, ParseError> {
        let tver = b[1] & 0x0f;
        if tver != 0 {
            return Err(ParseError::BadVersion(tver));
        }
        let opcode = Opcode::from_u8(b[0]).ok_or(ParseError::UnknownOpcode(b[0]))?;
        Ok(Bth {
            opcode,
            se: b[1] & 0x80 != 0,
            migreq: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            tver,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: be32(&b[4..]) & MASK24,
            ack_req: b[8] & 0x80 != 0,
            psn: be32(&b[8..]) & MASK24,
        })
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[0] = self.opcode as u8;
        b[1] = (self.se as u8) << 7
            | (self.migreq as u8) << 6
            | (self.pad & 3) << 4
            | (self.tver & 0x0f);
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4..8].copy_from_slice(&(self.dest_qp & MASK24).to_be_bytes());
        b[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6;
        b[8..12].copy_from_slice(&(self.psn & MASK24).to_be_bytes());
        b[8] = (self.ack_req as u8) << 7;
        b
    }
}

/// RDMA extended transport header: WRITE and READ requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reth {
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    /// The whole message's length, not this packet's.
    pub(crate) dma_len: u32,
}

impl Reth {
    pub(crate) const LEN: usize = 16;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> Reth {
        Reth {
            va: be64(b),
            rkey: be32(&b[8..]),
            dma_len: be32(&b[12..]),
        }
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.dma_len.to_be_bytes());
        b
    }
}

/// Why a responder refused a request (the AETH of a NAK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

/// The AETH syndrome: bits 6-5 the kind, bits 4-0 its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syndrome {
    /// `credits`: 5 bits, the end-to-end credit code (31: none counted).
    Ack {
        credits: u8,
    },
    /// `timer`: 5 bits, the code of the minimum RNR delay (IBA table 45).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

impl Syndrome {
    pub(crate) fn parse(b: u8) -> Result<Syndrome, ParseError> {
        let value = b & 0x1f;
        match b >> 5 {
            0 => Ok(Syndrome::Ack { credits: value }),
            1 => Ok(Syndrome::RnrNak { timer: value }),
            3 => Ok(Syndrome::Nak(match value {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                _ => return Err(ParseError::BadSyndrome(b)),
            })),
            // 2 is reserved; bit 7 must be clear.
            _ => Err(ParseError::BadSyndrome(b)),
        }
    }

    pub(crate) fn encode(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | code as u8,
        }
    }
}

/// ACK extended transport header: ACKs, NAKs and READ responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Aeth {
    pub(crate) syndrome: Syndrome,
    /// Message sequence number, 24 bits.
    pub(crate) msn: u32,
}

impl Aeth {
    pub(crate) const LEN: usize = 4;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> Result<Aeth, ParseError> {
        Ok(Aeth {
            syndrome: Syndrome::parse(b[0])?,
            msn: be32(b) & MASK24,
        })
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = (self.msn & MASK24).to_be_bytes();
        b[0] = self.syndrome.encode();
        b
    }
}

/// Atomic extended transport header: CMP_SWAP and FETCH_ADD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomicEth {
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    /// The swap value of CMP_SWAP, the addend of FETCH_ADD.
    pub(crate) swap_add: u64,
    /// The compare value of CMP_SWAP.
    pub(crate) compare: u64,
}

impl AtomicEth {
    pub(crate) const LEN: usize = 28;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> AtomicEth {
        AtomicEth {
            va: be64(b),
            rkey: be32(&b[8..]),
            swap_add: be64(&b[12..]),
            compare: be64(&b[20..]),
        }
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..].copy_from_slice(&self.compare.to_be_bytes());
        b
    }
}

/// Atomic ACK extended transport header: the value before the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomicAckEth {
    pub(crate) orig: u64,
}

impl AtomicAckEth {
    pub(crate) const LEN: usize = 8;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> AtomicAckEth {
        AtomicAckEth { orig: be64(b) }
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        self.orig.to_be_bytes()
    }
}

/// Immediate data. `imm` reads the 4 bytes as a big-endian number, so
/// verbs' `imm_data` (network order) is `imm.to_be()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ImmDt {
    pub(crate) imm: u32,
}

impl ImmDt {
    pub(crate) const LEN: usize = 4;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> ImmDt {
        ImmDt { imm: be32(b) }
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        self.imm.to_be_bytes()
    }
}

/// Invalidate extended transport header: the rkey SEND with invalidate
/// asks the responder to invalidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ieth {
    pub(crate) rkey: u32,
}

impl Ieth {
    pub(crate) const LEN: usize = 4;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> Ieth {
        Ieth { rkey: be32(b) }
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        self.rkey.to_be_bytes()
    }
}

/// Datagram extended transport header: UD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deth {
    pub(crate) qkey: u32,
    /// The sender's QP, 24 bits.
    pub(crate) src_qp: u32,
}

impl Deth {
    pub(crate) const LEN: usize = 8;

    pub(crate) fn parse(b: &[u8; Self::LEN]) -> Deth {
        Deth {
            qkey: be32(b),
            src_qp: be32(&b[4..]) & MASK24,
        }
    }

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4..].copy_from_slice(&(self.src_qp & MASK24).to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::super::opcode::Ext;
    use super::*;

    #[test]
    fn lengths_agree_with_the_opcode_table() {
        assert_eq!(Deth::LEN, Ext::Deth.len());
        assert_eq!(Reth::LEN, Ext::Reth.len());
        assert_eq!(AtomicEth::LEN, Ext::AtomicEth.len());
        assert_eq!(Aeth::LEN, Ext::Aeth.len());
        assert_eq!(AtomicAckEth::LEN, Ext::AtomicAckEth.len());
        assert_eq!(ImmDt::LEN, Ext::ImmDt.len());
        assert_eq!(Ieth::LEN, Ext::Ieth.len());
    }

    #[test]
    fn bth_fields_land_on_their_bits() {
        let bth = Bth {
            opcode: Opcode::RcWriteOnlyImm,
            se: true,
            migreq: false,
            pad: 3,
            tver: 0,
            pkey: 0x8001,
            fecn: false,
            becn: true,
            dest_qp: 0xabcdef,
            ack_req: true,
            psn: 0x123456,
        };
        let b = bth.encode();
        assert_eq!(
            b,
            [0x0b, 0xb0, 0x80, 0x01, 0x40, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56]
        );
        assert_eq!(Bth::parse(&b), Ok(bth));
        let other = Bth {
            se: false,
            migreq: true,
            pad: 1,
            fecn: true,
            becn: false,
            ack_req: false,
            ..bth
        };
        let b = other.encode();
        assert_eq!(&b[..2], &[0x0b, 0x50]);
        assert_eq!(b[4], 0x80);
        assert_eq!(b[8], 0x00);
        assert_eq!(Bth::parse(&b), Ok(other));
    }

    #[test]
    fn bth_ignores_reserved_bits_and_refuses_versions_and_opcodes() {
        let mut b = Bth::new(Opcode::RcAck, 0x11, 0x22).encode();
        b[4] |= 0x3f; // resv6a
        b[8] |= 0x7f; // resv7
        let bth = Bth::parse(&b).unwrap();
        assert_eq!(
            (bth.dest_qp, bth.psn, bth.fecn, bth.becn),
            (0x11, 0x22, false, false)
        );
        assert!(!bth.ack_req);
        b[1] |= 0x01;
        assert_eq!(Bth::parse(&b), Err(ParseError::BadVersion(1)));
        b[1] &= 0xf0;
        b[0] = 0x15;
        assert_eq!(Bth::parse(&b), Err(ParseError::UnknownOpcode(0x15)));
        // Fields wider than the wire keep only their wire bits.
        let wide = Bth {
            dest_qp: 0xff12_3456,
            psn: 0xff00_0001,
            ..Bth::new(Opcode::UdSendOnly, 0, 0)
        };
        let back = Bth::parse(&wide.encode()).unwrap();
        assert_eq!((back.dest_qp, back.psn), (0x12_3456, 1));
    }

    #[test]
    fn syndromes_of_every_kind() {
        let cases = [
            (0x00, Syndrome::Ack { credits: 0 }),
            (0x1f, Syndrome::Ack { credits: 31 }),
            (0x20, Syndrome::RnrNak { timer: 0 }),
            (0x2e, Syndrome::RnrNak { timer: 14 }),
            (0x60, Syndrome::Nak(NakCode::PsnSequenceError)),
            (0x61, Syndrome::Nak(NakCode::InvalidRequest)),
            (0x62, Syndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, Syndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, Syndrome::Nak(NakCode::InvalidRdRequest)),
        ];
        for (byte, syn) in cases {
            assert_eq!(Syndrome::parse(byte), Ok(syn), "{byte:#x}");
            assert_eq!(syn.encode(), byte);
        }
        for bad in [0x40, 0x5f, 0x65, 0x7f, 0x80, 0xe0] {
            assert_eq!(Syndrome::parse(bad), Err(ParseError::BadSyndrome(bad)));
        }
        let aeth = Aeth {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: 0x010203,
        };
        assert_eq!(aeth.encode(), [0x62, 0x01, 0x02, 0x03]);
        assert_eq!(Aeth::parse(&aeth.encode()), Ok(aeth));
        assert_eq!(
            Aeth::parse(&[0x40, 0, 0, 1]),
            Err(ParseError::BadSyndrome(0x40))
        );
    }

    #[test]
    fn extension_headers_are_big_endian() {
        let reth = Reth {
            va: 0x0102_0304_0506_0708,
            rkey: 0x0a0b_0c0d,
            dma_len: 0x1000,
        };
        let b = reth.encode();
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 0, 0, 0x10, 0]);
        assert_eq!(Reth::parse(&b), reth);

        let atomic = AtomicEth {
            va: 0x1122_3344_5566_7788,
            rkey: 0x99aa_bbcc,
            swap_add: 0x0000_0000_0000_0005,
            compare: 0xffff_ffff_ffff_fffe,
        };
        let b = atomic.encode();
        assert_eq!(
            &b[..12],
            &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc]
        );
        assert_eq!(&b[12..20], &[0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(&b[20..], &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(AtomicEth::parse(&b), atomic);

        let ack = AtomicAckEth {
            orig: 0x0102_0304_0506_0708,
        };
        assert_eq!(ack.encode(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(AtomicAckEth::parse(&ack.encode()), ack);

        assert_eq!(ImmDt { imm: 0x12345678 }.encode(), [0x12, 0x34, 0x56, 0x78]);
        assert_eq!(ImmDt::parse(&[0x12, 0x34, 0x56, 0x78]).imm, 0x12345678);
        assert_eq!(Ieth { rkey: 0x270 }.encode(), [0, 0, 2, 0x70]);
        assert_eq!(Ieth::parse(&[0, 0, 2, 0x70]).rkey, 0x270);

        let deth = Deth {
            qkey: 0x8001_0000,
            src_qp: 0x12_3456,
        };
        assert_eq!(deth.encode(), [0x80, 1, 0, 0, 0, 0x12, 0x34, 0x56]);
        assert_eq!(Deth::parse(&deth.encode()), deth);
        // The reserved byte before the source QP is ignored.
        assert_eq!(Deth::parse(&[0x80, 1, 0, 0, 0xff, 0x12, 0x34, 0x56]), deth);
    }
}
