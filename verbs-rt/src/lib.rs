//! Runtime pieces shared by libibverbs, librdmacm and the providers (each
//! shared object links its own copy, statics included):
//!
//! * `export`: `export!`, the body of every exported C function (its C
//!   convention, the tracer's record, no unwinding into C);
//! * `errno`: the calling thread's errno and the C return conventions
//!   (`int`, `ptr`, `minus_one`);
//! * `trace`: the verbs tracer (`RDMA_TRACE`);
//! * `check`: the misuse checker's switch, sink and report format
//!   (`RDMA_CHECK`);
//! * `logging`: the logger behind the `log` crate's macros
//!   (`VERBS_LOG_LEVEL`, `VERBS_LOG_FILE`, ...);
//! * `fault_spec`: the text of the fault-injection rules (`RSW_FAULTS`);
//! * [`ForkFresh`] (`fork`): process-wide state that a forked child starts
//!   afresh;
//! * [`Handles`] (`handles`): the table that validates every object
//!   pointer a C caller hands back;
//! * [`Poller`] (`poller`): the event loop's system-call layer.

pub mod check;
pub mod errno;
pub mod export;
pub mod fault_spec;
pub mod fork;
pub mod handles;
pub mod logging;
pub mod poller;
pub mod trace;

pub use fork::{fork_generation, register_fork_handler, ForkFresh};
pub use handles::Handles;
pub use poller::Poller;
