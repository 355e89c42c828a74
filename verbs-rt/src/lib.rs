//! Runtime pieces shared by libibverbs, librdmacm and the rsw provider:
//! process-wide state that a forked child starts afresh ([`ForkFresh`]),
//! the table that validates every object pointer a C caller hands back
//! ([`Handles`]), and the event loop's system-call layer ([`Poller`]).

pub mod fork;
pub mod handles;
pub mod poller;

pub use fork::{fork_generation, register_fork_handler, ForkFresh};
pub use handles::Handles;
pub use poller::Poller;
