//! Flow steering for raw packet QPs: the rules `ibv_create_flow` installs
//! (parsed from the caller's `ibv_flow_attr` and its specs), the frame
//! headers they match, which QP a frame is steered to, and the Toeplitz
//! hash RSS spreads frames with.
//!
//! Rules live in one process-wide list per interface. A frame goes to a
//! QP when (a) it has a SNIFFER rule, or (b) one of its NORMAL rules
//! matches and no other QP's matching NORMAL rule has a better (lower)
//! priority without `IBV_FLOW_ATTR_FLAGS_DONT_TRAP`, QPs tied on priority
//! each getting a copy, or (c) no NORMAL rule of any QP matches and the QP
//! has an ALL_DEFAULT rule (or MC_DEFAULT, for a multicast destination).
//! Rules of other processes are not seen: each process steers its own
//! copy of the interface's frames.

use std::os::raw::c_int;
use std::sync::Arc;

use parking_lot::RwLock;
use verbs_abi::*;
use verbs_rt::ForkFresh;

const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_VLAN: u16 = 0x8100;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// The header fields of a frame, laid out as the specs' filters lay them
/// out, so a spec matches by masked comparison of bytes.
#[derive(Default)]
pub struct Headers {
    /// `ibv_flow_eth_filter`: dst MAC, src MAC, ether type, VLAN tag (both
    /// big endian).
    pub eth: [u8; 16],
    pub vlan: bool,
    /// `ibv_flow_ipv4_ext_filter`: src, dst, proto, tos, ttl, flags.
    pub ipv4: Option<[u8; 12]>,
    /// `ibv_flow_ipv6_filter`: src, dst, flow label, next header, traffic
    /// class, hop limit, padding.
    pub ipv6: Option<[u8; 40]>,
    /// IP protocol of the transport header, and `ibv_flow_tcp_udp_filter`
    /// (dst port, src port, big endian) when it is TCP or UDP.
    pub l4: Option<(u8, [u8; 4])>,
}

impl Headers {
    /// Reads what it can of `f`; a layer cut short is left out.
    pub fn parse(f: &[u8]) -> Headers {
        let mut h = Headers::default();
        if f.len() < 14 {
            return h;
        }
        h.eth[..12].copy_from_slice(&f[..12]);
        let mut ty = u16::from_be_bytes([f[12], f[13]]);
        let mut off = 14;
        if ty == ETH_P_VLAN && f.len() >= 18 {
            h.vlan = true;
            h.eth[14..16].copy_from_slice(&f[14..16]);
            ty = u16::from_be_bytes([f[16], f[17]]);
            off = 18;
        }
        h.eth[12..14].copy_from_slice(&ty.to_be_bytes());
        let ip = &f[off..];
        let (proto, l4) = match ty {
            ETH_P_IPV4 if ip.len() >= 20 && ip[0] >> 4 == 4 => {
                let mut v = [0u8; 12];
                v[..8].copy_from_slice(&ip[12..20]);
                v[8] = ip[9];
                v[9] = ip[1];
                v[10] = ip[8];
                v[11] = ip[6] >> 5;
                h.ipv4 = Some(v);
                let ihl = ((ip[0] & 0xf) as usize) * 4;
                // Only a first fragment carries the ports.
                let first = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0;
                (ip[9], (first && ihl >= 20).then(|| ip.get(ihl..)).flatten())
            }
            ETH_P_IPV6 if ip.len() >= 40 && ip[0] >> 4 == 6 => {
                let mut v = [0u8; 40];
                v[..32].copy_from_slice(&ip[8..40]);
                let label = u32::from_be_bytes([0, ip[1] & 0xf, ip[2], ip[3]]);
                v[32..36].copy_from_slice(&label.to_be_bytes());
                v[36] = ip[6];
                v[37] = (ip[0] << 4) | (ip[1] >> 4);
                v[38] = ip[7];
                h.ipv6 = Some(v);
                (ip[6], ip.get(40..))
            }
            _ => return h,
        };
        if let Some(t) = l4.filter(|t| t.len() >= 4) {
            if proto == IPPROTO_TCP || proto == IPPROTO_UDP {
                h.l4 = Some((proto, [t[2], t[3], t[0], t[1]]));
            }
        }
        h
    }

    fn multicast(&self) -> bool {
        self.eth[0] & 1 != 0
    }
}

/// One spec of a rule: which layer, and its value and mask as bytes laid
/// out like [`Headers`]' fields.
#[derive(Clone, Debug, PartialEq)]
enum Spec {
    Eth {
        val: [u8; 16],
        mask: [u8; 16],
    },
    Ipv4 {
        val: [u8; 12],
        mask: [u8; 12],
    },
    Ipv6 {
        val: [u8; 40],
        mask: [u8; 40],
    },
    L4 {
        proto: u8,
        val: [u8; 4],
        mask: [u8; 4],
    },
}

fn masked_eq(have: &[u8], val: &[u8], mask: &[u8]) -> bool {
    have.iter()
        .zip(val.iter().zip(mask))
        .all(|(h, (v, m))| h & m == v & m)
}

impl Spec {
    fn matches(&self, h: &Headers) -> bool {
        match self {
            Spec::Eth { val, mask } => {
                // A VLAN tag asked for needs a tagged frame.
                (h.vlan || mask[14..16] == [0, 0]) && masked_eq(&h.eth, val, mask)
            }
            Spec::Ipv4 { val, mask } => h.ipv4.is_some_and(|v| masked_eq(&v, val, mask)),
            Spec::Ipv6 { val, mask } => h.ipv6.is_some_and(|v| masked_eq(&v, val, mask)),
            Spec::L4 { proto, val, mask } => {
                h.l4.is_some_and(|(p, v)| p == *proto && masked_eq(&v, val, mask))
            }
        }
    }
}

/// Copies the value and mask halves of a spec's filter: `f` bytes each,
/// the value at `at`, the mask right behind it; the first `n` bytes of
/// each land in `val` and `mask` (a shorter filter leaves the rest zero,
/// matching anything).
fn halves<const N: usize>(spec: &[u8], at: usize, f: usize) -> ([u8; N], [u8; N]) {
    let (mut val, mut mask) = ([0u8; N], [0u8; N]);
    let n = f.min(N);
    val[..n].copy_from_slice(&spec[at..at + n]);
    mask[..n].copy_from_slice(&spec[at + f..at + f + n]);
    (val, mask)
}

/// Reads one spec at the start of `b` (its bytes as the caller laid them
/// out, `verbs.h`): the spec and its size. EOPNOTSUPP for a type this
/// device does not match on; EINVAL for one malformed.
fn parse_spec(b: &[u8]) -> Result<(Spec, usize), c_int> {
    if b.len() < 8 {
        return Err(libc::EINVAL);
    }
    let ty = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let size = u16::from_ne_bytes([b[4], b[5]]) as usize;
    if size < 8 || size > b.len() {
        return Err(libc::EINVAL);
    }
    let s = &b[..size];
    // Filters of 2-byte alignment (ETH, TCP/UDP) follow `size` at 6; the
    // others start at 8, as C lays the structs out.
    let spec = match ty {
        IBV_FLOW_SPEC_ETH => {
            if size < 6 + 32 {
                return Err(libc::EINVAL);
            }
            let (val, mask) = halves::<16>(s, 6, 16);
            Spec::Eth { val, mask }
        }
        IBV_FLOW_SPEC_IPV4 => {
            if size < 8 + 16 {
                return Err(libc::EINVAL);
            }
            let (val, mask) = halves::<12>(s, 8, 8);
            Spec::Ipv4 { val, mask }
        }
        // Variable size: the filter is half of what follows the header,
        // and must cover at least the addresses.
        IBV_FLOW_SPEC_IPV4_EXT => {
            let f = (size - 8) / 2;
            if f < 8 {
                return Err(libc::EINVAL);
            }
            let (val, mask) = halves::<12>(s, 8, f);
            Spec::Ipv4 { val, mask }
        }
        IBV_FLOW_SPEC_IPV6 => {
            let f = (size - 8) / 2;
            if f < 32 {
                return Err(libc::EINVAL);
            }
            let (val, mut mask) = halves::<40>(s, 8, f);
            mask[39] = 0;
            Spec::Ipv6 { val, mask }
        }
        IBV_FLOW_SPEC_TCP | IBV_FLOW_SPEC_UDP => {
            if size < 6 + 8 {
                return Err(libc::EINVAL);
            }
            let (val, mask) = halves::<4>(s, 6, 4);
            let proto = if ty == IBV_FLOW_SPEC_TCP {
                IPPROTO_TCP
            } else {
                IPPROTO_UDP
            };
            Spec::L4 { proto, val, mask }
        }
        // Tunnels, inner headers, ESP, GRE, MPLS and actions: not matched
        // here.
        _ => return Err(libc::EOPNOTSUPP),
    };
    Ok((spec, size))
}

/// Longer than any spec this device knows (IPv6's is 88 bytes).
const MAX_SPEC: usize = 256;

/// An installed rule.
#[derive(Debug)]
pub struct Rule {
    pub id: u64,
    /// The QP it steers to (its serial).
    pub owner: u64,
    pub ifindex: u32,
    kind: ibv_flow_attr_type,
    priority: u16,
    dont_trap: bool,
    specs: Vec<Spec>,
}

impl Rule {
    /// A rule from the caller's flow attributes: the header and the
    /// `num_of_specs` specs behind it, each as long as its own `size`
    /// says (the header's `size` is not looked at: rdma-core's kernel path
    /// ignores it too, and pyverbs leaves it at the header's size).
    ///
    /// # Safety
    /// `attr` is readable for `sizeof(ibv_flow_attr)` and the specs that
    /// follow it.
    pub unsafe fn parse(
        attr: *const ibv_flow_attr,
        owner: u64,
        ifindex: u32,
    ) -> Result<Rule, c_int> {
        // SAFETY: per the contract.
        let a = unsafe { attr.read_unaligned() };
        let head = std::mem::size_of::<ibv_flow_attr>();
        if a.comp_mask != 0 || a.port != 1 {
            return Err(libc::EINVAL);
        }
        if a.flags & !IBV_FLOW_ATTR_FLAGS_DONT_TRAP != 0 {
            return Err(if a.flags & IBV_FLOW_ATTR_FLAGS_EGRESS != 0 {
                libc::EOPNOTSUPP
            } else {
                libc::EINVAL
            });
        }
        match a.r#type {
            IBV_FLOW_ATTR_NORMAL => {}
            IBV_FLOW_ATTR_ALL_DEFAULT | IBV_FLOW_ATTR_MC_DEFAULT | IBV_FLOW_ATTR_SNIFFER => {
                // They catch what they name by their type, nothing finer.
                if a.num_of_specs != 0 {
                    return Err(libc::EINVAL);
                }
            }
            _ => return Err(libc::EINVAL),
        }
        let mut at = (attr as *const u8).wrapping_add(head);
        let mut specs = Vec::with_capacity(a.num_of_specs as usize);
        for _ in 0..a.num_of_specs {
            // SAFETY: per the contract, a spec's head (type and size) is
            // there, and then as many bytes as its size says.
            let size = unsafe { at.add(4).cast::<u16>().read_unaligned() } as usize;
            if !(8..=MAX_SPEC).contains(&size) {
                return Err(libc::EINVAL);
            }
            // SAFETY: as above.
            let bytes = unsafe { std::slice::from_raw_parts(at, size) };
            let (s, n) = parse_spec(bytes)?;
            specs.push(s);
            at = at.wrapping_add(n);
        }
        Ok(Rule {
            id: 0,
            owner,
            ifindex,
            kind: a.r#type,
            priority: a.priority,
            dont_trap: a.flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP != 0,
            specs,
        })
    }

    fn matches(&self, h: &Headers) -> bool {
        self.kind == IBV_FLOW_ATTR_NORMAL && self.specs.iter().all(|s| s.matches(h))
    }
}

static RULES: ForkFresh<RwLock<Vec<Arc<Rule>>>> = ForkFresh::new(|| RwLock::new(Vec::new()));
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Installs `r`; its id.
pub fn install(mut r: Rule) -> u64 {
    r.id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = r.id;
    RULES.get().write().push(Arc::new(r));
    id
}

/// Removes rule `id`; whether it was there.
pub fn remove(id: u64) -> bool {
    let mut rules = RULES.get().write();
    let before = rules.len();
    rules.retain(|r| r.id != id);
    rules.len() != before
}

/// Whether QP `owner` has a rule on the interface (so it reads frames).
pub fn has_rules(owner: u64) -> bool {
    RULES.get().read().iter().any(|r| r.owner == owner)
}

/// Whether the frame with headers `h`, received on `ifindex`, is steered
/// to QP `owner` (see the module comment).
pub fn steers_to(ifindex: u32, owner: u64, h: &Headers) -> bool {
    let rules = RULES.get().read();
    let on_if = || rules.iter().filter(|r| r.ifindex == ifindex);
    let mine = || on_if().filter(|r| r.owner == owner);
    if mine().any(|r| r.kind == IBV_FLOW_ATTR_SNIFFER) {
        return true;
    }
    let best_mine = mine().filter(|r| r.matches(h)).map(|r| r.priority).min();
    if let Some(p) = best_mine {
        return !on_if()
            .any(|r| r.owner != owner && !r.dont_trap && r.priority < p && r.matches(h));
    }
    if on_if().any(|r| r.matches(h)) {
        return false;
    }
    mine().any(|r| {
        r.kind == IBV_FLOW_ATTR_ALL_DEFAULT || (r.kind == IBV_FLOW_ATTR_MC_DEFAULT && h.multicast())
    })
}

/// The RSS hash fields this device hashes on.
pub const HASH_FIELDS: u64 = (IBV_RX_HASH_SRC_IPV4
    | IBV_RX_HASH_DST_IPV4
    | IBV_RX_HASH_SRC_IPV6
    | IBV_RX_HASH_DST_IPV6
    | IBV_RX_HASH_SRC_PORT_TCP
    | IBV_RX_HASH_DST_PORT_TCP
    | IBV_RX_HASH_SRC_PORT_UDP
    | IBV_RX_HASH_DST_PORT_UDP) as u64;

/// The bytes RSS hashes for a frame, in the order hardware feeds them to
/// Toeplitz (source address, destination address, source port,
/// destination port; each only when `fields` names it and the frame has
/// it).
pub fn hash_input(h: &Headers, fields: u64) -> Vec<u8> {
    let has = |f: ibv_rx_hash_fields| fields & f as u64 != 0;
    let mut out = Vec::with_capacity(36);
    if let Some(v) = &h.ipv4 {
        if has(IBV_RX_HASH_SRC_IPV4) {
            out.extend_from_slice(&v[0..4]);
        }
        if has(IBV_RX_HASH_DST_IPV4) {
            out.extend_from_slice(&v[4..8]);
        }
    }
    if let Some(v) = &h.ipv6 {
        if has(IBV_RX_HASH_SRC_IPV6) {
            out.extend_from_slice(&v[0..16]);
        }
        if has(IBV_RX_HASH_DST_IPV6) {
            out.extend_from_slice(&v[16..32]);
        }
    }
    if let Some((proto, p)) = &h.l4 {
        let (src, dst) = if *proto == IPPROTO_TCP {
            (IBV_RX_HASH_SRC_PORT_TCP, IBV_RX_HASH_DST_PORT_TCP)
        } else {
            (IBV_RX_HASH_SRC_PORT_UDP, IBV_RX_HASH_DST_PORT_UDP)
        };
        if has(src) {
            out.extend_from_slice(&p[2..4]);
        }
        if has(dst) {
            out.extend_from_slice(&p[0..2]);
        }
    }
    out
}

/// The Toeplitz hash of `input` under `key` (Microsoft's RSS definition:
/// for each set bit of the input, from the most significant, the 32 key
/// bits starting at that bit's position are XORed in).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1))
    };
    let mut window: u32 = (0..32).fold(0, |w, i| (w << 1) | key_bit(i));
    let mut hash = 0;
    for (i, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | key_bit(i * 8 + bit + 32);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microsoft's verification key and its first IPv4 vectors.
    const KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    #[test]
    fn toeplitz_matches_the_reference_vectors() {
        // 66.9.149.187:2794 -> 161.142.100.80:1766
        let ip = [66, 9, 149, 187, 161, 142, 100, 80];
        assert_eq!(toeplitz(&KEY, &ip), 0x323e_8fc2);
        let mut tcp = ip.to_vec();
        tcp.extend_from_slice(&2794u16.to_be_bytes());
        tcp.extend_from_slice(&1766u16.to_be_bytes());
        assert_eq!(toeplitz(&KEY, &tcp), 0x51cc_c178);
    }

    fn udp_frame(dst_port: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = IPPROTO_UDP;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 0, 0, 1]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&dst_port.to_be_bytes());
        f
    }

    #[test]
    fn headers_of_a_udp_frame() {
        let h = Headers::parse(&udp_frame(4791));
        assert_eq!(&h.eth[12..14], &[0x08, 0x00]);
        assert_eq!(&h.ipv4.unwrap()[..8], &[10, 0, 0, 1, 10, 0, 0, 2]);
        assert_eq!(h.l4, Some((IPPROTO_UDP, [0x12, 0xb7, 0x03, 0xe8])));
        assert_eq!(hash_input(&h, HASH_FIELDS).len(), 12);
    }

    #[test]
    fn udp_spec_matches_its_port_only() {
        let s = Spec::L4 {
            proto: IPPROTO_UDP,
            val: [0x12, 0xb7, 0, 0],
            mask: [0xff, 0xff, 0, 0],
        };
        assert!(s.matches(&Headers::parse(&udp_frame(4791))));
        assert!(!s.matches(&Headers::parse(&udp_frame(4792))));
        let tcp = Spec::L4 {
            proto: IPPROTO_TCP,
            val: [0; 4],
            mask: [0; 4],
        };
        assert!(!tcp.matches(&Headers::parse(&udp_frame(4791))));
    }
}
