//! librdmacm.so.1: the RDMA connection manager in userspace.
//!
//! rdma-core's librdmacm asks the kernel's `rdma_cm` module to exchange IB
//! CM messages. Here the exchange runs over ordinary TCP/IP instead, with
//! no kernel module and no daemon: a listener is a real TCP listening
//! socket on the id's address and port, and each RDMA connection carries
//! its CM messages (REQ/REP/RTU/REJ/DREQ/DREP, see [`wire`]) over its own
//! TCP connection, kept open for the life of the RDMA connection so a dead
//! peer is noticed. Datagram ids ask a listener for its UD QP the same way
//! (SIDR_REQ/SIDR_REP), the connection closing after the answer; multicast
//! groups are IP multicast groups joined through libibverbs. Devices, QPs
//! and CQs come from our libibverbs through its exported C API only.
//! Ids on kernel devices use the kernel's CM (`kernel`, see `backend`);
//! ids on an rsw device in RoCEv2 mode carry the same state machine's
//! messages as the IB CM's MADs on QP1 (`gsi`, `mad`, `id::ibcm`), which
//! the kernel's CM understands.
//!
//! Layout: `cma` (the `rdma_*` entry points), `id` (the id state machine),
//! `channel` (event channels and events), `engine` (the CM thread),
//! `device` (shared device contexts and GID lookup), `wire`, `mad`,
//! `gsi`, `addr`, `sock`, `ffi` and `verbs` (libibverbs calls),
//! `addrinfo` and `rsocket`.

// The exported functions must keep C's names and signatures.
#![allow(clippy::missing_safety_doc)]

mod addr;
mod addrinfo;
mod backend;
mod channel;
mod check;
mod cma;
mod device;
mod engine;
mod error;
mod faults;
mod ffi;
mod gsi;
mod id;
mod kernel;
mod mad;
mod rsocket;
mod sock;
mod verbs;
mod wire;
