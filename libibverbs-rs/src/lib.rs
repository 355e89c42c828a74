//! libibverbs.so.1: the verbs API of rdma-core 44 over our own providers.
//!
//! Every exported symbol is listed, with its version node, in
//! `exports.txt`; the build turns that list into the linker's version
//! script. Modules are grouped by the object their verbs act on.
//!
//! Panic policy: every exported function's body is `verbs_rt::export!`,
//! which keeps a panic from unwinding into C (`catch_unwind`, then the
//! call's C error with errno `EIO`); the workspace builds with
//! `panic = "abort"`, so in the shipped library a bug aborts instead. The
//! entry points validate the pointers they can check (NULL, devices we
//! never listed, contexts that are not open, see `device::context_ops`)
//! and report EINVAL rather than crash.

mod ah;
mod check;
mod compat;
mod context;
mod cq;
mod device;
mod driver;
mod fork;
mod kernel;
mod mcast;
mod mr;
mod pd;
mod qp;
mod srq;
mod strings;
mod sysfs;
mod trace_ops;
mod unsupported;
mod util;
