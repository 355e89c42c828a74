//! The request and response buffers siw's commands travel in, laid out as
//! rdma-core's `DECLARE_DRV_CMD` lays them out (kern-abi.h, siw_abi.h):
//! a request is the write() header, the kernel's payload and the driver's
//! part; a response is the kernel's answer and the driver's part after it.
//! `#[repr(C)]` over the kernel's own structs gives C's offsets (checked
//! below), so the kernel finds siw's part where the C provider puts it.
//!
//! Also the doorbell: the empty `post_send` command siw's SQ is kicked with.

use core::ffi::c_void;
use core::mem::size_of;

use verbs_abi::ibv_send_wr;
use verbs_abi::uverbs::*;

/// A driver part that is empty (siw sends nothing beyond the kernel's
/// payload for most commands).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Empty;

/// A legacy write() request: header, kernel payload `T`, driver part `D`.
/// libibverbs' `ibv_cmd_*` fills the header and `core`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Req<T, D = Empty> {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: T,
    pub drv: D,
}

impl<T, D> Req<T, D> {
    /// The buffer and its size, as the `ibv_cmd_*` helpers take them.
    pub fn buf(&mut self) -> (*mut c_void, usize) {
        ((self as *mut Self).cast(), size_of::<Self>())
    }
}

/// A response: the kernel's answer `T`, then the driver's part `D`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Resp<T, D = Empty> {
    pub core: T,
    pub drv: D,
}

impl<T, D> Resp<T, D> {
    /// The buffer (typed as its kernel part) and its size.
    pub fn buf(&mut self) -> (*mut T, usize) {
        ((self as *mut Self).cast(), size_of::<Self>())
    }
}

pub type GetContextReq = Req<ib_uverbs_get_context>;
pub type GetContextResp = Resp<ib_uverbs_get_context_resp, siw_uresp_alloc_ctx>;
pub type QueryPortReq = Req<ib_uverbs_query_port>;
pub type AllocPdReq = Req<ib_uverbs_alloc_pd>;
pub type AllocPdResp = Resp<ib_uverbs_alloc_pd_resp>;
pub type RegMrReq = Req<ib_uverbs_reg_mr, siw_ureq_reg_mr>;
pub type RegMrResp = Resp<ib_uverbs_reg_mr_resp, siw_uresp_reg_mr>;
pub type CreateCqReq = Req<ib_uverbs_create_cq>;
pub type CreateCqResp = Resp<ib_uverbs_create_cq_resp, siw_uresp_create_cq>;
pub type CreateSrqReq = Req<ib_uverbs_create_srq>;
pub type CreateSrqResp = Resp<ib_uverbs_create_srq_resp, siw_uresp_create_srq>;
pub type ModifySrqReq = Req<ib_uverbs_modify_srq>;
pub type QuerySrqReq = Req<ib_uverbs_query_srq>;
pub type CreateQpReq = Req<ib_uverbs_create_qp>;
pub type CreateQpResp = Resp<ib_uverbs_create_qp_resp, siw_uresp_create_qp>;
pub type QueryQpReq = Req<ib_uverbs_query_qp>;
pub type ModifyQpReq = Req<ib_uverbs_modify_qp>;

/// The doorbell: a `post_send` with no work requests, which the kernel
/// takes as "look at the mapped SQ". Written straight to the command file,
/// as rdma-core's siw does (`siw_db`), so it costs one system call.
pub type Doorbell = Req<ib_uverbs_post_send>;

impl Doorbell {
    /// The doorbell of the QP with kernel handle `qp_handle`; the kernel
    /// writes its (ignored) answer to `resp`.
    pub fn new(qp_handle: u32, resp: &mut ib_uverbs_post_send_resp) -> Self {
        Req {
            hdr: ib_uverbs_cmd_hdr {
                command: IB_USER_VERBS_CMD_POST_SEND,
                in_words: (size_of::<Self>() / 4) as u16,
                out_words: (size_of::<ib_uverbs_post_send_resp>() / 4) as u16,
            },
            core: ib_uverbs_post_send {
                response: resp as *mut ib_uverbs_post_send_resp as u64,
                qp_handle,
                wr_count: 0,
                sge_count: 0,
                // What rdma-core's siw sends; no work request follows.
                wqe_size: size_of::<ibv_send_wr>() as u32,
            },
            drv: Empty,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    // C's sizes and offsets, worked out from the kernel structs the way
    // rdma-core's macros stack them (header 8 bytes, payloads 8-aligned
    // where they hold a u64).
    #[test]
    fn requests_as_c() {
        assert_eq!(size_of::<GetContextReq>(), 16);
        assert_eq!(size_of::<QueryPortReq>(), 24);
        assert_eq!(size_of::<AllocPdReq>(), 16);
        assert_eq!(offset_of!(RegMrReq, core), 8);
        assert_eq!(offset_of!(RegMrReq, drv), 48);
        assert_eq!(size_of::<RegMrReq>(), 56);
        assert_eq!(
            size_of::<CreateCqReq>(),
            8 + size_of::<ib_uverbs_create_cq>()
        );
        assert_eq!(offset_of!(ModifyQpReq, core), 8);
        assert_eq!(size_of::<Doorbell>(), 32);
    }

    #[test]
    fn responses_as_c() {
        assert_eq!(offset_of!(GetContextResp, drv), 8);
        assert_eq!(size_of::<GetContextResp>(), 16);
        assert_eq!(offset_of!(RegMrResp, drv), 12);
        assert_eq!(size_of::<RegMrResp>(), 20);
        assert_eq!(offset_of!(CreateCqResp, drv), 8);
        assert_eq!(size_of::<CreateCqResp>(), 24);
        assert_eq!(offset_of!(CreateSrqResp, drv), 16);
        assert_eq!(size_of::<CreateSrqResp>(), 32);
        assert_eq!(offset_of!(CreateQpResp, drv), 32);
        assert_eq!(size_of::<CreateQpResp>(), 64);
        assert_eq!(size_of::<AllocPdResp>(), 4);
    }

    #[test]
    fn doorbell_words() {
        let mut r = ib_uverbs_post_send_resp::default();
        let d = Doorbell::new(7, &mut r);
        assert_eq!((d.hdr.in_words, d.hdr.out_words), (8, 1));
        assert_eq!(d.hdr.command, IB_USER_VERBS_CMD_POST_SEND);
        assert_eq!(d.core.qp_handle, 7);
        assert_eq!((d.core.wr_count, d.core.sge_count), (0, 0));
        assert_eq!(d.core.response, &r as *const _ as u64);
    }
}
