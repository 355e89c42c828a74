//! The kernel's layouts of QP, address-handle and path attributes into
//! libibverbs' (rdma-core's `ibv_copy_*_from_kern`).

use std::net::SocketAddr;

use verbs_abi::uverbs::*;
use verbs_abi::*;

pub fn ah_attr(k: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    let mut a = ibv_ah_attr::zeroed();
    a.grh.dgid = ibv_gid::from_raw(k.grh.dgid);
    a.grh.flow_label = k.grh.flow_label;
    a.grh.sgid_index = k.grh.sgid_index;
    a.grh.hop_limit = k.grh.hop_limit;
    a.grh.traffic_class = k.grh.traffic_class;
    a.dlid = k.dlid;
    a.sl = k.sl;
    a.src_path_bits = k.src_path_bits;
    a.static_rate = k.static_rate;
    a.is_global = k.is_global;
    a.port_num = k.port_num;
    a
}

/// Everything but `qp_state`, which stays what the caller asked for (as
/// rdma-core leaves it).
pub fn qp_attr(dst: &mut ibv_qp_attr, k: &ib_uverbs_qp_attr) {
    dst.cur_qp_state = k.cur_qp_state;
    dst.path_mtu = k.path_mtu;
    dst.path_mig_state = k.path_mig_state;
    dst.qkey = k.qkey;
    dst.rq_psn = k.rq_psn;
    dst.sq_psn = k.sq_psn;
    dst.dest_qp_num = k.dest_qp_num;
    dst.qp_access_flags = k.qp_access_flags;
    dst.cap.max_send_wr = k.max_send_wr;
    dst.cap.max_recv_wr = k.max_recv_wr;
    dst.cap.max_send_sge = k.max_send_sge;
    dst.cap.max_recv_sge = k.max_recv_sge;
    dst.cap.max_inline_data = k.max_inline_data;
    dst.ah_attr = ah_attr(&k.ah_attr);
    dst.alt_ah_attr = ah_attr(&k.alt_ah_attr);
    dst.pkey_index = k.pkey_index;
    dst.alt_pkey_index = k.alt_pkey_index;
    dst.en_sqd_async_notify = k.en_sqd_async_notify;
    dst.sq_draining = k.sq_draining;
    dst.max_rd_atomic = k.max_rd_atomic;
    dst.max_dest_rd_atomic = k.max_dest_rd_atomic;
    dst.min_rnr_timer = k.min_rnr_timer;
    dst.port_num = k.port_num;
    dst.timeout = k.timeout;
    dst.retry_cnt = k.retry_cnt;
    dst.rnr_retry = k.rnr_retry;
    dst.alt_port_num = k.alt_port_num;
    dst.alt_timeout = k.alt_timeout;
}

pub fn path_rec(k: &ib_user_path_rec) -> ibv_sa_path_rec {
    ibv_sa_path_rec {
        dgid: ibv_gid::from_raw(k.dgid),
        sgid: ibv_gid::from_raw(k.sgid),
        dlid: k.dlid,
        slid: k.slid,
        raw_traffic: k.raw_traffic as i32,
        flow_label: k.flow_label,
        hop_limit: k.hop_limit,
        traffic_class: k.traffic_class,
        reversible: k.reversible as i32,
        numb_path: k.numb_path,
        pkey: k.pkey,
        sl: k.sl,
        mtu_selector: k.mtu_selector,
        mtu: k.mtu as u8,
        rate_selector: k.rate_selector,
        rate: k.rate,
        packet_life_time_selector: k.packet_life_time_selector,
        packet_life_time: k.packet_life_time,
        preference: k.preference,
    }
}

/// A socket address in the kernel's `sockaddr_in6`-sized slot (an IPv4
/// address keeps its own, shorter layout at the start, as C's memcpy does).
pub fn to_in6(a: &SocketAddr) -> ucma_sockaddr_in6 {
    let mut k = ucma_sockaddr_in6::default();
    match a {
        SocketAddr::V4(v4) => {
            // sockaddr_in: family, port, 4 address bytes, zero padding.
            k.sin6_family = libc::AF_INET as u16;
            k.sin6_port = v4.port().to_be();
            k.sin6_flowinfo = u32::from_ne_bytes(v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            k.sin6_family = libc::AF_INET6 as u16;
            k.sin6_port = v6.port().to_be();
            k.sin6_flowinfo = v6.flowinfo().to_be();
            k.sin6_addr = v6.ip().octets();
            k.sin6_scope_id = v6.scope_id();
        }
    }
    k
}

pub fn to_storage(a: &SocketAddr) -> (kernel_sockaddr_storage, u16) {
    let k = to_in6(a);
    let mut s = kernel_sockaddr_storage::default();
    let len = match a {
        SocketAddr::V4(_) => core::mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => core::mem::size_of::<libc::sockaddr_in6>(),
    };
    // SAFETY: both are plain bytes; the storage (128) holds the 28 copied.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&k as *const ucma_sockaddr_in6).cast::<u8>(),
            (&mut s as *mut kernel_sockaddr_storage).cast::<u8>(),
            core::mem::size_of::<ucma_sockaddr_in6>(),
        )
    };
    (s, len as u16)
}

/// The kernel's address slot as a C `sockaddr_storage` (for the id).
pub fn in6_to_c(k: &ucma_sockaddr_in6) -> libc::sockaddr_storage {
    // SAFETY: all zeroes is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    // SAFETY: plain bytes; 28 fit in 128.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (k as *const ucma_sockaddr_in6).cast::<u8>(),
            (&mut s as *mut libc::sockaddr_storage).cast::<u8>(),
            core::mem::size_of::<ucma_sockaddr_in6>(),
        )
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6};

    #[test]
    fn an_ipv4_address_keeps_sockaddr_in_layout() {
        let a = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 7471));
        let k = to_in6(&a);
        // SAFETY: reading the 16 bytes of a sockaddr_in from a 28-byte slot.
        let sin: libc::sockaddr_in =
            unsafe { core::ptr::read((&k as *const ucma_sockaddr_in6).cast()) };
        assert_eq!(sin.sin_family, libc::AF_INET as u16);
        assert_eq!(u16::from_be(sin.sin_port), 7471);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 0, 1]);
        let c = in6_to_c(&k);
        assert_eq!(c.ss_family, libc::AF_INET as u16);
    }

    #[test]
    fn an_ipv6_address_fills_every_field() {
        let a = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 0, 3));
        let (s, len) = to_storage(&a);
        assert_eq!(len as usize, core::mem::size_of::<libc::sockaddr_in6>());
        assert_eq!(s.ss_family, libc::AF_INET6 as u16);
        let k = to_in6(&a);
        assert_eq!(k.sin6_addr, Ipv6Addr::LOCALHOST.octets());
        assert_eq!(k.sin6_scope_id, 3);
        assert_eq!(u16::from_be(k.sin6_port), 9);
    }

    #[test]
    fn qp_attr_leaves_the_asked_state() {
        let mut k = ib_uverbs_qp_attr {
            qp_state: IBV_QPS_RTS,
            dest_qp_num: 17,
            max_dest_rd_atomic: 4,
            ..Default::default()
        };
        k.ah_attr.grh.dgid[15] = 9;
        k.ah_attr.is_global = 1;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = IBV_QPS_RTR;
        qp_attr(&mut a, &k);
        assert_eq!(a.qp_state, IBV_QPS_RTR);
        assert_eq!(a.dest_qp_num, 17);
        assert_eq!(a.max_dest_rd_atomic, 4);
        assert_eq!(a.ah_attr.grh.dgid.raw()[15], 9);
        assert_eq!(a.ah_attr.is_global, 1);
    }
}
