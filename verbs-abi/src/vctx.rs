//! The `verbs_context` rules of `<infiniband/verbs.h>`, written once for
//! every crate that reaches extension entries the way the header's inline
//! code does (libibverbs, librdmacm, tests).
//!
//! An extended context is the tail of a `verbs_context`: `abi_compat` says
//! so, and `sz`, just before the embedded `ibv_context`, gives how long the
//! provider's struct is. Providers built against an older header have a
//! shorter struct that starts later (fields are only ever added at the
//! front), so an entry at byte offset `off` exists when
//! `sz >= size_of::<verbs_context>() - off` — the header's
//! `verbs_get_ctx_op` test.

use core::mem::{offset_of, size_of};

use crate::verbs::{ibv_context, verbs_context, VERBS_ABI_IS_EXTENDED};

/// The `verbs_context` an `ibv_context` is the tail of, if it is extended.
///
/// # Safety
/// `ctx` is a live context.
pub unsafe fn verbs_context_of(ctx: *mut ibv_context) -> Option<*mut verbs_context> {
    // SAFETY: the caller guarantees `ctx` is live.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    Some(
        ctx.cast::<u8>()
            .wrapping_sub(offset_of!(verbs_context, context))
            .cast::<verbs_context>(),
    )
}

/// Whether a provider struct of `sz` bytes holds the entry at `off`.
pub const fn verbs_context_covers(sz: usize, off: usize) -> bool {
    sz >= size_of::<verbs_context>() - off
}

/// Whether the extended context `vctx` holds the entry at byte offset
/// `off` of `verbs_context`.
///
/// # Safety
/// `vctx` comes from [`verbs_context_of`] on a live context.
pub unsafe fn verbs_context_has(vctx: *mut verbs_context, off: usize) -> bool {
    // SAFETY: `sz` sits just before the embedded context, inside the
    // provider's struct whatever its length.
    verbs_context_covers(unsafe { (*vctx).sz }, off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_rule() {
        let full = size_of::<verbs_context>();
        let first = offset_of!(verbs_context, query_port);
        let create_qp_ex = offset_of!(verbs_context, create_qp_ex);
        assert!(verbs_context_covers(full, first));
        assert!(verbs_context_covers(full - first, first));
        // One field short of reaching `query_port`: every later one is
        // still there, `query_port` is not.
        let short = full - first - size_of::<usize>();
        assert!(!verbs_context_covers(short, first));
        assert!(verbs_context_covers(short, first + size_of::<usize>()));
        // A bare ibv_context plus `sz` (the oldest providers) has none.
        let bare = size_of::<ibv_context>() + size_of::<usize>();
        assert!(!verbs_context_covers(bare, create_qp_ex));
    }
}
