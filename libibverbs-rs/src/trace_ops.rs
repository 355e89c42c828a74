//! The tracer for the verbs a program reaches without calling into this
//! library: rdma-core's header makes `ibv_create_cq_ex`, `ibv_create_qp_ex`,
//! `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_req_notify_cq`, `ibv_open_xrcd`,
//! `ibv_alloc_dm` and the rest inline functions that call the provider
//! through the context's tables. With `RDMA_TRACE` set, each open context's
//! entries are replaced by trampolines that call the provider's and record
//! the call; without it nothing is replaced and nothing costs anything.
//! (The data path — posts and polls — is traced inside the provider.)

use core::ffi::{c_int, c_uint, c_void};
use core::mem::offset_of;
use core::sync::atomic::{AtomicUsize, Ordering};

use verbs_abi::*;
use verbs_rt::trace::{verb_c, CRet, Val};

use verbs_abi::vctx::{verbs_context_has, verbs_context_of};

/// One provider function behind a trampoline: its address, the first
/// provider's (all our contexts come from one provider; a context whose
/// entry differs keeps its own, untraced).
struct Slot(AtomicUsize);

impl Slot {
    const fn new() -> Slot {
        Slot(AtomicUsize::new(0))
    }

    /// Takes `orig` for this slot; false if the slot holds another.
    fn take(&self, orig: usize) -> bool {
        match self
            .0
            .compare_exchange(0, orig, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(cur) => cur == orig,
        }
    }

    fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// Declares, per entry, the slot holding the provider's function and the
/// trampoline that calls it and records the call (`$conv` as in
/// `export!`'s `raw::` conventions).
macro_rules! trampolines {
    ($($name:ident: $conv:ident fn($($a:ident: $t:ty),*) -> $r:ty;)*) => {
        mod slots {
            $(#[allow(non_upper_case_globals)] pub static $name: super::Slot = super::Slot::new();)*
        }
        mod tramp {
            use super::*;
            $(
                pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
                    let f: unsafe extern "C" fn($($t),*) -> $r =
                        // SAFETY: the slot was filled with this entry's
                        // provider function (same signature) before the
                        // trampoline was installed.
                        unsafe { core::mem::transmute::<usize, _>(slots::$name.get()) };
                    // SAFETY: the caller's arguments, passed on unchanged.
                    let r = unsafe { f($($a),*) };
                    verb_c(
                        concat!("verbs::ibv_", stringify!($name), "::entry"),
                        &[$((stringify!($a), Val::from($a))),*],
                        trampolines!(@ret $conv, r),
                    );
                    after(stringify!($name), r as usize);
                    r
                }
            )*
        }
    };
    (@ret int, $r:ident) => { CRet::Int($r as c_int) };
    (@ret ptr, $r:ident) => { CRet::Ptr($r as usize) };
}

trampolines! {
    create_cq_ex: ptr fn(context: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
    create_qp_ex: ptr fn(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
    open_qp: ptr fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp;
    create_srq_ex: ptr fn(context: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
    get_srq_num: int fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int;
    open_xrcd: ptr fn(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
    close_xrcd: int fn(xrcd: *mut ibv_xrcd) -> c_int;
    query_port: int fn(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr, port_attr_len: usize) -> c_int;
    query_device_ex: int fn(context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut ibv_device_attr_ex, attr_size: usize) -> c_int;
    query_rt_values_ex: int fn(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int;
    modify_cq: int fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int;
    alloc_td: ptr fn(context: *mut ibv_context, attr: *mut ibv_td_init_attr) -> *mut ibv_td;
    dealloc_td: int fn(td: *mut ibv_td) -> c_int;
    alloc_parent_domain: ptr fn(context: *mut ibv_context, attr: *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
    alloc_dm: ptr fn(context: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
    free_dm: int fn(dm: *mut ibv_dm) -> c_int;
    reg_dm_mr: ptr fn(pd: *mut ibv_pd, dm: *mut ibv_dm, dm_offset: u64, length: usize, access: c_uint) -> *mut ibv_mr;
    memcpy_to_dm: int fn(dm: *mut ibv_dm, dm_offset: u64, host_addr: *const c_void, length: usize) -> c_int;
    memcpy_from_dm: int fn(host_addr: *mut c_void, dm: *mut ibv_dm, dm_offset: u64, length: usize) -> c_int;
    advise_mr: int fn(pd: *mut ibv_pd, advice: u32, flags: u32, sg_list: *mut ibv_sge, num_sges: u32) -> c_int;
    alloc_null_mr: ptr fn(pd: *mut ibv_pd) -> *mut ibv_mr;
    alloc_mw: ptr fn(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw;
    dealloc_mw: int fn(mw: *mut ibv_mw) -> c_int;
    bind_mw: int fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int;
    req_notify_cq: int fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
}

/// What a trampoline does after its call: device memory's copy entries
/// live in each `ibv_dm`, so a new one gets its trampolines here.
fn after(name: &str, r: usize) {
    if name != "alloc_dm" || r == 0 {
        return;
    }
    let dm = r as *mut ibv_dm;
    // SAFETY: a device memory object the provider just returned; its
    // entries are ours to replace, as with the context's.
    unsafe {
        swap(
            &mut (*dm).memcpy_to_dm,
            &slots::memcpy_to_dm,
            tramp::memcpy_to_dm,
        );
        swap(
            &mut (*dm).memcpy_from_dm,
            &slots::memcpy_from_dm,
            tramp::memcpy_from_dm,
        );
    }
}

/// Puts trampoline `t` in `entry` if the provider filled it and its
/// function is the one `slot` holds (or the first).
fn swap<F: Copy>(entry: &mut Option<F>, slot: &Slot, t: F) {
    let Some(orig) = *entry else { return };
    // SAFETY: F is an `unsafe extern "C" fn` type: a plain code address.
    let (o, tr) = unsafe {
        (
            core::mem::transmute_copy::<F, usize>(&orig),
            core::mem::transmute_copy::<F, usize>(&t),
        )
    };
    if o == tr {
        return;
    }
    if slot.take(o) {
        *entry = Some(t);
    }
}

/// Replaces the provider entries the header's inline verbs call with
/// trampolines that record each call (only when tracing is on).
///
/// # Safety
/// `ctx` is an open, extended context the provider just returned.
pub unsafe fn install(ctx: *mut ibv_context) {
    if !verbs_rt::trace::on() {
        return;
    }
    // SAFETY: the caller's context; the ops table is part of it.
    let ops = unsafe { &mut (*ctx).ops };
    // The casts name the trampolines' types as the tables spell them
    // (enum arguments are plain integers).
    swap(&mut ops.alloc_mw, &slots::alloc_mw, tramp::alloc_mw);
    swap(&mut ops.dealloc_mw, &slots::dealloc_mw, tramp::dealloc_mw);
    swap(&mut ops.bind_mw, &slots::bind_mw, tramp::bind_mw);
    swap(
        &mut ops.req_notify_cq,
        &slots::req_notify_cq,
        tramp::req_notify_cq,
    );
    // SAFETY: as above; the extended table precedes the context.
    let Some(v) = (unsafe { verbs_context_of(ctx) }) else {
        return;
    };
    macro_rules! vswap {
        ($field:ident, $slot:ident) => {
            // SAFETY: v is the context's extended table.
            if unsafe { verbs_context_has(v, offset_of!(verbs_context, $field)) } {
                // SAFETY: the field lies within the provider's table (`sz`).
                let entry = unsafe { &mut (*v).$field };
                swap(entry, &slots::$slot, tramp::$slot);
            }
        };
    }
    vswap!(create_cq_ex, create_cq_ex);
    vswap!(create_qp_ex, create_qp_ex);
    vswap!(open_qp, open_qp);
    vswap!(create_srq_ex, create_srq_ex);
    vswap!(get_srq_num, get_srq_num);
    vswap!(open_xrcd, open_xrcd);
    vswap!(close_xrcd, close_xrcd);
    vswap!(query_port, query_port);
    vswap!(query_device_ex, query_device_ex);
    vswap!(query_rt_values, query_rt_values_ex);
    vswap!(modify_cq, modify_cq);
    vswap!(alloc_td, alloc_td);
    vswap!(dealloc_td, dealloc_td);
    vswap!(alloc_parent_domain, alloc_parent_domain);
    vswap!(alloc_dm, alloc_dm);
    vswap!(free_dm, free_dm);
    vswap!(reg_dm_mr, reg_dm_mr);
    vswap!(advise_mr, advise_mr);
    vswap!(alloc_null_mr, alloc_null_mr);
}
