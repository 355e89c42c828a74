//! How the commands built by the `cmd_*` modules reach the kernel: the
//! ioctl method call ([`CmdBuf`]), or the `write()` command framed by
//! `write.rs` (extended or legacy header). Each verb takes an [`Issue`],
//! [`Kernel`] in use, so tests can put a stand-in where the uverbs file
//! would answer. Also the bits of rdma-core's cmd_write.h they all share.

use core::ffi::{c_int, c_void};
use core::mem::size_of;
use core::sync::atomic::Ordering;

use verbs_abi::uverbs::{ib_uverbs_cmd_hdr, ib_uverbs_ex_cmd_hdr};
use verbs_abi::*;

use super::cmd_buffer::CmdBuf;
use super::write::{extended, legacy};

/// The legacy header.
pub(crate) const HDR: usize = size_of::<ib_uverbs_cmd_hdr>();
/// Both headers of an extended command (rdma-core's `struct ex_hdr`).
pub(crate) const EX_HDRS: usize = HDR + size_of::<ib_uverbs_ex_cmd_hdr>();

/// An extended `write()` command, sized as `_execute_cmd_write_ex` takes
/// it: `req` starts with both headers; `core_req` counts them and the core
/// payload, `req_size` adds the provider's part; the response likewise.
pub(crate) struct ExCmd {
    pub command: u32,
    pub req: *mut c_void,
    pub core_req: usize,
    pub req_size: usize,
    pub resp: *mut c_void,
    pub core_resp: usize,
    pub resp_size: usize,
}

/// An extended request built here with no provider part: both headers,
/// then the core payload `T`.
#[repr(C)]
pub(crate) struct ExReq<T> {
    pub hdr: ib_uverbs_cmd_hdr,
    pub ex: ib_uverbs_ex_cmd_hdr,
    pub body: T,
}

impl<T> ExReq<T> {
    pub(crate) fn new(body: T) -> ExReq<T> {
        ExReq {
            hdr: ib_uverbs_cmd_hdr::default(),
            ex: ib_uverbs_ex_cmd_hdr::default(),
            body,
        }
    }

    /// The command sending this request whole, with `resp` (core only)
    /// for its response.
    pub(crate) fn cmd<R>(&mut self, command: u32, resp: Option<&mut R>) -> ExCmd {
        let (rp, rs) = match resp {
            Some(r) => ((r as *mut R).cast(), size_of::<R>()),
            None => (core::ptr::null_mut(), 0),
        };
        ExCmd {
            command,
            req: (self as *mut Self).cast(),
            core_req: size_of::<Self>(),
            req_size: size_of::<Self>(),
            resp: rp,
            core_resp: rs,
            resp_size: rs,
        }
    }
}

/// A legacy `write()` command whose payload already names its response
/// (`resp_size` bytes).
pub(crate) struct LegacyCmd {
    pub command: u32,
    pub req: *mut c_void,
    pub req_size: usize,
    pub resp_size: usize,
}

/// Where a built command goes.
pub(crate) trait Issue {
    /// Runs the method call; 0 or the errno.
    ///
    /// # Safety
    /// `ctx` is a kernel context; the buffer's attributes point at live
    /// memory.
    unsafe fn ioctl(&mut self, ctx: *mut ibv_context, cb: &mut CmdBuf) -> c_int;

    /// Frames and writes an extended command; 0 or the errno.
    ///
    /// # Safety
    /// `ctx` is a kernel context; the buffers are as `c` describes them.
    unsafe fn write_ex(&mut self, ctx: *mut ibv_context, c: &ExCmd) -> c_int;

    /// Frames and writes a legacy command; 0 or the errno.
    ///
    /// # Safety
    /// As for [`Issue::write_ex`].
    unsafe fn write(&mut self, ctx: *mut ibv_context, c: &LegacyCmd) -> c_int;
}

/// The context's uverbs command file.
pub(crate) struct Kernel;

impl Issue for Kernel {
    unsafe fn ioctl(&mut self, ctx: *mut ibv_context, cb: &mut CmdBuf) -> c_int {
        // SAFETY: forwarded contract.
        unsafe { cb.execute(ctx) }
    }

    unsafe fn write_ex(&mut self, ctx: *mut ibv_context, c: &ExCmd) -> c_int {
        // SAFETY: forwarded contract.
        unsafe {
            extended(
                ctx,
                c.command,
                c.req,
                c.core_req,
                c.req_size,
                c.resp,
                c.core_resp,
                c.resp_size,
            )
        }
    }

    unsafe fn write(&mut self, ctx: *mut ibv_context, c: &LegacyCmd) -> c_int {
        // SAFETY: forwarded contract.
        unsafe { legacy(ctx, c.command, c.req, c.req_size, c.resp_size) }
    }
}

/// rdma-core's `verbs_is_destroy_err`: true when the destroy must return
/// `*rc` now. After the device went away (EIO) the destroy counts as done,
/// with nothing more to wait for, when the program asked for that.
pub(crate) fn destroy_err(rc: &mut c_int) -> bool {
    if *rc == libc::EIO && crate::driver::verbs_allow_disassociate_destroy.load(Ordering::Relaxed) {
        *rc = 0;
        return true;
    }
    *rc != 0
}

/// The provider's request buffer, or a zeroed copy of it of at least
/// `core` bytes when it passed none or a shorter one, so the core payload
/// can always be filled in place.
pub(crate) struct ReqBuf {
    _owned: Vec<u64>,
    pub ptr: *mut c_void,
    pub size: usize,
}

/// # Safety
/// `cmd` is NULL or `cmd_size` readable bytes.
pub(crate) unsafe fn req_buf(cmd: *mut c_void, cmd_size: usize, core: usize) -> ReqBuf {
    if !cmd.is_null() && cmd_size >= core {
        return ReqBuf {
            _owned: Vec::new(),
            ptr: cmd,
            size: cmd_size,
        };
    }
    let mut v = vec![0u64; core.div_ceil(8)];
    if !cmd.is_null() {
        // SAFETY: `cmd_size` (< core) readable bytes, per the contract.
        unsafe {
            core::ptr::copy_nonoverlapping(cmd.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), cmd_size)
        };
    }
    let ptr = v.as_mut_ptr().cast();
    ReqBuf {
        _owned: v,
        ptr,
        size: core.div_ceil(8) * 8,
    }
}

/// `_array_len`: `size * n`, or `usize::MAX` on overflow (which the
/// attribute then refuses).
pub(crate) fn array_len(size: usize, n: usize) -> usize {
    if size != 0 && usize::MAX / size <= n {
        return usize::MAX;
    }
    size * n
}

#[cfg(test)]
pub(crate) mod testing {
    //! A kernel context whose command file is a pipe: what the verbs write
    //! can be read back, and closing the reader makes the kernel fail
    //! (EPIPE; Rust's runtime ignores SIGPIPE).

    use super::*;

    pub(crate) struct FakeCtx {
        ctx: *mut ibv_context,
        rd: c_int,
    }

    impl FakeCtx {
        pub(crate) fn new() -> FakeCtx {
            let mut fds = [0; 2];
            // SAFETY: two ints for the descriptors.
            let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
            assert_eq!(rc, 0);
            let mut c = Box::new(ibv_context::zeroed());
            c.cmd_fd = fds[1];
            c.async_fd = -1;
            FakeCtx {
                ctx: Box::into_raw(c),
                rd: fds[0],
            }
        }

        pub(crate) fn ctx(&self) -> *mut ibv_context {
            self.ctx
        }

        /// Everything written so far.
        pub(crate) fn take(&self) -> Vec<u8> {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: reading into our buffer.
                let n = unsafe { libc::read(self.rd, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    return out;
                }
                out.extend_from_slice(&buf[..n as usize]);
            }
        }

        /// The kernel goes away: writes now fail with EPIPE.
        pub(crate) fn close_reader(&mut self) {
            // SAFETY: our descriptor, closed once.
            unsafe { libc::close(self.rd) };
            self.rd = -1;
        }
    }

    impl Drop for FakeCtx {
        fn drop(&mut self) {
            // SAFETY: ours, from `new`.
            unsafe {
                if self.rd >= 0 {
                    libc::close(self.rd);
                }
                libc::close((*self.ctx).cmd_fd);
                drop(Box::from_raw(self.ctx));
            }
        }
    }

    pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
        u16::from_ne_bytes(b[o..o + 2].try_into().unwrap())
    }

    pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
    }

    pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_ne_bytes(b[o..o + 8].try_into().unwrap())
    }

    /// The legacy header: (command, in_words, out_words).
    pub(crate) fn legacy_hdr(b: &[u8]) -> (u32, u16, u16) {
        (u32_at(b, 0), u16_at(b, 4), u16_at(b, 6))
    }

    /// The extended headers: (command, in_words, out_words, response,
    /// provider_in_words, provider_out_words, cmd_hdr_reserved).
    pub(crate) fn ex_hdr(b: &[u8]) -> (u32, u16, u16, u64, u16, u16, u32) {
        (
            u32_at(b, 0),
            u16_at(b, 4),
            u16_at(b, 6),
            u64_at(b, 8),
            u16_at(b, 16),
            u16_at(b, 18),
            u32_at(b, 20),
        )
    }

    /// The ioctl goes to `f` in place of the kernel.
    pub(crate) struct IoctlFake<F>(pub F);

    impl<F: FnMut(*mut ibv_context, &mut CmdBuf) -> c_int> Issue for IoctlFake<F> {
        unsafe fn ioctl(&mut self, ctx: *mut ibv_context, cb: &mut CmdBuf) -> c_int {
            (self.0)(ctx, cb)
        }
        unsafe fn write_ex(&mut self, ctx: *mut ibv_context, c: &ExCmd) -> c_int {
            // SAFETY: forwarded contract.
            unsafe { Kernel.write_ex(ctx, c) }
        }
        unsafe fn write(&mut self, ctx: *mut ibv_context, c: &LegacyCmd) -> c_int {
            // SAFETY: forwarded contract.
            unsafe { Kernel.write(ctx, c) }
        }
    }

    /// The command is really written (to the pipe, so its bytes can be
    /// checked), then `f` plays the kernel: it gets the request as framed
    /// and the response buffer, fills that, and says what `write()` failed
    /// with (0 for success).
    pub(crate) struct WriteFake<F>(pub F);

    impl<F: FnMut(&[u8], *mut c_void) -> c_int> Issue for WriteFake<F> {
        unsafe fn ioctl(&mut self, ctx: *mut ibv_context, cb: &mut CmdBuf) -> c_int {
            // SAFETY: forwarded contract.
            unsafe { Kernel.ioctl(ctx, cb) }
        }
        unsafe fn write_ex(&mut self, ctx: *mut ibv_context, c: &ExCmd) -> c_int {
            // SAFETY: forwarded contract.
            let rc = unsafe { Kernel.write_ex(ctx, c) };
            if rc != 0 {
                return rc;
            }
            // SAFETY: the request as framed, `req_size` bytes.
            let req = unsafe { core::slice::from_raw_parts(c.req.cast::<u8>(), c.req_size) };
            (self.0)(req, c.resp)
        }
        unsafe fn write(&mut self, ctx: *mut ibv_context, c: &LegacyCmd) -> c_int {
            // SAFETY: forwarded contract.
            let rc = unsafe { Kernel.write(ctx, c) };
            if rc != 0 {
                return rc;
            }
            // SAFETY: as above.
            let req = unsafe { core::slice::from_raw_parts(c.req.cast::<u8>(), c.req_size) };
            // The kernel finds the response through the payload's first word.
            let resp = if c.resp_size != 0 {
                u64_at(req, HDR) as usize as *mut c_void
            } else {
                core::ptr::null_mut()
            };
            (self.0)(req, resp)
        }
    }
}
