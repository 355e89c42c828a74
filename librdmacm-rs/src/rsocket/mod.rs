//! rsockets: the socket API of `<rdma/rsocket.h>` over our own librdmacm
//! and libibverbs, so the bytes travel as RDMA writes on an RC QP.
//!
//! A stream rsocket is an rdma_cm id on its own event channel; connecting
//! exchanges, in the connection's private data, where each side's receive
//! ring is (`conn::Hello`). Both ends run this library: the protocol
//! (`conn`) is ours and is not rdma-core's rsocket wire format. Datagram
//! rsockets are not implemented (`rsocket(.., SOCK_DGRAM, ..)` fails with
//! EOPNOTSUPP).
//!
//! Layers, top down: `api` (the exported calls) over `poll` (`rpoll`,
//! `rselect`) and `opts` (socket options, `rfcntl`) over `stream` (the
//! rsocket and its connection state machine) over `conn` (the data path)
//! over `verbs` (the libibverbs calls).

mod api;
mod conn;
mod opts;
mod poll;
mod stream;
mod verbs;
