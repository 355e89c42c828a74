//! Completion queue entries: the kernel writes `struct ib_uverbs_wc` into
//! the CQ ring; programs read `struct ibv_wc` (`ibv_poll_cq`) or single
//! fields (`ibv_wc_read_*`). The two structs agree field for field up to
//! `dlid_path_bits`; the kernel's `port_num` has no `ibv_wc` field. Values
//! go through unchanged, as rxe's C provider copies the entry as is.

use verbs_abi::uverbs::ib_uverbs_wc;
use verbs_abi::*;

/// The entry as `ibv_poll_cq` returns it.
#[inline]
pub fn to_wc(k: &ib_uverbs_wc) -> ibv_wc {
    ibv_wc {
        wr_id: k.wr_id,
        status: k.status,
        opcode: k.opcode,
        vendor_err: k.vendor_err,
        byte_len: k.byte_len,
        imm: ibv_wc_imm { imm_data: k.ex },
        qp_num: k.qp_num,
        src_qp: k.src_qp,
        wc_flags: k.wc_flags,
        pkey_index: k.pkey_index,
        slid: k.slid,
        sl: k.sl,
        dlid_path_bits: k.dlid_path_bits,
    }
}

/// The `IBV_WC_EX_WITH_*` fields an extended CQ of rxe can report: those
/// of a classic `ibv_wc` (C: `RXE_SUP_WC_FLAGS`).
pub const SUPPORTED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS as u64;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn entry_and_wc_agree_field_for_field() {
        assert_eq!(size_of::<ib_uverbs_wc>(), size_of::<ibv_wc>());
        assert_eq!(offset_of!(ib_uverbs_wc, ex), offset_of!(ibv_wc, imm));
        assert_eq!(
            offset_of!(ib_uverbs_wc, wc_flags),
            offset_of!(ibv_wc, wc_flags)
        );
        assert_eq!(
            offset_of!(ib_uverbs_wc, dlid_path_bits),
            offset_of!(ibv_wc, dlid_path_bits)
        );
    }

    #[test]
    fn decodes_a_receive_with_immediate() {
        let k = ib_uverbs_wc {
            wr_id: 0xdead_beef,
            status: IBV_WC_SUCCESS,
            opcode: IBV_WC_RECV_RDMA_WITH_IMM,
            vendor_err: 0,
            byte_len: 4096,
            ex: 0x1122_3344,
            qp_num: 0x11,
            src_qp: 0x22,
            wc_flags: IBV_WC_WITH_IMM | IBV_WC_GRH,
            pkey_index: 3,
            slid: 4,
            sl: 5,
            dlid_path_bits: 6,
            port_num: 1,
            reserved: 0,
        };
        let w = to_wc(&k);
        assert_eq!(w.wr_id, 0xdead_beef);
        assert_eq!(
            (w.status, w.opcode),
            (IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM)
        );
        assert_eq!((w.byte_len, w.imm_data()), (4096, 0x1122_3344));
        assert_eq!((w.qp_num, w.src_qp), (0x11, 0x22));
        assert_eq!(w.wc_flags, IBV_WC_WITH_IMM | IBV_WC_GRH);
        assert_eq!((w.pkey_index, w.slid, w.sl, w.dlid_path_bits), (3, 4, 5, 6));
    }

    #[test]
    fn error_status_and_vendor_error_pass_through() {
        let k = ib_uverbs_wc {
            wr_id: 1,
            status: IBV_WC_REM_ACCESS_ERR,
            vendor_err: 0x33,
            ..Default::default()
        };
        let w = to_wc(&k);
        assert_eq!((w.status, w.vendor_err), (IBV_WC_REM_ACCESS_ERR, 0x33));
    }
}
