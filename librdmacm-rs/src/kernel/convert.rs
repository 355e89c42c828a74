//! The kernel's layouts into libibverbs' (through libibverbs'
//! `ibv_copy_*_from_kern`, as rdma-core's librdmacm does) and socket
//! addresses into the kernel's slots.

use std::net::SocketAddr;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::ffi;

// The conversions rdma-core's librdmacm takes from libibverbs, taken from
// ours the same way.

pub fn ah_attr(k: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    let mut a = ibv_ah_attr::zeroed();
    let mut k = *k;
    // SAFETY: two valid structs of the layouts the call takes.
    unsafe { ffi::ibv_copy_ah_attr_from_kern(&mut a, &mut k) };
    a
}

/// Everything but `qp_state`, which stays what the caller asked for.
pub fn qp_attr(dst: &mut ibv_qp_attr, k: &ib_uverbs_qp_attr) {
    let mut k = *k;
    // SAFETY: as above.
    unsafe { ffi::ibv_copy_qp_attr_from_kern(dst, &mut k) };
}

pub fn path_rec(k: &ib_user_path_rec) -> ibv_sa_path_rec {
    let mut k = *k;
    // SAFETY: all zeroes is a valid path record (plain integers).
    let mut p: ibv_sa_path_rec = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    unsafe { ffi::ibv_copy_path_rec_from_kern(&mut p, &mut k) };
    p
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
}
