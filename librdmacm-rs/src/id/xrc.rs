//! XRC through the CM: ids whose QP type is `IBV_QPT_XRC_SEND` or
//! `IBV_QPT_XRC_RECV` (`rdma_create_ep` with such an address, as
//! rdma_xserver and rdma_xclient use). The receive QP and its XRC SRQs
//! live in an XRC domain (the device's own unless the application names
//! one), and each side's QP is moved with the attributes its type has,
//! as the kernel's CM gives them: the send side's RTR has no responder
//! resources, the receive side's RTS no requester ones.

use super::*;

/// `mask` (the RC attributes for `state`) reduced to what a QP of type
/// `qp_type` takes.
pub(super) fn qp_mask(qp_type: ibv_qp_type, state: ibv_qp_state, mask: u32) -> u32 {
    match (qp_type, state) {
        (IBV_QPT_XRC_SEND, IBV_QPS_RTR) => {
            mask & !(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
        }
        (IBV_QPT_XRC_RECV, IBV_QPS_RTS) => {
            mask & !(IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
        }
        _ => mask,
    }
}

impl CmId {
    /// An XRC receive QP gets the device's XRC domain when it names none.
    pub(super) fn xrc_qp_init(st: &IdState, attr: &mut ibv_qp_init_attr_ex) -> Res<()> {
        if attr.qp_type == IBV_QPT_XRC_RECV
            && (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null())
        {
            let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
            attr.xrcd = dev.xrcd()?;
            attr.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
        }
        Ok(())
    }

    /// An XRC SRQ gets the device's XRC domain and the id's receive CQ
    /// (made now, of the SRQ's size, if the id has none) when it names
    /// neither.
    pub(super) fn xrc_srq_init(
        &self,
        st: &mut IdState,
        attr: &mut ibv_srq_init_attr_ex,
    ) -> Res<()> {
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null() {
            attr.xrcd = dev.xrcd()?;
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || attr.cq.is_null() {
            let c = self.cs(st);
            if c.recv_cq.is_null() {
                create_cqs(c, 0, attr.attr.max_wr.max(1))?;
            }
            attr.cq = c.recv_cq;
        }
        attr.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        Ok(())
    }
}
