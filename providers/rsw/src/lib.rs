//! `rsw`: a software RDMA provider. Real RC queue pairs in userspace,
//! carried over TCP between processes and hosts, with no kernel module and
//! no daemon.
//!
//! libibverbs reaches the provider through one exported table,
//! [`verbs_rs_provider_v1`] (see `verbs_abi::provider`); programs reach the
//! data path through the function pointers stored in the public structs
//! (`ibv_context.ops`, `verbs_context`, `ibv_cq_ex`, `ibv_qp_ex`).
//!
//! Module map: `device` (interfaces as devices), `context` (contexts and
//! async events), `pd`, `mr` (key table), `channel` and `cq` (completions),
//! `qp` (QP object, state machine, post calls), `qp_ex` (`ibv_wr_*`),
//! `requester` / `responder` (the two halves of the RC protocol), `wire`
//! (message format), `transport` (byte streams between QPs, TCP today),
//! `progress` (the background thread that drives it all) and `util` (OS
//! helpers, including what a forked child resets).

pub mod channel;
pub mod context;
pub mod cq;
pub mod device;
pub mod gid;
pub mod guard;
pub mod handles;
pub mod mr;
pub mod pd;
pub mod progress;
pub mod qp;
pub mod qp_ex;
pub mod requester;
pub mod responder;
pub mod transport;
mod util;
pub mod wire;

use verbs_abi::provider::{ProviderOps, PROVIDER_ABI_VERSION};

/// The provider entry point libibverbs looks up after `dlopen`.
#[no_mangle]
pub static verbs_rs_provider_v1: ProviderOps = ProviderOps {
    abi_version: PROVIDER_ABI_VERSION,
    size: std::mem::size_of::<ProviderOps>() as u32,
    name: c"rsw".as_ptr(),
    discover: Some(device::discover),
    open_device: Some(context::open_device),
    close_device: Some(context::close_device),
    query_device_ex: Some(device::query_device_ex),
    query_port: Some(device::query_port),
    query_gid_ex: Some(device::query_gid_ex),
    query_pkey: Some(device::query_pkey),
    alloc_pd: Some(pd::alloc_pd),
    dealloc_pd: Some(pd::dealloc_pd),
    reg_mr: Some(mr::reg_mr),
    rereg_mr: Some(mr::rereg_mr),
    dereg_mr: Some(mr::dereg_mr),
    alloc_mw: None,
    dealloc_mw: None,
    create_comp_channel: Some(channel::create_comp_channel),
    destroy_comp_channel: Some(channel::destroy_comp_channel),
    get_cq_event: Some(channel::get_cq_event),
    ack_cq_events: Some(channel::ack_cq_events),
    create_cq_ex: Some(cq::create_cq_ex),
    resize_cq: Some(cq::resize_cq),
    destroy_cq: Some(cq::destroy_cq),
    create_srq_ex: None,
    modify_srq: None,
    query_srq: None,
    destroy_srq: None,
    create_qp_ex: Some(qp::create_qp_ex),
    modify_qp: Some(qp::modify_qp),
    query_qp: Some(qp::query_qp),
    destroy_qp: Some(qp::destroy_qp),
    create_ah: None,
    destroy_ah: None,
    attach_mcast: None,
    detach_mcast: None,
    get_async_event: Some(context::get_async_event),
    ack_async_event: Some(context::ack_async_event),
    object_context: Some(handles::object_context),
};
