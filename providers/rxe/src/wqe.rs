//! Work queue elements: what `ibv_post_send`, `ibv_post_recv` and the
//! `ibv_wr_*` builders write into a slot of the kernel's ring
//! (`struct rxe_send_wqe` / `rxe_recv_wqe`, then the scatter/gather list
//! or the inline data), with the checks rxe's C provider makes first.
//!
//! A slot is seen as `[u64]` (the ring guarantees 8-byte alignment and
//! whole words); [`SendSlot`] and [`RecvSlot`] split it into the header and
//! the tail. Nothing here touches the ring's indices.

use core::ffi::c_int;
use core::mem::size_of;

use libc::EINVAL;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::ah::Ah;

/// What a send queue takes, fixed when the QP is created.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqLimits {
    pub qp_type: ibv_qp_type,
    pub max_sge: u32,
    pub max_inline: u32,
}

const SEND_HDR_WORDS: usize = size_of::<rxe_send_wqe>() / 8;
const RECV_HDR_WORDS: usize = size_of::<rxe_recv_wqe>() / 8;
const SGE_WORDS: usize = size_of::<rxe_sge>() / 8;

/// A send slot: the WQE header and the space after it.
pub struct SendSlot<'a> {
    pub hdr: &'a mut rxe_send_wqe,
    tail: &'a mut [u64],
}

impl<'a> SendSlot<'a> {
    pub fn new(slot: &'a mut [u64]) -> Result<Self, c_int> {
        if slot.len() < SEND_HDR_WORDS {
            return Err(EINVAL);
        }
        let (head, tail) = slot.split_at_mut(SEND_HDR_WORDS);
        // SAFETY: `head` is 8-byte aligned words of exactly the header's
        // size, and every bit pattern is a valid rxe_send_wqe (integers
        // and unions of integers).
        let hdr = unsafe { &mut *head.as_mut_ptr().cast::<rxe_send_wqe>() };
        Ok(SendSlot { hdr, tail })
    }

    /// Room for `n` SGEs after the header, or None when they do not fit.
    pub fn sges(&mut self, n: usize) -> Option<&mut [rxe_sge]> {
        sge_area(self.tail, n)
    }

    /// The bytes after the header (inline data).
    pub fn inline_area(&mut self) -> &mut [u8] {
        // SAFETY: plain bytes over our words, same lifetime and exclusivity.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.tail.as_mut_ptr().cast::<u8>(),
                self.tail.len() * 8,
            )
        }
    }

    /// Starts a fresh WQE for an `ibv_wr_*` builder: C zeroes the header
    /// and sets the request's identity.
    pub fn start(&mut self, opcode: ibv_wr_opcode, wr_id: u64, flags: u32, ssn: u32) {
        *self.hdr = rxe_send_wqe::default();
        self.hdr.wr.wr_id = wr_id;
        self.hdr.wr.opcode = opcode;
        self.hdr.wr.send_flags = flags;
        self.hdr.ssn = ssn;
    }

    fn set_length(&mut self, length: u32) {
        self.hdr.dma.length = length;
        self.hdr.dma.resid = length;
    }

    /// `ibv_wr_set_sge`: one SGE, none when `length` is 0.
    pub fn set_sge(&mut self, lkey: u32, addr: u64, length: u32) -> Result<(), c_int> {
        if length == 0 {
            return Ok(());
        }
        let s = self.sges(1).ok_or(EINVAL)?;
        s[0] = rxe_sge { addr, length, lkey };
        self.hdr.dma.num_sge = 1;
        self.set_length(length);
        Ok(())
    }

    /// `ibv_wr_set_sge_list` and the SGE half of `ibv_post_send`.
    pub fn set_sge_list(&mut self, sges: &[ibv_sge], max_sge: u32) -> Result<(), c_int> {
        if sges.len() > max_sge as usize {
            return Err(libc::ENOSPC);
        }
        let dst = self.sges(sges.len()).ok_or(EINVAL)?;
        for (d, s) in dst.iter_mut().zip(sges) {
            *d = rxe_sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
        }
        self.hdr.dma.num_sge = sges.len() as u32;
        self.set_length(total_length(sges));
        Ok(())
    }

    /// `ibv_wr_set_inline_data[_list]` and inline sends: the buffers'
    /// bytes, one after the other, after the header. The kernel reads the
    /// data there only when the WQE says IBV_SEND_INLINE, which an
    /// `ibv_wr_*` program need not have set in `wr_flags`: set it here.
    pub fn set_inline<'b>(
        &mut self,
        bufs: impl Iterator<Item = &'b [u8]>,
        max_inline: u32,
    ) -> Result<(), c_int> {
        let room = self.inline_area();
        let limit = room.len().min(max_inline as usize);
        let mut at = 0usize;
        for b in bufs {
            let end = at.checked_add(b.len()).filter(|&e| e <= limit);
            let end = end.ok_or(libc::ENOSPC)?;
            room[at..end].copy_from_slice(b);
            at = end;
        }
        self.set_length(at as u32);
        self.hdr.wr.send_flags |= IBV_SEND_INLINE;
        Ok(())
    }

    /// `ibv_wr_atomic_write`: the 8 bytes to write, where the kernel
    /// takes them (the start of the data area; not inline data).
    pub fn set_atomic_data(&mut self, data: [u8; 8]) -> Result<(), c_int> {
        let room = self.inline_area();
        room.get_mut(..8).ok_or(EINVAL)?.copy_from_slice(&data);
        self.set_length(8);
        Ok(())
    }

    /// `ibv_wr_set_ud_addr` and a UD send's destination: the kernel's AH
    /// number, or on kernels without one (0) the address vector itself.
    pub fn set_ud(&mut self, ah: &Ah, remote_qpn: u32, remote_qkey: u32) {
        let mut ud = rxe_send_wr_ud {
            remote_qpn,
            remote_qkey,
            ah_num: ah.num,
            ..Default::default()
        };
        if ah.num == 0 {
            ud.av = ah.av;
        }
        self.hdr.wr.wr.ud = ud;
    }
}

/// A receive slot: the WQE header and the space after it.
pub struct RecvSlot<'a> {
    pub hdr: &'a mut rxe_recv_wqe,
    tail: &'a mut [u64],
}

impl<'a> RecvSlot<'a> {
    pub fn new(slot: &'a mut [u64]) -> Result<Self, c_int> {
        if slot.len() < RECV_HDR_WORDS {
            return Err(EINVAL);
        }
        let (head, tail) = slot.split_at_mut(RECV_HDR_WORDS);
        // SAFETY: as in SendSlot::new, for rxe_recv_wqe.
        let hdr = unsafe { &mut *head.as_mut_ptr().cast::<rxe_recv_wqe>() };
        Ok(RecvSlot { hdr, tail })
    }
}

fn sge_area(tail: &mut [u64], n: usize) -> Option<&mut [rxe_sge]> {
    let words = n.checked_mul(SGE_WORDS)?;
    let area = tail.get_mut(..words)?;
    // SAFETY: `n` SGEs of two aligned words each, within our words; any
    // bit pattern is a valid rxe_sge.
    Some(unsafe { core::slice::from_raw_parts_mut(area.as_mut_ptr().cast::<rxe_sge>(), n) })
}

/// The sum of the SGEs' lengths, wrapping as C's unsigned sum does (the
/// kernel checks each SGE against its MR).
pub fn total_length(sges: &[ibv_sge]) -> u32 {
    sges.iter().fold(0u32, |a, s| a.wrapping_add(s.length))
}

/// A request's SGE list as a slice.
///
/// # Safety
/// `list` holds `num` entries when `num` is positive.
pub unsafe fn sg_list<'a>(list: *const ibv_sge, num: c_int) -> Result<&'a [ibv_sge], c_int> {
    match num {
        0 => Ok(&[]),
        n if n < 0 || list.is_null() => Err(EINVAL),
        // SAFETY: per the contract.
        n => Ok(unsafe { core::slice::from_raw_parts(list, n as usize) }),
    }
}

fn is_atomic(opcode: ibv_wr_opcode) -> bool {
    matches!(
        opcode,
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    )
}

/// rxe's sanity checks of a send request (C: `validate_send_wr`).
pub fn validate_send(
    wr: &ibv_send_wr,
    num_sge: usize,
    length: u32,
    sq: &SqLimits,
) -> Result<(), c_int> {
    if num_sge > sq.max_sge as usize {
        return Err(EINVAL);
    }
    if is_atomic(wr.opcode) {
        // SAFETY: every member of the union is plain integers and pointers.
        let addr = unsafe { wr.wr.atomic.remote_addr };
        if length < 8 || addr & 7 != 0 {
            return Err(EINVAL);
        }
    }
    if wr.send_flags & IBV_SEND_INLINE != 0 && length > sq.max_inline {
        return Err(EINVAL);
    }
    if wr.opcode == IBV_WR_BIND_MW
        && (length != 0
            || num_sge != 0
            || wr.imm_data() != 0
            || !matches!(sq.qp_type, IBV_QPT_RC | IBV_QPT_UC))
    {
        return Err(EINVAL);
    }
    Ok(())
}

/// Writes the send request `wr` into `slot` as WQE number `ssn`
/// (C: `validate_send_wr`, `convert_send_wr`, `init_send_wqe`).
///
/// # Safety
/// `wr` is a request as `ibv_post_send` takes it: `sg_list` holds
/// `num_sge` entries, each naming readable memory when the request is
/// inline; a UD send's `wr.ud.ah` is an AH of this provider; a bind's `mw`
/// is live and its `bind_info.mr` NULL or live.
pub unsafe fn encode_send(
    slot: &mut [u64],
    wr: &ibv_send_wr,
    sq: &SqLimits,
    ssn: u32,
) -> Result<(), c_int> {
    // SAFETY: per the contract.
    let sges = unsafe { sg_list(wr.sg_list, wr.num_sge) }?;
    let length = total_length(sges);
    validate_send(wr, sges.len(), length, sq)?;
    let mut s = SendSlot::new(slot)?;
    s.start(wr.opcode, wr.wr_id, wr.send_flags, ssn);
    s.hdr.wr.ex = wr.imm_data();
    // SAFETY: the union members read are those the opcode uses, plain
    // data; the AH, MW and MR pointers are live per the contract.
    unsafe {
        match wr.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                let r = wr.wr.rdma;
                s.hdr.wr.wr.rdma = rxe_send_wr_rdma {
                    remote_addr: r.remote_addr,
                    rkey: r.rkey,
                    reserved: 0,
                };
                s.hdr.iova = r.remote_addr;
            }
            IBV_WR_SEND | IBV_WR_SEND_WITH_IMM if sq.qp_type == IBV_QPT_UD => {
                let ud = wr.wr.ud;
                let ah = Ah::from_ibv(ud.ah).ok_or(EINVAL)?;
                s.set_ud(ah, ud.remote_qpn, ud.remote_qkey);
            }
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                let a = wr.wr.atomic;
                s.hdr.wr.wr.atomic = rxe_send_wr_atomic {
                    remote_addr: a.remote_addr,
                    compare_add: a.compare_add,
                    swap: a.swap,
                    rkey: a.rkey,
                    reserved: 0,
                };
                s.hdr.iova = a.remote_addr;
            }
            IBV_WR_BIND_MW => {
                let b = wr.ext.bind_mw;
                let mr = b.bind_info.mr;
                s.hdr.wr.wr.mw = rxe_send_wr_mw {
                    addr: b.bind_info.addr,
                    length: b.bind_info.length,
                    mr_lkey: if mr.is_null() { 0 } else { (*mr).lkey },
                    mw_rkey: if b.mw.is_null() { 0 } else { (*b.mw).rkey },
                    rkey: b.rkey,
                    access: b.bind_info.mw_access_flags,
                };
            }
            _ => {}
        }
    }
    if wr.send_flags & IBV_SEND_INLINE != 0 {
        // SAFETY: each SGE names readable memory (contract).
        let bufs = sges.iter().map(|g| unsafe {
            core::slice::from_raw_parts(g.addr as usize as *const u8, g.length as usize)
        });
        s.set_inline(bufs, sq.max_inline).map_err(|_| EINVAL)?;
        // C reports the SGE count for inline sends too.
        s.hdr.dma.num_sge = sges.len() as u32;
    } else {
        s.set_sge_list(sges, sq.max_sge).map_err(|_| EINVAL)?;
    }
    Ok(())
}

/// Writes the receive request `wr` into `slot` (C: `rxe_post_one_recv`).
///
/// # Safety
/// `wr.sg_list` holds `wr.num_sge` entries.
pub unsafe fn encode_recv(slot: &mut [u64], wr: &ibv_recv_wr, max_sge: u32) -> Result<(), c_int> {
    // SAFETY: per the contract.
    let sges = unsafe { sg_list(wr.sg_list, wr.num_sge) }?;
    if sges.len() > max_sge as usize {
        return Err(EINVAL);
    }
    let s = RecvSlot::new(slot)?;
    let dst = sge_area(s.tail, sges.len()).ok_or(EINVAL)?;
    for (d, g) in dst.iter_mut().zip(sges) {
        *d = rxe_sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        };
    }
    let length = total_length(sges);
    *s.hdr = rxe_recv_wqe {
        wr_id: wr.wr_id,
        reserved: 0,
        padding: 0,
        dma: rxe_dma_info {
            length,
            resid: length,
            cur_sge: 0,
            num_sge: sges.len() as u32,
            sge_offset: 0,
            reserved: 0,
        },
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ptr::null_mut;

    fn send_wr(opcode: ibv_wr_opcode, sges: &mut [ibv_sge]) -> ibv_send_wr {
        // SAFETY: all-zero is a valid ibv_send_wr (integers, pointers,
        // unions of those).
        let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
        wr.wr_id = 0x1234;
        wr.opcode = opcode;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as c_int;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr
    }

    fn rc() -> SqLimits {
        SqLimits {
            qp_type: IBV_QPT_RC,
            max_sge: 4,
            max_inline: 64,
        }
    }

    /// SGE `i` after a send header, as (addr, length, lkey).
    fn sge_at(slot: &[u64], i: usize) -> (u64, u32, u32) {
        let w = SEND_HDR_WORDS + 2 * i;
        (slot[w], slot[w + 1] as u32, (slot[w + 1] >> 32) as u32)
    }

    #[test]
    fn header_sizes() {
        assert_eq!(size_of::<rxe_send_wqe>(), 208);
        assert_eq!(size_of::<rxe_recv_wqe>(), 40);
        assert_eq!(size_of::<rxe_sge>(), 16);
    }

    #[test]
    fn rdma_write_with_two_sges() {
        let mut sges = [
            ibv_sge {
                addr: 0x1000,
                length: 100,
                lkey: 7,
            },
            ibv_sge {
                addr: 0x2000,
                length: 28,
                lkey: 8,
            },
        ];
        let mut wr = send_wr(IBV_WR_RDMA_WRITE_WITH_IMM, &mut sges);
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0xabc000,
            rkey: 0x55,
        };
        wr.set_imm_data(0x0102_0304);
        let mut slot = [0xffu64; 64];
        // SAFETY: the request's pointers are the arrays above.
        unsafe { encode_send(&mut slot, &wr, &rc(), 9) }.unwrap();
        let s = SendSlot::new(&mut slot).unwrap();
        let h = &*s.hdr;
        assert_eq!(h.wr.wr_id, 0x1234);
        assert_eq!(h.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(h.wr.send_flags, IBV_SEND_SIGNALED);
        assert_eq!(h.wr.ex, 0x0102_0304);
        // SAFETY: the member the opcode uses.
        let r = unsafe { h.wr.wr.rdma };
        assert_eq!((r.remote_addr, r.rkey), (0xabc000, 0x55));
        assert_eq!(h.iova, 0xabc000);
        assert_eq!((h.dma.length, h.dma.resid, h.dma.num_sge), (128, 128, 2));
        assert_eq!(
            (h.dma.cur_sge, h.dma.sge_offset, h.state, h.status),
            (0, 0, 0, 0)
        );
        assert_eq!(h.ssn, 9);
        assert_eq!(sge_at(&slot, 0), (0x1000, 100, 7));
        assert_eq!(sge_at(&slot, 1), (0x2000, 28, 8));
    }

    #[test]
    fn inline_send_copies_the_bytes() {
        let a = *b"hello ";
        let b = *b"world";
        let mut sges = [
            ibv_sge {
                addr: a.as_ptr() as u64,
                length: a.len() as u32,
                lkey: 0,
            },
            ibv_sge {
                addr: b.as_ptr() as u64,
                length: b.len() as u32,
                lkey: 0,
            },
        ];
        let mut wr = send_wr(IBV_WR_SEND, &mut sges);
        wr.send_flags |= IBV_SEND_INLINE;
        let mut slot = [0u64; 64];
        // SAFETY: the SGEs name the arrays above.
        unsafe { encode_send(&mut slot, &wr, &rc(), 0) }.unwrap();
        let mut s = SendSlot::new(&mut slot).unwrap();
        assert_eq!((s.hdr.dma.length, s.hdr.dma.num_sge), (11, 2));
        assert_eq!(&s.inline_area()[..11], b"hello world");
    }

    #[test]
    fn checks_before_writing() {
        let mut slot = [0u64; 64];
        let mut five = [ibv_sge {
            addr: 0,
            length: 1,
            lkey: 0,
        }; 5];
        let wr = send_wr(IBV_WR_SEND, &mut five);
        // SAFETY: the SGEs are the array above (never read: rejected).
        let r = unsafe { encode_send(&mut slot, &wr, &rc(), 0) };
        assert_eq!(r, Err(EINVAL));

        let big = [0u8; 65];
        let mut one = [ibv_sge {
            addr: big.as_ptr() as u64,
            length: 65,
            lkey: 0,
        }];
        let mut wr = send_wr(IBV_WR_SEND, &mut one);
        wr.send_flags |= IBV_SEND_INLINE;
        // SAFETY: as above.
        let r = unsafe { encode_send(&mut slot, &wr, &rc(), 0) };
        assert_eq!(r, Err(EINVAL));

        let mut eight = [ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }];
        let mut wr = send_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, &mut eight);
        wr.wr.atomic = ibv_send_wr_atomic {
            remote_addr: 0x2004,
            compare_add: 1,
            swap: 0,
            rkey: 3,
        };
        // SAFETY: as above.
        let r = unsafe { encode_send(&mut slot, &wr, &rc(), 0) };
        assert_eq!(r, Err(EINVAL));
        wr.wr.atomic.remote_addr = 0x2008;
        // SAFETY: as above.
        unsafe { encode_send(&mut slot, &wr, &rc(), 0) }.unwrap();
        let s = SendSlot::new(&mut slot).unwrap();
        // SAFETY: the atomic member.
        let a = unsafe { s.hdr.wr.wr.atomic };
        assert_eq!((a.remote_addr, a.compare_add, a.rkey), (0x2008, 1, 3));
        assert_eq!(s.hdr.iova, 0x2008);

        // Binding a window takes no data and no immediate, on RC/UC only.
        let mut wr = send_wr(IBV_WR_BIND_MW, &mut []);
        wr.set_imm_data(1);
        assert_eq!(validate_send(&wr, 0, 0, &rc()), Err(EINVAL));
        wr.set_imm_data(0);
        assert_eq!(validate_send(&wr, 0, 0, &rc()), Ok(()));
        let ud = SqLimits {
            qp_type: IBV_QPT_UD,
            ..rc()
        };
        assert_eq!(validate_send(&wr, 0, 0, &ud), Err(EINVAL));
    }

    #[test]
    fn ud_send_carries_the_ah_number_or_the_av() {
        let mut ah = Ah::test_new(17);
        let mut wr = send_wr(IBV_WR_SEND, &mut []);
        wr.wr.ud = ibv_send_wr_ud {
            ah: ah.ibv(),
            remote_qpn: 0x11,
            remote_qkey: 0x22,
        };
        let ud = SqLimits {
            qp_type: IBV_QPT_UD,
            ..rc()
        };
        let mut slot = [0u64; 64];
        // SAFETY: the AH is ours and live.
        unsafe { encode_send(&mut slot, &wr, &ud, 0) }.unwrap();
        let s = SendSlot::new(&mut slot).unwrap();
        // SAFETY: the UD member.
        let u = unsafe { s.hdr.wr.wr.ud };
        assert_eq!((u.remote_qpn, u.remote_qkey, u.ah_num), (0x11, 0x22, 17));
        assert_eq!(u.av.port_num, 0);

        // An old kernel (no AH numbers): the AV goes into the WQE.
        ah.num = 0;
        ah.av.port_num = 1;
        ah.av.network_type = RXE_NETWORK_TYPE_IPV4;
        // SAFETY: as above.
        unsafe { encode_send(&mut slot, &wr, &ud, 0) }.unwrap();
        let s = SendSlot::new(&mut slot).unwrap();
        // SAFETY: as above.
        let u = unsafe { s.hdr.wr.wr.ud };
        assert_eq!((u.ah_num, u.av.port_num, u.av.network_type), (0, 1, 1));

        wr.wr.ud.ah = null_mut();
        // SAFETY: a NULL AH is refused before it is read.
        assert_eq!(unsafe { encode_send(&mut slot, &wr, &ud, 0) }, Err(EINVAL));
    }

    #[test]
    fn recv_wqe() {
        let mut sges = [
            ibv_sge {
                addr: 0x10,
                length: 4096,
                lkey: 5,
            },
            ibv_sge {
                addr: 0x20,
                length: 40,
                lkey: 6,
            },
        ];
        // SAFETY: all-zero is a valid ibv_recv_wr.
        let mut wr: ibv_recv_wr = unsafe { core::mem::zeroed() };
        wr.wr_id = 77;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = 2;
        let mut slot = [0xeeu64; 16];
        // SAFETY: the SGEs are the array above.
        unsafe { encode_recv(&mut slot, &wr, 2) }.unwrap();
        assert_eq!(slot[0], 77);
        let s = RecvSlot::new(&mut slot).unwrap();
        assert_eq!(
            (
                s.hdr.dma.length,
                s.hdr.dma.resid,
                s.hdr.dma.num_sge,
                s.hdr.dma.cur_sge
            ),
            (4136, 4136, 2, 0)
        );
        assert_eq!((slot[5], slot[6]), (0x10, 4096 | (5 << 32)));
        assert_eq!((slot[7], slot[8]), (0x20, 40 | (6 << 32)));
        // SAFETY: as above.
        assert_eq!(unsafe { encode_recv(&mut slot, &wr, 1) }, Err(EINVAL));
        // A slot too small for the list is refused, not overrun.
        let mut small = [0u64; 7];
        // SAFETY: as above.
        assert_eq!(unsafe { encode_recv(&mut small, &wr, 2) }, Err(EINVAL));
    }

    #[test]
    fn builders_and_setters() {
        let mut slot = [0xffu64; 40];
        let mut s = SendSlot::new(&mut slot).unwrap();
        s.start(IBV_WR_SEND, 5, IBV_SEND_SIGNALED, 3);
        assert_eq!((s.hdr.wr.wr_id, s.hdr.ssn, s.hdr.dma.num_sge), (5, 3, 0));
        s.set_sge(9, 0x100, 0).unwrap();
        assert_eq!(s.hdr.dma.num_sge, 0);
        s.set_sge(9, 0x100, 50).unwrap();
        assert_eq!((s.hdr.dma.num_sge, s.hdr.dma.length), (1, 50));
        let list = [
            ibv_sge {
                addr: 1,
                length: 10,
                lkey: 1,
            },
            ibv_sge {
                addr: 2,
                length: 20,
                lkey: 2,
            },
        ];
        // C sums the first SGE's length num_sge times; the total is the sum.
        s.set_sge_list(&list, 4).unwrap();
        assert_eq!((s.hdr.dma.num_sge, s.hdr.dma.length), (2, 30));
        assert_eq!(s.set_sge_list(&list, 1), Err(libc::ENOSPC));
        // C never adds the buffers' lengths up; the total is the sum.
        let parts: [&[u8]; 3] = [b"ab", b"cd", b"e"];
        assert_eq!(s.hdr.wr.send_flags & IBV_SEND_INLINE, 0);
        s.set_inline(parts.iter().copied(), 8).unwrap();
        assert_eq!(s.hdr.dma.length, 5);
        // The kernel reads inline data only from a WQE marked inline.
        assert_ne!(s.hdr.wr.send_flags & IBV_SEND_INLINE, 0);
        assert_eq!(&s.inline_area()[..5], b"abcde");
        assert_eq!(s.set_inline(parts.iter().copied(), 4), Err(libc::ENOSPC));
        // The slot's own size bounds inline data too (40 words - header).
        let long = [0u8; 200];
        assert_eq!(
            s.set_inline([&long[..]].into_iter(), 1000),
            Err(libc::ENOSPC)
        );
        // An atomic write's value goes where the kernel takes it, not inline.
        s.start(IBV_WR_ATOMIC_WRITE, 6, 0, 4);
        s.set_atomic_data(*b"8 bytes!").unwrap();
        assert_eq!((s.hdr.dma.length, s.hdr.wr.send_flags), (8, 0));
        assert_eq!(&s.inline_area()[..8], b"8 bytes!");
    }
}
