//! The kernel's RDMA CM, for ids on kernel RDMA devices (rxe, siw, NICs).
//!
//! `backend` decides which ids come here: a bind or an address resolution
//! to an address a kernel device owns, and the kernel half of a wildcard
//! listener. Such an id keeps its C object and its channel; the kernel's
//! id behind it is created on its channel's own `/dev/infiniband/rdma_cm`
//! file (`file`). The CM thread moves the file's events onto the channel
//! (`pump`), and rdma-core's handling of each (route queries, QP
//! transitions, the RTU) runs when the program takes it (`retrieve`).
//! `id` holds the kernel's handles and rdma-core's verbs over them.

mod convert;
mod file;
mod id;
mod pump;
mod retrieve;

pub use file::enabled;
pub use id::{create, destroy, lookup, KId};
pub use retrieve::on_retrieve;
