//! rsockets: the socket API of `<rdma/rsocket.h>` over our own librdmacm
//! and libibverbs, so the bytes travel as RDMA writes on an RC QP.
//!
//! A stream rsocket is an rdma_cm id on its own event channel; connecting
//! exchanges, in the connection's private data, where each side's receive
//! ring is (`conn::Hello`). Both ends run this library: the protocol
//! (`conn`) is ours and is not rdma-core's rsocket wire format. A datagram
//! rsocket (`dgram`) is a UD QP named by a kernel UDP socket that only
//! answers address queries.
//!
//! Layers, top down: `api` (the exported calls) over `poll` (`rpoll`,
//! `rselect`) and `opts` (socket options, `rfcntl`) over `stream` (the
//! rsocket and its connection state machine) and `dgram` over `conn` (the
//! stream data path) over `verbs` (the libibverbs calls).

mod api;
mod conn;
mod dgram;
mod opts;
mod poll;
mod stream;
mod verbs;
