//! GIDs as this provider uses them: IP addresses, IPv4 as IPv4-mapped
//! IPv6 (`::ffff:a.b.c.d`, RoCE v2's form). Pure functions for every layer.

/// The IPv4-mapped GID of an IPv4 address.
pub fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// The IPv4 address inside an IPv4-mapped GID.
pub fn gid_as_ipv4(g: &[u8; 16]) -> Option<[u8; 4]> {
    if g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
        Some([g[12], g[13], g[14], g[15]])
    } else {
        None
    }
}

/// One spelling per address: an IPv4 address given in the deprecated
/// IPv4-compatible form (`::a.b.c.d`) becomes IPv4-mapped
/// (`::ffff:a.b.c.d`), the form GIDs and dual-stack sockets use.
pub fn canon_gid(g: &[u8; 16]) -> [u8; 16] {
    let v4_compat =
        g[..12].iter().all(|&b| b == 0) && g[12..] != [0, 0, 0, 0] && g[12..] != [0, 0, 0, 1];
    if v4_compat {
        ipv4_mapped([g[12], g[13], g[14], g[15]])
    } else {
        *g
    }
}

/// A multicast group address: IPv6 `ff00::/8` or IPv4 `224.0.0.0/4`.
pub fn is_multicast(g: &[u8; 16]) -> bool {
    match gid_as_ipv4(&canon_gid(g)) {
        Some(v4) => v4[0] & 0xf0 == 0xe0,
        None => g[0] == 0xff,
    }
}

/// Whether `g` is an address of this host (in this network namespace):
/// one a socket can bind. A syscall: for rare paths only.
pub fn is_local(g: &[u8; 16]) -> bool {
    let ip: std::net::IpAddr = match gid_as_ipv4(g) {
        Some(v4) => std::net::Ipv4Addr::from(v4).into(),
        None => std::net::Ipv6Addr::from(*g).into(),
    };
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_per_address() {
        let mapped = ipv4_mapped([10, 0, 0, 7]);
        let mut compat = [0u8; 16];
        compat[12..].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(canon_gid(&compat), mapped);
        assert_eq!(canon_gid(&mapped), mapped);
        assert_eq!(gid_as_ipv4(&canon_gid(&compat)), Some([10, 0, 0, 7]));
        let mut loopback6 = [0u8; 16];
        loopback6[15] = 1;
        assert_eq!(canon_gid(&loopback6), loopback6);
        assert_eq!(canon_gid(&[0; 16]), [0; 16]);
        assert_eq!(gid_as_ipv4(&loopback6), None);
    }

    #[test]
    fn multicast_groups() {
        assert!(is_multicast(&ipv4_mapped([239, 1, 2, 3])));
        assert!(is_multicast(&ipv4_mapped([224, 0, 0, 1])));
        assert!(!is_multicast(&ipv4_mapped([127, 0, 0, 1])));
        let mut g = [0u8; 16];
        g[0] = 0xff;
        g[1] = 0x0e;
        assert!(is_multicast(&g));
        g[0] = 0xfe;
        assert!(!is_multicast(&g));
    }
}
