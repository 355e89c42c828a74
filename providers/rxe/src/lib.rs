//! The userspace half of the kernel's soft RoCE device, rxe: a provider
//! for rdma-core 44's provider interface (`IBVERBS_PRIVATE_34`), in place
//! of rdma-core's C `librxe-rdmav34.so`. Our libibverbs loads it as
//! `librxe-rs-rdmav34.so` (RDMAV_C_PROVIDERS=rxe picks the C one).
//!
//! The kernel does the transport; the provider creates the kernel's
//! objects through libibverbs' `ibv_cmd_*` commands and maps the queues
//! the kernel shares: WQEs are written straight into the send, receive and
//! SRQ rings (a POST_SEND command with no requests is the doorbell), and
//! completions read straight out of the CQ rings.
//!
//! Modules, top to bottom: `device` (what is registered, the match table),
//! `context` (the operation table, queries); the data path `post`
//! (posting) and `wr` (`ibv_wr_*`); the objects `pd`, `mr` (regions and
//! windows), `ah`, `cq`, `srq`, `qp`; below them `wq` (a work queue, its
//! posting and the doorbell), `wqe` (what goes into a slot), `cqe` (what
//! comes out of one), `queue` (a ring shared with the kernel), `lock`;
//! beside them `abi` (command buffers) and `ffi` (libibverbs' functions).
//! Each module's extern "C" functions are thin: they turn the C pointers
//! into our objects and call safe code.

mod abi;
mod ah;
mod context;
mod cq;
mod cqe;
mod device;
mod ffi;
mod lock;
mod mr;
mod pd;
mod post;
mod qp;
mod queue;
mod srq;
mod wq;
mod wqe;
mod wr;

/// Registers the provider when the shared object is loaded, as C's
/// `PROVIDER_DRIVER` constructor does: libibverbs loads us while reading
/// its driver list, and matches devices against the table right after.
#[cfg(not(test))]
extern "C" fn register() {
    // SAFETY: the operations are a static of this object, which never
    // unloads (linked -z nodelete).
    unsafe { ffi::verbs_register_driver_34(&device::DEVICE_OPS.0) };
}

// Not in the unit tests: they run without libibverbs.
#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER: extern "C" fn() = register;
