//! `rsw`: a software RDMA provider. RC, UC, UD and XRC queue pairs in
//! userspace, carried over TCP (RC, UC, XRC) and UDP (UD) between processes
//! and hosts, and by a same-host path between processes of one host, with
//! no kernel module and no daemon.
//!
//! libibverbs reaches the provider through one exported table,
//! [`verbs_rs_provider_v1`] (see `verbs_abi::provider`); programs reach the
//! data path through the function pointers stored in the public structs
//! (`ibv_context.ops`, `verbs_context`, `ibv_cq_ex`, `ibv_qp_ex`).
//!
//! Module map, top to bottom (each calls only those below it; see
//! docs/architecture.md):
//! - entry points: this file (the one entry-point table, and `testing`,
//!   what the tests reach), `leaks` (the misuse checker's exit summary);
//! - verbs: `qp/` (creation, the state machine, posting, multicast,
//!   `ibv_wr_*`, the checker's QP checks);
//! - engine: `engine/` (`requester`, `samehost` (the same-host path's
//!   requests), `completer`, `responder` for RC, UC and XRC, each with its
//!   per-QP state in its `info`, which the QP holds through the
//!   `wq::Engines` trait; `datagram` for UD, `raw` for raw packet QPs);
//! - objects: `wq/` (the QP's state), `rwq` (work queues and RSS
//!   indirection tables), `flow` (steering rules, RSS hashing), `srq`,
//!   `mw`, `dm`, `remote_srq`,
//!   `place` (placing a message into a receive), `cq`, `mr` (the key
//!   table), `xrcd`, `ah`, `pd`, `xrc_registry`,
//!   `ring` (work queues), `context`, `channel`, `device`, `td`;
//! - transport: `transport/` (TCP, UDP, the same-host path);
//! - progress: `progress` (the background thread), `port` (the link
//!   watch), `stats` (counters, the socket `rsw-stat` reads);
//! - bottom: `check` (the misuse checker's ledger), `wire` (message
//!   format), `roce/` (RoCEv2's headers and ICRC, not yet wired into the
//!   engines), `gid`, `handles` (the handle table type), `guard` (fault-safe
//!   access to application memory), `ringmem`, `event_count`, `faults`
//!   (what `RSW_FAULTS` asks for), `trace` and `util`.

mod ah;
mod channel;
mod check;
mod context;
mod cq;
mod device;
mod dm;
mod engine;
mod event_count;
mod faults;
mod flow;
mod gid;
mod guard;
mod handles;
mod leaks;
mod mr;
mod mw;
mod pd;
mod place;
mod port;
mod progress;
mod qp;
mod remote_srq;
mod ring;
mod ringmem;
mod roce;
mod rwq;
mod srq;
mod stats;
mod td;
mod tm;
mod trace;
mod transport;
mod util;
pub mod wire;
mod wq;
mod xrc_registry;
mod xrcd;

use std::os::raw::c_void;

use verbs_abi::provider::{async_event_object, ObjectKind, ProviderOps, PROVIDER_ABI_VERSION};
use verbs_abi::*;

/// The provider entry point libibverbs looks up after `dlopen`.
#[no_mangle]
pub static verbs_rs_provider_v1: ProviderOps = ProviderOps {
    abi_version: PROVIDER_ABI_VERSION,
    size: std::mem::size_of::<ProviderOps>() as u32,
    name: c"rsw".as_ptr(),
    discover: Some(device::discover),
    open_device: Some(open_device),
    close_device: Some(context::close_device),
    query_device_ex: Some(context::query_device_ex),
    query_port: Some(context::query_port),
    query_gid_ex: Some(context::query_gid_ex),
    query_pkey: Some(context::query_pkey),
    alloc_pd: Some(pd::alloc_pd),
    dealloc_pd: Some(pd::dealloc_pd),
    reg_mr: Some(mr::reg_mr),
    rereg_mr: Some(mr::rereg_mr),
    dereg_mr: Some(mr::dereg_mr),
    alloc_mw: Some(mw::alloc_mw),
    dealloc_mw: Some(mw::dealloc_mw),
    create_comp_channel: Some(channel::create_comp_channel),
    destroy_comp_channel: Some(channel::destroy_comp_channel),
    get_cq_event: Some(channel::get_cq_event),
    ack_cq_events: Some(cq::ack_cq_events),
    create_cq_ex: Some(cq::create_cq_ex),
    resize_cq: Some(cq::resize_cq),
    destroy_cq: Some(cq::destroy_cq),
    create_srq_ex: Some(srq::create_srq_ex),
    modify_srq: Some(srq::modify_srq),
    query_srq: Some(srq::query_srq),
    destroy_srq: Some(srq::destroy_srq),
    create_qp_ex: Some(qp::create_qp_ex),
    modify_qp: Some(qp::modify_qp),
    query_qp: Some(qp::query_qp),
    destroy_qp: Some(qp::destroy_qp),
    create_ah: Some(ah::create_ah),
    destroy_ah: Some(ah::destroy_ah),
    attach_mcast: Some(qp::attach_mcast),
    detach_mcast: Some(qp::detach_mcast),
    get_async_event: Some(context::get_async_event),
    ack_async_event: Some(ack_async_event),
    object_context: Some(object_context),
    create_cq: None,
    create_srq: None,
    create_qp: None,
};

/// The data-path entries every context carries: one table with the one
/// above, so the provider's whole C surface is declared here.
static DATA_PATH: context::DataPath = context::DataPath {
    create_cq_ex: cq::create_cq_ex,
    create_qp_ex: qp::create_qp_ex,
    poll_cq: cq::poll_cq,
    req_notify_cq: cq::req_notify_cq,
    post_send: qp::post_send,
    post_recv: qp::post_recv,
    create_srq_ex: srq::create_srq_ex,
    post_srq_recv: srq::post_srq_recv,
    post_srq_ops: srq::post_srq_ops,
    get_srq_num: srq::get_srq_num,
    open_xrcd: xrcd::open_xrcd,
    close_xrcd: xrcd::close_xrcd,
    alloc_mw: mw::alloc_mw,
    bind_mw: qp::bind_mw,
    dealloc_mw: mw::dealloc_mw,
    advise_mr: mr::advise_mr,
    alloc_dm: dm::alloc_dm,
    free_dm: dm::free_dm,
    reg_dm_mr: dm::reg_dm_mr,
    alloc_td: td::alloc_td,
    dealloc_td: td::dealloc_td,
    alloc_parent_domain: pd::alloc_parent_domain,
    open_qp: qp::open_qp,
    create_flow: qp::create_flow,
    destroy_flow: qp::destroy_flow,
    create_wq: rwq::create_wq,
    modify_wq: rwq::modify_wq,
    destroy_wq: rwq::destroy_wq,
    create_rwq_ind_table: rwq::create_rwq_ind_table,
    destroy_rwq_ind_table: rwq::destroy_rwq_ind_table,
};

unsafe extern "C" fn open_device(device: *mut ibv_device, handle: *mut c_void) -> *mut ibv_context {
    if verbs_rt::check::on() {
        check::init(check::Above {
            qp_handle: qp::check::handle_of,
            sends_naming: qp::check::sends_naming,
            exit_summary: leaks::report,
        });
    }
    // SAFETY: forwarded from libibverbs' open of this device.
    let ctx = unsafe { context::open_device(device, handle, &DATA_PATH) };
    if !ctx.is_null() {
        stats::serve(qp::stats_report);
    }
    ctx
}

/// Acknowledges an async event: the object it is about may be destroyed
/// once all of its events are acknowledged.
unsafe extern "C" fn ack_async_event(event: *mut ibv_async_event) {
    // SAFETY: event is what get_async_event returned; its element is a live
    // object because destroying that object waits for this acknowledgement.
    unsafe {
        let ev = &*event;
        if verbs_rt::check::on() {
            check::async_acked(ev);
        }
        match async_event_object(ev.event_type) {
            Some(ObjectKind::Cq) => crate::cq::Cq::from_ibv(ev.element.cq).async_events.acked(1),
            Some(ObjectKind::Qp) => crate::qp::Qp::from_ibv(ev.element.qp).async_events.acked(1),
            Some(ObjectKind::Srq) => crate::srq::Srq::from_ibv(ev.element.srq)
                .async_events
                .acked(1),
            _ => {}
        }
    }
}

/// The provider's `object_context` entry (see `verbs_abi::provider`).
unsafe extern "C" fn object_context(kind: u32, obj: *mut c_void) -> *mut ibv_context {
    let ctx = match ObjectKind::from_u32(kind) {
        Some(ObjectKind::Pd) => pd::PDS.get(obj),
        Some(ObjectKind::Mr) => mr::MRS.get(obj),
        Some(ObjectKind::Cq) => cq::CQS.get(obj),
        Some(ObjectKind::CompChannel) => channel::CHANNELS.get(obj),
        Some(ObjectKind::Xrcd) => xrcd::XRCDS.get(obj),
        Some(ObjectKind::Mw) => mw::MWS.get(obj).map(|m| handles::Ctx(m.context())),
        Some(ObjectKind::Ah) => ah::AHS.get(obj).map(|a| handles::Ctx(a.ctx_ptr())),
        // The context each was made in, not what its public struct says
        // now: a program may have overwritten that (the verb then fails as
        // the kernel's does, see `handles::names`).
        Some(ObjectKind::Srq) => srq::SRQS.get(obj).map(|s| handles::Ctx(s.ibv_ctx)),
        Some(ObjectKind::Qp) => qp::QPS
            .get(obj)
            .and_then(|w| w.upgrade())
            .map(|q| handles::Ctx(q.ibv_ctx)),
        // Kinds this provider never creates.
        _ => None,
    };
    ctx.map_or(std::ptr::null_mut(), |c| c.0)
}

/// What the tests reach besides the C ABI and the wire format (`wire`,
/// which their hand-written peers speak): counters and switches of the
/// engines, named here so every module can stay the crate's own. Not an
/// API for programs.
#[doc(hidden)]
pub mod testing {
    pub use crate::engine::responder::refused_connections;
    pub use crate::faults::configure as configure_faults;
    pub use crate::gid::ipv4_mapped;
    pub use crate::qp::{held_connections, socket_calls};
    pub use crate::wq::conn::pending_connections;

    /// The same-host path's counters and switch (`transport::local`,
    /// `transport::shm`).
    pub mod local {
        pub use crate::transport::local::{atomic_batches, direct_ops, doorbells};
    }
    pub mod shm {
        pub use crate::transport::shm::enabled;
    }

    /// Completions a CQ holds, not polled yet.
    ///
    /// # Safety
    /// `cq` is a live CQ of this provider.
    pub unsafe fn cq_backlog(cq: *mut verbs_abi::ibv_cq) -> usize {
        // SAFETY: per the contract.
        unsafe { crate::cq::Cq::from_ibv(cq) }.backlog()
    }

    /// Runs `f` with the QP table locked (as a fork from another thread
    /// may find it).
    pub fn with_qps_locked<R>(f: impl FnOnce() -> R) -> R {
        crate::qp::QPS.with_locked(f)
    }
}
