//! `siw-rs`: the userspace half of the kernel's soft iWARP device (siw),
//! a Rust replacement for rdma-core's `libsiw-rdmav34.so`.
//!
//! siw keeps every queue in the kernel and maps it into the process: work
//! requests are written into the mapped SQ and RQ, completions read from
//! the mapped CQ, and the CQ is armed through a word after its CQEs. Only
//! an SQ the kernel may have gone idle on needs a system call (the
//! doorbell, an empty `post_send`). Everything else is a uverbs command
//! issued through libibverbs' `ibv_cmd_*` helpers, which rdma-core 44
//! exports to its providers (`IBVERBS_PRIVATE_34`) and our libibverbs too.
//!
//! Modules, top to bottom: `device` (what libibverbs registers and
//! matches), `context` (an open device, its queries and its operation
//! table), the objects `pd`, `mr`, `cq`, `srq`, `qp`, the data path
//! `post`; below them `wqe` (work requests and completions in siw's
//! format), `ring` (the shared rings and their hand-over), `mapping` (a
//! kernel queue mapped here), `lock` (the queues' spin lock), `abi` (command layouts) and `ffi` (the calls
//! into libibverbs). The entry points are thin `extern "C"` functions of
//! the object modules; `unsafe` is confined to them and to the rings.

mod abi;
mod context;
mod cq;
mod device;
mod ffi;
mod lock;
mod mapping;
mod mr;
mod pd;
mod post;
mod qp;
mod ring;
mod srq;
mod wqe;

/// Registers the provider while the library loads, as rdma-core's
/// `PROVIDER_DRIVER` constructor does: libibverbs has `dlopen`ed us and
/// picks up every table registered during the call.
#[cfg(not(test))]
extern "C" fn register() {
    // SAFETY: a static table that lives as long as the library, which is
    // never unloaded.
    unsafe { ffi::verbs_register_driver_34(&device::DEVICE_OPS.0) };
}

/// The constructor (`.init_array`). Not in the unit tests' executables,
/// which have no libibverbs to register with.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static REGISTER: extern "C" fn() = register;
