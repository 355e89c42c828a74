//! `ibv_resolve_eth_l2_from_gid` for kernel RoCE devices: the MAC and VLAN
//! of the next hop toward a GID, as rdma-core 44 finds them (its
//! providers call it when they build an AH). The route to the destination
//! through the interface that owns the source GID's address; then the
//! interface's own MAC for a local destination, a MAC derived from the
//! address for multicast and IPv6 link-local ones, or the kernel's
//! neighbour entry of the next hop, which a datagram to the discard port
//! makes the kernel resolve when it has none.

use core::ffi::c_int;
use core::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const RTM_GETROUTE: u16 = 26;
const RTM_GETNEIGH: u16 = 30;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const RTN_LOCAL: u8 = 2;
const RTN_BLACKHOLE: u8 = 6;
const RTN_UNREACHABLE: u8 = 7;
const RTN_PROHIBIT: u8 = 8;
const RTN_THROW: u8 = 9;
const NUD_INCOMPLETE: u16 = 0x01;
const NUD_FAILED: u16 = 0x20;
const NUD_NOARP: u16 = 0x40;
/// rdma-core's bound on the whole resolution.
const TIMEOUT: Duration = Duration::from_millis(3000);
/// How often the probe is sent again while the entry is missing.
const PROBE_EVERY: Duration = Duration::from_millis(272);
const NLMSG_HDRLEN: usize = 16;

/// A GID as the address it carries (IPv4-mapped GIDs as IPv4).
pub(crate) fn gid_addr(raw: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The MAC a destination address encodes: IPv4 and IPv6 multicast, and
/// IPv6 link-local (EUI-64), as rdma-core's `handle_encoded_mac`.
pub(crate) fn encoded_mac(dst: IpAddr) -> Option<[u8; 6]> {
    match dst {
        IpAddr::V4(a) if a.is_multicast() => {
            let o = a.octets();
            Some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
        }
        IpAddr::V6(a) if a.octets()[0] == 0xff => {
            let o = a.octets();
            Some([0x33, 0x33, o[12], o[13], o[14], o[15]])
        }
        IpAddr::V6(a) if a.octets()[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0] => {
            let o = a.octets();
            Some([o[8] ^ 2, o[9], o[10], o[13], o[14], o[15]])
        }
        _ => None,
    }
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

fn family(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn push_attr(m: &mut Vec<u8>, kind: u16, data: &[u8]) {
    m.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(data);
    m.resize(align4(m.len()), 0);
}

fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((kind, &b[4..len]));
        b = &b[align4(len).min(b.len())..];
    }
    out
}

fn get<'a>(a: &[(u16, &'a [u8])], k: u16) -> Option<&'a [u8]> {
    a.iter().find(|(t, _)| *t == k).map(|(_, v)| *v)
}

/// One rtnetlink request and its answers' bodies (after `nlmsghdr`).
fn ask(kind: u16, flags: u16, body: &[u8]) -> Result<Vec<Vec<u8>>, c_int> {
    // SAFETY: plain socket creation.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(verbs_rt::errno::errno());
    }
    // SAFETY: a descriptor we just created.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: a valid timeval of the given size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as u32,
        )
    };
    let total = NLMSG_HDRLEN + body.len();
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    // SAFETY: `m` is readable for its length.
    if unsafe { libc::send(fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) } < 0 {
        return Err(verbs_rt::errno::errno());
    }
    let dump = flags & libc::NLM_F_DUMP as u16 != 0;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = verbs_rt::errno::errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        let mut b = &buf[..n as usize];
        while b.len() >= NLMSG_HDRLEN {
            let len = u32::from_ne_bytes(b[0..4].try_into().unwrap_or_default()) as usize;
            let t = u16::from_ne_bytes([b[4], b[5]]);
            if len < NLMSG_HDRLEN || len > b.len() {
                return Ok(out);
            }
            match t {
                3 => return Ok(out), // NLMSG_DONE
                2 => {
                    // NLMSG_ERROR: 0 is an acknowledgement.
                    let code = b
                        .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
                        .map_or(-libc::EIO, |v| {
                            i32::from_ne_bytes(v.try_into().unwrap_or_default())
                        });
                    return if code == 0 { Ok(out) } else { Err(-code) };
                }
                _ => out.push(b[NLMSG_HDRLEN..len].to_vec()),
            }
            if !dump {
                return Ok(out);
            }
            b = &b[align4(len).min(b.len())..];
        }
    }
}

/// What the route to `dst` through `oif` says.
struct Route {
    kind: u8,
    gateway: Option<IpAddr>,
}

fn route(dst: IpAddr, oif: u32) -> Result<Route, c_int> {
    let a = addr_bytes(dst);
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope,
    // type, flags (u32).
    let mut body = vec![
        family(dst),
        (a.len() * 8) as u8,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    push_attr(&mut body, RTA_DST, &a);
    push_attr(&mut body, RTA_OIF, &oif.to_ne_bytes());
    let answers = ask(RTM_GETROUTE, 0, &body)?;
    let r = answers.first().ok_or(libc::ENETUNREACH)?;
    if r.len() < 12 {
        return Err(libc::ENOMSG);
    }
    let at = attrs(&r[12..]);
    let gateway = get(&at, RTA_GATEWAY).and_then(|g| match g.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(g[0], g[1], g[2], g[3]))),
        16 => <[u8; 16]>::try_from(g)
            .ok()
            .map(|o| IpAddr::V6(Ipv6Addr::from(o))),
        _ => None,
    });
    Ok(Route {
        kind: r[7],
        gateway,
    })
}

/// The kernel's usable neighbour entry of `addr` on `oif`.
fn neighbour(addr: IpAddr, oif: u32) -> Result<Option<[u8; 6]>, c_int> {
    // struct ndmsg: family, pad1, pad2, ifindex (i32), state (u16),
    // flags, type.
    let mut body = vec![family(addr), 0, 0, 0];
    body.extend_from_slice(&(oif as i32).to_ne_bytes());
    body.extend_from_slice(&[0; 4]);
    let want = addr_bytes(addr);
    for n in ask(RTM_GETNEIGH, libc::NLM_F_DUMP as u16, &body)? {
        if n.len() < 12 {
            continue;
        }
        let ifindex = i32::from_ne_bytes(n[4..8].try_into().unwrap_or_default());
        let state = u16::from_ne_bytes([n[8], n[9]]);
        if ifindex as u32 != oif || state & (NUD_INCOMPLETE | NUD_FAILED | NUD_NOARP) != 0 {
            continue;
        }
        let at = attrs(&n[12..]);
        if get(&at, NDA_DST) != Some(&want[..]) {
            continue;
        }
        if let Some(ll) = get(&at, NDA_LLADDR).and_then(|l| <[u8; 6]>::try_from(l).ok()) {
            return Ok(Some(ll));
        }
    }
    Ok(None)
}

/// The interface that holds address `a`.
fn oif_of(a: IpAddr) -> Option<u32> {
    let mut ifs: *mut libc::ifaddrs = core::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = ifs;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null() {
            // SAFETY: the address is a sockaddr of the family it says.
            let this = unsafe {
                match i32::from((*i.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let s = &*(i.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))))
                    }
                    libc::AF_INET6 => {
                        let s = &*(i.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            };
            if this == Some(a) {
                // SAFETY: the interface name is a C string of the list.
                let idx = unsafe { libc::if_nametoindex(i.ifa_name) };
                if idx > 0 {
                    found = Some(idx);
                    break;
                }
            }
        }
        p = i.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifs) };
    found
}

fn ifname(oif: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` holds IF_NAMESIZE bytes, as if_indextoname needs.
    let p = unsafe { libc::if_indextoname(oif, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a C string into `buf`.
    Some(
        unsafe { core::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn link_mac(oif: u32) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{}/address", ifname(oif)?)).ok()?;
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    <[u8; 6]>::try_from(v).ok()
}

/// The VLAN id of a VLAN interface, 0xffff for any other (rdma-core).
fn vlan_of(oif: u32) -> u16 {
    let Some(name) = ifname(oif) else {
        return 0xffff;
    };
    std::fs::read_to_string(format!("/proc/net/vlan/{name}"))
        .ok()
        .and_then(|s| {
            let i = s.find("VID:")?;
            s[i + 4..].split_whitespace().next()?.parse::<u16>().ok()
        })
        .filter(|&v| v <= 0xfff)
        .unwrap_or(0xffff)
}

/// Makes the kernel resolve `dst`: a datagram to its discard port.
fn probe(dst: IpAddr, src: IpAddr) {
    let bind: SocketAddr = match src {
        IpAddr::V4(_) => (src, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    if let Ok(s) = UdpSocket::bind(bind) {
        let _ = s.send_to(b"H", SocketAddr::new(dst, 9));
    }
}

/// The next hop's MAC and the interface's VLAN toward `dgid` from `sgid`;
/// Err carries a positive errno.
pub(crate) fn resolve(sgid: &[u8; 16], dgid: &[u8; 16]) -> Result<([u8; 6], u16), c_int> {
    let (src, dst) = (gid_addr(sgid), gid_addr(dgid));
    let oif = oif_of(src).ok_or(libc::EINVAL)?;
    let r = route(dst, oif).map_err(|_| libc::EHOSTUNREACH)?;
    if matches!(
        r.kind,
        RTN_BLACKHOLE | RTN_UNREACHABLE | RTN_PROHIBIT | RTN_THROW
    ) {
        return Err(libc::EHOSTUNREACH);
    }
    let vid = vlan_of(oif);
    if r.kind == RTN_LOCAL {
        return link_mac(oif).map(|m| (m, vid)).ok_or(libc::EHOSTUNREACH);
    }
    let hop = r.gateway.unwrap_or(dst);
    if let Some(m) = encoded_mac(hop) {
        return Ok((m, vid));
    }
    let deadline = Instant::now() + TIMEOUT;
    let mut next_probe = Instant::now();
    loop {
        if let Some(m) = neighbour(hop, oif).map_err(|_| libc::EHOSTUNREACH)? {
            return Ok((m, vid));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(libc::EHOSTUNREACH);
        }
        if now >= next_probe {
            probe(hop, src);
            next_probe = now + PROBE_EVERY;
        }
        // Bounded wait for the kernel's neighbour resolution.
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_and_encoded_macs() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[224, 129, 2, 3]);
        assert_eq!(gid_addr(&g), IpAddr::V4(Ipv4Addr::new(224, 129, 2, 3)));
        assert_eq!(
            encoded_mac(gid_addr(&g)),
            Some([0x01, 0x00, 0x5e, 0x01, 2, 3])
        );
        let m6: Ipv6Addr = "ff02::1:ff12:3456".parse().unwrap();
        assert_eq!(
            encoded_mac(IpAddr::V6(m6)),
            Some([0x33, 0x33, 0xff, 0x12, 0x34, 0x56])
        );
        let ll: Ipv6Addr = "fe80::5054:ff:fe12:3401".parse().unwrap();
        assert_eq!(
            encoded_mac(IpAddr::V6(ll)),
            Some([0x52, 0x54, 0x00, 0x12, 0x34, 0x01])
        );
        assert_eq!(encoded_mac(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))), None);
        assert_eq!(gid_addr(&ll.octets()), IpAddr::V6(ll));
    }

    #[test]
    fn loopback_route_is_local() {
        // Whatever the host, 127.0.0.1 through lo is a local route.
        let lo = oif_of(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("lo has 127.0.0.1");
        let r = route(IpAddr::V4(Ipv4Addr::LOCALHOST), lo).expect("route");
        assert_eq!(r.kind, RTN_LOCAL);
        assert!(r.gateway.is_none());
    }
}
