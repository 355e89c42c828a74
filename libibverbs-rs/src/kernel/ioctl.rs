//! The uverbs ioctl method interface (`RDMA_VERBS_IOCTL`): rdma-core's
//! `execute_ioctl` over a provider's chain of `ibv_command_buffer`s, and a
//! small builder for the methods this library issues itself.

use core::ffi::{c_int, c_uint};
use core::mem::size_of;

use verbs_abi::driver::{
    ib_uverbs_attr, ib_uverbs_attr_data, ib_uverbs_ioctl_hdr, ibv_command_buffer, _UHW_NO_INDEX,
};
use verbs_abi::*;

use super::context::private_of;
use verbs_rt::export;

/// `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub(crate) const RDMA_VERBS_IOCTL: libc::c_ulong = 0xc018_1b01;
pub(crate) const UVERBS_ATTR_F_MANDATORY: u16 = 1;
pub(crate) const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 2;
/// `UVERBS_ATTR_UHW_IN`: the provider's input, `UVERBS_ID_NS_UHW` | 0.
const UVERBS_ATTR_UHW_IN: u16 = 0x1000;

pub(crate) const UVERBS_OBJECT_DEVICE: u16 = 0;
pub(crate) const UVERBS_METHOD_QUERY_PORT: u16 = 2;
pub(crate) const UVERBS_METHOD_QUERY_CONTEXT: u16 = 4;
pub(crate) const UVERBS_METHOD_QUERY_GID_ENTRY: u16 = 6;

/// Issues the ioctl; 0 or the errno.
///
/// # Safety
/// `hdr` is followed by `hdr.num_attrs` attributes whose pointers are
/// valid for the lengths they give.
unsafe fn issue(ctx: *mut ibv_context, hdr: *mut ib_uverbs_ioctl_hdr) -> c_int {
    // SAFETY: per the contract; a kernel context's private part is ours.
    unsafe {
        (*hdr).length = (size_of::<ib_uverbs_ioctl_hdr>()
            + size_of::<ib_uverbs_attr>() * (*hdr).num_attrs as usize)
            as u16;
        (*hdr).reserved1 = 0;
        (*hdr).reserved2 = 0;
        (*hdr).driver_id = private_of(ctx).map_or(0, |p| p.driver_id);
        loop {
            if libc::ioctl((*ctx).cmd_fd, RDMA_VERBS_IOCTL, hdr) == 0 {
                return 0;
            }
            let e = verbs_rt::errno::errno();
            if e != libc::EINTR {
                return e;
            }
        }
    }
}

/// One method call built here: up to eight attributes.
#[repr(C)]
pub(crate) struct Call {
    hdr: ib_uverbs_ioctl_hdr,
    attrs: [ib_uverbs_attr; 8],
}

impl Call {
    pub(crate) fn new(object: u16, method: u16) -> Call {
        Call {
            hdr: ib_uverbs_ioctl_hdr {
                object_id: object,
                method_id: method,
                ..Default::default()
            },
            attrs: [ib_uverbs_attr::default(); 8],
        }
    }

    fn push(&mut self, a: ib_uverbs_attr) {
        let i = self.hdr.num_attrs as usize;
        self.attrs[i] = a;
        self.hdr.num_attrs += 1;
    }

    /// An input whose value fits the attribute (`fill_attr_const_in`,
    /// `fill_attr_in_uint32`).
    pub(crate) fn inline_in(&mut self, id: u16, v: u64, len: u16) {
        self.push(ib_uverbs_attr {
            attr_id: id,
            len,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: ib_uverbs_attr_data { reserved: 0 },
            data: v,
        });
    }

    /// An output buffer the kernel fills.
    pub(crate) fn out<T>(&mut self, id: u16, dst: *mut T) {
        self.push(ib_uverbs_attr {
            attr_id: id,
            len: size_of::<T>() as u16,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: ib_uverbs_attr_data { reserved: 0 },
            data: dst as usize as u64,
        });
    }

    /// Runs the call; 0 or the errno.
    ///
    /// # Safety
    /// `ctx` is a kernel context and every output buffer is still live.
    pub(crate) unsafe fn run(&mut self, ctx: *mut ibv_context) -> c_int {
        // SAFETY: the attributes follow the header in this struct.
        unsafe { issue(ctx, &mut self.hdr) }
    }
}

/// Counts the attributes of a chain: `num_attrs` plus those filled in each
/// linked buffer.
///
/// # Safety
/// `link` is NULL or a chain of command buffers.
pub(crate) unsafe fn final_num_attrs(
    num_attrs: c_uint,
    mut link: *const ibv_command_buffer,
) -> c_uint {
    let mut n = num_attrs;
    while !link.is_null() {
        // SAFETY: per the contract; `next_attr` points into the buffer's own
        // attribute array, after `hdr`.
        unsafe {
            let first = core::ptr::addr_of!((*link).hdr.attrs).cast::<ib_uverbs_attr>();
            n += (*link).next_attr.offset_from(first) as c_uint;
            link = (*link).next;
        }
    }
    n
}

/// rdma-core's `execute_ioctl`: the linked buffers' attributes are copied
/// after this one's, a short provider input is inlined, the kernel runs the
/// method, and the linked attributes are copied back to their owners.
///
/// # Safety
/// `ctx` is a kernel context; `cmd` a command buffer whose attribute array
/// has room for every linked attribute (`__ioctl_final_num_attrs`).
#[no_mangle]
pub unsafe extern "C" fn execute_ioctl(
    ctx: *mut ibv_context,
    cmd: *mut ibv_command_buffer,
) -> c_int {
    export!(raw::int, untraced, {
        if ctx.is_null() || cmd.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: per the contract.
        unsafe {
            let c = &mut *cmd;
            if c.buffer_error() {
                verbs_rt::errno::set_errno(libc::EINVAL);
                return libc::EINVAL;
            }
            let base = core::ptr::addr_of_mut!(c.hdr.attrs).cast::<ib_uverbs_attr>();
            let mut end = c.next_attr;
            let mut link = c.next;
            while !link.is_null() {
                let l = &*link;
                let lbase = core::ptr::addr_of!(l.hdr.attrs).cast::<ib_uverbs_attr>();
                if l.uhw_in_idx != _UHW_NO_INDEX && c.uhw_in_idx == _UHW_NO_INDEX {
                    c.uhw_in_idx = l.uhw_in_idx + end.offset_from(base) as u8;
                }
                let mut cur = lbase;
                while !core::ptr::eq(cur, l.next_attr) {
                    // `last_attr` is one past the buffer's last slot.
                    if !c.last_attr.is_null() && end >= c.last_attr {
                        return libc::EINVAL;
                    }
                    *end = *cur;
                    end = end.add(1);
                    cur = cur.add(1);
                }
                link = l.next;
            }
            c.hdr.num_attrs = end.offset_from(base) as u16;
            if c.uhw_in_idx != _UHW_NO_INDEX {
                let uhw = &mut *base.add(c.uhw_in_idx as usize);
                if uhw.attr_id == UVERBS_ATTR_UHW_IN && uhw.len as usize <= size_of::<u64>() {
                    let mut v = 0u64;
                    core::ptr::copy_nonoverlapping(
                        uhw.data as usize as *const u8,
                        (&mut v as *mut u64).cast::<u8>(),
                        uhw.len as usize,
                    );
                    uhw.data = v;
                }
            }
            let rc = issue(ctx, &mut c.hdr);
            if rc != 0 {
                verbs_rt::errno::set_errno(rc);
                return rc;
            }
            // Linked attributes go back to their owners (outputs such as
            // object handles are read from there).
            let mut end = c.next_attr as *const ib_uverbs_attr;
            let mut link = c.next;
            while !link.is_null() {
                let l = &mut *link;
                let mut cur = core::ptr::addr_of_mut!(l.hdr.attrs).cast::<ib_uverbs_attr>();
                while cur != l.next_attr {
                    *cur = *end;
                    end = end.add(1);
                    cur = cur.add(1);
                }
                link = l.next;
            }
            0
        }
    })
}

/// Exported counterpart of [`final_num_attrs`] (rdma-core's
/// `__ioctl_final_num_attrs`, used by its command-buffer macros).
///
/// # Safety
/// As for [`final_num_attrs`].
#[no_mangle]
pub unsafe extern "C" fn __ioctl_final_num_attrs(
    num_attrs: c_uint,
    link: *mut ibv_command_buffer,
) -> c_uint {
    export!(raw::value, untraced, {
        // SAFETY: forwarded contract.
        unsafe { final_num_attrs(num_attrs, link) }
    })
}
