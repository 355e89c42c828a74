//! Work requests in siw's format and completions in the verbs' format:
//! the translations between the application's `ibv_send_wr`/`ibv_recv_wr`/
//! `ibv_wc` and the kernel's `siw_sqe`/`siw_rqe`/`siw_cqe` (siw-abi.h).
//! Pure functions over values; the queues they go into are `ring`'s.

use core::ffi::{c_int, c_uint};

use verbs_abi::uverbs::*;
use verbs_abi::*;

/// siw's opcode for a send work request, or None for the verbs siw does
/// not carry to user QPs (immediate data, atomics, memory windows, local
/// invalidation, TSO).
#[inline]
pub fn send_opcode(op: ibv_wr_opcode) -> Option<u8> {
    match op {
        IBV_WR_RDMA_WRITE => Some(SIW_OP_WRITE),
        IBV_WR_SEND => Some(SIW_OP_SEND),
        IBV_WR_RDMA_READ => Some(SIW_OP_READ),
        IBV_WR_SEND_WITH_INV => Some(SIW_OP_SEND_REMOTE_INV),
        _ => None,
    }
}

/// The SQE flags of a work request's `send_flags` (`VALID` included: the
/// caller stores them last, which hands the element to the kernel).
#[inline]
pub fn send_flags(send_flags: c_uint, sig_all: bool) -> u16 {
    let mut f = SIW_WQE_VALID;
    if send_flags & IBV_SEND_SIGNALED != 0 || sig_all {
        f |= SIW_WQE_SIGNALLED;
    }
    if send_flags & IBV_SEND_SOLICITED != 0 {
        f |= SIW_WQE_SOLICITED;
    }
    if send_flags & IBV_SEND_INLINE != 0 {
        f |= SIW_WQE_INLINE;
    }
    if send_flags & IBV_SEND_FENCE != 0 {
        f |= SIW_WQE_READ_FENCE;
    }
    f
}

/// What a send work request says, read out of the application's
/// `ibv_send_wr` by the caller.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub opcode: ibv_wr_opcode,
    pub send_flags: c_uint,
    pub remote_addr: u64,
    pub rkey: u32,
    /// `invalidate_rkey` (the union with `imm_data`).
    pub invalidate_rkey: u32,
    pub sges: &'a [ibv_sge],
}

/// Builds the SQE of `wr` and the flags to publish it with. Inline data
/// is copied by `copy(sge, dst)`, which fills `dst` (the SGE's length)
/// from the application's buffer.
#[inline]
pub fn sqe_of(
    wr: &SendWr<'_>,
    sig_all: bool,
    mut copy: impl FnMut(&ibv_sge, &mut [u8]),
) -> Result<(siw_sqe, u16), c_int> {
    let Some(opcode) = send_opcode(wr.opcode) else {
        log::error!("siw: opcode {} unsupported", wr.opcode);
        return Err(libc::EINVAL);
    };
    let mut flags = send_flags(wr.send_flags, sig_all);
    // The kernel sends inline data only with SEND and WRITE (it fails any
    // other inline SQE); elsewhere the flag means nothing, as for other
    // providers, and the SGEs are used.
    if opcode != SIW_OP_SEND && opcode != SIW_OP_WRITE {
        flags &= !SIW_WQE_INLINE;
    }
    let mut sqe = siw_sqe {
        id: wr.wr_id,
        flags: 0,
        num_sge: 0,
        opcode,
        // SEND_WITH_INV carries the key to invalidate where WRITE and
        // READ carry the remote one (the kernel sends `rkey` either way).
        rkey: if opcode == SIW_OP_SEND_REMOTE_INV {
            wr.invalidate_rkey
        } else {
            wr.rkey
        },
        raddr: wr.remote_addr,
        sge: [siw_sge::default(); SIW_MAX_SGE],
    };
    if flags & SIW_WQE_INLINE != 0 {
        // Inline data lives in the SQE itself, in the space of sge[1..];
        // sge[0].length says how much. More SGEs than SIW_MAX_SGE are
        // fine here: only their bytes are kept.
        let total: usize = wr.sges.iter().map(|s| s.length as usize).sum();
        if total > SIW_MAX_INLINE {
            log::error!(
                "inline data of {total} bytes, at most {SIW_MAX_INLINE}: work request refused"
            );
            return Err(libc::EINVAL);
        }
        let mut buf = [0u8; SIW_MAX_INLINE];
        let mut at = 0;
        for s in wr.sges {
            let n = s.length as usize;
            copy(s, &mut buf[at..at + n]);
            at += n;
        }
        for (sge, chunk) in sqe.sge[1..].iter_mut().zip(buf.chunks_exact(16)) {
            *sge = sge_from_bytes(chunk.try_into().expect("16-byte chunks"));
        }
        sqe.sge[0].length = total as u32;
        sqe.num_sge = 1;
    } else {
        if wr.sges.len() > SIW_MAX_SGE {
            return Err(libc::EINVAL);
        }
        for (dst, src) in sqe.sge.iter_mut().zip(wr.sges) {
            *dst = sge_of(src);
        }
        sqe.num_sge = wr.sges.len() as u8;
    }
    Ok((sqe, flags))
}

/// Sixteen bytes of inline data as the SGE whose place they take (the
/// kernel reads them back as bytes, so the layout is the machine's).
fn sge_from_bytes(b: &[u8; 16]) -> siw_sge {
    let [a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, l3, k0, k1, k2, k3] = *b;
    siw_sge {
        laddr: u64::from_ne_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
        length: u32::from_ne_bytes([l0, l1, l2, l3]),
        lkey: u32::from_ne_bytes([k0, k1, k2, k3]),
    }
}

fn sge_of(s: &ibv_sge) -> siw_sge {
    siw_sge {
        laddr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}

/// Builds the RQE of a receive work request (its flags are always
/// exactly `VALID`: the kernel takes an RQE only when they are).
#[inline]
pub fn rqe_of(wr_id: u64, sges: &[ibv_sge]) -> Result<siw_rqe, c_int> {
    if sges.len() > SIW_MAX_SGE {
        return Err(libc::EINVAL);
    }
    let mut rqe = siw_rqe {
        id: wr_id,
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    for (dst, src) in rqe.sge.iter_mut().zip(sges) {
        *dst = sge_of(src);
    }
    Ok(rqe)
}

/// The verbs opcode of a completion's siw opcode.
pub fn wc_opcode(op: u8) -> ibv_wc_opcode {
    match op {
        SIW_OP_WRITE => IBV_WC_RDMA_WRITE,
        SIW_OP_READ | SIW_OP_READ_LOCAL_INV => IBV_WC_RDMA_READ,
        SIW_OP_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
        SIW_OP_COMP_AND_SWAP => IBV_WC_COMP_SWAP,
        SIW_OP_RECEIVE => IBV_WC_RECV,
        // SEND, SEND_WITH_IMM, SEND_REMOTE_INV, and what no user CQ sees.
        _ => IBV_WC_SEND,
    }
}

/// The verbs status of a completion's siw status.
pub fn wc_status(status: u16) -> ibv_wc_status {
    match status {
        SIW_WC_SUCCESS => IBV_WC_SUCCESS,
        SIW_WC_LOC_LEN_ERR => IBV_WC_LOC_LEN_ERR,
        SIW_WC_LOC_PROT_ERR => IBV_WC_LOC_PROT_ERR,
        SIW_WC_LOC_QP_OP_ERR => IBV_WC_LOC_QP_OP_ERR,
        SIW_WC_WR_FLUSH_ERR => IBV_WC_WR_FLUSH_ERR,
        SIW_WC_BAD_RESP_ERR => IBV_WC_BAD_RESP_ERR,
        SIW_WC_LOC_ACCESS_ERR => IBV_WC_LOC_ACCESS_ERR,
        SIW_WC_REM_ACCESS_ERR => IBV_WC_REM_ACCESS_ERR,
        SIW_WC_REM_INV_REQ_ERR => IBV_WC_REM_INV_REQ_ERR,
        _ => IBV_WC_GENERAL_ERR,
    }
}

/// The work completion of a CQE. siw's CQEs carry no immediate data; the
/// kernel reports an invalidated key only to its own consumers, but one
/// flagged here is passed on.
#[inline]
pub fn wc_of(cqe: &siw_cqe) -> ibv_wc {
    let mut wc = ibv_wc::zeroed();
    wc.wr_id = cqe.id;
    wc.status = wc_status(cqe.status);
    wc.opcode = wc_opcode(cqe.opcode);
    wc.byte_len = cqe.bytes;
    wc.qp_num = cqe.qp_id as u32;
    if u16::from(cqe.flags) & SIW_WQE_REM_INVAL != 0 {
        wc.wc_flags = IBV_WC_WITH_INV;
        wc.imm = ibv_wc_imm {
            invalidated_rkey: cqe.inval_stag(),
        };
    }
    wc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(addr: u64, length: u32, lkey: u32) -> ibv_sge {
        ibv_sge { addr, length, lkey }
    }

    fn wr<'a>(opcode: ibv_wr_opcode, flags: c_uint, sges: &'a [ibv_sge]) -> SendWr<'a> {
        SendWr {
            wr_id: 0x1234,
            opcode,
            send_flags: flags,
            remote_addr: 0xdead_0000,
            rkey: 0x55,
            invalidate_rkey: 0x77,
            sges,
        }
    }

    fn no_copy(_: &ibv_sge, _: &mut [u8]) {
        panic!("no inline data expected");
    }

    #[test]
    fn opcodes() {
        assert_eq!(send_opcode(IBV_WR_RDMA_WRITE), Some(SIW_OP_WRITE));
        assert_eq!(send_opcode(IBV_WR_RDMA_READ), Some(SIW_OP_READ));
        assert_eq!(send_opcode(IBV_WR_SEND), Some(SIW_OP_SEND));
        assert_eq!(
            send_opcode(IBV_WR_SEND_WITH_INV),
            Some(SIW_OP_SEND_REMOTE_INV)
        );
        for op in [
            IBV_WR_RDMA_WRITE_WITH_IMM,
            IBV_WR_SEND_WITH_IMM,
            IBV_WR_ATOMIC_CMP_AND_SWP,
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            IBV_WR_LOCAL_INV,
            IBV_WR_BIND_MW,
            IBV_WR_TSO,
            IBV_WR_DRIVER1,
            IBV_WR_ATOMIC_WRITE,
            99,
        ] {
            assert_eq!(send_opcode(op), None, "opcode {op}");
            assert_eq!(
                sqe_of(&wr(op, 0, &[]), false, no_copy).err(),
                Some(libc::EINVAL)
            );
        }
    }

    #[test]
    fn flags() {
        assert_eq!(send_flags(0, false), SIW_WQE_VALID);
        assert_eq!(send_flags(0, true), SIW_WQE_VALID | SIW_WQE_SIGNALLED);
        assert_eq!(
            send_flags(
                IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE | IBV_SEND_FENCE,
                false
            ),
            SIW_WQE_VALID
                | SIW_WQE_SIGNALLED
                | SIW_WQE_SOLICITED
                | SIW_WQE_INLINE
                | SIW_WQE_READ_FENCE
        );
    }

    #[test]
    fn sqe_with_sges() {
        let s = [sge(0x1000, 64, 7), sge(0x2000, 32, 8)];
        let (q, f) = sqe_of(
            &wr(IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s),
            false,
            no_copy,
        )
        .unwrap();
        assert_eq!(f, SIW_WQE_VALID | SIW_WQE_SIGNALLED);
        assert_eq!(
            (q.id, q.opcode, q.num_sge, q.flags),
            (0x1234, SIW_OP_WRITE, 2, 0)
        );
        assert_eq!((q.raddr, q.rkey), (0xdead_0000, 0x55));
        assert_eq!(
            (q.sge[1].laddr, q.sge[1].length, q.sge[1].lkey),
            (0x2000, 32, 8)
        );
        assert_eq!(q.sge[2].length, 0);
        let many = [sge(0, 1, 1); SIW_MAX_SGE + 1];
        assert_eq!(
            sqe_of(&wr(IBV_WR_SEND, 0, &many), false, no_copy).err(),
            Some(libc::EINVAL)
        );
        let max = [sge(0, 1, 1); SIW_MAX_SGE];
        assert!(sqe_of(&wr(IBV_WR_SEND, 0, &max), false, no_copy).is_ok());
    }

    #[test]
    fn send_with_inv_carries_the_key_to_invalidate() {
        let (q, _) = sqe_of(&wr(IBV_WR_SEND_WITH_INV, 0, &[]), false, no_copy).unwrap();
        assert_eq!((q.opcode, q.rkey), (SIW_OP_SEND_REMOTE_INV, 0x77));
    }

    #[test]
    fn inline_data_sits_in_the_sqe() {
        let data: Vec<u8> = (0..80u8).collect();
        // 80 bytes over three SGEs, more than one SGE's worth each.
        let s = [sge(0, 30, 0), sge(30, 0, 0), sge(30, 50, 0)];
        let copy = |g: &ibv_sge, dst: &mut [u8]| {
            let a = g.addr as usize;
            dst.copy_from_slice(&data[a..a + g.length as usize]);
        };
        let (q, f) = sqe_of(&wr(IBV_WR_SEND, IBV_SEND_INLINE, &s), false, copy).unwrap();
        assert_eq!(f, SIW_WQE_VALID | SIW_WQE_INLINE);
        assert_eq!((q.num_sge, q.sge[0].length), (1, 80));
        // SAFETY: reading the plain-integer SGE array as bytes.
        let bytes = unsafe {
            core::slice::from_raw_parts(q.sge[1..].as_ptr().cast::<u8>(), SIW_MAX_INLINE)
        };
        assert_eq!(bytes, &data[..]);
        let big = [sge(0, 81, 0)];
        assert_eq!(
            sqe_of(&wr(IBV_WR_SEND, IBV_SEND_INLINE, &big), false, |_, _| ()).err(),
            Some(libc::EINVAL)
        );
        // Inline on a READ is ignored: its SGE is the local buffer.
        let r = [sge(0x3000, 100, 9)];
        let (q, f) = sqe_of(&wr(IBV_WR_RDMA_READ, IBV_SEND_INLINE, &r), false, no_copy).unwrap();
        assert_eq!(f & SIW_WQE_INLINE, 0);
        assert_eq!(
            (q.num_sge, q.sge[0].laddr, q.sge[0].length),
            (1, 0x3000, 100)
        );
    }

    #[test]
    fn rqe() {
        let s = [sge(0x1000, 4096, 3)];
        let r = rqe_of(9, &s).unwrap();
        assert_eq!((r.id, r.num_sge, r.flags), (9, 1, 0));
        assert_eq!(
            (r.sge[0].laddr, r.sge[0].length, r.sge[0].lkey),
            (0x1000, 4096, 3)
        );
        assert_eq!(rqe_of(1, &[]).unwrap().num_sge, 0);
        assert_eq!(
            rqe_of(1, &[s[0]; SIW_MAX_SGE + 1]).err(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn completions() {
        let cqe = siw_cqe {
            id: 42,
            flags: SIW_WQE_VALID as u8,
            opcode: SIW_OP_RECEIVE,
            status: SIW_WC_SUCCESS,
            bytes: 4096,
            imm_data: 0,
            qp_id: 17,
        };
        let wc = wc_of(&cqe);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (42, IBV_WC_SUCCESS, IBV_WC_RECV)
        );
        assert_eq!((wc.byte_len, wc.qp_num, wc.wc_flags), (4096, 17, 0));
        assert_eq!((wc.src_qp, wc.slid, wc.sl, wc.pkey_index), (0, 0, 0, 0));
        let inv = siw_cqe {
            flags: (SIW_WQE_VALID | SIW_WQE_REM_INVAL) as u8,
            imm_data: u64::from(0xabcd_u32.to_le()),
            ..cqe
        };
        let wc = wc_of(&inv);
        assert_eq!(wc.wc_flags, IBV_WC_WITH_INV);
        // SAFETY: the field the flag says is set.
        assert_eq!(unsafe { wc.imm.invalidated_rkey }, inv.inval_stag());

        let pairs = [
            (SIW_OP_WRITE, IBV_WC_RDMA_WRITE),
            (SIW_OP_READ, IBV_WC_RDMA_READ),
            (SIW_OP_READ_LOCAL_INV, IBV_WC_RDMA_READ),
            (SIW_OP_SEND, IBV_WC_SEND),
            (SIW_OP_SEND_WITH_IMM, IBV_WC_SEND),
            (SIW_OP_SEND_REMOTE_INV, IBV_WC_SEND),
            (SIW_OP_FETCH_AND_ADD, IBV_WC_FETCH_ADD),
            (SIW_OP_COMP_AND_SWAP, IBV_WC_COMP_SWAP),
            (SIW_OP_RECEIVE, IBV_WC_RECV),
        ];
        for (s, v) in pairs {
            assert_eq!(wc_opcode(s), v, "siw opcode {s}");
        }
        let statuses = [
            (SIW_WC_SUCCESS, IBV_WC_SUCCESS),
            (SIW_WC_LOC_LEN_ERR, IBV_WC_LOC_LEN_ERR),
            (SIW_WC_LOC_PROT_ERR, IBV_WC_LOC_PROT_ERR),
            (SIW_WC_LOC_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR),
            (SIW_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR),
            (SIW_WC_BAD_RESP_ERR, IBV_WC_BAD_RESP_ERR),
            (SIW_WC_LOC_ACCESS_ERR, IBV_WC_LOC_ACCESS_ERR),
            (SIW_WC_REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR),
            (SIW_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR),
            (SIW_WC_GENERAL_ERR, IBV_WC_GENERAL_ERR),
            (SIW_NUM_WC_STATUS, IBV_WC_GENERAL_ERR),
        ];
        for (s, v) in statuses {
            assert_eq!(wc_status(s), v, "siw status {s}");
        }
    }
}
