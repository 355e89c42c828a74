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
