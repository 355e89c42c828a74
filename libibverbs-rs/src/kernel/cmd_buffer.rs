//! rdma-core's ioctl command buffer as its `ibv_cmd_*` methods build one
//! (cmd_ioctl.h): `DECLARE_COMMAND_BUFFER_LINK`, with room for the
//! attributes of the provider's linked buffers, and the `fill_attr_*`
//! helpers. [`execute_ioctl`] linearises the chain and issues it.

use core::ffi::{c_int, c_void};
use core::mem::size_of;
use core::ptr::addr_of_mut;

use verbs_abi::driver::{
    ib_uverbs_attr, ib_uverbs_attr_data, ibv_command_buffer, _UHW_NO_INDEX, IBV_CMDB_BUFFER_ERROR,
};
use verbs_abi::*;

use super::ioctl::{execute_ioctl, final_num_attrs, UVERBS_ATTR_F_MANDATORY};

/// The index an attribute gets when the buffer had no room left (the
/// buffer is then marked in error and never issued).
const NO_ROOM: usize = usize::MAX;

/// One method call: the header buffer followed by its attribute array.
pub(crate) struct CmdBuf {
    /// `_IOCTL_NUM_CMDB(total)` buffers, as C declares them: the first is
    /// the header, the rest only room for `hdr.attrs`. Only raw pointers
    /// from `as_mut_ptr` reach it, so `next_attr` stays valid.
    mem: Vec<ibv_command_buffer>,
}

impl CmdBuf {
    /// `DECLARE_COMMAND_BUFFER_LINK(object, method, num_attrs, link)`.
    ///
    /// # Safety
    /// `link` is NULL or a chain of live command buffers, which must stay
    /// live until the call is issued.
    pub(crate) unsafe fn new(
        object: u16,
        method: u16,
        num_attrs: u32,
        link: *mut ibv_command_buffer,
    ) -> CmdBuf {
        // SAFETY: per the contract.
        let total = unsafe { final_num_attrs(num_attrs, link) } as usize;
        let cb = size_of::<ibv_command_buffer>();
        let n = (2 * cb + size_of::<ib_uverbs_attr>() * total - 1) / cb;
        let mut me = CmdBuf {
            mem: vec![ibv_command_buffer::zeroed(); n],
        };
        let c = me.cmdb();
        // SAFETY: `c` heads `n` buffers, enough for `total` attributes after
        // its header (the `_IOCTL_NUM_CMDB` arithmetic).
        unsafe {
            let base = addr_of_mut!((*c).hdr.attrs).cast::<ib_uverbs_attr>();
            (*c).next = link;
            (*c).next_attr = base;
            (*c).last_attr = base.add(total);
            (*c).uhw_in_idx = _UHW_NO_INDEX;
            (*c).uhw_out_idx = _UHW_NO_INDEX;
            (*c).hdr.object_id = object;
            (*c).hdr.method_id = method;
        }
        me
    }

    /// The buffer as rdma-core's functions take it.
    pub(crate) fn cmdb(&mut self) -> *mut ibv_command_buffer {
        self.mem.as_mut_ptr()
    }

    fn base(&mut self) -> *mut ib_uverbs_attr {
        let c = self.cmdb();
        // SAFETY: in bounds of the first buffer.
        unsafe { addr_of_mut!((*c).hdr.attrs).cast() }
    }

    /// `_ioctl_next_attr`: the next slot, mandatory by default.
    fn push(&mut self, attr_id: u16, len: u16, data: u64) -> usize {
        let base = self.base();
        let c = self.cmdb();
        // SAFETY: `next_attr..last_attr` lies inside `mem` (set up in `new`).
        unsafe {
            let a = (*c).next_attr;
            if a >= (*c).last_attr {
                // C asserts; a call that cannot be marshalled fails EINVAL.
                (*c).bits |= IBV_CMDB_BUFFER_ERROR;
                return NO_ROOM;
            }
            a.write(ib_uverbs_attr {
                attr_id,
                len,
                flags: UVERBS_ATTR_F_MANDATORY,
                attr_data: ib_uverbs_attr_data { reserved: 0 },
                data,
            });
            (*c).next_attr = a.add(1);
            a.offset_from(base) as usize
        }
    }

    fn len16(&mut self, len: usize) -> u16 {
        if len > u16::MAX as usize {
            // SAFETY: the header buffer is ours.
            unsafe { (*self.cmdb()).bits |= IBV_CMDB_BUFFER_ERROR };
        }
        len as u16
    }

    /// `fill_attr_in_obj`: an object handle (IDR) in.
    pub(crate) fn in_obj(&mut self, attr_id: u16, idr: u32) -> usize {
        self.push(attr_id, 0, idr as u64)
    }

    /// `fill_attr_out_obj`: the kernel puts the new object's handle here.
    pub(crate) fn out_obj(&mut self, attr_id: u16) -> usize {
        self.in_obj(attr_id, 0)
    }

    /// `fill_attr_in_uint64` (and `fill_attr_const_in`).
    pub(crate) fn in_u64(&mut self, attr_id: u16, v: u64) -> usize {
        self.push(attr_id, 8, v)
    }

    /// `fill_attr_in_uint32`: the value in the first four bytes of `data`.
    pub(crate) fn in_u32(&mut self, attr_id: u16, v: u32) -> usize {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&v.to_ne_bytes());
        self.push(attr_id, 4, u64::from_ne_bytes(b))
    }

    /// `fill_attr_in`: up to eight bytes inline, a pointer beyond.
    ///
    /// # Safety
    /// `data` is readable for `len` bytes (and stays so until issued).
    pub(crate) unsafe fn in_ptr(&mut self, attr_id: u16, data: *const c_void, len: usize) -> usize {
        let l = self.len16(len);
        let v = if len <= size_of::<u64>() {
            let mut b = [0u8; 8];
            if len != 0 {
                // SAFETY: `len` readable bytes, per the contract.
                unsafe { core::ptr::copy_nonoverlapping(data.cast::<u8>(), b.as_mut_ptr(), len) };
            }
            u64::from_ne_bytes(b)
        } else {
            data as usize as u64
        };
        self.push(attr_id, l, v)
    }

    /// `fill_attr_in_enum`: `fill_attr_in` naming the element.
    ///
    /// # Safety
    /// As for [`CmdBuf::in_ptr`].
    pub(crate) unsafe fn in_enum(
        &mut self,
        attr_id: u16,
        elem_id: u8,
        data: *const c_void,
        len: usize,
    ) -> usize {
        // SAFETY: forwarded contract.
        let i = unsafe { self.in_ptr(attr_id, data, len) };
        if let Some(a) = self.slot(i) {
            // SAFETY: writing one member of a plain-data union.
            unsafe { (*a).attr_data.enum_data.elem_id = elem_id };
        }
        i
    }

    /// `fill_attr_out`: `len` bytes at `data` for the kernel to fill.
    pub(crate) fn out(&mut self, attr_id: u16, data: *mut c_void, len: usize) -> usize {
        let l = self.len16(len);
        self.push(attr_id, l, data as usize as u64)
    }

    /// `fill_attr_out_ptr`.
    pub(crate) fn out_ptr<T>(&mut self, attr_id: u16, data: *mut T) -> usize {
        self.out(attr_id, data.cast(), size_of::<T>())
    }

    fn slot(&mut self, i: usize) -> Option<*mut ib_uverbs_attr> {
        let base = self.base();
        // SAFETY: reading our own header buffer.
        let filled = unsafe { (*self.cmdb()).next_attr.offset_from(base) } as usize;
        // SAFETY: below `next_attr`, inside `mem`.
        (i < filled).then(|| unsafe { base.add(i) })
    }

    /// The attribute at `i` (as filled, or as the kernel left it).
    pub(crate) fn attr(&mut self, i: usize) -> Option<ib_uverbs_attr> {
        // SAFETY: `slot` only returns filled slots.
        self.slot(i).map(|a| unsafe { a.read() })
    }

    /// `read_attr_obj`: the handle the kernel returned at `i`.
    pub(crate) fn read_obj(&mut self, i: usize) -> u32 {
        self.attr(i).map_or(0, |a| a.data as u32)
    }

    /// `execute_ioctl`: 0 or the errno (also left in `errno`).
    ///
    /// # Safety
    /// `ctx` is a kernel context; every pointer the attributes carry is
    /// still live, and so is the linked chain.
    pub(crate) unsafe fn execute(&mut self, ctx: *mut ibv_context) -> c_int {
        // SAFETY: forwarded contract; `new` sized the array for the chain.
        unsafe { execute_ioctl(ctx, self.cmdb()) }
    }

    /// The header as it stands (after [`CmdBuf::execute`], the array the
    /// kernel was given).
    #[cfg(test)]
    pub(crate) fn hdr(&mut self) -> verbs_abi::driver::ib_uverbs_ioctl_hdr {
        // SAFETY: our own header buffer.
        unsafe { (*self.cmdb()).hdr }
    }

    /// Plays the kernel: puts `v` in the `data` of attribute `i`.
    #[cfg(test)]
    pub(crate) fn set_data(&mut self, i: usize, v: u64) {
        let a = self.slot(i).expect("a filled attribute");
        // SAFETY: a filled slot of `mem`.
        unsafe { (*a).data = v };
    }

    /// The attributes filled here, before any linearisation.
    #[cfg(test)]
    pub(crate) fn filled(&mut self) -> Vec<ib_uverbs_attr> {
        let base = self.base();
        // SAFETY: `base..next_attr` are filled slots of `mem`.
        unsafe {
            let n = (*self.cmdb()).next_attr.offset_from(base) as usize;
            core::slice::from_raw_parts(base, n).to_vec()
        }
    }

    /// The first `n` slots of the array (filled here, then the copies of
    /// the linked buffers' attributes once linearised).
    #[cfg(test)]
    pub(crate) fn array(&mut self, n: usize) -> Vec<ib_uverbs_attr> {
        let base = self.base();
        // SAFETY: bounded by the capacity set up in `new`.
        unsafe {
            assert!(base.add(n) <= (*self.cmdb()).last_attr);
            core::slice::from_raw_parts(base, n).to_vec()
        }
    }
}

/// Test views of attributes (`ib_uverbs_attr` has a union, so no `Debug`
/// or `PartialEq`): id, len, flags, attr_data, data.
#[cfg(test)]
pub(crate) fn key(a: &ib_uverbs_attr) -> (u16, u16, u16, u16, u64) {
    // SAFETY: both views of attr_data are plain integers.
    let ad = unsafe { a.attr_data.reserved };
    (a.attr_id, a.len, a.flags, ad, a.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::cmd_issue::testing::FakeCtx;
    use verbs_abi::uverbs::{UVERBS_ATTR_UHW_IN, UVERBS_OBJECT_DM};

    const M: u16 = UVERBS_ATTR_F_MANDATORY;

    #[test]
    fn fill_helpers_lay_out_attributes_as_rdma_core() {
        // SAFETY: no link; the inputs outlive the buffer.
        unsafe {
            let mut b = CmdBuf::new(7, 3, 8, core::ptr::null_mut());
            let small = [1u8, 2, 3];
            let big = [9u64; 2];
            let mut out = 0u64;
            assert_eq!(b.out_obj(0), 0);
            b.in_obj(1, 0x1234);
            b.in_u64(2, 0x1122_3344_5566_7788);
            b.in_u32(3, 0xdead_beef);
            b.in_ptr(4, small.as_ptr().cast(), 3);
            b.in_enum(5, 2, big.as_ptr().cast(), 16);
            b.out_ptr(6, &mut out);
            b.in_obj(8, 5);
            let a = b.filled();
            assert_eq!(a.len(), 8);
            assert_eq!(key(&a[0]), (0, 0, M, 0, 0));
            assert_eq!(key(&a[1]), (1, 0, M, 0, 0x1234));
            assert_eq!(key(&a[2]), (2, 8, M, 0, 0x1122_3344_5566_7788));
            let mut w = [0u8; 8];
            w[..4].copy_from_slice(&0xdead_beef_u32.to_ne_bytes());
            assert_eq!(key(&a[3]), (3, 4, M, 0, u64::from_ne_bytes(w)));
            assert_eq!(key(&a[4]).4.to_ne_bytes()[..3], small);
            assert_eq!(key(&a[5]), (5, 16, M, 2, big.as_ptr() as u64));
            assert_eq!(key(&a[6]), (6, 8, M, 0, &mut out as *mut u64 as u64));
            assert_eq!(key(&a[7]), (8, 0, M, 0, 5));
            let h = b.hdr();
            assert_eq!((h.object_id, h.method_id), (7, 3));
            assert!(!(*b.cmdb()).buffer_error());
            // Full: the ninth attribute marks the buffer in error.
            assert_eq!(b.in_u64(9, 0), NO_ROOM);
            assert!((*b.cmdb()).buffer_error());
        }
    }

    #[test]
    fn oversized_attribute_is_a_buffer_error() {
        // SAFETY: the pointer is never read (the buffer is in error).
        unsafe {
            let mut b = CmdBuf::new(7, 3, 1, core::ptr::null_mut());
            b.out(1, core::ptr::null_mut(), 1 << 16);
            assert!((*b.cmdb()).buffer_error());
            let f = FakeCtx::new();
            assert_eq!(b.execute(f.ctx()), libc::EINVAL);
        }
    }

    #[test]
    fn link_room_and_linearisation() {
        // SAFETY: both buffers and the data outlive the call.
        unsafe {
            let drv = [5u8, 6];
            let mut link = CmdBuf::new(UVERBS_OBJECT_DM, 0, 3, core::ptr::null_mut());
            link.in_u32(0x1000 + 2, 77);
            link.in_ptr(UVERBS_ATTR_UHW_IN, drv.as_ptr().cast(), 2);
            let mut b = CmdBuf::new(UVERBS_OBJECT_DM, 0, 2, link.cmdb());
            // Room for ours and the two the link filled, not its capacity.
            let c = b.cmdb();
            let base = addr_of_mut!((*c).hdr.attrs).cast::<ib_uverbs_attr>();
            assert_eq!((*c).last_attr.offset_from(base), 4);
            assert_eq!((*c).next, link.cmdb());
            b.out_obj(0);
            b.in_u64(1, 4096);
            // A pipe is no uverbs file: the ioctl fails after the chain was
            // linearised into our array.
            let f = FakeCtx::new();
            assert_eq!(b.execute(f.ctx()), libc::ENOTTY);
            let h = b.hdr();
            assert_eq!(h.num_attrs, 4);
            assert_eq!(h.length as usize, 24 + 4 * 16);
            let arr = b.array(4);
            let l = link.filled();
            assert_eq!(key(&arr[2]), key(&l[0]));
            assert_eq!(key(&arr[3]), key(&l[1]));
        }
    }
}
