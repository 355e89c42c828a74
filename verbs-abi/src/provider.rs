//! The provider ABI: how libibverbs finds and drives a provider.
//!
//! A provider is a shared object named by a driver file (`driver NAME` in
//! `$IBV_CONFIG_DIR`). libibverbs `dlopen`s it and looks up one data symbol,
//! [`PROVIDER_ENTRY_SYMBOL`], a `static` [`ProviderOps`]. Everything else goes
//! through that table:
//!
//! * `discover` lists the provider's devices; libibverbs wraps each in an
//!   `ibv_device` it owns and never frees (devices may outlive the list that
//!   returned them, as in rdma-core).
//! * `open_device` returns the `ibv_context` that sits at the end of a
//!   `verbs_context` the provider allocated. The provider fills
//!   `context.device` (with the device it was given), `async_fd`,
//!   `num_comp_vectors`, the data-path entries of `context.ops`,
//!   `abi_compat = VERBS_ABI_IS_EXTENDED`, `sz`, and the `verbs_context`
//!   entries (`query_port`, `create_cq_ex`, `create_qp_ex`, ...) that
//!   programs reach through the inline functions of `<infiniband/verbs.h>`.
//! * The other entries back the exported verbs. libibverbs checks
//!   arguments that need no provider knowledge (NULL objects, closed
//!   contexts) before calling; a provider may leave an entry `None`, and the
//!   verb then fails with `EOPNOTSUPP`.
//!
//! Object rules, the contract the inline functions rely on:
//! * Every QP a provider returns is the `qp_base` of an `ibv_qp_ex`, so
//!   `ibv_qp_to_qp_ex` is a cast.
//! * Every CQ is the start of an `ibv_cq_ex`, so `ibv_create_cq` is
//!   `create_cq_ex` plus a cast.
//! * Errors: `c_int` entries return 0 or a positive errno; pointer entries
//!   return NULL and set `errno`.
//!
//! Versioning: `abi_version` must equal [`PROVIDER_ABI_VERSION`]; `size` is
//! `size_of::<ProviderOps>()` of the provider's build, so entries appended
//! later read as absent from an older provider.

use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::verbs::*;

/// Bumped when an existing entry changes meaning or signature.
pub const PROVIDER_ABI_VERSION: u32 = 1;

/// The name of the `ProviderOps` static every provider exports.
pub const PROVIDER_ENTRY_SYMBOL: &core::ffi::CStr = c"verbs_rs_provider_v1";

/// Longest device name, including the NUL (`IBV_SYSFS_NAME_MAX`).
pub const DEVICE_NAME_MAX: usize = 64;

/// One device as a provider reports it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProviderDevice {
    /// NUL-terminated device name, unique on the host, stable across runs.
    pub name: [c_char; DEVICE_NAME_MAX],
    /// `IBV_NODE_*`.
    pub node_type: c_int,
    /// `IBV_TRANSPORT_*`.
    pub transport_type: c_int,
    /// Node GUID in network byte order, as `ibv_get_device_guid` returns it.
    pub node_guid: u64,
    /// The provider's own reference, handed back to `open_device`. Must stay
    /// valid for the life of the process.
    pub handle: *mut c_void,
}

/// A table entry; `None` means the provider does not implement it.
type Entry<F> = Option<F>;

/// The table a provider exports. All entries are `unsafe extern "C"` and may
/// be called from any thread.
#[repr(C)]
pub struct ProviderOps {
    pub abi_version: u32,
    pub size: u32,
    /// NUL-terminated provider name, for diagnostics.
    pub name: *const c_char,

    /// Writes up to `max` devices to `out` and returns how many the provider
    /// has (which may exceed `max`: call again with room), or -errno.
    pub discover: Entry<unsafe extern "C" fn(out: *mut ProviderDevice, max: usize) -> isize>,
    pub open_device: Entry<
        unsafe extern "C" fn(device: *mut ibv_device, handle: *mut c_void) -> *mut ibv_context,
    >,
    pub close_device: Entry<unsafe extern "C" fn(context: *mut ibv_context) -> c_int>,

    pub query_device_ex: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            input: *const ibv_query_device_ex_input,
            attr: *mut ibv_device_attr_ex,
            attr_size: usize,
        ) -> c_int,
    >,
    pub query_port: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            attr: *mut ibv_port_attr,
            attr_size: usize,
        ) -> c_int,
    >,
    /// Fills one GID table entry: ENODATA for an empty entry inside the
    /// table, EINVAL for an index at or past `gid_tbl_len`.
    pub query_gid_ex: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u32,
            gid_index: u32,
            entry: *mut ibv_gid_entry,
            flags: u32,
        ) -> c_int,
    >,
    /// Writes one P_Key table entry in network byte order, as
    /// `ibv_query_pkey` returns it; EINVAL past the table's end.
    pub query_pkey: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            index: c_int,
            pkey: *mut __be16,
        ) -> c_int,
    >,

    pub alloc_pd: Entry<unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd>,
    pub dealloc_pd: Entry<unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int>,

    pub reg_mr: Entry<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            iova: u64,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    /// Returns 0 or a positive errno (`IBV_REREG_MR_ERR_*` are for the
    /// exported call to map).
    pub rereg_mr: Entry<
        unsafe extern "C" fn(
            mr: *mut ibv_mr,
            flags: c_int,
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            access: c_int,
        ) -> c_int,
    >,
    pub dereg_mr: Entry<unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int>,
    pub alloc_mw: Entry<unsafe extern "C" fn(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw>,
    pub dealloc_mw: Entry<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,

    pub create_comp_channel:
        Entry<unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_comp_channel>,
    pub destroy_comp_channel: Entry<unsafe extern "C" fn(channel: *mut ibv_comp_channel) -> c_int>,
    /// Blocks (unless the channel fd is O_NONBLOCK) for the next CQ event;
    /// returns 0 or -1 with errno, like `ibv_get_cq_event`.
    pub get_cq_event: Entry<
        unsafe extern "C" fn(
            channel: *mut ibv_comp_channel,
            cq: *mut *mut ibv_cq,
            cq_context: *mut *mut c_void,
        ) -> c_int,
    >,
    pub ack_cq_events: Entry<unsafe extern "C" fn(cq: *mut ibv_cq, nevents: c_uint)>,

    pub create_cq_ex: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut ibv_cq_ex,
    >,
    pub resize_cq: Entry<unsafe extern "C" fn(cq: *mut ibv_cq, cqe: c_int) -> c_int>,
    pub destroy_cq: Entry<unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int>,

    pub create_srq_ex: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    pub modify_srq: Entry<
        unsafe extern "C" fn(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int,
    >,
    pub query_srq: Entry<unsafe extern "C" fn(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int>,
    pub destroy_srq: Entry<unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int>,

    pub create_qp_ex: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    pub modify_qp:
        Entry<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int>,
    pub query_qp: Entry<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            attr: *mut ibv_qp_attr,
            mask: c_int,
            init_attr: *mut ibv_qp_init_attr,
        ) -> c_int,
    >,
    pub destroy_qp: Entry<unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int>,

    pub create_ah:
        Entry<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah>,
    pub destroy_ah: Entry<unsafe extern "C" fn(ah: *mut ibv_ah) -> c_int>,
    pub attach_mcast:
        Entry<unsafe extern "C" fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int>,
    pub detach_mcast:
        Entry<unsafe extern "C" fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int>,

    /// Blocks (unless `async_fd` is O_NONBLOCK) for the next async event;
    /// returns 0 or -1 with errno.
    pub get_async_event: Entry<
        unsafe extern "C" fn(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int,
    >,
    /// Called for QP, CQ, SRQ and WQ events only (port and device events
    /// need no acknowledgement bookkeeping).
    pub ack_async_event: Entry<unsafe extern "C" fn(event: *mut ibv_async_event)>,

    /// The context of `obj`, a live object of kind `kind` (an
    /// [`ObjectKind`] value) that this provider handed out, or NULL when it
    /// is not one: never created here, or destroyed since. It must not read
    /// through `obj` before knowing it. libibverbs asks before it touches
    /// an application's object pointer, so a stale or foreign pointer fails
    /// with EINVAL instead of reading freed memory. Without this entry
    /// libibverbs trusts the pointer, as rdma-core does.
    pub object_context:
        Entry<unsafe extern "C" fn(kind: u32, obj: *mut c_void) -> *mut ibv_context>,

    /// The legacy creates, for providers whose plain objects differ from
    /// the extended ones (rdma-core's providers have both). When absent,
    /// libibverbs builds the object through the `_ex` entry. `create_cq`
    /// also takes the CQ's context, which the provider records.
    pub create_cq: Entry<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            cqe: c_int,
            channel: *mut ibv_comp_channel,
            comp_vector: c_int,
            cq_context: *mut c_void,
        ) -> *mut ibv_cq,
    >,
    pub create_srq:
        Entry<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq>,
    pub create_qp:
        Entry<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp>,
}

/// The kinds of object [`ProviderOps::object_context`] is asked about.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    Pd = 1,
    Mr = 2,
    Cq = 3,
    Qp = 4,
    Srq = 5,
    Ah = 6,
    Mw = 7,
    CompChannel = 8,
    Wq = 9,
    Xrcd = 10,
}

impl ObjectKind {
    pub fn from_u32(v: u32) -> Option<ObjectKind> {
        use ObjectKind::*;
        [Pd, Mr, Cq, Qp, Srq, Ah, Mw, CompChannel, Wq, Xrcd]
            .into_iter()
            .find(|k| *k as u32 == v)
    }
}

/// The kind of object an async event of type `t` is about (its
/// `element`), or None for port and device events.
pub fn async_event_object(t: ibv_event_type) -> Option<ObjectKind> {
    Some(match t {
        IBV_EVENT_CQ_ERR => ObjectKind::Cq,
        IBV_EVENT_QP_FATAL
        | IBV_EVENT_QP_REQ_ERR
        | IBV_EVENT_QP_ACCESS_ERR
        | IBV_EVENT_COMM_EST
        | IBV_EVENT_SQ_DRAINED
        | IBV_EVENT_PATH_MIG
        | IBV_EVENT_PATH_MIG_ERR
        | IBV_EVENT_QP_LAST_WQE_REACHED => ObjectKind::Qp,
        IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => ObjectKind::Srq,
        IBV_EVENT_WQ_FATAL => ObjectKind::Wq,
        _ => return None,
    })
}

/// A verbs object type and its [`ObjectKind`]; every such object starts
/// with its `ibv_context *`.
pub trait VerbsObject {
    const KIND: ObjectKind;
}

macro_rules! verbs_objects {
    ($($t:ty => $k:ident),* $(,)?) => {
        $(impl VerbsObject for $t { const KIND: ObjectKind = ObjectKind::$k; })*
    };
}

verbs_objects! {
    ibv_pd => Pd,
    ibv_mr => Mr,
    ibv_cq => Cq,
    ibv_qp => Qp,
    ibv_srq => Srq,
    ibv_ah => Ah,
    ibv_mw => Mw,
    ibv_comp_channel => CompChannel,
    ibv_wq => Wq,
    ibv_xrcd => Xrcd,
}

// SAFETY: the table is immutable after construction and `name` points to a
// static string, so sharing it between threads is sound.
unsafe impl Sync for ProviderOps {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_events_name_their_object() {
        assert_eq!(async_event_object(IBV_EVENT_CQ_ERR), Some(ObjectKind::Cq));
        assert_eq!(async_event_object(IBV_EVENT_COMM_EST), Some(ObjectKind::Qp));
        assert_eq!(
            async_event_object(IBV_EVENT_QP_LAST_WQE_REACHED),
            Some(ObjectKind::Qp)
        );
        assert_eq!(
            async_event_object(IBV_EVENT_SRQ_LIMIT_REACHED),
            Some(ObjectKind::Srq)
        );
        assert_eq!(async_event_object(IBV_EVENT_WQ_FATAL), Some(ObjectKind::Wq));
        assert_eq!(async_event_object(IBV_EVENT_PORT_ACTIVE), None);
        assert_eq!(async_event_object(IBV_EVENT_DEVICE_FATAL), None);
        for k in 1..=10 {
            assert_eq!(ObjectKind::from_u32(k).map(|o| o as u32), Some(k));
        }
        assert_eq!(ObjectKind::from_u32(0), None);
    }
}
