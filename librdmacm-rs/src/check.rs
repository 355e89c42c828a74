//! The misuse checker's CM checks (`RDMA_CHECK`, see `verbs_abi::check`):
//! `rdma_destroy_id` with CM events not acknowledged, which rdma-core
//! answers by blocking for ever.

use verbs_abi::check::{report, summary, Obj};

/// `rdma_destroy_id` of `id` with `n` events the application never acked
/// (after the grace for other threads).
pub(crate) fn unacked_at_destroy(id: usize, n: u64) {
    report(
        "unacked_events",
        Obj::new("cm_id", id),
        &format!("rdma_destroy_id with {n} CM event(s) not acknowledged: rdma-core blocks for ever here; with the checker on it fails with EBUSY instead"),
        "rdma_get_cm_event(3)/rdma_destroy_id(3): every event must be released with rdma_ack_cm_event; rdma_destroy_id blocks until all events on the id are acknowledged",
    );
}

/// With the checker on, at exit: the CM ids never destroyed and the CM
/// events never acknowledged are listed, and the default PDs this library
/// keeps for the life of the process are released before the provider's
/// leak summary (registered earlier, when the first device was opened, so
/// it runs later). Registered at the first device open or event.
pub(crate) fn release_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(at_exit) };
    });
}

extern "C" fn at_exit() {
    let (ids, events) = crate::id::leftovers();
    if !ids.is_empty() {
        let mut l: Vec<String> = ids.iter().take(8).map(|h| format!("{h:#x}")).collect();
        if ids.len() > 8 {
            l.push(format!("and {} more", ids.len() - 8));
        }
        summary(&format!("leaked {} cm_id(s): {}", ids.len(), l.join(", ")));
    }
    if events > 0 {
        summary(&format!(
            "{events} CM event(s) never acknowledged (rdma_ack_cm_event)"
        ));
    }
    crate::device::release_default_pds();
}
