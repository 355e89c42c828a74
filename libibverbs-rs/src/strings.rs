//! Human-readable names for verbs enums and the static-rate conversions.
//!
//! The texts are part of the observable behaviour of rdma-core (programs
//! print them and scripts grep for them), so they are reproduced exactly;
//! out-of-range values map to "unknown" as there.

use core::ffi::{c_char, c_int, CStr};
use verbs_rt::export;

/// `IBV_RATE_MAX`, "no rate / unknown", as the `int` these calls trade in.
const IBV_RATE_MAX: c_int = verbs_abi::IBV_RATE_MAX as c_int;

fn node_type_name(node_type: c_int) -> &'static CStr {
    match node_type {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    }
}

fn port_state_name(state: c_int) -> &'static CStr {
    match state {
        0 => c"no state change (NOP)",
        1 => c"down",
        2 => c"init",
        3 => c"armed",
        4 => c"active",
        5 => c"active defer",
        _ => c"unknown",
    }
}

pub(crate) fn event_type_name(event: c_int) -> &'static CStr {
    match event {
        0 => c"CQ error",
        1 => c"local work queue catastrophic error",
        2 => c"invalid request local work queue error",
        3 => c"local access violation work queue error",
        4 => c"communication established",
        5 => c"send queue drained",
        6 => c"path migrated",
        7 => c"path migration request error",
        8 => c"local catastrophic error",
        9 => c"port active",
        10 => c"port error",
        11 => c"LID change",
        12 => c"P_Key change",
        13 => c"SM change",
        14 => c"SRQ catastrophic error",
        15 => c"SRQ limit reached",
        16 => c"last WQE reached",
        17 => c"client reregistration",
        18 => c"GID table change",
        19 => c"WQ fatal",
        // Added after rdma-core 44 (IBV_EVENT_DEVICE_SPEED_CHANGE); a
        // 44-era program never sees this value, a newer one gets its text.
        20 => c"Device link speed change",
        _ => c"unknown",
    }
}

fn wc_status_name(status: c_int) -> &'static CStr {
    match status {
        0 => c"success",
        1 => c"local length error",
        2 => c"local QP operation error",
        3 => c"local EE context operation error",
        4 => c"local protection error",
        5 => c"Work Request Flushed Error",
        6 => c"memory management operation error",
        7 => c"bad response error",
        8 => c"local access error",
        9 => c"remote invalid request error",
        10 => c"remote access error",
        11 => c"remote operation error",
        12 => c"transport retry counter exceeded",
        13 => c"RNR retry counter exceeded",
        14 => c"local RDD violation error",
        15 => c"remote invalid RD request",
        16 => c"aborted error",
        17 => c"invalid EE context number",
        18 => c"invalid EE context state",
        19 => c"fatal error",
        20 => c"response timeout error",
        21 => c"general error",
        22 => c"TM error",
        23 => c"TM software rendezvous",
        _ => c"unknown",
    }
}

/// `enum ibv_rate` value, multiple of 2.5 Gb/s, and the exact data rate in
/// Mb/s. The encoding is not monotonic (it grew over the years), hence a
/// table. A multiplier of 0 means the rate has no 2.5 Gb/s multiple
/// (the FDR/EDR-era rates), which the multiplier conversions ignore.
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),       // 2.5 Gb/s
    (5, 2, 5000),       // 5 Gb/s
    (3, 4, 10000),      // 10 Gb/s
    (6, 8, 20000),      // 20 Gb/s
    (4, 12, 30000),     // 30 Gb/s
    (7, 16, 40000),     // 40 Gb/s
    (8, 24, 60000),     // 60 Gb/s
    (9, 32, 80000),     // 80 Gb/s
    (10, 48, 120000),   // 120 Gb/s
    (11, 0, 14062),     // 14 Gb/s (FDR)
    (12, 0, 56250),     // 56 Gb/s
    (13, 0, 112500),    // 112 Gb/s
    (14, 0, 168750),    // 168 Gb/s
    (15, 0, 25781),     // 25 Gb/s (EDR)
    (16, 0, 103125),    // 100 Gb/s
    (17, 0, 206250),    // 200 Gb/s
    (18, 0, 309375),    // 300 Gb/s
    (19, 11, 28125),    // 28 Gb/s
    (20, 20, 53125),    // 50 Gb/s
    (21, 160, 425000),  // 400 Gb/s
    (22, 240, 637500),  // 600 Gb/s
    (23, 320, 850000),  // 800 Gb/s
    (24, 480, 1275000), // 1200 Gb/s
];

pub(crate) fn rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

pub(crate) fn mult_to_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

pub(crate) fn rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

pub(crate) fn mbps_to_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    export!(raw::value, untraced, { node_type_name(node_type).as_ptr() })
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    export!(raw::value, untraced, {
        port_state_name(port_state).as_ptr()
    })
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    export!(raw::value, untraced, { event_type_name(event).as_ptr() })
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    export!(raw::value, untraced, { wc_status_name(status).as_ptr() })
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    export!(raw::value, untraced, { rate_to_mult(rate) })
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    export!(raw::value, untraced, { mult_to_rate(mult) })
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    export!(raw::value, untraced, { rate_to_mbps(rate) })
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    export!(raw::value, untraced, { mbps_to_rate(mbps) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: every pointer handed out here comes from a 'static CStr.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn enum_names() {
        assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
        assert_eq!(s(ibv_node_type_str(4)), "iWARP NIC");
        assert_eq!(s(ibv_node_type_str(-1)), "unknown");
        assert_eq!(s(ibv_node_type_str(0)), "unknown");
        assert_eq!(s(ibv_node_type_str(8)), "unknown");
        assert_eq!(s(ibv_port_state_str(4)), "active");
        assert_eq!(s(ibv_port_state_str(0)), "no state change (NOP)");
        assert_eq!(s(ibv_port_state_str(6)), "unknown");
        assert_eq!(s(ibv_event_type_str(9)), "port active");
        assert_eq!(s(ibv_event_type_str(-3)), "unknown");
        assert_eq!(s(ibv_wc_status_str(0)), "success");
        assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
        assert_eq!(s(ibv_wc_status_str(12)), "transport retry counter exceeded");
        assert_eq!(s(ibv_wc_status_str(23)), "TM software rendezvous");
        assert_eq!(s(ibv_wc_status_str(24)), "unknown");
    }

    #[test]
    fn rates() {
        // IBV_RATE_10_GBPS is 3, IBV_RATE_100_GBPS 16, IBV_RATE_14_GBPS 11.
        assert_eq!(ibv_rate_to_mult(3), 4);
        assert_eq!(mult_to_ibv_rate(4), 3);
        assert_eq!(ibv_rate_to_mult(16), -1);
        assert_eq!(ibv_rate_to_mult(0), -1);
        assert_eq!(mult_to_ibv_rate(0), IBV_RATE_MAX);
        assert_eq!(mult_to_ibv_rate(7), IBV_RATE_MAX);
        assert_eq!(ibv_rate_to_mbps(16), 103125);
        assert_eq!(ibv_rate_to_mbps(11), 14062);
        assert_eq!(ibv_rate_to_mbps(0), -1);
        assert_eq!(mbps_to_ibv_rate(25781), 15);
        assert_eq!(mbps_to_ibv_rate(100000), IBV_RATE_MAX);
        for &(rate, mult, mbps) in RATES {
            assert_eq!(rate_to_mbps(rate), mbps);
            assert_eq!(mbps_to_rate(mbps), rate);
            if mult != 0 {
                assert_eq!(mult_to_rate(rate_to_mult(rate)), rate);
            }
        }
    }
}
