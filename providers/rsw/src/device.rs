//! Devices: one per network interface that has an IP address.
//!
//! The device is a view of the interface: its addresses become the GID
//! table (RoCE v2 style, so a GID is directly an IP address to connect to),
//! its MAC the GUID, its MTU the port MTU. Nothing here is cached across
//! `open_device` calls, so a device reflects the interface as it is when
//! opened.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::raw::{c_int, c_uint, c_void};

use parking_lot::Mutex;
use verbs_abi::provider::{ProviderDevice, DEVICE_NAME_MAX};
use verbs_abi::*;

pub use crate::gid::ipv4_mapped;
use crate::util::copy_cstr;
use verbs_rt::ForkFresh;

// Limits we advertise. They are what the implementation enforces, chosen so
// preallocated queues stay reasonable in memory.
pub const MAX_QP: u32 = 16384;
pub const MAX_QP_WR: u32 = 16384;
pub const MAX_SRQ_WR: u32 = 16384;
pub const MAX_SRQ: u32 = 16384;
pub const MAX_AH: u32 = 1 << 16;
pub const MAX_MW: u32 = 1 << 16;
/// Largest RSS indirection table: 2^8 entries.
pub const MAX_LOG_IND_TBL: u32 = 8;
/// Indirection tables and receive WQs a process may have.
pub const MAX_IND_TBLS: u32 = 1024;
pub const MAX_WQS: u32 = 16384;
/// Device memory (`ibv_alloc_dm`) a process may hold.
pub const MAX_DM_SIZE: u64 = 1 << 20;
/// Multicast groups QPs of this process may be attached to, and QPs per
/// group (counted per process: the groups live in the kernel's IP stack).
pub const MAX_MCAST_GRP: u32 = 1024;
pub const MAX_MCAST_QP_ATTACH: u32 = 64;
/// IEEE OUI-sized vendor id ("rsw"): no hardware vendor's, so programs that
/// branch on a vendor take their generic path.
pub const VENDOR_ID: u32 = 0x72_73_77;
pub const VENDOR_PART_ID: u32 = 1;
pub const MAX_SGE: u32 = 32;
/// Tag matching (`tm`), mlx5's values: the rendezvous header, the tags
/// of a list, the operations outstanding, the SGEs of a tagged buffer.
pub const TM_MAX_RNDV_HDR_SIZE: u32 = 64;
pub const TM_MAX_NUM_TAGS: u32 = 1023;
pub const TM_MAX_OPS: u32 = 1024;
pub const TM_MAX_SGE: u32 = 1;
pub const MAX_CQ: u32 = 16384;
pub const MAX_CQE: u32 = 1 << 20;
pub const MAX_MR: u32 = 1 << 20;
pub const MAX_PD: u32 = 1 << 16;
pub const MAX_RD_ATOM: u32 = 16;
pub const MAX_INLINE: u32 = 1024;
/// Inline room every QP gets even if it asked for none, so small sends take
/// the copy-at-post path (like hardware that always has a few inline bytes).
pub const MIN_INLINE: u32 = 64;
/// Largest message, as in InfiniBand (2^31 bytes).
pub const MAX_MSG_SZ: u32 = 1 << 31;
pub const FW_VER: &str = concat!("rsw ", env!("CARGO_PKG_VERSION"));
/// The completion clock runs in nanoseconds: 1,000,000 kHz.
pub const CORE_CLOCK_KHZ: u64 = 1_000_000;

/// Descriptors a connected QP holds: its listener and one connection per
/// direction.
const FDS_PER_QP: u64 = 3;
/// Descriptors left to the application and to everything else we open.
const RESERVED_FDS: u64 = 64;

/// How many QPs this process can really have connected at once: what the
/// descriptor limit allows (three per QP), and what the host's ephemeral
/// ports allow (a listener and an outgoing connection per QP), within
/// [`MAX_QP`]. Read when asked, since both limits can change; creating a
/// QP past it fails (`qp::Place`), so `max_qp` is what a program can have.
pub fn qp_limit() -> u32 {
    let nofile = crate::util::nofile_limit();
    let by_fds = nofile.saturating_sub(RESERVED_FDS) / FDS_PER_QP;
    let by_ports = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u64>().ok());
            Some((it.next()??, it.next()??))
        })
        .map_or(u64::MAX, |(lo, hi)| (hi + 1).saturating_sub(lo) / 2);
    by_fds.min(by_ports).clamp(1, MAX_QP as u64) as u32
}

/// Everything a context needs to know about its interface.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub ifname: String,
    pub ifindex: u32,
    /// GUID bytes in network order.
    pub guid: [u8; 8],
    /// Interface MTU in bytes.
    pub if_mtu: u32,
    /// GID table: IPv4-mapped addresses first, then IPv6 ones.
    pub gids: Vec<[u8; 16]>,
}

impl DeviceInfo {
    /// GUID as stored in the C structs (a `__be64`: its memory bytes are the
    /// GUID in network order).
    pub fn guid_be(&self) -> u64 {
        u64::from_ne_bytes(self.guid)
    }

    pub fn active_mtu(&self) -> ibv_mtu {
        mtu_enum(self.if_mtu)
    }

    /// The loopback interface: this host only.
    pub fn is_loopback(&self) -> bool {
        self.ifname == "lo"
    }

    /// The active MTU in bytes: the largest UD message.
    pub fn mtu_bytes(&self) -> u32 {
        128 << self.active_mtu()
    }

    /// Whether `RSW_ROCEV2` names this device: its UD QPs then speak
    /// RoCEv2 (`engine::roce_ud`), and other QP types are refused.
    pub fn speaks_rocev2(&self) -> bool {
        static SPEC: std::sync::LazyLock<Option<String>> =
            std::sync::LazyLock::new(|| std::env::var(ROCEV2_VAR).ok());
        SPEC.as_deref()
            .is_some_and(|s| rocev2_listed(s, &self.name, &self.ifname))
    }
}

/// The setting naming the devices that speak RoCEv2 (rdma-environ(7)).
pub const ROCEV2_VAR: &str = "RSW_ROCEV2";

/// Whether `spec` (device or interface names, separated by commas or
/// blanks; `all` for every device) names the device `name` on `ifname`.
pub fn rocev2_listed(spec: &str, name: &str, ifname: &str) -> bool {
    spec.split(|c: char| c == ',' || c.is_whitespace())
        .any(|w| w == "all" || w == name || w == ifname)
}

/// Largest InfiniBand MTU that fits in an interface MTU once IP and TCP
/// headers are taken off.
pub fn mtu_enum(if_mtu: u32) -> ibv_mtu {
    const OVERHEAD: u32 = 80;
    let room = if_mtu.saturating_sub(OVERHEAD);
    match room {
        r if r >= 4096 => IBV_MTU_4096,
        r if r >= 2048 => IBV_MTU_2048,
        r if r >= 1024 => IBV_MTU_1024,
        r if r >= 512 => IBV_MTU_512,
        _ => IBV_MTU_256,
    }
}

/// EUI-64 from a MAC; interfaces without one (loopback) get a name hash so
/// the GUID is still stable across runs.
pub fn guid_for(ifname: &str, mac: Option<[u8; 6]>) -> [u8; 8] {
    match mac {
        Some(m) if m != [0; 6] => [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]],
        _ => {
            // FNV-1a: simple, stable and good enough to separate names.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in ifname.bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            let mut g = h.to_be_bytes();
            // Mark it locally administered, as a MAC-derived one would not be.
            g[0] = (g[0] & !1) | 2;
            g
        }
    }
}

struct IfScan {
    ifindex: u32,
    loopback: bool,
    mac: Option<[u8; 6]>,
    v4: Vec<[u8; 4]>,
    v6: Vec<[u8; 16]>,
}

fn read_mtu(ifname: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

/// Lists the interfaces that have at least one IP address, ordered by
/// interface index so device order is stable, loopback last: programs that
/// take "the first device" (ibv_rc_pingpong, perftest without -d) should get
/// one whose GIDs another host can reach, as with soft-RoCE on a NIC.
pub fn scan() -> Vec<DeviceInfo> {
    let mut ifs: HashMap<String, IfScan> = HashMap::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills head with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned; its fields
        // are valid until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let ent = ifs.entry(name.clone()).or_insert_with(|| IfScan {
            // SAFETY: ifa_name is a valid C string.
            ifindex: unsafe { libc::if_nametoindex(ifa.ifa_name) },
            loopback: false,
            mac: None,
            v4: Vec::new(),
            v6: Vec::new(),
        });
        ent.loopback |= ifa.ifa_flags & libc::IFF_LOOPBACK as c_uint != 0;
        // SAFETY: ifa_addr points to a sockaddr whose family says which
        // concrete sockaddr type it is.
        unsafe {
            match (*ifa.ifa_addr).sa_family as c_int {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    ent.v4.push(sin.sin_addr.s_addr.to_ne_bytes());
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    ent.v6.push(sin6.sin6_addr.s6_addr);
                }
                libc::AF_PACKET => {
                    let sll = &*(ifa.ifa_addr as *const libc::sockaddr_ll);
                    if sll.sll_halen == 6 {
                        let mut m = [0u8; 6];
                        m.copy_from_slice(&sll.sll_addr[..6]);
                        ent.mac = Some(m);
                    }
                }
                _ => {}
            }
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };

    let mut out: Vec<(bool, DeviceInfo)> = ifs
        .into_iter()
        .filter(|(_, s)| !s.v4.is_empty() || !s.v6.is_empty())
        .map(|(ifname, s)| {
            let mut gids: Vec<[u8; 16]> = s.v4.iter().map(|a| ipv4_mapped(*a)).collect();
            gids.extend(s.v6.iter().copied());
            let info = DeviceInfo {
                name: format!("rsw_{ifname}"),
                guid: guid_for(&ifname, s.mac),
                if_mtu: read_mtu(&ifname),
                ifindex: s.ifindex,
                ifname,
                gids,
            };
            (s.loopback, info)
        })
        .collect();
    out.sort_by_key(|(loopback, d)| (*loopback, d.ifindex));
    out.into_iter().map(|(_, d)| d).collect()
}

/// What `ProviderDevice.handle` points to: the interface name. Interned and
/// never freed, as the provider ABI requires handles to outlive the process's
/// use of them.
pub struct DevHandle {
    pub ifname: String,
}

static HANDLES: ForkFresh<Mutex<Vec<&'static DevHandle>>> =
    ForkFresh::new(|| Mutex::new(Vec::new()));

/// The handles themselves stay valid in a forked child; only the list (and
/// its possibly held lock) starts afresh.
fn handle_for(ifname: &str) -> &'static DevHandle {
    let mut hs = HANDLES.get().lock();
    if let Some(h) = hs.iter().find(|h| h.ifname == ifname) {
        return h;
    }
    let h: &'static DevHandle = Box::leak(Box::new(DevHandle {
        ifname: ifname.to_owned(),
    }));
    hs.push(h);
    h
}

/// Finds the current state of the interface behind a handle.
pub fn lookup(handle: *mut c_void) -> Option<DeviceInfo> {
    if handle.is_null() {
        return None;
    }
    // SAFETY: handles we hand out are leaked `DevHandle`s, valid forever.
    let h = unsafe { &*(handle as *const DevHandle) };
    scan().into_iter().find(|d| d.ifname == h.ifname)
}

pub(crate) unsafe extern "C" fn discover(out: *mut ProviderDevice, max: usize) -> isize {
    verbs_rt::logging::init();
    let devs = scan();
    for (i, d) in devs.iter().enumerate().take(max) {
        let mut pd = ProviderDevice {
            name: [0; DEVICE_NAME_MAX],
            node_type: IBV_NODE_CA,
            transport_type: IBV_TRANSPORT_IB,
            node_guid: d.guid_be(),
            handle: handle_for(&d.ifname) as *const DevHandle as *mut c_void,
        };
        copy_cstr(&mut pd.name, &d.name);
        // SAFETY: the caller gave room for `max` entries and i < max.
        unsafe { out.add(i).write(pd) };
    }
    devs.len() as isize
}

pub fn device_attr(d: &DeviceInfo) -> ibv_device_attr {
    let mut a = ibv_device_attr::zeroed();
    copy_cstr(&mut a.fw_ver, FW_VER);
    a.node_guid = d.guid_be();
    a.sys_image_guid = d.guid_be();
    // Any user address range can be registered; cap at the x86-64 user
    // address space.
    a.max_mr_size = 1 << 47;
    a.page_size_cap = 4096;
    a.vendor_id = VENDOR_ID;
    a.vendor_part_id = VENDOR_PART_ID;
    a.hw_ver = 1;
    let max_qp = qp_limit();
    a.max_qp = max_qp as c_int;
    a.max_qp_wr = MAX_QP_WR as c_int;
    a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_CURR_QP_STATE_MOD
        | IBV_DEVICE_SRQ_RESIZE
        | IBV_DEVICE_XRC
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    a.max_sge = MAX_SGE as c_int;
    a.max_sge_rd = MAX_SGE as c_int;
    a.max_cq = MAX_CQ as c_int;
    a.max_cqe = MAX_CQE as c_int;
    a.max_mr = MAX_MR as c_int;
    a.max_pd = MAX_PD as c_int;
    a.max_qp_rd_atom = MAX_RD_ATOM as c_int;
    a.max_srq = MAX_SRQ as c_int;
    a.max_srq_wr = MAX_SRQ_WR as c_int;
    a.max_srq_sge = MAX_SGE as c_int;
    a.max_ah = MAX_AH as c_int;
    a.max_mw = MAX_MW as c_int;
    a.max_mcast_grp = MAX_MCAST_GRP as c_int;
    a.max_mcast_qp_attach = MAX_MCAST_QP_ATTACH as c_int;
    a.max_total_mcast_qp_attach = (MAX_MCAST_GRP * MAX_MCAST_QP_ATTACH) as c_int;
    a.max_res_rd_atom = (MAX_RD_ATOM * max_qp) as c_int;
    a.max_qp_init_rd_atom = MAX_RD_ATOM as c_int;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

pub fn port_attr(d: &DeviceInfo) -> ibv_port_attr {
    let mut p: ibv_port_attr = ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: d.active_mtu(),
        active_mtu: d.active_mtu(),
        gid_tbl_len: d.gids.len().max(1) as c_int,
        port_cap_flags: IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS,
        max_msg_sz: MAX_MSG_SZ,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X EDR: a plausible figure for tools that print link speed.
        active_width: 2,
        active_speed: 32,
        // LinkUp
        phys_state: 5,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
    };
    if d.gids.is_empty() {
        p.gid_tbl_len = 1;
    }
    p
}

/// The tag-matching capabilities `ibv_query_device_ex` reports
/// (`tm_caps`; tag matching is done in software, `tm`).
pub fn tm_caps() -> verbs_abi::ibv_tm_caps {
    verbs_abi::ibv_tm_caps {
        max_rndv_hdr_size: TM_MAX_RNDV_HDR_SIZE,
        max_num_tags: TM_MAX_NUM_TAGS,
        flags: verbs_abi::IBV_TM_CAP_RC,
        max_ops: TM_MAX_OPS,
        max_sge: TM_MAX_SGE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocev2_setting_names_devices_or_interfaces() {
        assert!(rocev2_listed("rsw_vD", "rsw_vD", "vD"));
        assert!(rocev2_listed("vD", "rsw_vD", "vD"));
        assert!(rocev2_listed("eth0, vD", "rsw_vD", "vD"));
        assert!(rocev2_listed("lo rsw_vD", "rsw_vD", "vD"));
        assert!(rocev2_listed("all", "rsw_lo", "lo"));
        assert!(!rocev2_listed("", "rsw_vD", "vD"));
        assert!(!rocev2_listed("rsw_vD2,v", "rsw_vD", "vD"));
        assert!(!rocev2_listed("rsw_eth0", "rsw_vD", "vD"));
    }
    use crate::gid::gid_as_ipv4;

    #[test]
    fn mtu_mapping() {
        assert_eq!(mtu_enum(65536), IBV_MTU_4096);
        assert_eq!(mtu_enum(9000), IBV_MTU_4096);
        assert_eq!(mtu_enum(1500), IBV_MTU_1024);
        assert_eq!(mtu_enum(1400), IBV_MTU_1024);
        assert_eq!(mtu_enum(576), IBV_MTU_256);
    }

    #[test]
    fn guid_from_mac_is_eui64() {
        let g = guid_for("eth0", Some([0x02, 0xfc, 0, 0, 0, 1]));
        assert_eq!(g, [0x00, 0xfc, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x01]);
        let a = guid_for("lo", None);
        assert_eq!(a, guid_for("lo", Some([0; 6])));
        assert_ne!(a, guid_for("lo2", None));
    }

    #[test]
    fn ipv4_mapped_round_trip() {
        let g = ipv4_mapped([127, 0, 0, 1]);
        assert_eq!(gid_as_ipv4(&g), Some([127, 0, 0, 1]));
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(gid_as_ipv4(&v6), None);
    }

    #[test]
    fn loopback_is_listed() {
        let devs = scan();
        let lo = devs.iter().find(|d| d.name == "rsw_lo").expect("rsw_lo");
        assert_eq!(lo.gids[0], ipv4_mapped([127, 0, 0, 1]));
        assert_eq!(lo.active_mtu(), IBV_MTU_4096);
    }
}
