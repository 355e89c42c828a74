//! rsockets: the socket API of `<rdma/rsocket.h>` over our own librdmacm
//! and libibverbs, so the bytes travel as RDMA writes on an RC QP.
//!
//! A stream rsocket is an rdma_cm id on its own event channel; it speaks
//! rdma-core 44's rsocket protocol (`wire` has its formats, `conn` runs
//! it), so either end may be rdma-core's librdmacm. A datagram
//! rsocket (`dgram`) is named by a kernel UDP socket and sends from UD QPs,
//! in rdma-core 44's datagram protocol (`dwire` has its formats).
//!
//! Layers, top down: `api` (the exported calls) over `poll` (`rpoll`,
//! `rselect`) and `opts` (socket options, `rfcntl`) over `stream` (the
//! rsocket and its connection state machine) and `dgram` (over `dwire`)
//! over `conn` (the stream data path, in `wire`'s formats) over `verbs`
//! (the libibverbs calls). `settings` holds the option values all of them read.

mod api;
mod conn;
mod dgram;
mod dwire;
mod opts;
mod poll;
mod settings;
mod stream;
use crate::verbs;
mod wire;
