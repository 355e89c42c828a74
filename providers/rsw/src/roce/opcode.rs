//! BTH opcodes of RC, UC and UD, and which extension headers follow the
//! BTH for each, in wire order (IBA 9.2, 9.3; RoCEv2 carries them as is).

/// The transport service an opcode belongs to: the opcode's top 3 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Rc,
    Uc,
    Ud,
}

/// An extension transport header. The declaration order is the wire
/// order: when an opcode carries two, the earlier one comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ext {
    Deth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
}

impl Ext {
    /// Bytes on the wire.
    pub(crate) const fn len(self) -> usize {
        match self {
            Ext::Deth => 8,
            Ext::Reth => 16,
            Ext::AtomicEth => 28,
            Ext::Aeth => 4,
            Ext::AtomicAckEth => 8,
            Ext::ImmDt => 4,
            Ext::Ieth => 4,
        }
    }
}

/// Bytes of the base transport header.
pub(crate) const BTH_LEN: usize = 12;

macro_rules! opcodes {
    ($($name:ident = $val:literal,)*) => {
        /// A BTH opcode this codec knows (RC, UC, UD; no RD, XRC, CNP).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub(crate) enum Opcode {
            $($name = $val,)*
        }

        impl Opcode {
            /// Every opcode, in numeric order.
            pub(crate) const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            /// The opcode with this BTH byte, if this codec knows it.
            pub(crate) const fn from_u8(b: u8) -> Option<Opcode> {
                match b {
                    $($val => Some(Opcode::$name),)*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    RcSendFirst = 0x00,
    RcSendMiddle = 0x01,
    RcSendLast = 0x02,
    RcSendLastImm = 0x03,
    RcSendOnly = 0x04,
    RcSendOnlyImm = 0x05,
    RcWriteFirst = 0x06,
    RcWriteMiddle = 0x07,
    RcWriteLast = 0x08,
    RcWriteLastImm = 0x09,
    RcWriteOnly = 0x0a,
    RcWriteOnlyImm = 0x0b,
    RcReadRequest = 0x0c,
    RcReadResponseFirst = 0x0d,
    RcReadResponseMiddle = 0x0e,
    RcReadResponseLast = 0x0f,
    RcReadResponseOnly = 0x10,
    RcAck = 0x11,
    RcAtomicAck = 0x12,
    RcCompareSwap = 0x13,
    RcFetchAdd = 0x14,
    RcSendLastInv = 0x16,
    RcSendOnlyInv = 0x17,
    UcSendFirst = 0x20,
    UcSendMiddle = 0x21,
    UcSendLast = 0x22,
    UcSendLastImm = 0x23,
    UcSendOnly = 0x24,
    UcSendOnlyImm = 0x25,
    UcWriteFirst = 0x26,
    UcWriteMiddle = 0x27,
    UcWriteLast = 0x28,
    UcWriteLastImm = 0x29,
    UcWriteOnly = 0x2a,
    UcWriteOnlyImm = 0x2b,
    UdSendOnly = 0x64,
    UdSendOnlyImm = 0x65,
}

impl Opcode {
    pub(crate) const fn transport(self) -> Transport {
        match self as u8 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            _ => Transport::Ud,
        }
    }

    /// The extension headers after the BTH, in wire order. The operation
    /// (the low 5 bits) decides them, the same for RC and UC; UD adds the
    /// DETH in front.
    pub(crate) const fn exts(self) -> &'static [Ext] {
        use Ext::*;
        if let Transport::Ud = self.transport() {
            return match self {
                Opcode::UdSendOnlyImm => &[Deth, ImmDt],
                _ => &[Deth],
            };
        }
        match self as u8 & 0x1f {
            0x03 | 0x05 | 0x09 => &[ImmDt],
            0x06 | 0x0a | 0x0c => &[Reth],
            0x0b => &[Reth, ImmDt],
            0x0d | 0x0f | 0x10 | 0x11 => &[Aeth],
            0x12 => &[Aeth, AtomicAckEth],
            0x13 | 0x14 => &[AtomicEth],
            0x16 | 0x17 => &[Ieth],
            _ => &[],
        }
    }

    /// Whether `self` carries `ext`.
    pub(crate) fn has(self, ext: Ext) -> bool {
        self.exts().contains(&ext)
    }

    /// Bytes from the start of the BTH to the payload.
    pub(crate) const fn header_len(self) -> usize {
        let exts = self.exts();
        let mut len = BTH_LEN;
        let mut i = 0;
        while i < exts.len() {
            len += exts[i].len();
            i += 1;
        }
        len
    }

    /// Whether a payload may follow the headers: every opcode but the READ
    /// request, the ACKs and the atomic requests (whose operands ride in
    /// the headers). A payload of 0 bytes is allowed where one may follow.
    pub(crate) const fn carries_payload(self) -> bool {
        !matches!(
            self,
            Opcode::RcReadRequest
                | Opcode::RcAck
                | Opcode::RcAtomicAck
                | Opcode::RcCompareSwap
                | Opcode::RcFetchAdd
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_byte_maps_back_and_nothing_else_does() {
        let mut known = 0;
        for b in 0..=255u8 {
            match Opcode::from_u8(b) {
                Some(op) => {
                    assert_eq!(op as u8, b);
                    known += 1;
                }
                None => assert!(!Opcode::ALL.iter().any(|&op| op as u8 == b)),
            }
        }
        assert_eq!(known, Opcode::ALL.len());
        assert_eq!(known, 23 + 12 + 2);
        // Reserved and other transports' opcodes are unknown.
        for b in [0x15, 0x18, 0x1c, 0x2c, 0x40, 0x60, 0x66, 0x80, 0xa0] {
            assert_eq!(Opcode::from_u8(b), None, "{b:#x}");
        }
    }

    #[test]
    fn exts_come_in_wire_order_without_repeats() {
        for &op in Opcode::ALL {
            let exts = op.exts();
            assert!(exts.windows(2).all(|w| w[0] < w[1]), "{op:?}: {exts:?}");
        }
    }

    #[test]
    fn header_lengths_of_the_iba_table() {
        use Opcode::*;
        let cases = [
            (RcSendFirst, 12),
            (RcSendOnlyImm, 16),
            (RcWriteFirst, 28),
            (RcWriteMiddle, 12),
            (RcWriteLastImm, 16),
            (RcWriteOnlyImm, 32),
            (RcReadRequest, 28),
            (RcReadResponseFirst, 16),
            (RcReadResponseMiddle, 12),
            (RcAck, 16),
            (RcAtomicAck, 24),
            (RcCompareSwap, 40),
            (RcFetchAdd, 40),
            (RcSendOnlyInv, 16),
            (UcWriteOnlyImm, 32),
            (UcSendLastImm, 16),
            (UdSendOnly, 20),
            (UdSendOnlyImm, 24),
        ];
        for (op, len) in cases {
            assert_eq!(op.header_len(), len, "{op:?}");
        }
    }

    #[test]
    fn uc_mirrors_rc_sends_and_writes() {
        for &op in Opcode::ALL {
            if op.transport() != Transport::Uc {
                continue;
            }
            let rc = Opcode::from_u8(op as u8 & 0x1f).unwrap();
            assert_eq!(op.exts(), rc.exts(), "{op:?}");
            assert!(op.carries_payload());
        }
        assert_eq!(Opcode::UdSendOnly.transport(), Transport::Ud);
        assert!(Opcode::RcAtomicAck.has(Ext::AtomicAckEth));
        assert!(!Opcode::RcAck.has(Ext::AtomicAckEth));
        assert!(!Opcode::RcFetchAdd.carries_payload());
        assert!(Opcode::RcReadResponseMiddle.carries_payload());
    }
}
