//! Process-wide state that a forked child starts afresh.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

/// A process-global value that a forked child replaces with a fresh one.
///
/// After `fork()` the child has only the forking thread, yet it inherits the
/// parent's memory: a lock held by one of the parent's other threads (the
/// progress thread, typically) would stay locked in the child forever. So
/// the child forgets the inherited value (it is leaked, never freed, so
/// stray references stay valid) and builds a new one on first use, like a
/// process that never used the provider. The parent's verbs objects are not
/// usable in the child, as with rdma-core.
///
/// Each value remembers the fork generation it was built in; the child's
/// `pthread_atfork` handler only bumps the generation, and every
/// `ForkFresh` notices on its next use. No list of tables to keep up to
/// date, so none can be forgotten.
pub struct ForkFresh<T> {
    ptr: AtomicPtr<Generational<T>>,
    init: fn() -> T,
}

struct Generational<T> {
    generation: u64,
    value: T,
}

/// Bumped in every forked child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The current fork generation (0 in the original process).
pub fn fork_generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

impl<T> ForkFresh<T> {
    pub const fn new(init: fn() -> T) -> ForkFresh<T> {
        ForkFresh {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            init,
        }
    }

    pub fn get(&self) -> &T {
        let generation = fork_generation();
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: non-null pointers come from Box::into_raw below and are
        // never freed.
        if !p.is_null() && unsafe { (*p).generation } == generation {
            // SAFETY: as above.
            return unsafe { &(*p).value };
        }
        register_fork_handler();
        let new = Box::into_raw(Box::new(Generational {
            generation,
            value: (self.init)(),
        }));
        // The parent's value (if any) is replaced, never freed: references
        // to it may survive in the child.
        match self
            .ptr
            .compare_exchange(p, new, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: we just published our own allocation.
            Ok(_) => unsafe { &(*new).value },
            Err(_) => {
                // SAFETY: `new` lost the race and was never shared.
                drop(unsafe { Box::from_raw(new) });
                self.get()
            }
        }
    }
}

static FORK_HANDLER: Once = Once::new();

/// Registers [`after_fork_child`] with `pthread_atfork`, once.
pub fn register_fork_handler() {
    FORK_HANDLER.call_once(|| {
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
}

/// Runs in a forked child: every `ForkFresh` starts afresh on its next use.
/// (An event loop, a thread and descriptors rather than a table,
/// registers its own handler.)
extern "C" fn after_fork_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}
