//! The misuse checker's CM checks (`RDMA_CHECK`, see `verbs_rt::check`):
//! `rdma_destroy_id` with CM events not acknowledged, which rdma-core
//! answers by blocking for ever, and the summary at exit.
//!
//! This module sits below the ids and the devices: it knows neither. What
//! it reports is pushed to it, and what must happen at exit is registered
//! with it as a hook by the module that owns the state (`at_exit`).

use parking_lot::Mutex;
use verbs_rt::check::{report, summary, Obj};

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

/// The exit summary's lines for the CM ids never destroyed and the CM
/// events never acknowledged.
pub(crate) fn leftovers(ids: &[usize], events: usize) {
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
}

/// What runs at exit with the checker on, in the reverse order of
/// registration (as atexit(3) runs its handlers); each hook once.
static HOOKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Runs `hook` at exit. The process-wide handler is installed with the
/// first hook: the first device open or event, so after the provider's own
/// leak summary was registered and therefore before it runs (the default
/// PDs this library keeps must be gone by then).
pub(crate) fn at_exit(hook: fn()) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(run_hooks) };
    });
    let mut hooks = HOOKS.lock();
    if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
        hooks.push(hook);
    }
}

extern "C" fn run_hooks() {
    let hooks = std::mem::take(&mut *HOOKS.lock());
    for h in hooks.iter().rev() {
        h();
    }
}
