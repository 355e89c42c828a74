//! What the provider's handle tables (`verbs_rt::Handles`, one per object
//! kind) hold besides the object, and the lookup libibverbs makes through
//! [`object_context`] before it reads through an application's pointer.

use verbs_abi::*;

/// The context an object belongs to, kept beside it so a lookup needs no
/// read through the application's pointer.
#[derive(Clone, Copy)]
pub struct Ctx(pub *mut ibv_context);

// SAFETY: a plain address, only handed back to libibverbs.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// What the kernel answers when a request names an object it does not
/// have, for rdma-core over uverbs sends the `handle` (and goes to the
/// command file of the `context`) it finds in the object's public struct,
/// which a program can overwrite. uverbs looks the handle up and finds
/// nothing: its ioctl methods fail the attribute lookup with ENOENT
/// (every destroy, and creating QPs and SRQs, which rdma-core 44 sends as
/// ioctls), its write() commands find no object and answer EINVAL
/// (modify and query, `reg_mr`, `alloc_mw`, `create_ah`, `resize_cq`,
/// `req_notify_cq` as rxe sends it, `attach_mcast`).
pub const UNKNOWN_BY_IOCTL: i32 = libc::ENOENT;
/// See [`UNKNOWN_BY_IOCTL`].
pub const UNKNOWN_BY_WRITE: i32 = libc::EINVAL;

/// Whether the `context` and `handle` fields of a live object's public
/// struct still name it: `ctx` is the context it was made in, `handle`
/// the handle it was given. The object stays whole when they do not (the
/// verb fails as the kernel's does, [`UNKNOWN_BY_IOCTL`]), so a program
/// that still holds it can use and destroy it once the fields are put
/// back.
///
/// # Safety
/// Both fields are readable: they belong to a live object of ours.
pub unsafe fn names(
    ctx_field: *const *mut ibv_context,
    handle_field: *const u32,
    ctx: *mut ibv_context,
    handle: u32,
) -> bool {
    // Volatile: the application writes these fields, not through us.
    // SAFETY: forwarded contract.
    unsafe {
        std::ptr::read_volatile(ctx_field) == ctx && std::ptr::read_volatile(handle_field) == handle
    }
}
