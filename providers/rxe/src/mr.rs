//! Memory regions and memory windows. The kernel does all the work; a
//! type 1 window is bound by a send WQE (`ibv_bind_mw` posts one).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};

use verbs_abi::driver::verbs_mr;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::Cmd;
use crate::ffi;

#[repr(C)]
struct Mr {
    vmr: UnsafeCell<verbs_mr>,
}

#[repr(C)]
struct Mw {
    ibv: UnsafeCell<ibv_mw>,
}

/// # Safety
/// `pd` is a live PD of an rxe context; the range is the program's.
unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> Result<*mut ibv_mr, c_int> {
    let mr = Box::new(Mr {
        vmr: UnsafeCell::new(verbs_mr::zeroed()),
    });
    let mut cmd = Cmd::<ib_uverbs_reg_mr>::default();
    let mut resp = ib_uverbs_reg_mr_resp::default();
    // SAFETY: a live PD; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_reg_mr(
            pd,
            addr,
            length,
            hca_va,
            access,
            mr.vmr.get(),
            cmd.as_ptr(),
            cmd.size(),
            &mut resp,
            core::mem::size_of_val(&resp),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    Ok(Box::into_raw(mr).cast())
}

pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: libibverbs passes a live PD and the program's range.
    verbs_rt::errno::ptr_or_errno(unsafe { reg(pd, addr, length, hca_va, access) })
}

pub unsafe extern "C" fn dereg_mr(vmr: *mut verbs_mr) -> c_int {
    // SAFETY: an MR of ours, freed once, after the kernel let it go.
    unsafe {
        let rc = ffi::ibv_cmd_dereg_mr(vmr);
        if rc == 0 {
            drop(Box::from_raw(vmr.cast::<Mr>()));
        }
        rc
    }
}

/// # Safety
/// `pd` is a live PD of an rxe context.
unsafe fn alloc(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> Result<*mut ibv_mw, c_int> {
    let mw = Box::new(Mw {
        ibv: UnsafeCell::new(ibv_mw::zeroed()),
    });
    let mut cmd = Cmd::<ib_uverbs_alloc_mw>::default();
    let mut resp = ib_uverbs_alloc_mw_resp::default();
    // SAFETY: a live PD; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_alloc_mw(
            pd,
            mw_type,
            mw.ibv.get(),
            cmd.as_ptr(),
            cmd.size(),
            &mut resp,
            core::mem::size_of_val(&resp),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    Ok(Box::into_raw(mw).cast())
}

pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: libibverbs passes a live PD.
    verbs_rt::errno::ptr_or_errno(unsafe { alloc(pd, mw_type) })
}

pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: a window of ours, freed once, after the kernel let it go.
    unsafe {
        let rc = ffi::ibv_cmd_dealloc_mw(mw);
        if rc == 0 {
            drop(Box::from_raw(mw.cast::<Mw>()));
        }
        rc
    }
}

/// The rkey a bind gives a window: the same index, the next 8-bit key.
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_bind_mw`: a BIND_MW send WQE with the window's next rkey, which
/// the window takes once the WQE is posted (the program undoes that if
/// the completion fails).
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: libibverbs passes live objects and the program's request.
    unsafe {
        let b = &*bind;
        if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
            verbs_rt::errno::set_errno(libc::EINVAL);
            return libc::EINVAL;
        }
        let mut wr: ibv_send_wr = core::mem::zeroed();
        wr.opcode = IBV_WR_BIND_MW;
        wr.wr_id = b.wr_id;
        wr.send_flags = b.send_flags;
        let rkey = next_rkey((*mw).rkey);
        wr.ext.bind_mw = ibv_send_wr_bind_mw {
            mw,
            rkey,
            bind_info: b.bind_info,
        };
        let mut bad = core::ptr::null_mut();
        let rc = crate::post::post_send(qp, &mut wr, &mut bad);
        if rc != 0 {
            verbs_rt::errno::set_errno(rc);
            return rc;
        }
        (*mw).rkey = rkey;
        0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_rkey_turns_the_key_byte_only() {
        assert_eq!(super::next_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(super::next_rkey(0x1234_56ff), 0x1234_5600);
    }
}
