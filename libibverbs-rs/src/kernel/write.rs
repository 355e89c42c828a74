//! The uverbs `write()` command framing: a legacy header counted in
//! 4-byte words over the whole request, or the extended header counted in
//! 8-byte words with the provider's part apart. Both as rdma-core 44 frames
//! them; the kernel still takes every verb this way.

use core::ffi::{c_int, c_void};
use core::mem::size_of;

use verbs_abi::uverbs::{ib_uverbs_cmd_hdr, ib_uverbs_ex_cmd_hdr, IB_USER_VERBS_CMD_FLAG_EXTENDED};
use verbs_abi::*;

use crate::util::set_errno;

/// The pointer as the kernel's `__aligned_u64`.
pub(crate) fn ptr_u64<T>(p: *const T) -> u64 {
    p as usize as u64
}

fn write_all(fd: c_int, req: *const u8, len: usize) -> c_int {
    loop {
        // SAFETY: the caller's request is `len` readable bytes.
        let n = unsafe { libc::write(fd, req.cast(), len) };
        if n == len as isize {
            return 0;
        }
        let e = verbs_rt::errno::errno();
        if n < 0 && e == libc::EINTR {
            continue;
        }
        // A short write is the kernel refusing the length.
        return if n < 0 { e } else { libc::EINVAL };
    }
}

/// A legacy command: `req` starts with `ib_uverbs_cmd_hdr`, is `req_size`
/// bytes with the provider's part last; `resp_size` bytes at `resp`. The
/// caller has put `resp` in the core payload's `response` field where the
/// command has one. Returns 0 or an errno.
///
/// # Safety
/// `ctx` is a kernel context; `req` is `req_size` writable bytes and `resp`
/// NULL or `resp_size` writable bytes.
pub(crate) unsafe fn legacy(
    ctx: *mut ibv_context,
    command: u32,
    req: *mut c_void,
    req_size: usize,
    resp_size: usize,
) -> c_int {
    if !req_size.is_multiple_of(4)
        || !resp_size.is_multiple_of(4)
        || req_size > u16::MAX as usize * 4
    {
        return libc::EINVAL;
    }
    let hdr = req.cast::<ib_uverbs_cmd_hdr>();
    // SAFETY: the request begins with the header, per the contract.
    unsafe {
        (*hdr).command = command;
        (*hdr).in_words = (req_size / 4) as u16;
        (*hdr).out_words = (resp_size / 4) as u16;
        write_all((*ctx).cmd_fd, req.cast(), req_size)
    }
}

/// The legacy request `core` (header included) with the response pointer
/// in its first payload word, for commands built here with no provider
/// part.
///
/// # Safety
/// As for [`legacy`]; `T` begins with `ib_uverbs_cmd_hdr` then `response`.
pub(crate) unsafe fn legacy_core<T, R>(
    ctx: *mut ibv_context,
    command: u32,
    core: &mut T,
    resp: Option<&mut R>,
) -> c_int {
    let (rp, rs) = match resp {
        Some(r) => (r as *mut R as *mut c_void, size_of::<R>()),
        None => (core::ptr::null_mut(), 0),
    };
    let p = (core as *mut T).cast::<u8>();
    if rs != 0 {
        // SAFETY: the payload's first word, after the header, is `response`.
        unsafe {
            p.add(size_of::<ib_uverbs_cmd_hdr>())
                .cast::<u64>()
                .write_unaligned(ptr_u64(rp))
        };
    }
    // SAFETY: forwarded contract.
    unsafe { legacy(ctx, command, p.cast(), size_of::<T>(), rs) }
}

/// Sets `response` (the first payload word) of a provider's legacy
/// request, then issues it.
///
/// # Safety
/// As for [`legacy`], with `req` holding `response` after the header.
pub(crate) unsafe fn legacy_with_resp(
    ctx: *mut ibv_context,
    command: u32,
    req: *mut c_void,
    req_size: usize,
    resp: *mut c_void,
    resp_size: usize,
) -> c_int {
    if req_size < size_of::<ib_uverbs_cmd_hdr>() + 8 {
        return libc::EINVAL;
    }
    // SAFETY: the request has room for the response word (checked).
    unsafe {
        req.cast::<u8>()
            .add(size_of::<ib_uverbs_cmd_hdr>())
            .cast::<u64>()
            .write_unaligned(ptr_u64(resp));
        legacy(ctx, command, req, req_size, resp_size)
    }
}

/// An extended command: `req` holds both headers then the core payload
/// (`core_req_size` bytes counted from the start, headers included) then
/// the provider's part up to `req_size`; likewise the response.
///
/// # Safety
/// `ctx` is a kernel context; the buffers are as described and writable.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn extended(
    ctx: *mut ibv_context,
    command: u32,
    req: *mut c_void,
    core_req_size: usize,
    req_size: usize,
    resp: *mut c_void,
    core_resp_size: usize,
    resp_size: usize,
) -> c_int {
    let hdrs = size_of::<ib_uverbs_cmd_hdr>() + size_of::<ib_uverbs_ex_cmd_hdr>();
    let ok = core_req_size >= hdrs
        && req_size >= core_req_size
        && resp_size >= core_resp_size
        && (core_req_size - hdrs).is_multiple_of(8)
        && (req_size - core_req_size).is_multiple_of(8)
        && core_resp_size.is_multiple_of(8)
        && (resp_size - core_resp_size).is_multiple_of(8);
    if !ok {
        return libc::EINVAL;
    }
    let hdr = req.cast::<ib_uverbs_cmd_hdr>();
    // SAFETY: the request begins with both headers (checked size).
    unsafe {
        let ex = req
            .cast::<u8>()
            .add(size_of::<ib_uverbs_cmd_hdr>())
            .cast::<ib_uverbs_ex_cmd_hdr>();
        (*hdr).command = IB_USER_VERBS_CMD_FLAG_EXTENDED | command;
        (*hdr).in_words = ((core_req_size - hdrs) / 8) as u16;
        (*hdr).out_words = (core_resp_size / 8) as u16;
        (*ex).provider_in_words = ((req_size - core_req_size) / 8) as u16;
        (*ex).provider_out_words = ((resp_size - core_resp_size) / 8) as u16;
        (*ex).response = ptr_u64(resp);
        (*ex).cmd_hdr_reserved = 0;
        if !resp.is_null() {
            core::ptr::write_bytes(resp.cast::<u8>(), 0, resp_size);
        }
        write_all((*ctx).cmd_fd, req.cast(), req_size)
    }
}

/// For constructors: errno set, NULL returned.
pub(crate) fn fail_null<T>(e: c_int) -> *mut T {
    set_errno(e);
    core::ptr::null_mut()
}

/// A legacy request built here: the header, then the kernel's payload.
#[repr(C)]
pub(crate) struct Req<T> {
    pub hdr: ib_uverbs_cmd_hdr,
    pub body: T,
}

/// Issues `body` as legacy command `command`; with a response, the
/// payload's first word (its `response` field) is pointed at `resp`.
///
/// # Safety
/// `ctx` is a kernel context; `T` is the command's payload, starting with
/// `response` whenever `resp` is given.
pub(crate) unsafe fn run<T, R>(
    ctx: *mut ibv_context,
    command: u32,
    body: T,
    resp: Option<&mut R>,
) -> c_int {
    let mut req = Req {
        hdr: ib_uverbs_cmd_hdr::default(),
        body,
    };
    // SAFETY: forwarded contract; `Req` starts with the header.
    unsafe { legacy_core(ctx, command, &mut req, resp) }
}
