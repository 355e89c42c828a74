//! Socket addresses: conversions between C `sockaddr`s, `std::net`
//! addresses and RoCE v2 GIDs (IPv4 is carried as `::ffff:a.b.c.d`).

use core::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

/// Reads a C socket address.
///
/// # Safety
/// `sa` must be null or point to a readable address whose size matches
/// its family.
pub unsafe fn from_c(sa: *const sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a readable address of the family's size.
    unsafe {
        match (*sa).sa_family as i32 {
            libc::AF_INET => {
                let sin = &*(sa as *const sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const sockaddr_in6);
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// A C copy of `addr` and its length.
pub fn to_c(addr: &SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut ss: sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut sockaddr_storage as *mut sockaddr_in) };
            sin.sin_family = libc::AF_INET as _;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut sockaddr_storage as *mut sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as _;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<sockaddr_in6>()
        }
    };
    (ss, len as socklen_t)
}

/// The RoCE v2 GID of an IP address.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// IPv4-mapped IPv6 addresses (what a dual-stack socket reports for an
/// IPv4 peer) are reported as plain IPv4, as the kernel's CM does.
pub fn unmap(addr: SocketAddr) -> SocketAddr {
    if let SocketAddr::V6(a) = addr {
        if let Some(v4) = a.ip().to_ipv4_mapped() {
            return SocketAddr::V4(SocketAddrV4::new(v4, a.port()));
        }
    }
    addr
}

/// Resolving the wildcard address means "this host", as for the kernel CM.
pub fn any_to_loopback(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        let ip = match addr {
            SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
        SocketAddr::new(ip, addr.port())
    } else {
        addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_len(family: i32) -> usize {
        match family {
            libc::AF_INET => size_of::<sockaddr_in>(),
            libc::AF_INET6 => size_of::<sockaddr_in6>(),
            _ => 0,
        }
    }

    /// The IP address a RoCE v2 GID stands for.
    fn ip_of_gid(gid: [u8; 16]) -> IpAddr {
        let v6 = Ipv6Addr::from(gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    #[test]
    fn round_trip_v4_and_v6() {
        for s in ["10.1.2.3:4791", "[fe80::1%2]:7471", "[::1]:0"] {
            let a: SocketAddr = s.parse().unwrap();
            let (ss, len) = to_c(&a);
            assert_eq!(len as usize, c_len(ss.ss_family as i32));
            // SAFETY: `ss` is a valid address of its family.
            let b = unsafe { from_c(&ss as *const _ as *const sockaddr) }.unwrap();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn gids_map_ipv4() {
        let ip: IpAddr = "192.168.7.9".parse().unwrap();
        let g = gid_of(ip);
        assert_eq!(&g[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&g[12..], &[192, 168, 7, 9]);
        assert_eq!(ip_of_gid(g), ip);
        let v6: IpAddr = "2001:db8::5".parse().unwrap();
        assert_eq!(ip_of_gid(gid_of(v6)), v6);
    }

    #[test]
    fn unmaps_v4_mapped() {
        let a: SocketAddr = "[::ffff:127.0.0.1]:99".parse().unwrap();
        assert_eq!(unmap(a), "127.0.0.1:99".parse::<SocketAddr>().unwrap());
        let b: SocketAddr = "[::1]:99".parse().unwrap();
        assert_eq!(unmap(b), b);
        assert_eq!(
            any_to_loopback("0.0.0.0:5".parse().unwrap()),
            "127.0.0.1:5".parse::<SocketAddr>().unwrap()
        );
    }
}
