//! Receive WQ indirection tables (rdma-core's
//! `ibv_cmd_create_rwq_ind_table` in cmd.c and cmd_rwq_ind.c), through
//! the extended `write()` commands.

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::cmd_issue::{destroy_err, ExCmd, ExReq, Issue, Kernel, EX_HDRS};
use verbs_rt::export;

const CORE: usize = EX_HDRS + size_of::<ib_uverbs_ex_create_rwq_ind_table>();
const RESP: usize = size_of::<ib_uverbs_ex_create_rwq_ind_table_resp>();
/// The longest request the 16-bit word counts of the headers can carry.
const MAX_REQ: usize = EX_HDRS + u16::MAX as usize * 8;

/// # Safety
/// `ctx` a kernel context; `init_attr` valid, its table `1 <<
/// log_ind_tbl_size` live WQs; `resp` `resp_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_create_rwq_ind_table(
    ctx: *mut ibv_context,
    init_attr: *mut ibv_rwq_ind_table_init_attr,
    rwq_ind_table: *mut ibv_rwq_ind_table,
    resp: *mut ib_uverbs_ex_create_rwq_ind_table_resp,
    resp_size: usize,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { create_rwq_ind_table(ctx, init_attr, rwq_ind_table, resp, resp_size, &mut Kernel) }
    })
}

pub(crate) unsafe fn create_rwq_ind_table(
    ctx: *mut ibv_context,
    init_attr: *mut ibv_rwq_ind_table_init_attr,
    rwq_ind_table: *mut ibv_rwq_ind_table,
    resp: *mut ib_uverbs_ex_create_rwq_ind_table_resp,
    resp_size: usize,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_create_rwq_ind_table`.
    unsafe {
        let a = &*init_attr;
        if a.comp_mask >= IBV_CREATE_IND_TABLE_RESERVED {
            return libc::EINVAL;
        }
        // A table the command cannot carry (the kernel's own limit is far
        // lower) is refused before the shift could overflow.
        let n = 1usize.checked_shl(a.log_ind_tbl_size).unwrap_or(usize::MAX);
        if n > (MAX_REQ - CORE) / size_of::<u32>() {
            return libc::EINVAL;
        }
        // The whole message is a multiple of 8 bytes.
        let size = (CORE + n * size_of::<u32>()).div_ceil(8) * 8;
        let mut buf = vec![0u64; size / 8];
        let p = buf.as_mut_ptr().cast::<u8>();
        p.add(EX_HDRS)
            .cast::<ib_uverbs_ex_create_rwq_ind_table>()
            .write(ib_uverbs_ex_create_rwq_ind_table {
                comp_mask: 0,
                log_ind_tbl_size: a.log_ind_tbl_size,
            });
        let handles = p.add(CORE).cast::<u32>();
        for i in 0..n {
            handles.add(i).write((**a.ind_tbl.add(i)).handle);
        }
        let rc = k.write_ex(
            ctx,
            &ExCmd {
                command: IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL,
                req: p.cast(),
                core_req: size,
                req_size: size,
                resp: resp.cast(),
                core_resp: RESP,
                resp_size,
            },
        );
        if rc != 0 {
            return rc;
        }
        let r = resp.read_volatile();
        // An old kernel's shorter answer lacks the table's number.
        if (r.response_length as usize) < RESP {
            return libc::EINVAL;
        }
        let t = &mut *rwq_ind_table;
        t.ind_tbl_handle = r.ind_tbl_handle as c_int;
        t.ind_tbl_num = r.ind_tbl_num as c_int;
        t.context = ctx;
    }
    0
}

/// # Safety
/// `rwq_ind_table` is a live table of a kernel context.
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_destroy_rwq_ind_table(
    rwq_ind_table: *mut ibv_rwq_ind_table,
) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { destroy_rwq_ind_table(rwq_ind_table, &mut Kernel) }
    })
}

pub(crate) unsafe fn destroy_rwq_ind_table(
    rwq_ind_table: *mut ibv_rwq_ind_table,
    k: &mut impl Issue,
) -> c_int {
    // SAFETY: per the contract of `ibv_cmd_destroy_rwq_ind_table`.
    let mut rc = unsafe {
        let t = &*rwq_ind_table;
        let mut req = ExReq::new(ib_uverbs_ex_destroy_rwq_ind_table {
            comp_mask: 0,
            ind_tbl_handle: t.ind_tbl_handle as u32,
        });
        let c = req.cmd::<()>(IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL, None);
        k.write_ex(t.context, &c)
    };
    if destroy_err(&mut rc) {
        return rc;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_issue::testing::*;
    use core::ffi::c_void;

    const EXT: u32 = IB_USER_VERBS_CMD_FLAG_EXTENDED;

    #[test]
    fn create_lists_the_wq_handles_and_checks_the_answer() {
        let mut f = FakeCtx::new();
        let mut wqs = [ibv_wq::zeroed(), ibv_wq::zeroed()];
        wqs[0].handle = 0x10;
        wqs[1].handle = 0x20;
        let mut tbl = [&mut wqs[0] as *mut ibv_wq, &mut wqs[1] as *mut ibv_wq];
        let mut a = ibv_rwq_ind_table_init_attr {
            log_ind_tbl_size: 1,
            ind_tbl: tbl.as_mut_ptr(),
            comp_mask: 0,
        };
        let mut t = ibv_rwq_ind_table::zeroed();
        // The provider's response: the core, then 8 bytes of its own.
        let mut resp = [0u64; 3];
        let rp = resp
            .as_mut_ptr()
            .cast::<ib_uverbs_ex_create_rwq_ind_table_resp>();
        let mut answer = 16u32;
        let mut k = WriteFake(|_: &[u8], r: *mut c_void| {
            // SAFETY: the response the command names.
            unsafe {
                *r.cast::<ib_uverbs_ex_create_rwq_ind_table_resp>() =
                    ib_uverbs_ex_create_rwq_ind_table_resp {
                        comp_mask: 0,
                        response_length: answer,
                        ind_tbl_handle: 0x99,
                        ind_tbl_num: 0x300,
                    };
            }
            answer = 8;
            0
        });
        // SAFETY: every object outlives the calls.
        unsafe {
            let rc = create_rwq_ind_table(f.ctx(), &mut a, &mut t, rp, 24, &mut k);
            assert_eq!(rc, 0);
            let b = f.take();
            // 24 + 8 + 2 * 4 = 40, already a multiple of 8.
            assert_eq!(b.len(), 40);
            assert_eq!(ex_hdr(&b), (EXT | 55, 2, 2, rp as u64, 0, 1, 0));
            assert_eq!((u32_at(&b, 24), u32_at(&b, 28)), (0, 1));
            assert_eq!((u32_at(&b, 32), u32_at(&b, 36)), (0x10, 0x20));
            assert_eq!(
                (t.ind_tbl_handle, t.ind_tbl_num, t.context),
                (0x99, 0x300, f.ctx())
            );
            // The second answer is too short.
            t.ind_tbl_handle = 0;
            assert_eq!(
                create_rwq_ind_table(f.ctx(), &mut a, &mut t, rp, 24, &mut k),
                libc::EINVAL
            );
            assert_eq!(t.ind_tbl_handle, 0);
            let _ = f.take();
            // One entry: padded to 8 bytes.
            a.log_ind_tbl_size = 0;
            assert_eq!(
                ibv_cmd_create_rwq_ind_table(f.ctx(), &mut a, &mut t, rp, 16),
                libc::EINVAL
            );
            let b = f.take();
            assert_eq!(b.len(), 40);
            assert_eq!(ex_hdr(&b).1, 2);
            assert_eq!((u32_at(&b, 32), u32_at(&b, 36)), (0x10, 0));
            a.comp_mask = IBV_CREATE_IND_TABLE_RESERVED;
            assert_eq!(
                ibv_cmd_create_rwq_ind_table(f.ctx(), &mut a, &mut t, rp, 16),
                libc::EINVAL
            );
            a.comp_mask = 0;
            a.log_ind_tbl_size = 40;
            assert_eq!(
                ibv_cmd_create_rwq_ind_table(f.ctx(), &mut a, &mut t, rp, 16),
                libc::EINVAL
            );
            assert!(f.take().is_empty());
            a.log_ind_tbl_size = 1;
            f.close_reader();
            assert_eq!(
                ibv_cmd_create_rwq_ind_table(f.ctx(), &mut a, &mut t, rp, 16),
                libc::EPIPE
            );
        }
    }

    #[test]
    fn destroy_names_the_table() {
        let mut f = FakeCtx::new();
        let mut t = ibv_rwq_ind_table::zeroed();
        t.context = f.ctx();
        t.ind_tbl_handle = 0x66;
        // SAFETY: the table outlives the calls.
        unsafe {
            assert_eq!(ibv_cmd_destroy_rwq_ind_table(&mut t), 0);
            let b = f.take();
            assert_eq!(b.len(), 32);
            assert_eq!(ex_hdr(&b), (EXT | 56, 1, 0, 0, 0, 0, 0));
            assert_eq!((u32_at(&b, 24), u32_at(&b, 28)), (0, 0x66));
            f.close_reader();
            assert_eq!(ibv_cmd_destroy_rwq_ind_table(&mut t), libc::EPIPE);
        }
    }
}
