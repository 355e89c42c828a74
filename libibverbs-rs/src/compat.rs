//! rdma-core's historical and provider-facing entry points.
//!
//! * The `ibv_copy_*_kern` calls convert between the public structs and the
//!   kernel uverbs/SA wire structs; they are pure and implemented fully.
//! * `verbs_open_device`, `__verbs_log` and the obsolete
//!   `ibv_register_driver`: small provider-facing helpers. The provider
//!   interface proper (registration, contexts, `ibv_cmd_*`) is in
//!   `kernel`.

use core::ffi::{c_char, c_int, c_void, CStr};

use verbs_abi::*;

use crate::util::warning;
use verbs_rt::export;

// The kernel's structs these calls take, as verbs-abi lays them out (and
// checks them against the UAPI headers).
pub use verbs_abi::uverbs::{
    ib_user_path_rec, ib_uverbs_ah_attr, ib_uverbs_global_route, ib_uverbs_qp_attr,
};

const _: () = {
    assert!(core::mem::size_of::<ib_uverbs_global_route>() == 24);
    assert!(core::mem::size_of::<ib_uverbs_ah_attr>() == 32);
    assert!(core::mem::size_of::<ib_uverbs_qp_attr>() == 144);
    assert!(core::mem::size_of::<ib_user_path_rec>() == 64);
};

/// Fills the fields of `dst` that the kernel struct carries; the rest keep
/// their values (the C calls copy field by field into the caller's struct).
pub(crate) fn ah_attr_from_kern(dst: &mut ibv_ah_attr, src: &ib_uverbs_ah_attr) {
    dst.grh.dgid = ibv_gid::from_raw(src.grh.dgid);
    dst.grh.flow_label = src.grh.flow_label;
    dst.grh.sgid_index = src.grh.sgid_index;
    dst.grh.hop_limit = src.grh.hop_limit;
    dst.grh.traffic_class = src.grh.traffic_class;
    dst.dlid = src.dlid;
    dst.sl = src.sl;
    dst.src_path_bits = src.src_path_bits;
    dst.static_rate = src.static_rate;
    dst.is_global = src.is_global;
    dst.port_num = src.port_num;
}

/// As in rdma-core, `qp_state` and the attribute mask are not part of the
/// conversion (the caller knows the state it asked about).
pub(crate) fn qp_attr_from_kern(dst: &mut ibv_qp_attr, src: &ib_uverbs_qp_attr) {
    dst.cur_qp_state = src.cur_qp_state;
    dst.path_mtu = src.path_mtu;
    dst.path_mig_state = src.path_mig_state;
    dst.qkey = src.qkey;
    dst.rq_psn = src.rq_psn;
    dst.sq_psn = src.sq_psn;
    dst.dest_qp_num = src.dest_qp_num;
    dst.qp_access_flags = src.qp_access_flags;
    dst.cap.max_send_wr = src.max_send_wr;
    dst.cap.max_recv_wr = src.max_recv_wr;
    dst.cap.max_send_sge = src.max_send_sge;
    dst.cap.max_recv_sge = src.max_recv_sge;
    dst.cap.max_inline_data = src.max_inline_data;
    ah_attr_from_kern(&mut dst.ah_attr, &src.ah_attr);
    ah_attr_from_kern(&mut dst.alt_ah_attr, &src.alt_ah_attr);
    dst.pkey_index = src.pkey_index;
    dst.alt_pkey_index = src.alt_pkey_index;
    dst.en_sqd_async_notify = src.en_sqd_async_notify;
    dst.sq_draining = src.sq_draining;
    dst.max_rd_atomic = src.max_rd_atomic;
    dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
    dst.min_rnr_timer = src.min_rnr_timer;
    dst.port_num = src.port_num;
    dst.timeout = src.timeout;
    dst.retry_cnt = src.retry_cnt;
    dst.rnr_retry = src.rnr_retry;
    dst.alt_port_num = src.alt_port_num;
    dst.alt_timeout = src.alt_timeout;
}

/// Integer fields are reinterpreted or narrowed exactly as the C
/// assignments between the two structs do.
pub(crate) fn path_rec_from_kern(dst: &mut ibv_sa_path_rec, src: &ib_user_path_rec) {
    dst.dgid = ibv_gid::from_raw(src.dgid);
    dst.sgid = ibv_gid::from_raw(src.sgid);
    dst.dlid = src.dlid;
    dst.slid = src.slid;
    dst.raw_traffic = src.raw_traffic as c_int;
    dst.flow_label = src.flow_label;
    dst.hop_limit = src.hop_limit;
    dst.traffic_class = src.traffic_class;
    dst.reversible = src.reversible as c_int;
    dst.numb_path = src.numb_path;
    dst.pkey = src.pkey;
    dst.sl = src.sl;
    dst.mtu_selector = src.mtu_selector;
    dst.mtu = src.mtu as u8;
    dst.rate_selector = src.rate_selector;
    dst.rate = src.rate;
    dst.packet_life_time = src.packet_life_time;
    dst.preference = src.preference;
    dst.packet_life_time_selector = src.packet_life_time_selector;
}

pub(crate) fn path_rec_to_kern(dst: &mut ib_user_path_rec, src: &ibv_sa_path_rec) {
    dst.dgid = src.dgid.raw();
    dst.sgid = src.sgid.raw();
    dst.dlid = src.dlid;
    dst.slid = src.slid;
    dst.raw_traffic = src.raw_traffic as u32;
    dst.flow_label = src.flow_label;
    dst.hop_limit = src.hop_limit;
    dst.traffic_class = src.traffic_class;
    dst.reversible = src.reversible as u32;
    dst.numb_path = src.numb_path;
    dst.pkey = src.pkey;
    dst.sl = src.sl;
    dst.mtu_selector = src.mtu_selector;
    dst.mtu = src.mtu.into();
    dst.rate_selector = src.rate_selector;
    dst.rate = src.rate;
    dst.packet_life_time = src.packet_life_time;
    dst.preference = src.preference;
    dst.packet_life_time_selector = src.packet_life_time_selector;
}

/// # Safety
/// `dst` and `src` are NULL or valid structs.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *mut ib_uverbs_ah_attr,
) {
    export!(raw::void, untraced, {
        // SAFETY: NULL is skipped; otherwise the caller's valid structs.
        if let (Some(d), Some(s)) = unsafe { (dst.as_mut(), src.as_ref()) } {
            ah_attr_from_kern(d, s);
        }
    })
}

/// # Safety
/// `dst` and `src` are NULL or valid structs.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *mut ib_uverbs_qp_attr,
) {
    export!(raw::void, untraced, {
        // SAFETY: as above.
        if let (Some(d), Some(s)) = unsafe { (dst.as_mut(), src.as_ref()) } {
            qp_attr_from_kern(d, s);
        }
    })
}

/// # Safety
/// `dst` and `src` are NULL or valid structs.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *mut ib_user_path_rec,
) {
    export!(raw::void, untraced, {
        // SAFETY: as above.
        if let (Some(d), Some(s)) = unsafe { (dst.as_mut(), src.as_ref()) } {
            path_rec_from_kern(d, s);
        }
    })
}

/// # Safety
/// `dst` and `src` are NULL or valid structs.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *mut ibv_sa_path_rec,
) {
    export!(raw::void, untraced, {
        // SAFETY: as above.
        if let (Some(d), Some(s)) = unsafe { (dst.as_mut(), src.as_ref()) } {
            path_rec_to_kern(d, s);
        }
    })
}

/// A C string for a warning, tolerating NULL.
///
/// # Safety
/// `s` is NULL or a C string.
unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        "(unnamed)".to_owned()
    } else {
        // SAFETY: non-NULL C string per the caller.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }
}

/// The pre-2017 provider registration (`ibv_register_driver@IBVERBS_1.1`,
/// a non-default version as in rdma-core: only old binaries bind to it).
unsafe extern "C" fn register_driver_v1(name: *const c_char, _init: *mut c_void) {
    // SAFETY: the C contract passes a driver name.
    let name = unsafe { text(name) };
    warning!("driver '{name}' uses the obsolete ibv_register_driver interface; ignored");
}

// A symbol version other than the default cannot come from the version
// script; the assembler's .symver does it, on a stub that tail-calls the
// Rust function (the stub and the directive must share an object file).
core::arch::global_asm!(
    ".globl ibverbs_rs_register_driver_v1",
    ".type ibverbs_rs_register_driver_v1, @function",
    "ibverbs_rs_register_driver_v1:",
    "jmp {target}@PLT",
    ".size ibverbs_rs_register_driver_v1, . - ibverbs_rs_register_driver_v1",
    ".symver ibverbs_rs_register_driver_v1, ibv_register_driver@IBVERBS_1.1",
    target = sym register_driver_v1,
);

/// Opening with provider-private data, for rdma-core's direct-verbs
/// libraries (mlx5dv_open_device and the like); our own providers take
/// none.
///
/// # Safety
/// `device` is NULL or an `ibv_device` from a device list.
#[no_mangle]
pub unsafe extern "C" fn verbs_open_device(
    device: *mut ibv_device,
    private_data: *mut c_void,
) -> *mut ibv_context {
    export!(ptr, (device), {
        // SAFETY: forwarded contract.
        unsafe { crate::context::open_device_with(device, private_data) }
    })
}

/// rdma-core's provider logger. In C it is variadic; a non-variadic
/// definition receives the fixed arguments of a variadic call unchanged on
/// x86-64, and the message is dropped (stable Rust cannot walk a va_list),
/// which is also rdma-core's behaviour unless VERBS_LOG_LEVEL asks for it.
///
/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn __verbs_log(_ctx: *mut verbs_context, _level: u32, _fmt: *const c_char) {
    export!(raw::void, untraced, {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ah_attr_copy() {
        let mut k = ib_uverbs_ah_attr::default();
        k.grh.dgid = [7; 16];
        k.grh.flow_label = 0x12345;
        k.grh.sgid_index = 3;
        k.grh.hop_limit = 64;
        k.grh.traffic_class = 9;
        k.dlid = 0x1234;
        k.sl = 2;
        k.src_path_bits = 1;
        k.static_rate = 3;
        k.is_global = 1;
        k.port_num = 1;
        let mut a = ibv_ah_attr::zeroed();
        // SAFETY: valid structs.
        unsafe { ibv_copy_ah_attr_from_kern(&mut a, &mut k) };
        assert_eq!(a.grh.dgid.raw(), [7; 16]);
        assert_eq!(a.grh.flow_label, 0x12345);
        assert_eq!(
            (a.grh.sgid_index, a.grh.hop_limit, a.grh.traffic_class),
            (3, 64, 9)
        );
        assert_eq!(
            (
                a.dlid,
                a.sl,
                a.src_path_bits,
                a.static_rate,
                a.is_global,
                a.port_num
            ),
            (0x1234, 2, 1, 3, 1, 1)
        );
        // SAFETY: NULL arguments are ignored.
        unsafe { ibv_copy_ah_attr_from_kern(core::ptr::null_mut(), &mut k) };
    }

    #[test]
    fn qp_attr_copy() {
        let mut k = ib_uverbs_qp_attr {
            qp_state: 3,
            cur_qp_state: 2,
            path_mtu: 5,
            path_mig_state: 1,
            qkey: 0x11111111,
            rq_psn: 100,
            sq_psn: 200,
            dest_qp_num: 0x42,
            qp_access_flags: 7,
            max_send_wr: 16,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 3,
            max_inline_data: 64,
            pkey_index: 1,
            alt_pkey_index: 2,
            en_sqd_async_notify: 1,
            sq_draining: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 5,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            alt_port_num: 2,
            alt_timeout: 15,
            ..Default::default()
        };
        k.ah_attr.dlid = 9;
        k.alt_ah_attr.dlid = 10;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = 6;
        // SAFETY: valid structs.
        unsafe { ibv_copy_qp_attr_from_kern(&mut a, &mut k) };
        assert_eq!(a.qp_state, 6, "qp_state is not part of the conversion");
        assert_eq!((a.cur_qp_state, a.path_mtu, a.path_mig_state), (2, 5, 1));
        assert_eq!(
            (a.qkey, a.rq_psn, a.sq_psn, a.dest_qp_num, a.qp_access_flags),
            (0x11111111, 100, 200, 0x42, 7)
        );
        assert_eq!(
            (
                a.cap.max_send_wr,
                a.cap.max_recv_wr,
                a.cap.max_send_sge,
                a.cap.max_recv_sge,
                a.cap.max_inline_data
            ),
            (16, 32, 2, 3, 64)
        );
        assert_eq!((a.ah_attr.dlid, a.alt_ah_attr.dlid), (9, 10));
        assert_eq!(
            (
                a.pkey_index,
                a.alt_pkey_index,
                a.en_sqd_async_notify,
                a.sq_draining
            ),
            (1, 2, 1, 1)
        );
        assert_eq!(
            (
                a.max_rd_atomic,
                a.max_dest_rd_atomic,
                a.min_rnr_timer,
                a.port_num
            ),
            (4, 5, 12, 1)
        );
        assert_eq!(
            (
                a.timeout,
                a.retry_cnt,
                a.rnr_retry,
                a.alt_port_num,
                a.alt_timeout
            ),
            (14, 7, 6, 2, 15)
        );
    }

    #[test]
    fn path_rec_round_trip() {
        let mut p: ibv_sa_path_rec = ibv_sa_path_rec::zeroed();
        p.dgid = ibv_gid::from_raw([1; 16]);
        p.sgid = ibv_gid::from_raw([2; 16]);
        p.dlid = 0x0100;
        p.slid = 0x0200;
        p.raw_traffic = 1;
        p.flow_label = 0x3000_0000;
        p.hop_limit = 8;
        p.traffic_class = 4;
        p.reversible = 1;
        p.numb_path = 1;
        p.pkey = 0xffff;
        p.sl = 3;
        p.mtu_selector = 2;
        p.mtu = 4;
        p.rate_selector = 2;
        p.rate = 16;
        p.packet_life_time_selector = 2;
        p.packet_life_time = 18;
        p.preference = 5;
        let mut k = ib_user_path_rec::default();
        // SAFETY: valid structs.
        unsafe { ibv_copy_path_rec_to_kern(&mut k, &mut p) };
        assert_eq!((k.dgid, k.sgid), ([1; 16], [2; 16]));
        assert_eq!(
            (k.dlid, k.slid, k.raw_traffic, k.flow_label),
            (0x0100, 0x0200, 1, 0x3000_0000)
        );
        assert_eq!(
            (k.reversible, k.mtu, k.pkey, k.rate, k.preference),
            (1, 4, 0xffff, 16, 5)
        );
        let mut back = ibv_sa_path_rec::zeroed();
        // SAFETY: valid structs.
        unsafe { ibv_copy_path_rec_from_kern(&mut back, &mut k) };
        let bytes = |r: &ibv_sa_path_rec| {
            // SAFETY: reading a plain struct as bytes; padding is zero in
            // both since both started zeroed.
            unsafe { core::slice::from_raw_parts((r as *const ibv_sa_path_rec).cast::<u8>(), 64) }
                .to_vec()
        };
        assert_eq!(bytes(&back), bytes(&p));
    }
}
