//! rdma-core's rsocket protocol, as its `librdmacm/rsocket.c` (v44) puts
//! it on the wire: the connection's private data, the immediate data that
//! names each message, and the layouts peers write into each other's
//! memory. Facts only; `conn` runs the protocol.
//!
//! Each side registers a *target* area the peer writes into: two SGEs
//! (where the peer may put stream data next, the halves of our receive
//! buffer) followed by the iomap table (the regions the peer mapped with
//! `riomap`). The connect private data names that area, the first half of
//! the receive buffer and the receive credits.

/// `struct rs_conn_data`'s version.
pub const VERSION: u8 = 1;
/// `RS_CONN_FLAG_NET`: the sender is big-endian (its SGEs are in network
/// order).
pub const FLAG_NET: u8 = 1 << 0;
/// `RS_CONN_FLAG_IOMAP`: an iomap table follows the target SGL.
pub const FLAG_IOMAP: u8 = 1 << 1;
/// `sizeof(struct rs_conn_data)`.
pub const CONN_DATA_LEN: usize = 40;
/// `RS_SGL_SIZE`: SGEs in a target SGL.
pub const SGL_SIZE: u32 = 2;
/// `sizeof(struct rs_sge)`: addr u64, key u32, length u32.
pub const SGE_LEN: usize = 16;
/// `sizeof(struct rs_iomap)`: offset u64, then an `rs_sge`.
pub const IOMAP_LEN: usize = 24;

// Immediate data: op in bits 31..29, its value in 28..0 (`rs_msg_set`).
pub const OP_DATA: u32 = 0;
/// A plain RDMA WRITE (riowrite): never sent as a message.
pub const OP_WRITE: u32 = 2;
/// Credits (the value: the sequence number the sender may send up to),
/// possibly with a new target SGE written just before.
pub const OP_SGL: u32 = 4;
/// An iomap entry was written (the value: its index).
pub const OP_IOMAP_SGL: u32 = 6;
pub const OP_CTRL: u32 = 7;
const OP_SHIFT: u32 = 29;
const DATA_MASK: u32 = (1 << OP_SHIFT) - 1;

// `OP_CTRL` values. (1, `RS_CTRL_KEEPALIVE`, names rdma-core's
// keepalive, a zero-length RDMA WRITE without immediate data: the
// receiver never sees it.)
pub const CTRL_DISCONNECT: u32 = 0;
pub const CTRL_SHUTDOWN: u32 = 2;

pub fn msg(op: u32, data: u32) -> u32 {
    (op << OP_SHIFT) | (data & DATA_MASK)
}
pub fn msg_op(m: u32) -> u32 {
    m >> OP_SHIFT
}
pub fn msg_data(m: u32) -> u32 {
    m & DATA_MASK
}

/// `struct rs_sge`, in host order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

impl Sge {
    /// As written into a peer's memory: its own byte order (`swap` when it
    /// differs from ours; rdma-core's `RS_OPT_SWAP_SGL`).
    pub fn to_bytes(self, swap: bool) -> [u8; SGE_LEN] {
        let s = if swap { self.swapped() } else { self };
        let mut b = [0u8; SGE_LEN];
        b[0..8].copy_from_slice(&s.addr.to_ne_bytes());
        b[8..12].copy_from_slice(&s.key.to_ne_bytes());
        b[12..16].copy_from_slice(&s.length.to_ne_bytes());
        b
    }

    /// As a peer wrote it into our memory (in our order).
    pub fn from_bytes(b: &[u8; SGE_LEN]) -> Sge {
        Sge {
            addr: u64::from_ne_bytes(b[0..8].try_into().unwrap_or_default()),
            key: u32::from_ne_bytes(b[8..12].try_into().unwrap_or_default()),
            length: u32::from_ne_bytes(b[12..16].try_into().unwrap_or_default()),
        }
    }

    fn swapped(self) -> Sge {
        Sge {
            addr: self.addr.swap_bytes(),
            key: self.key.swap_bytes(),
            length: self.length.swap_bytes(),
        }
    }

    fn to_be(self) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.key.to_be_bytes());
        b[12..16].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    fn from_be(b: &[u8]) -> Sge {
        Sge {
            addr: u64::from_be_bytes(b[0..8].try_into().unwrap_or_default()),
            key: u32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
            length: u32::from_be_bytes(b[12..16].try_into().unwrap_or_default()),
        }
    }
}

/// `struct rs_iomap`: a region mapped at `offset` of the mapper's space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Iomap {
    pub offset: u64,
    pub sge: Sge,
}

impl Iomap {
    pub fn to_bytes(self, swap: bool) -> [u8; IOMAP_LEN] {
        let mut b = [0u8; IOMAP_LEN];
        let off = if swap {
            self.offset.swap_bytes()
        } else {
            self.offset
        };
        b[0..8].copy_from_slice(&off.to_ne_bytes());
        b[8..].copy_from_slice(&self.sge.to_bytes(swap));
        b
    }

    pub fn from_bytes(b: &[u8; IOMAP_LEN]) -> Iomap {
        let mut s = [0u8; SGE_LEN];
        s.copy_from_slice(&b[8..]);
        Iomap {
            offset: u64::from_ne_bytes(b[0..8].try_into().unwrap_or_default()),
            sge: Sge::from_bytes(&s),
        }
    }

    pub fn covers(&self, offset: u64) -> bool {
        offset >= self.offset && offset - self.offset < self.sge.length as u64
    }
}

/// `rs_value_to_scale(value, 8)`: an iomap size in one byte (exact up to
/// 128, in units of 256 past it).
pub fn iomap_size_to_byte(v: u32) -> u8 {
    if v <= 128 {
        v as u8
    } else {
        (0x80 | (v >> 8).min(0x7f)) as u8
    }
}

/// `rs_scale_to_value(value, 8)`.
pub fn iomap_size_from_byte(b: u8) -> u32 {
    if b <= 128 {
        b as u32
    } else {
        ((b & 0x7f) as u32) << 8
    }
}

/// `struct rs_conn_data`: what each side says when connecting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnData {
    pub flags: u8,
    /// Data messages the peer may send before it hears from us.
    pub credits: u16,
    /// Entries of the iomap table after the target SGL.
    pub iomap_size: u32,
    /// Our target SGL: its address, key, and length in SGEs.
    pub target_sgl: Sge,
    /// The first part of our receive buffer the peer may fill.
    pub data_buf: Sge,
}

impl ConnData {
    pub fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = VERSION;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = iomap_size_to_byte(self.iomap_size);
        b[8..24].copy_from_slice(&self.target_sgl.to_be());
        b[24..40].copy_from_slice(&self.data_buf.to_be());
        b
    }

    /// The peer's data; None when it is not version 1 or unusable.
    pub fn decode(b: &[u8]) -> Option<ConnData> {
        if b.len() < CONN_DATA_LEN || b[0] != VERSION {
            return None;
        }
        let d = ConnData {
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            iomap_size: if b[1] & FLAG_IOMAP != 0 {
                iomap_size_from_byte(b[7])
            } else {
                0
            },
            target_sgl: Sge::from_be(&b[8..24]),
            data_buf: Sge::from_be(&b[24..40]),
        };
        (d.credits > 0 && d.target_sgl.length > 0 && d.data_buf.length > 0).then_some(d)
    }

    /// Whether the peer's SGEs come in the other byte order than ours.
    pub fn swapped(&self) -> bool {
        (self.flags & FLAG_NET != 0) != cfg!(target_endian = "big")
    }
}

/// Our `RS_CONN_FLAG_*`.
pub fn our_flags() -> u8 {
    FLAG_IOMAP
        | if cfg!(target_endian = "big") {
            FLAG_NET
        } else {
            0
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_is_rdma_cores_layout() {
        let d = ConnData {
            flags: FLAG_IOMAP,
            credits: 384,
            iomap_size: 4,
            target_sgl: Sge {
                addr: 0x1122_3344_5566_7788,
                key: 0xaabb_ccdd,
                length: SGL_SIZE,
            },
            data_buf: Sge {
                addr: 0x1000,
                key: 7,
                length: 65536,
            },
        };
        let b = d.encode();
        assert_eq!(&b[0..8], &[1, 2, 1, 128, 0, 0, 0, 4]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&b[16..20], &0xaabb_ccddu32.to_be_bytes());
        assert_eq!(&b[20..24], &2u32.to_be_bytes());
        assert_eq!(&b[36..40], &65536u32.to_be_bytes());
        assert_eq!(ConnData::decode(&b), Some(d));
        let mut bad = b;
        bad[0] = 2;
        assert_eq!(ConnData::decode(&bad), None);
        assert_eq!(ConnData::decode(&b[..CONN_DATA_LEN - 1]), None);
    }

    #[test]
    fn iomap_size_scale_round_trips_as_rdma_cores() {
        for v in [0, 1, 128] {
            assert_eq!(iomap_size_from_byte(iomap_size_to_byte(v)), v);
        }
        assert_eq!(iomap_size_to_byte(1024), 0x84);
        assert_eq!(iomap_size_from_byte(0x84), 1024);
    }

    #[test]
    fn messages_pack_op_and_value() {
        let m = msg(OP_SGL, 0x1_0005);
        assert_eq!(m, 0x8001_0005);
        assert_eq!((msg_op(m), msg_data(m)), (OP_SGL, 0x1_0005));
        assert_eq!(msg(OP_CTRL, CTRL_SHUTDOWN), 0xe000_0002);
    }
}
