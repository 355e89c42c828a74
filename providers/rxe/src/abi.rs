//! The buffers the provider hands the `ibv_cmd_*` commands: rdma-core's
//! request layouts (`struct ibv_alloc_pd` and the like: the write()
//! header, then the kernel's payload) and rxe's `DECLARE_DRV_CMD`
//! responses (the core response, then rxe's part, `rxe-abi.h`), where the
//! kernel reports the mmap offsets of the queues and the AH number.
//!
//! rdma-core's headers declare these per command; here two generic shapes
//! cover them all, and the tests pin each offset the kernel relies on.

use verbs_abi::uverbs::*;

/// A legacy request (C: `struct ibv_<cmd>`): the write() header, the
/// kernel's payload `T`, then the driver's part `D` (`()` for none).
#[repr(C)]
#[derive(Default)]
pub struct Cmd<T, D = ()> {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: T,
    pub drv: D,
}

/// An extended request (C: `struct ibv_<cmd>_ex`): both headers, then the
/// kernel's payload.
#[repr(C)]
#[derive(Default)]
pub struct ExCmd<T> {
    pub hdr: ib_uverbs_cmd_hdr,
    pub ex_hdr: ib_uverbs_ex_cmd_hdr,
    pub core: T,
}

/// A response with rxe's part after the core one (C: `struct
/// urxe_<cmd>_resp`, whose `ibv_resp` and `drv_payload` these are).
#[repr(C)]
#[derive(Default)]
pub struct Resp<T, D> {
    pub core: T,
    pub drv: D,
}

impl<T, D> Cmd<T, D> {
    pub fn size(&self) -> usize {
        core::mem::size_of::<Self>()
    }

    /// The request as the `void *cmd` the commands take.
    pub fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        (self as *mut Self).cast()
    }
}

impl<T> ExCmd<T> {
    pub fn size(&self) -> usize {
        core::mem::size_of::<Self>()
    }

    pub fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        (self as *mut Self).cast()
    }
}

impl<T, D> Resp<T, D> {
    pub fn size(&self) -> usize {
        core::mem::size_of::<Self>()
    }

    /// The response as the core type the commands take.
    pub fn as_core(&mut self) -> *mut T {
        (self as *mut Self).cast()
    }
}

pub type CreateCqResp = Resp<ib_uverbs_create_cq_resp, rxe_create_cq_resp>;
pub type CreateCqExResp = Resp<ib_uverbs_ex_create_cq_resp, rxe_create_cq_resp>;
pub type ResizeCqResp = Resp<ib_uverbs_resize_cq_resp, rxe_resize_cq_resp>;
pub type CreateQpResp = Resp<ib_uverbs_create_qp_resp, rxe_create_qp_resp>;
pub type CreateQpExResp = Resp<ib_uverbs_ex_create_qp_resp, rxe_create_qp_resp>;
pub type CreateSrqResp = Resp<ib_uverbs_create_srq_resp, rxe_create_srq_resp>;
pub type CreateAhResp = Resp<ib_uverbs_create_ah_resp, rxe_create_ah_resp>;
/// `struct urxe_modify_srq`: the kernel writes the new queue's mmap
/// information where `drv.mmap_info_addr` points.
pub type ModifySrqCmd = Cmd<ib_uverbs_modify_srq, rxe_modify_srq_cmd>;

/// `struct ibv_post_send` with no work requests: rxe's doorbell.
pub type PostSendCmd = Cmd<ib_uverbs_post_send>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// Where rxe's part starts: right after the core response, at that
    /// type's alignment, as in C's `DECLARE_DRV_CMD` union.
    #[test]
    fn driver_parts_where_the_kernel_writes_them() {
        assert_eq!(offset_of!(CreateCqResp, drv), 8);
        assert_eq!(offset_of!(CreateCqExResp, drv), 16);
        assert_eq!(offset_of!(ResizeCqResp, drv), 8);
        assert_eq!(offset_of!(CreateQpResp, drv), 32);
        assert_eq!(offset_of!(CreateQpExResp, drv), 40);
        assert_eq!(offset_of!(CreateSrqResp, drv), 16);
        assert_eq!(offset_of!(CreateAhResp, drv), 4);
        assert_eq!(size_of::<CreateAhResp>(), 12);
        assert_eq!(offset_of!(ModifySrqCmd, drv), 24);
        assert_eq!(size_of::<ModifySrqCmd>(), 32);
    }

    #[test]
    fn request_sizes_match_rdma_core() {
        // The doorbell's in_words is its size in 32-bit words.
        assert_eq!(size_of::<PostSendCmd>(), 32);
        assert_eq!(size_of::<Cmd<ib_uverbs_alloc_pd>>(), 16);
        assert_eq!(size_of::<Cmd<ib_uverbs_create_qp>>(), 8 + 56);
        assert_eq!(size_of::<ExCmd<ib_uverbs_ex_create_qp>>(), 24 + 64);
    }
}
