//! Tag matching's rendezvous (`crate::tm`): a matched `IBV_TMH_RNDV`
//! request's data is read from the requester by an RDMA READ the
//! receiving QP issues itself, as mlx5's hardware does ("the ownership of
//! the QP's Send Queue is passed to the TM-SRQ, which uses it to initiate
//! rendezvous RDMA-Reads"), then a FIN message goes back. Both are WQEs
//! of the QP's send queue that the application did not post
//! (`SendWqe::tm`): the READ lands in the tag's buffer and completes as
//! the tag's second completion (`TmSrq::data_done`) (`IBV_WC_TM_RECV` with
//! `IBV_WC_TM_DATA_VALID`, on the SRQ's CQ); the FIN (the request's TMH
//! and RVH, opcode `IBV_TMH_FIN`, 32 bytes inline) waits until the READ
//! has completed and completes silently. A QP on a tag-matching SRQ has
//! room for [`RNDV_PER_QP`] of them beside what it was created with.

use verbs_abi::*;

use crate::engine::{Qp, QpInner};
use crate::progress::engine;
use crate::ring::{SendWqe, TM_FIN, TM_RNDV_READ};
use crate::tm::{Rvh, Tag, Tmh, RVH_LEN, TMH_LEN};
use crate::wire::Op;

/// Rendezvous transfers a QP may have under way at once (each takes two
/// send queue slots).
pub const RNDV_PER_QP: u32 = 8;

/// Starts the READ of `rvh` into `tag`'s buffer for the request with
/// header `tmh`; false when the QP cannot (not in RTS, no room in its send
/// queue, nothing to read into): software finishes it then.
pub fn start(qp: &Qp, g: &mut QpInner, tag: Tag, tmh: Tmh, rvh: Rvh) -> bool {
    if g.state != IBV_QPS_RTS
        || g.tx_blocked
        || g.qp_type != IBV_QPT_RC
        || g.sq.room() < 2
        || g.sq.max_sge == 0
        || g.sq.max_inline < TMH_LEN + RVH_LEN
    {
        return false;
    }
    let Some(sge) = tag.sge.filter(|_| rvh.len > 0) else {
        return false;
    };
    let read = SendWqe {
        wr_id: tag.wr_id,
        op: Op::ReadReq,
        remote_addr: rvh.va,
        rkey: rvh.rkey,
        len: rvh.len,
        nsge: 1,
        imm: tmh.app_ctx,
        compare_add: tmh.tag,
        tm: TM_RNDV_READ,
        ..SendWqe::EMPTY
    };
    let seq = g.sq.next_seq();
    let base = g.sq.slot(seq) * g.sq.max_sge;
    g.sq.sges[base] = sge;
    *g.sq.wqe_mut(seq) = read;
    g.sq.commit();
    let fin = fin_message(tmh, rvh);
    let seq = g.sq.next_seq();
    let base = g.sq.slot(seq) * g.sq.max_inline;
    g.sq.inline_buf[base..base + fin.len()].copy_from_slice(&fin);
    *g.sq.wqe_mut(seq) = SendWqe {
        wr_id: tag.wr_id,
        op: Op::Send,
        len: fin.len() as u32,
        inline: true,
        tm: TM_FIN,
        ..SendWqe::EMPTY
    };
    g.sq.commit();
    // The requester runs on its own turn (we are inside the responder).
    if let Ok(e) = engine() {
        e.kick(qp.serial);
    }
    true
}

/// The FIN message for a rendezvous request: its TMH and RVH again, the
/// opcode `IBV_TMH_FIN`.
fn fin_message(tmh: Tmh, rvh: Rvh) -> [u8; TMH_LEN + RVH_LEN] {
    let mut m = [0u8; TMH_LEN + RVH_LEN];
    m[0] = crate::tm::TMH_FIN;
    m[4..8].copy_from_slice(&tmh.app_ctx.to_be_bytes());
    m[8..16].copy_from_slice(&tmh.tag.to_be_bytes());
    m[16..24].copy_from_slice(&rvh.va.to_be_bytes());
    m[24..28].copy_from_slice(&rvh.rkey.to_be_bytes());
    m[28..32].copy_from_slice(&rvh.len.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fin_repeats_the_headers() {
        let m = fin_message(
            Tmh {
                op: crate::tm::TMH_RNDV,
                app_ctx: 5,
                tag: 0x1234,
            },
            Rvh {
                va: 0x1000,
                rkey: 9,
                len: 64,
            },
        );
        let mut h = [0u8; TMH_LEN];
        h.copy_from_slice(&m[..TMH_LEN]);
        let t = Tmh::decode(&h);
        assert_eq!((t.op, t.app_ctx, t.tag), (crate::tm::TMH_FIN, 5, 0x1234));
        assert_eq!(
            Rvh::decode(&m[TMH_LEN..]),
            Some(Rvh {
                va: 0x1000,
                rkey: 9,
                len: 64
            })
        );
    }
}
