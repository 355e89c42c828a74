//! RoCEv2's wire format: the InfiniBand transport headers a RoCEv2 packet
//! carries in a UDP datagram to port [`PORT`], and its invariant CRC, so
//! that rsw can one day exchange packets with the kernel's rxe and RoCE
//! NICs (issue 29). Pure: byte slices in, byte slices out, no I/O, no
//! allocation.
//!
//! A packet, after the IP and UDP headers: the BTH (`headers::Bth`), the
//! extension headers its opcode names (`opcode::Opcode::exts`, in that
//! order), the payload, 0-3 pad bytes, and the 4-byte ICRC (`icrc`).
//! `packet` parses and encodes the whole; `crc32` is the CRC the ICRC
//! uses; `ud` is a UD SEND and the GRH area of its receive, which the UD
//! engine of a RoCEv2-mode device speaks (`engine::roce_ud`).
//!
//! `rc` is the arithmetic of RC and UC (PSNs, segmentation), `atomic` the
//! responder's memory of atomics executed, which `engine::roce_rc`
//! speaks. Some helpers only the tests use (`rxe_captures`: packets
//! captured from rxe in the VM test bed; whole-IP-packet ICRC checks),
//! hence the `dead_code` allowance below.
#![cfg_attr(not(test), allow(dead_code))]

pub(crate) mod atomic;
pub(crate) mod crc32;
pub(crate) mod headers;
pub(crate) mod icrc;
pub(crate) mod opcode;
pub(crate) mod packet;
pub(crate) mod rc;
pub(crate) mod ud;

#[cfg(test)]
mod rxe_captures;
// Under tests/: its settings (`RSW_ROCE_*`) are the test's, not the
// library's, so rdma-environ(7) does not list them.
#[cfg(test)]
#[path = "tests/rxe_live.rs"]
mod rxe_live;

/// The UDP destination port of RoCEv2.
pub(crate) const PORT: u16 = 4791;
