//! Checks `verbs_abi::uverbs` against the kernel's RDMA UAPI headers in
//! `/usr/include/rdma/` (Debian's linux-libc-dev).
//!
//! The lists below name every struct (with every field) and every constant
//! of `src/uverbs.rs`; the test writes them as C into a temporary
//! `uverbs_probe_items.h`, compiles `tests/uverbs_probe.c` against the
//! headers with `cc` (or `$CC`), runs it, and compares what C prints with
//! Rust's `size_of`/`align_of`/`offset_of!`/field sizes and constant values.
//! It also reads `src/uverbs.rs` and fails if a struct, field or constant
//! defined there is missing from the lists.  Skipped, with a note, where
//! `/usr/include/rdma/ib_user_verbs.h` is absent.
#![allow(non_camel_case_types)]

use core::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use verbs_abi::uverbs::*;

/// One line of the probe's output and what Rust expects it to say.
struct Item {
    /// The probe macro call, e.g. `FIELD(struct ib_uverbs_cmd_hdr, in_words)`.
    c: String,
    /// What the numbers are, for the failure message.
    what: &'static str,
    rust: Vec<u64>,
    /// For a string constant, its text (then `rust` is empty).
    rust_text: Option<&'static str>,
}

#[derive(Default)]
struct Lists {
    items: Vec<Item>,
    /// Rust struct name -> top-level fields listed.
    structs: BTreeMap<&'static str, BTreeSet<String>>,
    consts: BTreeSet<String>,
    exprs: Vec<String>,
    strings: BTreeSet<String>,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// Widens a constant the way C's `(unsigned long long)` cast does.
trait ToU64 {
    fn to_u64(self) -> u64;
}
macro_rules! to_u64_unsigned {
    ($($t:ty),*) => {$(impl ToU64 for $t {
        fn to_u64(self) -> u64 {
            u64::from(self)
        }
    })*};
}
to_u64_unsigned!(u8, u16, u32, u64);
impl ToU64 for i32 {
    fn to_u64(self) -> u64 {
        i64::from(self) as u64
    }
}
impl ToU64 for usize {
    fn to_u64(self) -> u64 {
        self as u64
    }
}

/// A field path as C spells it (`r#type` is `type`).
fn c_path(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| p.strip_prefix("r#").unwrap_or(p))
        .collect::<Vec<_>>()
        .join(".")
}

/// The C types of this module that are unions, not structs.
const C_UNIONS: &[&str] = &["rxe_gid"];

/// Rust names of C types whose C name is not a valid or free Rust name.
const C_NAMES: &[(&str, &str)] = &[
    ("ucma_sockaddr_in6", "sockaddr_in6"),
    ("kernel_sockaddr_storage", "__kernel_sockaddr_storage"),
];

fn c_name(name: &str) -> &str {
    C_NAMES
        .iter()
        .find(|(r, _)| *r == name)
        .map_or(name, |(_, c)| c)
}

fn c_tag(name: &str) -> &'static str {
    if C_UNIONS.contains(&name) {
        "union"
    } else {
        "struct"
    }
}

/// `struct name`, or for a Rust type standing for one of C's anonymous
/// members (`name = parent.path`), the member's type via `__typeof__`.
fn c_type(name: &str, parent: &[&str]) -> String {
    match parent.split_first() {
        None => format!("{} {}", c_tag(name), c_name(name)),
        Some((p, path)) => format!(
            "__typeof__((({} {} *)0)->{})",
            c_tag(p),
            c_name(p),
            c_path(path)
        ),
    }
}

/// `structs! { name { field, a.b, ... } name = parent.member { ... } }`
macro_rules! structs {
    ($lists:ident; $( $t:ident $(= $p:ident . $($pp:ident).+ )? { $($($f:ident).+),* $(,)? } )*) => {$({
        let cty = c_type(stringify!($t), &[$(stringify!($p), $(stringify!($pp)),+)?]);
        $lists.items.push(Item {
            c: format!("STRUCT({cty})"),
            what: "size, alignment",
            rust: vec![size_of::<$t>() as u64, align_of::<$t>() as u64],
            rust_text: None,
        });
        let listed = $lists.structs.entry(stringify!($t)).or_default();
        let probe = MaybeUninit::<$t>::uninit();
        let base = probe.as_ptr();
        $(
            let parts = [$(stringify!($f)),+];
            listed.insert(c_path(&parts[..1]));
            $lists.items.push(Item {
                c: format!("FIELD({cty}, {})", c_path(&parts)),
                what: "offset, size",
                rust: vec![
                    offset_of!($t, $($f).+) as u64,
                    // SAFETY: `addr_of!` only computes an address inside
                    // `probe`; nothing is read, no reference is made.
                    size_of_pointee(unsafe { core::ptr::addr_of!((*base).$($f).+) }) as u64,
                ],
                rust_text: None,
            });
        )*
    })*};
}

/// `consts![lists; NAME, ...]`
macro_rules! consts {
    ($lists:ident; $($c:ident),* $(,)?) => {$(
        $lists.consts.insert(stringify!($c).to_string());
        $lists.items.push(Item {
            c: format!("CONST({})", stringify!($c)),
            what: "value",
            rust: vec![$c.to_u64()],
            rust_text: None,
        });
    )*};
}

/// `exprs![lists; F(A, B), ...]`: expressions spelled the same in C and Rust
/// (the function-like macros, as `const fn`s here).
macro_rules! exprs {
    ($lists:ident; $($e:expr),* $(,)?) => {$(
        $lists.exprs.push(stringify!($e).to_string());
        $lists.items.push(Item {
            c: format!("CONST({})", stringify!($e)),
            what: "value",
            rust: vec![($e).to_u64()],
            rust_text: None,
        });
    )*};
}

/// `strings![lists; NAME, ...]`: string constants.
macro_rules! strings {
    ($lists:ident; $($c:ident),* $(,)?) => {$(
        $lists.strings.insert(stringify!($c).to_string());
        $lists.items.push(Item {
            c: format!("STRING({})", stringify!($c)),
            what: "text",
            rust: Vec::new(),
            rust_text: Some($c),
        });
    )*};
}

// `exprs!` spells masks as C does (`RDMA_NLA_TYPE_MASK & 0xffff`).
#[allow(clippy::identity_op)]
fn lists() -> Lists {
    let mut l = Lists::default();
    structs! { l;
    ib_uverbs_async_event_desc { element, event_type, reserved }
    ib_uverbs_comp_event_desc { cq_handle }
    ib_uverbs_cq_moderation_caps { max_cq_moderation_count, max_cq_moderation_period, reserved }
    ib_uverbs_cmd_hdr { command, in_words, out_words }
    ib_uverbs_ex_cmd_hdr { response, provider_in_words, provider_out_words, cmd_hdr_reserved }
    ib_uverbs_get_context { response }
    ib_uverbs_get_context_resp { async_fd, num_comp_vectors }
    ib_uverbs_query_device { response }
    ib_uverbs_query_device_resp { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt, reserved }
    ib_uverbs_ex_query_device { comp_mask, reserved }
    ib_uverbs_odp_caps_per_transport_caps = ib_uverbs_odp_caps.per_transport_caps { rc_odp_caps, uc_odp_caps, ud_odp_caps }
    ib_uverbs_odp_caps { general_caps, per_transport_caps, reserved }
    ib_uverbs_rss_caps { supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, reserved }
    ib_uverbs_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge, reserved }
    ib_uverbs_ex_query_device_resp { base, comp_mask, response_length, odp_caps, timestamp_mask, hca_core_clock, device_cap_flags_ex, rss_caps, max_wq_type_rq, raw_packet_caps, tm_caps, cq_moderation_caps, max_dm_size, xrc_odp_caps, reserved }
    ib_uverbs_query_port { response, port_num, reserved }
    ib_uverbs_query_port_resp { port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, gid_tbl_len, pkey_tbl_len, lid, sm_lid, state, max_mtu, active_mtu, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags, reserved }
    ib_uverbs_alloc_pd { response }
    ib_uverbs_alloc_pd_resp { pd_handle }
    ib_uverbs_dealloc_pd { pd_handle }
    ib_uverbs_open_xrcd { response, fd, oflags }
    ib_uverbs_open_xrcd_resp { xrcd_handle }
    ib_uverbs_close_xrcd { xrcd_handle }
    ib_uverbs_reg_mr { response, start, length, hca_va, pd_handle, access_flags }
    ib_uverbs_reg_mr_resp { mr_handle, lkey, rkey }
    ib_uverbs_rereg_mr { response, mr_handle, flags, start, length, hca_va, pd_handle, access_flags }
    ib_uverbs_rereg_mr_resp { lkey, rkey }
    ib_uverbs_dereg_mr { mr_handle }
    ib_uverbs_alloc_mw { response, pd_handle, mw_type, reserved }
    ib_uverbs_alloc_mw_resp { mw_handle, rkey }
    ib_uverbs_dealloc_mw { mw_handle }
    ib_uverbs_create_comp_channel { response }
    ib_uverbs_create_comp_channel_resp { fd }
    ib_uverbs_create_cq { response, user_handle, cqe, comp_vector, comp_channel, reserved }
    ib_uverbs_ex_create_cq { user_handle, cqe, comp_vector, comp_channel, comp_mask, flags, reserved }
    ib_uverbs_create_cq_resp { cq_handle, cqe }
    ib_uverbs_ex_create_cq_resp { base, comp_mask, response_length }
    ib_uverbs_resize_cq { response, cq_handle, cqe }
    ib_uverbs_resize_cq_resp { cqe, reserved }
    ib_uverbs_poll_cq { response, cq_handle, ne }
    ib_uverbs_wc { wr_id, status, opcode, vendor_err, byte_len, ex, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits, port_num, reserved }
    ib_uverbs_poll_cq_resp { count, reserved }
    ib_uverbs_req_notify_cq { cq_handle, solicited_only }
    ib_uverbs_destroy_cq { response, cq_handle, reserved }
    ib_uverbs_destroy_cq_resp { comp_events_reported, async_events_reported }
    ib_uverbs_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved }
    ib_uverbs_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved }
    ib_uverbs_qp_attr { qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, reserved }
    ib_uverbs_create_qp { response, user_handle, pd_handle, send_cq_handle, recv_cq_handle, srq_handle, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, sq_sig_all, qp_type, is_srq, reserved }
    ib_uverbs_ex_create_qp { user_handle, pd_handle, send_cq_handle, recv_cq_handle, srq_handle, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, sq_sig_all, qp_type, is_srq, reserved, comp_mask, create_flags, rwq_ind_tbl_handle, source_qpn }
    ib_uverbs_open_qp { response, user_handle, pd_handle, qpn, qp_type, reserved }
    ib_uverbs_create_qp_resp { qp_handle, qpn, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, reserved }
    ib_uverbs_ex_create_qp_resp { base, comp_mask, response_length }
    ib_uverbs_qp_dest { dgid, flow_label, dlid, reserved, sgid_index, hop_limit, traffic_class, sl, src_path_bits, static_rate, is_global, port_num }
    ib_uverbs_query_qp { response, qp_handle, attr_mask }
    ib_uverbs_query_qp_resp { dest, alt_dest, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, pkey_index, alt_pkey_index, qp_state, cur_qp_state, path_mtu, path_mig_state, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, sq_sig_all, reserved }
    ib_uverbs_modify_qp { dest, alt_dest, qp_handle, attr_mask, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, pkey_index, alt_pkey_index, qp_state, cur_qp_state, path_mtu, path_mig_state, en_sqd_async_notify, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, reserved }
    ib_uverbs_ex_modify_qp { base, rate_limit, reserved }
    ib_uverbs_ex_modify_qp_resp { comp_mask, response_length }
    ib_uverbs_destroy_qp { response, qp_handle, reserved }
    ib_uverbs_destroy_qp_resp { events_reported }
    ib_uverbs_sge { addr, length, lkey }
    ib_uverbs_send_wr_rdma = ib_uverbs_send_wr.wr.rdma { remote_addr, rkey, reserved }
    ib_uverbs_send_wr_atomic = ib_uverbs_send_wr.wr.atomic { remote_addr, compare_add, swap, rkey, reserved }
    ib_uverbs_send_wr_ud = ib_uverbs_send_wr.wr.ud { ah, remote_qpn, remote_qkey, reserved }
    ib_uverbs_send_wr_wr = ib_uverbs_send_wr.wr { rdma, atomic, ud }
    ib_uverbs_send_wr { wr_id, num_sge, opcode, send_flags, ex, wr }
    ib_uverbs_post_send { response, qp_handle, wr_count, sge_count, wqe_size }
    ib_uverbs_post_send_resp { bad_wr }
    ib_uverbs_recv_wr { wr_id, num_sge, reserved }
    ib_uverbs_post_recv { response, qp_handle, wr_count, sge_count, wqe_size }
    ib_uverbs_post_recv_resp { bad_wr }
    ib_uverbs_post_srq_recv { response, srq_handle, wr_count, sge_count, wqe_size }
    ib_uverbs_post_srq_recv_resp { bad_wr }
    ib_uverbs_create_ah { response, user_handle, pd_handle, reserved, attr }
    ib_uverbs_create_ah_resp { ah_handle }
    ib_uverbs_destroy_ah { ah_handle }
    ib_uverbs_attach_mcast { gid, qp_handle, mlid, reserved }
    ib_uverbs_detach_mcast { gid, qp_handle, mlid, reserved }
    ib_uverbs_flow_spec_hdr { r#type, size, reserved }
    ib_uverbs_flow_eth_filter { dst_mac, src_mac, ether_type, vlan_tag }
    ib_uverbs_flow_spec_eth { hdr, val, mask }
    ib_uverbs_flow_ipv4_filter { src_ip, dst_ip, proto, tos, ttl, flags }
    ib_uverbs_flow_spec_ipv4 { hdr, val, mask }
    ib_uverbs_flow_tcp_udp_filter { dst_port, src_port }
    ib_uverbs_flow_spec_tcp_udp { hdr, val, mask }
    ib_uverbs_flow_ipv6_filter { src_ip, dst_ip, flow_label, next_hdr, traffic_class, hop_limit, reserved }
    ib_uverbs_flow_spec_ipv6 { hdr, val, mask }
    ib_uverbs_flow_spec_action_tag { hdr, tag_id, reserved1 }
    ib_uverbs_flow_spec_action_drop { hdr }
    ib_uverbs_flow_spec_action_handle { hdr, handle, reserved1 }
    ib_uverbs_flow_spec_action_count { hdr, handle, reserved1 }
    ib_uverbs_flow_tunnel_filter { tunnel_id }
    ib_uverbs_flow_spec_tunnel { hdr, val, mask }
    ib_uverbs_flow_spec_esp_filter { spi, seq }
    ib_uverbs_flow_spec_esp { hdr, val, mask }
    ib_uverbs_flow_gre_filter { c_ks_res0_ver, protocol, key }
    ib_uverbs_flow_spec_gre { hdr, val, mask }
    ib_uverbs_flow_mpls_filter { label }
    ib_uverbs_flow_spec_mpls { hdr, val, mask }
    ib_uverbs_flow_attr { r#type, size, priority, num_of_specs, reserved, port, flags }
    ib_uverbs_create_flow { comp_mask, qp_handle, flow_attr }
    ib_uverbs_create_flow_resp { comp_mask, flow_handle }
    ib_uverbs_destroy_flow { comp_mask, flow_handle }
    ib_uverbs_create_srq { response, user_handle, pd_handle, max_wr, max_sge, srq_limit }
    ib_uverbs_create_xsrq { response, user_handle, srq_type, pd_handle, max_wr, max_sge, srq_limit, max_num_tags, xrcd_handle, cq_handle }
    ib_uverbs_create_srq_resp { srq_handle, max_wr, max_sge, srqn }
    ib_uverbs_modify_srq { srq_handle, attr_mask, max_wr, srq_limit }
    ib_uverbs_query_srq { response, srq_handle, reserved }
    ib_uverbs_query_srq_resp { max_wr, max_sge, srq_limit, reserved }
    ib_uverbs_destroy_srq { response, srq_handle, reserved }
    ib_uverbs_destroy_srq_resp { events_reported }
    ib_uverbs_ex_create_wq { comp_mask, wq_type, user_handle, pd_handle, cq_handle, max_wr, max_sge, create_flags, reserved }
    ib_uverbs_ex_create_wq_resp { comp_mask, response_length, wq_handle, max_wr, max_sge, wqn }
    ib_uverbs_ex_destroy_wq { comp_mask, wq_handle }
    ib_uverbs_ex_destroy_wq_resp { comp_mask, response_length, events_reported, reserved }
    ib_uverbs_ex_modify_wq { attr_mask, wq_handle, wq_state, curr_wq_state, flags, flags_mask }
    ib_uverbs_ex_create_rwq_ind_table { comp_mask, log_ind_tbl_size }
    ib_uverbs_ex_create_rwq_ind_table_resp { comp_mask, response_length, ind_tbl_handle, ind_tbl_num }
    ib_uverbs_ex_destroy_rwq_ind_table { comp_mask, ind_tbl_handle }
    ib_uverbs_cq_moderation { cq_count, cq_period }
    ib_uverbs_ex_modify_cq { cq_handle, attr_mask, attr, reserved }
    ib_uverbs_flow_action_esp_keymat_aes_gcm { iv, iv_algo, salt, icv_len, key_len, aes_key }
    ib_uverbs_flow_action_esp_replay_bmp { size }
    ib_uverbs_flow_action_esp_encap { val_ptr, next_ptr, len, r#type }
    ib_uverbs_flow_action_esp { spi, seq, tfc_pad, flags, hard_limit_pkts }
    ib_uverbs_query_port_resp_ex { legacy_resp, port_cap_flags2, reserved }
    ib_uverbs_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    ib_uverbs_gid_entry { gid, gid_index, port_num, gid_type, netdev_ifindex }
    ib_uverbs_attr { attr_id, len, flags, attr_data, data }
    ib_uverbs_ioctl_hdr { length, object_id, method_id, num_attrs, reserved1, driver_id, reserved2 }
    rdma_ls_resolve_header { device_name, port_num, path_use }
    rdma_ls_ip_resolve_header { ifindex }
    rdma_nla_ls_gid { gid }
    rxe_gid_global = rxe_gid.global { subnet_prefix, interface_id }
    rxe_gid { raw, global }
    rxe_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    rxe_av_addr = rxe_av.sgid_addr { _sockaddr_in, _sockaddr_in6 }
    rxe_av { port_num, network_type, dmac, grh, sgid_addr, dgid_addr }
    rxe_send_wr_rdma = rxe_send_wr.wr.rdma { remote_addr, rkey, reserved }
    rxe_send_wr_atomic = rxe_send_wr.wr.atomic { remote_addr, compare_add, swap, rkey, reserved }
    rxe_send_wr_ud = rxe_send_wr.wr.ud { remote_qpn, remote_qkey, pkey_index, reserved, ah_num, pad, av }
    rxe_send_wr_mw = rxe_send_wr.wr.mw { addr, length, mr_lkey, mw_rkey, rkey, access }
    rxe_send_wr_wr = rxe_send_wr.wr { rdma, atomic, ud, mw }
    rxe_send_wr { wr_id, reserved, opcode, send_flags, ex, wr }
    rxe_sge { addr, length, lkey }
    mminfo { offset, size, pad }
    rxe_dma_info { length, resid, cur_sge, num_sge, sge_offset, reserved }
    rxe_send_wqe { wr, status, state, iova, mask, first_psn, last_psn, ack_length, ssn, has_rd_atomic, dma }
    rxe_recv_wqe { wr_id, reserved, padding, dma }
    rxe_create_ah_resp { ah_num, reserved }
    rxe_create_cq_resp { mi }
    rxe_resize_cq_resp { mi }
    rxe_create_qp_resp { rq_mi, sq_mi }
    rxe_create_srq_resp { mi, srq_num, reserved }
    rxe_modify_srq_cmd { mmap_info_addr }
    rxe_queue_buf { log2_elem_size, index_mask, pad_1, producer_index, pad_2, consumer_index, pad_3 }
    siw_uresp_create_cq { cq_id, num_cqe, cq_key }
    siw_uresp_create_qp { qp_id, num_sqe, num_rqe, pad, sq_key, rq_key }
    siw_ureq_reg_mr { stag_key, reserved, pad }
    siw_uresp_reg_mr { stag, pad }
    siw_uresp_create_srq { num_rqe, pad, srq_key }
    siw_uresp_alloc_ctx { dev_id, pad }
    siw_sge { laddr, length, lkey }
    siw_sqe { id, flags, num_sge, opcode, rkey, raddr, sge }
    siw_rqe { id, flags, num_sge, opcode, unused, sge }
    siw_cqe { id, flags, opcode, status, bytes, imm_data, qp_id }
    siw_cq_ctrl { flags, pad }
    ib_user_path_rec { dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey, hop_limit, traffic_class, numb_path, sl, mtu_selector, rate_selector, rate, packet_life_time_selector, packet_life_time, preference }
    rdma_ucm_cmd_hdr { cmd, r#in, out }
    ucma_sockaddr_in6 { sin6_family, sin6_port, sin6_flowinfo, sin6_addr, sin6_scope_id }
    kernel_sockaddr_storage { ss_family, __data }
    rdma_ucm_create_id { uid, response, ps, qp_type, reserved }
    rdma_ucm_create_id_resp { id }
    rdma_ucm_destroy_id { response, id, reserved }
    rdma_ucm_destroy_id_resp { events_reported }
    rdma_ucm_bind_ip { response, addr, id }
    rdma_ucm_resolve_ip { src_addr, dst_addr, id, timeout_ms }
    rdma_ucm_resolve_route { id, timeout_ms }
    rdma_ucm_query { response, id, option }
    rdma_ucm_query_route_resp { node_guid, ib_route, src_addr, dst_addr, num_paths, port_num, reserved, ibdev_index, reserved1 }
    rdma_ucm_conn_param { qp_num, qkey, private_data, private_data_len, srq, responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, valid }
    rdma_ucm_ud_param { qp_num, qkey, ah_attr, private_data, private_data_len, reserved }
    rdma_ucm_ece { vendor_id, attr_mod }
    rdma_ucm_connect { conn_param, id, reserved, ece }
    rdma_ucm_listen { id, backlog }
    rdma_ucm_accept { uid, conn_param, id, reserved, ece }
    rdma_ucm_reject { id, private_data_len, reason, reserved, private_data }
    rdma_ucm_disconnect { id }
    rdma_ucm_init_qp_attr { response, id, qp_state }
    rdma_ucm_notify { id, event }
    rdma_ucm_join_mcast { response, uid, id, addr_size, join_flags, addr }
    rdma_ucm_get_event { response }
    rdma_ucm_event_param = rdma_ucm_event_resp.param { conn, ud }
    rdma_ucm_event_resp { uid, id, event, status, param, reserved, ece }
    rdma_ucm_set_option { optval, id, level, optname, optlen }
    rdma_ucm_migrate_id { response, id, fd }
    rdma_ucm_migrate_resp { events_reported }
    }
    consts! { l;
    RDMA_USER_CM_ABI_VERSION, RDMA_MAX_PRIVATE_DATA,
    RDMA_USER_CM_CMD_CREATE_ID, RDMA_USER_CM_CMD_DESTROY_ID, RDMA_USER_CM_CMD_BIND_IP, RDMA_USER_CM_CMD_RESOLVE_IP, RDMA_USER_CM_CMD_RESOLVE_ROUTE, RDMA_USER_CM_CMD_QUERY_ROUTE, RDMA_USER_CM_CMD_CONNECT, RDMA_USER_CM_CMD_LISTEN, RDMA_USER_CM_CMD_ACCEPT, RDMA_USER_CM_CMD_REJECT, RDMA_USER_CM_CMD_DISCONNECT, RDMA_USER_CM_CMD_INIT_QP_ATTR, RDMA_USER_CM_CMD_GET_EVENT, RDMA_USER_CM_CMD_GET_OPTION, RDMA_USER_CM_CMD_SET_OPTION, RDMA_USER_CM_CMD_NOTIFY, RDMA_USER_CM_CMD_JOIN_IP_MCAST, RDMA_USER_CM_CMD_LEAVE_MCAST, RDMA_USER_CM_CMD_MIGRATE_ID, RDMA_USER_CM_CMD_QUERY, RDMA_USER_CM_CMD_BIND, RDMA_USER_CM_CMD_RESOLVE_ADDR, RDMA_USER_CM_CMD_JOIN_MCAST,
    RDMA_USER_CM_QUERY_ADDR, RDMA_USER_CM_QUERY_PATH, RDMA_USER_CM_QUERY_GID,
    IB_USER_VERBS_ABI_VERSION,
    IB_USER_VERBS_CMD_THRESHOLD,
    IB_USER_VERBS_CMD_GET_CONTEXT,
    IB_USER_VERBS_CMD_QUERY_DEVICE,
    IB_USER_VERBS_CMD_QUERY_PORT,
    IB_USER_VERBS_CMD_ALLOC_PD,
    IB_USER_VERBS_CMD_DEALLOC_PD,
    IB_USER_VERBS_CMD_CREATE_AH,
    IB_USER_VERBS_CMD_MODIFY_AH,
    IB_USER_VERBS_CMD_QUERY_AH,
    IB_USER_VERBS_CMD_DESTROY_AH,
    IB_USER_VERBS_CMD_REG_MR,
    IB_USER_VERBS_CMD_REG_SMR,
    IB_USER_VERBS_CMD_REREG_MR,
    IB_USER_VERBS_CMD_QUERY_MR,
    IB_USER_VERBS_CMD_DEREG_MR,
    IB_USER_VERBS_CMD_ALLOC_MW,
    IB_USER_VERBS_CMD_BIND_MW,
    IB_USER_VERBS_CMD_DEALLOC_MW,
    IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
    IB_USER_VERBS_CMD_CREATE_CQ,
    IB_USER_VERBS_CMD_RESIZE_CQ,
    IB_USER_VERBS_CMD_DESTROY_CQ,
    IB_USER_VERBS_CMD_POLL_CQ,
    IB_USER_VERBS_CMD_PEEK_CQ,
    IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
    IB_USER_VERBS_CMD_CREATE_QP,
    IB_USER_VERBS_CMD_QUERY_QP,
    IB_USER_VERBS_CMD_MODIFY_QP,
    IB_USER_VERBS_CMD_DESTROY_QP,
    IB_USER_VERBS_CMD_POST_SEND,
    IB_USER_VERBS_CMD_POST_RECV,
    IB_USER_VERBS_CMD_ATTACH_MCAST,
    IB_USER_VERBS_CMD_DETACH_MCAST,
    IB_USER_VERBS_CMD_CREATE_SRQ,
    IB_USER_VERBS_CMD_MODIFY_SRQ,
    IB_USER_VERBS_CMD_QUERY_SRQ,
    IB_USER_VERBS_CMD_DESTROY_SRQ,
    IB_USER_VERBS_CMD_POST_SRQ_RECV,
    IB_USER_VERBS_CMD_OPEN_XRCD,
    IB_USER_VERBS_CMD_CLOSE_XRCD,
    IB_USER_VERBS_CMD_CREATE_XSRQ,
    IB_USER_VERBS_CMD_OPEN_QP,
    IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
    IB_USER_VERBS_EX_CMD_CREATE_CQ,
    IB_USER_VERBS_EX_CMD_CREATE_QP,
    IB_USER_VERBS_EX_CMD_MODIFY_QP,
    IB_USER_VERBS_EX_CMD_CREATE_FLOW,
    IB_USER_VERBS_EX_CMD_DESTROY_FLOW,
    IB_USER_VERBS_EX_CMD_CREATE_WQ,
    IB_USER_VERBS_EX_CMD_MODIFY_WQ,
    IB_USER_VERBS_EX_CMD_DESTROY_WQ,
    IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL,
    IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL,
    IB_USER_VERBS_EX_CMD_MODIFY_CQ,
    IB_USER_VERBS_CMD_COMMAND_MASK,
    IB_USER_VERBS_CMD_FLAG_EXTENDED,
    IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION,
    IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN,
    IB_UVERBS_WC_SEND,
    IB_UVERBS_WC_RDMA_WRITE,
    IB_UVERBS_WC_RDMA_READ,
    IB_UVERBS_WC_COMP_SWAP,
    IB_UVERBS_WC_FETCH_ADD,
    IB_UVERBS_WC_BIND_MW,
    IB_UVERBS_WC_LOCAL_INV,
    IB_UVERBS_WC_TSO,
    IB_UVERBS_CREATE_QP_MASK_IND_TABLE,
    IB_UVERBS_CREATE_QP_SUP_COMP_MASK,
    IB_UVERBS_WR_RDMA_WRITE,
    IB_UVERBS_WR_RDMA_WRITE_WITH_IMM,
    IB_UVERBS_WR_SEND,
    IB_UVERBS_WR_SEND_WITH_IMM,
    IB_UVERBS_WR_RDMA_READ,
    IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
    IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD,
    IB_UVERBS_WR_LOCAL_INV,
    IB_UVERBS_WR_BIND_MW,
    IB_UVERBS_WR_SEND_WITH_INV,
    IB_UVERBS_WR_TSO,
    IB_UVERBS_WR_RDMA_READ_WITH_INV,
    IB_UVERBS_WR_MASKED_ATOMIC_CMP_AND_SWP,
    IB_UVERBS_WR_MASKED_ATOMIC_FETCH_AND_ADD,
    IB_USER_VERBS_MAX_LOG_IND_TBL_SIZE,
    IB_DEVICE_NAME_MAX,
    IB_UVERBS_DEVICE_RESIZE_MAX_WR,
    IB_UVERBS_DEVICE_BAD_PKEY_CNTR,
    IB_UVERBS_DEVICE_BAD_QKEY_CNTR,
    IB_UVERBS_DEVICE_RAW_MULTI,
    IB_UVERBS_DEVICE_AUTO_PATH_MIG,
    IB_UVERBS_DEVICE_CHANGE_PHY_PORT,
    IB_UVERBS_DEVICE_UD_AV_PORT_ENFORCE,
    IB_UVERBS_DEVICE_CURR_QP_STATE_MOD,
    IB_UVERBS_DEVICE_SHUTDOWN_PORT,
    IB_UVERBS_DEVICE_PORT_ACTIVE_EVENT,
    IB_UVERBS_DEVICE_SYS_IMAGE_GUID,
    IB_UVERBS_DEVICE_RC_RNR_NAK_GEN,
    IB_UVERBS_DEVICE_SRQ_RESIZE,
    IB_UVERBS_DEVICE_N_NOTIFY_CQ,
    IB_UVERBS_DEVICE_MEM_WINDOW,
    IB_UVERBS_DEVICE_UD_IP_CSUM,
    IB_UVERBS_DEVICE_XRC,
    IB_UVERBS_DEVICE_MEM_MGT_EXTENSIONS,
    IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2A,
    IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2B,
    IB_UVERBS_DEVICE_RC_IP_CSUM,
    IB_UVERBS_DEVICE_RAW_IP_CSUM,
    IB_UVERBS_DEVICE_MANAGED_FLOW_STEERING,
    IB_UVERBS_DEVICE_RAW_SCATTER_FCS,
    IB_UVERBS_DEVICE_PCI_WRITE_END_PADDING,
    IB_UVERBS_RAW_PACKET_CAP_CVLAN_STRIPPING,
    IB_UVERBS_RAW_PACKET_CAP_SCATTER_FCS,
    IB_UVERBS_RAW_PACKET_CAP_IP_CSUM,
    IB_UVERBS_RAW_PACKET_CAP_DELAY_DROP,
    IB_UVERBS_ACCESS_OPTIONAL_FIRST,
    IB_UVERBS_ACCESS_OPTIONAL_LAST,
    IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS,
    IB_UVERBS_ACCESS_LOCAL_WRITE,
    IB_UVERBS_ACCESS_REMOTE_WRITE,
    IB_UVERBS_ACCESS_REMOTE_READ,
    IB_UVERBS_ACCESS_REMOTE_ATOMIC,
    IB_UVERBS_ACCESS_MW_BIND,
    IB_UVERBS_ACCESS_ZERO_BASED,
    IB_UVERBS_ACCESS_ON_DEMAND,
    IB_UVERBS_ACCESS_HUGETLB,
    IB_UVERBS_ACCESS_RELAXED_ORDERING,
    IB_UVERBS_ACCESS_OPTIONAL_RANGE,
    IB_UVERBS_SRQT_BASIC,
    IB_UVERBS_SRQT_XRC,
    IB_UVERBS_SRQT_TM,
    IB_UVERBS_WQT_RQ,
    IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING,
    IB_UVERBS_WQ_FLAGS_SCATTER_FCS,
    IB_UVERBS_WQ_FLAGS_DELAY_DROP,
    IB_UVERBS_WQ_FLAGS_PCI_WRITE_END_PADDING,
    IB_UVERBS_QPT_RC,
    IB_UVERBS_QPT_UC,
    IB_UVERBS_QPT_UD,
    IB_UVERBS_QPT_RAW_PACKET,
    IB_UVERBS_QPT_XRC_INI,
    IB_UVERBS_QPT_XRC_TGT,
    IB_UVERBS_QPT_DRIVER,
    IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK,
    IB_UVERBS_QP_CREATE_SCATTER_FCS,
    IB_UVERBS_QP_CREATE_CVLAN_STRIPPING,
    IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING,
    IB_UVERBS_QP_CREATE_SQ_SIG_ALL,
    IB_UVERBS_PCF_SM,
    IB_UVERBS_PCF_NOTICE_SUP,
    IB_UVERBS_PCF_TRAP_SUP,
    IB_UVERBS_PCF_OPT_IPD_SUP,
    IB_UVERBS_PCF_AUTO_MIGR_SUP,
    IB_UVERBS_PCF_SL_MAP_SUP,
    IB_UVERBS_PCF_MKEY_NVRAM,
    IB_UVERBS_PCF_PKEY_NVRAM,
    IB_UVERBS_PCF_LED_INFO_SUP,
    IB_UVERBS_PCF_SM_DISABLED,
    IB_UVERBS_PCF_SYS_IMAGE_GUID_SUP,
    IB_UVERBS_PCF_PKEY_SW_EXT_PORT_TRAP_SUP,
    IB_UVERBS_PCF_EXTENDED_SPEEDS_SUP,
    IB_UVERBS_PCF_CM_SUP,
    IB_UVERBS_PCF_SNMP_TUNNEL_SUP,
    IB_UVERBS_PCF_REINIT_SUP,
    IB_UVERBS_PCF_DEVICE_MGMT_SUP,
    IB_UVERBS_PCF_VENDOR_CLASS_SUP,
    IB_UVERBS_PCF_DR_NOTICE_SUP,
    IB_UVERBS_PCF_CAP_MASK_NOTICE_SUP,
    IB_UVERBS_PCF_BOOT_MGMT_SUP,
    IB_UVERBS_PCF_LINK_LATENCY_SUP,
    IB_UVERBS_PCF_CLIENT_REG_SUP,
    IB_UVERBS_PCF_LINK_SPEED_WIDTH_TABLE_SUP,
    IB_UVERBS_PCF_VENDOR_SPECIFIC_MADS_TABLE_SUP,
    IB_UVERBS_PCF_MCAST_PKEY_TRAP_SUPPRESSION_SUP,
    IB_UVERBS_PCF_MCAST_FDB_TOP_SUP,
    IB_UVERBS_PCF_HIERARCHY_INFO_SUP,
    IB_UVERBS_PCF_IP_BASED_GIDS,
    IB_UVERBS_QPF_GRH_REQUIRED,
    IB_UVERBS_FLOW_ACTION_ESP_KEYMAT_AES_GCM,
    IB_UVERBS_FLOW_ACTION_IV_ALGO_SEQ,
    IB_UVERBS_FLOW_ACTION_ESP_REPLAY_NONE,
    IB_UVERBS_FLOW_ACTION_ESP_REPLAY_BMP,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_INLINE_CRYPTO,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_FULL_OFFLOAD,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TUNNEL,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TRANSPORT,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_DECRYPT,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ENCRYPT,
    IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ESN_NEW_WINDOW,
    IB_UVERBS_READ_COUNTERS_PREFER_CACHED,
    IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
    IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE,
    IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
    IB_UVERBS_ADVISE_MR_FLAG_FLUSH,
    RDMA_DRIVER_UNKNOWN,
    RDMA_DRIVER_MLX5,
    RDMA_DRIVER_MLX4,
    RDMA_DRIVER_CXGB3,
    RDMA_DRIVER_CXGB4,
    RDMA_DRIVER_MTHCA,
    RDMA_DRIVER_BNXT_RE,
    RDMA_DRIVER_OCRDMA,
    RDMA_DRIVER_NES,
    RDMA_DRIVER_I40IW,
    RDMA_DRIVER_IRDMA,
    RDMA_DRIVER_VMW_PVRDMA,
    RDMA_DRIVER_QEDR,
    RDMA_DRIVER_HNS,
    RDMA_DRIVER_USNIC,
    RDMA_DRIVER_RXE,
    RDMA_DRIVER_HFI1,
    RDMA_DRIVER_QIB,
    RDMA_DRIVER_EFA,
    RDMA_DRIVER_SIW,
    RDMA_DRIVER_ERDMA,
    IB_UVERBS_GID_TYPE_IB,
    IB_UVERBS_GID_TYPE_ROCE_V1,
    IB_UVERBS_GID_TYPE_ROCE_V2,
    RDMA_IOCTL_MAGIC,
    RDMA_VERBS_IOCTL,
    UVERBS_ATTR_F_MANDATORY,
    UVERBS_ATTR_F_VALID_OUTPUT,
    UVERBS_ID_NS_MASK,
    UVERBS_ID_NS_SHIFT,
    UVERBS_UDATA_DRIVER_DATA_NS,
    UVERBS_UDATA_DRIVER_DATA_FLAG,
    UVERBS_OBJECT_DEVICE,
    UVERBS_OBJECT_PD,
    UVERBS_OBJECT_COMP_CHANNEL,
    UVERBS_OBJECT_CQ,
    UVERBS_OBJECT_QP,
    UVERBS_OBJECT_SRQ,
    UVERBS_OBJECT_AH,
    UVERBS_OBJECT_MR,
    UVERBS_OBJECT_MW,
    UVERBS_OBJECT_FLOW,
    UVERBS_OBJECT_XRCD,
    UVERBS_OBJECT_RWQ_IND_TBL,
    UVERBS_OBJECT_WQ,
    UVERBS_OBJECT_FLOW_ACTION,
    UVERBS_OBJECT_DM,
    UVERBS_OBJECT_COUNTERS,
    UVERBS_OBJECT_ASYNC_EVENT,
    UVERBS_ATTR_UHW_IN,
    UVERBS_ATTR_UHW_OUT,
    UVERBS_METHOD_INVOKE_WRITE,
    UVERBS_METHOD_INFO_HANDLES,
    UVERBS_METHOD_QUERY_PORT,
    UVERBS_METHOD_GET_CONTEXT,
    UVERBS_METHOD_QUERY_CONTEXT,
    UVERBS_METHOD_QUERY_GID_TABLE,
    UVERBS_METHOD_QUERY_GID_ENTRY,
    UVERBS_ATTR_CORE_IN,
    UVERBS_ATTR_CORE_OUT,
    UVERBS_ATTR_WRITE_CMD,
    UVERBS_ATTR_QUERY_PORT_PORT_NUM,
    UVERBS_ATTR_QUERY_PORT_RESP,
    UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
    UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
    UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
    UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
    UVERBS_ATTR_CREATE_CQ_HANDLE,
    UVERBS_ATTR_CREATE_CQ_CQE,
    UVERBS_ATTR_CREATE_CQ_USER_HANDLE,
    UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL,
    UVERBS_ATTR_CREATE_CQ_COMP_VECTOR,
    UVERBS_ATTR_CREATE_CQ_FLAGS,
    UVERBS_ATTR_CREATE_CQ_RESP_CQE,
    UVERBS_ATTR_CREATE_CQ_EVENT_FD,
    UVERBS_ATTR_DESTROY_CQ_HANDLE,
    UVERBS_ATTR_DESTROY_CQ_RESP,
    UVERBS_ATTR_CREATE_FLOW_ACTION_ESP_HANDLE,
    UVERBS_ATTR_FLOW_ACTION_ESP_ATTRS,
    UVERBS_ATTR_FLOW_ACTION_ESP_ESN,
    UVERBS_ATTR_FLOW_ACTION_ESP_KEYMAT,
    UVERBS_ATTR_FLOW_ACTION_ESP_REPLAY,
    UVERBS_ATTR_FLOW_ACTION_ESP_ENCAP,
    UVERBS_ATTR_MODIFY_FLOW_ACTION_ESP_HANDLE,
    UVERBS_ATTR_DESTROY_FLOW_ACTION_HANDLE,
    UVERBS_ATTR_CREATE_QP_HANDLE,
    UVERBS_ATTR_CREATE_QP_XRCD_HANDLE,
    UVERBS_ATTR_CREATE_QP_PD_HANDLE,
    UVERBS_ATTR_CREATE_QP_SRQ_HANDLE,
    UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE,
    UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE,
    UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE,
    UVERBS_ATTR_CREATE_QP_USER_HANDLE,
    UVERBS_ATTR_CREATE_QP_CAP,
    UVERBS_ATTR_CREATE_QP_TYPE,
    UVERBS_ATTR_CREATE_QP_FLAGS,
    UVERBS_ATTR_CREATE_QP_SOURCE_QPN,
    UVERBS_ATTR_CREATE_QP_EVENT_FD,
    UVERBS_ATTR_CREATE_QP_RESP_CAP,
    UVERBS_ATTR_CREATE_QP_RESP_QP_NUM,
    UVERBS_ATTR_DESTROY_QP_HANDLE,
    UVERBS_ATTR_DESTROY_QP_RESP,
    UVERBS_METHOD_QP_CREATE,
    UVERBS_METHOD_QP_DESTROY,
    UVERBS_ATTR_CREATE_SRQ_HANDLE,
    UVERBS_ATTR_CREATE_SRQ_PD_HANDLE,
    UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE,
    UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE,
    UVERBS_ATTR_CREATE_SRQ_USER_HANDLE,
    UVERBS_ATTR_CREATE_SRQ_MAX_WR,
    UVERBS_ATTR_CREATE_SRQ_MAX_SGE,
    UVERBS_ATTR_CREATE_SRQ_LIMIT,
    UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS,
    UVERBS_ATTR_CREATE_SRQ_TYPE,
    UVERBS_ATTR_CREATE_SRQ_EVENT_FD,
    UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR,
    UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE,
    UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM,
    UVERBS_ATTR_DESTROY_SRQ_HANDLE,
    UVERBS_ATTR_DESTROY_SRQ_RESP,
    UVERBS_METHOD_SRQ_CREATE,
    UVERBS_METHOD_SRQ_DESTROY,
    UVERBS_METHOD_CQ_CREATE,
    UVERBS_METHOD_CQ_DESTROY,
    UVERBS_ATTR_CREATE_WQ_HANDLE,
    UVERBS_ATTR_CREATE_WQ_PD_HANDLE,
    UVERBS_ATTR_CREATE_WQ_CQ_HANDLE,
    UVERBS_ATTR_CREATE_WQ_USER_HANDLE,
    UVERBS_ATTR_CREATE_WQ_TYPE,
    UVERBS_ATTR_CREATE_WQ_EVENT_FD,
    UVERBS_ATTR_CREATE_WQ_MAX_WR,
    UVERBS_ATTR_CREATE_WQ_MAX_SGE,
    UVERBS_ATTR_CREATE_WQ_FLAGS,
    UVERBS_ATTR_CREATE_WQ_RESP_MAX_WR,
    UVERBS_ATTR_CREATE_WQ_RESP_MAX_SGE,
    UVERBS_ATTR_CREATE_WQ_RESP_WQ_NUM,
    UVERBS_ATTR_DESTROY_WQ_HANDLE,
    UVERBS_ATTR_DESTROY_WQ_RESP,
    UVERBS_METHOD_WQ_CREATE,
    UVERBS_METHOD_WQ_DESTROY,
    UVERBS_METHOD_FLOW_ACTION_ESP_CREATE,
    UVERBS_METHOD_FLOW_ACTION_DESTROY,
    UVERBS_METHOD_FLOW_ACTION_ESP_MODIFY,
    UVERBS_ATTR_ALLOC_DM_HANDLE,
    UVERBS_ATTR_ALLOC_DM_LENGTH,
    UVERBS_ATTR_ALLOC_DM_ALIGNMENT,
    UVERBS_ATTR_FREE_DM_HANDLE,
    UVERBS_METHOD_DM_ALLOC,
    UVERBS_METHOD_DM_FREE,
    UVERBS_ATTR_REG_DM_MR_HANDLE,
    UVERBS_ATTR_REG_DM_MR_OFFSET,
    UVERBS_ATTR_REG_DM_MR_LENGTH,
    UVERBS_ATTR_REG_DM_MR_PD_HANDLE,
    UVERBS_ATTR_REG_DM_MR_ACCESS_FLAGS,
    UVERBS_ATTR_REG_DM_MR_DM_HANDLE,
    UVERBS_ATTR_REG_DM_MR_RESP_LKEY,
    UVERBS_ATTR_REG_DM_MR_RESP_RKEY,
    UVERBS_METHOD_DM_MR_REG,
    UVERBS_METHOD_MR_DESTROY,
    UVERBS_METHOD_ADVISE_MR,
    UVERBS_METHOD_QUERY_MR,
    UVERBS_METHOD_REG_DMABUF_MR,
    UVERBS_ATTR_DESTROY_MR_HANDLE,
    UVERBS_ATTR_ADVISE_MR_PD_HANDLE,
    UVERBS_ATTR_ADVISE_MR_ADVICE,
    UVERBS_ATTR_ADVISE_MR_FLAGS,
    UVERBS_ATTR_ADVISE_MR_SGE_LIST,
    UVERBS_ATTR_QUERY_MR_HANDLE,
    UVERBS_ATTR_QUERY_MR_RESP_LKEY,
    UVERBS_ATTR_QUERY_MR_RESP_RKEY,
    UVERBS_ATTR_QUERY_MR_RESP_LENGTH,
    UVERBS_ATTR_QUERY_MR_RESP_IOVA,
    UVERBS_ATTR_REG_DMABUF_MR_HANDLE,
    UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE,
    UVERBS_ATTR_REG_DMABUF_MR_OFFSET,
    UVERBS_ATTR_REG_DMABUF_MR_LENGTH,
    UVERBS_ATTR_REG_DMABUF_MR_IOVA,
    UVERBS_ATTR_REG_DMABUF_MR_FD,
    UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS,
    UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY,
    UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY,
    UVERBS_ATTR_CREATE_COUNTERS_HANDLE,
    UVERBS_ATTR_DESTROY_COUNTERS_HANDLE,
    UVERBS_ATTR_READ_COUNTERS_HANDLE,
    UVERBS_ATTR_READ_COUNTERS_BUFF,
    UVERBS_ATTR_READ_COUNTERS_FLAGS,
    UVERBS_METHOD_COUNTERS_CREATE,
    UVERBS_METHOD_COUNTERS_DESTROY,
    UVERBS_METHOD_COUNTERS_READ,
    UVERBS_ATTR_INFO_OBJECT_ID,
    UVERBS_ATTR_INFO_TOTAL_HANDLES,
    UVERBS_ATTR_INFO_HANDLES_LIST,
    UVERBS_METHOD_PD_DESTROY,
    UVERBS_ATTR_DESTROY_PD_HANDLE,
    UVERBS_METHOD_MW_DESTROY,
    UVERBS_ATTR_DESTROY_MW_HANDLE,
    UVERBS_METHOD_XRCD_DESTROY,
    UVERBS_ATTR_DESTROY_XRCD_HANDLE,
    UVERBS_METHOD_AH_DESTROY,
    UVERBS_ATTR_DESTROY_AH_HANDLE,
    UVERBS_METHOD_RWQ_IND_TBL_DESTROY,
    UVERBS_ATTR_DESTROY_RWQ_IND_TBL_HANDLE,
    UVERBS_METHOD_FLOW_DESTROY,
    UVERBS_ATTR_DESTROY_FLOW_HANDLE,
    UVERBS_METHOD_ASYNC_EVENT_ALLOC,
    UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE,
    UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
    UVERBS_ATTR_QUERY_GID_TABLE_FLAGS,
    UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
    UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
    UVERBS_ATTR_QUERY_GID_ENTRY_PORT,
    UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX,
    UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS,
    UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
    NETLINK_RDMA,
    RDMA_NL_IWCM,
    RDMA_NL_RSVD,
    RDMA_NL_LS,
    RDMA_NL_NLDEV,
    RDMA_NL_NUM_CLIENTS,
    RDMA_NL_GROUP_IWPM,
    RDMA_NL_GROUP_LS,
    RDMA_NL_NUM_GROUPS,
    IWPM_UABI_VERSION_MIN,
    IWPM_UABI_VERSION,
    IWPM_FLAGS_NO_PORT_MAP,
    RDMA_NL_IWPM_REG_PID,
    RDMA_NL_IWPM_ADD_MAPPING,
    RDMA_NL_IWPM_QUERY_MAPPING,
    RDMA_NL_IWPM_REMOVE_MAPPING,
    RDMA_NL_IWPM_REMOTE_INFO,
    RDMA_NL_IWPM_HANDLE_ERR,
    RDMA_NL_IWPM_MAPINFO,
    RDMA_NL_IWPM_MAPINFO_NUM,
    RDMA_NL_IWPM_HELLO,
    RDMA_NL_IWPM_NUM_OPS,
    IWPM_NLA_REG_PID_UNSPEC,
    IWPM_NLA_REG_PID_SEQ,
    IWPM_NLA_REG_IF_NAME,
    IWPM_NLA_REG_IBDEV_NAME,
    IWPM_NLA_REG_ULIB_NAME,
    IWPM_NLA_REG_PID_MAX,
    IWPM_NLA_RREG_PID_UNSPEC,
    IWPM_NLA_RREG_PID_SEQ,
    IWPM_NLA_RREG_IBDEV_NAME,
    IWPM_NLA_RREG_ULIB_NAME,
    IWPM_NLA_RREG_ULIB_VER,
    IWPM_NLA_RREG_PID_ERR,
    IWPM_NLA_RREG_PID_MAX,
    IWPM_NLA_MANAGE_MAPPING_UNSPEC,
    IWPM_NLA_MANAGE_MAPPING_SEQ,
    IWPM_NLA_MANAGE_ADDR,
    IWPM_NLA_MANAGE_FLAGS,
    IWPM_NLA_MANAGE_MAPPING_MAX,
    IWPM_NLA_RMANAGE_MAPPING_UNSPEC,
    IWPM_NLA_RMANAGE_MAPPING_SEQ,
    IWPM_NLA_RMANAGE_ADDR,
    IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR,
    IWPM_NLA_MANAGE_MAPPED_LOC_ADDR,
    IWPM_NLA_RMANAGE_MAPPING_ERR,
    IWPM_NLA_RMANAGE_MAPPING_MAX,
    IWPM_NLA_MAPINFO_SEND_MAX,
    IWPM_NLA_REMOVE_MAPPING_MAX,
    IWPM_NLA_QUERY_MAPPING_UNSPEC,
    IWPM_NLA_QUERY_MAPPING_SEQ,
    IWPM_NLA_QUERY_LOCAL_ADDR,
    IWPM_NLA_QUERY_REMOTE_ADDR,
    IWPM_NLA_QUERY_FLAGS,
    IWPM_NLA_QUERY_MAPPING_MAX,
    IWPM_NLA_RQUERY_MAPPING_UNSPEC,
    IWPM_NLA_RQUERY_MAPPING_SEQ,
    IWPM_NLA_RQUERY_LOCAL_ADDR,
    IWPM_NLA_RQUERY_REMOTE_ADDR,
    IWPM_NLA_RQUERY_MAPPED_LOC_ADDR,
    IWPM_NLA_RQUERY_MAPPED_REM_ADDR,
    IWPM_NLA_RQUERY_MAPPING_ERR,
    IWPM_NLA_RQUERY_MAPPING_MAX,
    IWPM_NLA_MAPINFO_REQ_UNSPEC,
    IWPM_NLA_MAPINFO_ULIB_NAME,
    IWPM_NLA_MAPINFO_ULIB_VER,
    IWPM_NLA_MAPINFO_REQ_MAX,
    IWPM_NLA_MAPINFO_UNSPEC,
    IWPM_NLA_MAPINFO_LOCAL_ADDR,
    IWPM_NLA_MAPINFO_MAPPED_ADDR,
    IWPM_NLA_MAPINFO_FLAGS,
    IWPM_NLA_MAPINFO_MAX,
    IWPM_NLA_MAPINFO_NUM_UNSPEC,
    IWPM_NLA_MAPINFO_SEQ,
    IWPM_NLA_MAPINFO_SEND_NUM,
    IWPM_NLA_MAPINFO_ACK_NUM,
    IWPM_NLA_MAPINFO_NUM_MAX,
    IWPM_NLA_ERR_UNSPEC,
    IWPM_NLA_ERR_SEQ,
    IWPM_NLA_ERR_CODE,
    IWPM_NLA_ERR_MAX,
    IWPM_NLA_HELLO_UNSPEC,
    IWPM_NLA_HELLO_ABI_VERSION,
    IWPM_NLA_HELLO_MAX,
    RDMA_NODE_IB_CA,
    RDMA_NODE_IB_SWITCH,
    RDMA_NODE_IB_ROUTER,
    RDMA_NODE_RNIC,
    RDMA_NODE_USNIC,
    RDMA_NODE_USNIC_UDP,
    RDMA_NODE_UNSPECIFIED,
    RDMA_NL_LS_OP_RESOLVE,
    RDMA_NL_LS_OP_SET_TIMEOUT,
    RDMA_NL_LS_OP_IP_RESOLVE,
    RDMA_NL_LS_NUM_OPS,
    RDMA_NL_LS_F_ERR,
    LS_RESOLVE_PATH_USE_ALL,
    LS_RESOLVE_PATH_USE_UNIDIRECTIONAL,
    LS_RESOLVE_PATH_USE_GMP,
    LS_RESOLVE_PATH_USE_MAX,
    LS_DEVICE_NAME_MAX,
    RDMA_NLA_F_MANDATORY,
    LS_NLA_TYPE_UNSPEC,
    LS_NLA_TYPE_PATH_RECORD,
    LS_NLA_TYPE_TIMEOUT,
    LS_NLA_TYPE_SERVICE_ID,
    LS_NLA_TYPE_DGID,
    LS_NLA_TYPE_SGID,
    LS_NLA_TYPE_TCLASS,
    LS_NLA_TYPE_PKEY,
    LS_NLA_TYPE_QOS_CLASS,
    LS_NLA_TYPE_IPV4,
    LS_NLA_TYPE_IPV6,
    LS_NLA_TYPE_MAX,
    RDMA_NLDEV_CMD_UNSPEC,
    RDMA_NLDEV_CMD_GET,
    RDMA_NLDEV_CMD_SET,
    RDMA_NLDEV_CMD_NEWLINK,
    RDMA_NLDEV_CMD_DELLINK,
    RDMA_NLDEV_CMD_PORT_GET,
    RDMA_NLDEV_CMD_SYS_GET,
    RDMA_NLDEV_CMD_SYS_SET,
    RDMA_NLDEV_CMD_RES_GET,
    RDMA_NLDEV_CMD_RES_QP_GET,
    RDMA_NLDEV_CMD_RES_CM_ID_GET,
    RDMA_NLDEV_CMD_RES_CQ_GET,
    RDMA_NLDEV_CMD_RES_MR_GET,
    RDMA_NLDEV_CMD_RES_PD_GET,
    RDMA_NLDEV_CMD_GET_CHARDEV,
    RDMA_NLDEV_CMD_STAT_SET,
    RDMA_NLDEV_CMD_STAT_GET,
    RDMA_NLDEV_CMD_STAT_DEL,
    RDMA_NLDEV_CMD_RES_QP_GET_RAW,
    RDMA_NLDEV_CMD_RES_CQ_GET_RAW,
    RDMA_NLDEV_CMD_RES_MR_GET_RAW,
    RDMA_NLDEV_CMD_RES_CTX_GET,
    RDMA_NLDEV_CMD_RES_SRQ_GET,
    RDMA_NLDEV_CMD_STAT_GET_STATUS,
    RDMA_NLDEV_NUM_OPS,
    RDMA_NLDEV_PRINT_TYPE_UNSPEC,
    RDMA_NLDEV_PRINT_TYPE_HEX,
    RDMA_NLDEV_ATTR_UNSPEC,
    RDMA_NLDEV_ATTR_PAD,
    RDMA_NLDEV_ATTR_DEV_INDEX,
    RDMA_NLDEV_ATTR_DEV_NAME,
    RDMA_NLDEV_ATTR_PORT_INDEX,
    RDMA_NLDEV_ATTR_CAP_FLAGS,
    RDMA_NLDEV_ATTR_FW_VERSION,
    RDMA_NLDEV_ATTR_NODE_GUID,
    RDMA_NLDEV_ATTR_SYS_IMAGE_GUID,
    RDMA_NLDEV_ATTR_SUBNET_PREFIX,
    RDMA_NLDEV_ATTR_LID,
    RDMA_NLDEV_ATTR_SM_LID,
    RDMA_NLDEV_ATTR_LMC,
    RDMA_NLDEV_ATTR_PORT_STATE,
    RDMA_NLDEV_ATTR_PORT_PHYS_STATE,
    RDMA_NLDEV_ATTR_DEV_NODE_TYPE,
    RDMA_NLDEV_ATTR_RES_SUMMARY,
    RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY,
    RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME,
    RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR,
    RDMA_NLDEV_ATTR_RES_QP,
    RDMA_NLDEV_ATTR_RES_QP_ENTRY,
    RDMA_NLDEV_ATTR_RES_LQPN,
    RDMA_NLDEV_ATTR_RES_RQPN,
    RDMA_NLDEV_ATTR_RES_RQ_PSN,
    RDMA_NLDEV_ATTR_RES_SQ_PSN,
    RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE,
    RDMA_NLDEV_ATTR_RES_TYPE,
    RDMA_NLDEV_ATTR_RES_STATE,
    RDMA_NLDEV_ATTR_RES_PID,
    RDMA_NLDEV_ATTR_RES_KERN_NAME,
    RDMA_NLDEV_ATTR_RES_CM_ID,
    RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY,
    RDMA_NLDEV_ATTR_RES_PS,
    RDMA_NLDEV_ATTR_RES_SRC_ADDR,
    RDMA_NLDEV_ATTR_RES_DST_ADDR,
    RDMA_NLDEV_ATTR_RES_CQ,
    RDMA_NLDEV_ATTR_RES_CQ_ENTRY,
    RDMA_NLDEV_ATTR_RES_CQE,
    RDMA_NLDEV_ATTR_RES_USECNT,
    RDMA_NLDEV_ATTR_RES_POLL_CTX,
    RDMA_NLDEV_ATTR_RES_MR,
    RDMA_NLDEV_ATTR_RES_MR_ENTRY,
    RDMA_NLDEV_ATTR_RES_RKEY,
    RDMA_NLDEV_ATTR_RES_LKEY,
    RDMA_NLDEV_ATTR_RES_IOVA,
    RDMA_NLDEV_ATTR_RES_MRLEN,
    RDMA_NLDEV_ATTR_RES_PD,
    RDMA_NLDEV_ATTR_RES_PD_ENTRY,
    RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY,
    RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY,
    RDMA_NLDEV_ATTR_NDEV_INDEX,
    RDMA_NLDEV_ATTR_NDEV_NAME,
    RDMA_NLDEV_ATTR_DRIVER,
    RDMA_NLDEV_ATTR_DRIVER_ENTRY,
    RDMA_NLDEV_ATTR_DRIVER_STRING,
    RDMA_NLDEV_ATTR_DRIVER_PRINT_TYPE,
    RDMA_NLDEV_ATTR_DRIVER_S32,
    RDMA_NLDEV_ATTR_DRIVER_U32,
    RDMA_NLDEV_ATTR_DRIVER_S64,
    RDMA_NLDEV_ATTR_DRIVER_U64,
    RDMA_NLDEV_ATTR_RES_PDN,
    RDMA_NLDEV_ATTR_RES_CQN,
    RDMA_NLDEV_ATTR_RES_MRN,
    RDMA_NLDEV_ATTR_RES_CM_IDN,
    RDMA_NLDEV_ATTR_RES_CTXN,
    RDMA_NLDEV_ATTR_LINK_TYPE,
    RDMA_NLDEV_SYS_ATTR_NETNS_MODE,
    RDMA_NLDEV_ATTR_DEV_PROTOCOL,
    RDMA_NLDEV_NET_NS_FD,
    RDMA_NLDEV_ATTR_CHARDEV_TYPE,
    RDMA_NLDEV_ATTR_CHARDEV_NAME,
    RDMA_NLDEV_ATTR_CHARDEV_ABI,
    RDMA_NLDEV_ATTR_CHARDEV,
    RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID,
    RDMA_NLDEV_ATTR_STAT_MODE,
    RDMA_NLDEV_ATTR_STAT_RES,
    RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK,
    RDMA_NLDEV_ATTR_STAT_COUNTER,
    RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY,
    RDMA_NLDEV_ATTR_STAT_COUNTER_ID,
    RDMA_NLDEV_ATTR_STAT_HWCOUNTERS,
    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY,
    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME,
    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
    RDMA_NLDEV_ATTR_DEV_DIM,
    RDMA_NLDEV_ATTR_RES_RAW,
    RDMA_NLDEV_ATTR_RES_CTX,
    RDMA_NLDEV_ATTR_RES_CTX_ENTRY,
    RDMA_NLDEV_ATTR_RES_SRQ,
    RDMA_NLDEV_ATTR_RES_SRQ_ENTRY,
    RDMA_NLDEV_ATTR_RES_SRQN,
    RDMA_NLDEV_ATTR_MIN_RANGE,
    RDMA_NLDEV_ATTR_MAX_RANGE,
    RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK,
    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX,
    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC,
    RDMA_COUNTER_MODE_NONE,
    RDMA_COUNTER_MODE_AUTO,
    RDMA_COUNTER_MODE_MANUAL,
    RDMA_COUNTER_MODE_MAX,
    RDMA_COUNTER_MASK_QP_TYPE,
    RDMA_COUNTER_MASK_PID,
    RXE_NETWORK_TYPE_IPV4,
    RXE_NETWORK_TYPE_IPV6,
    SIW_ABI_VERSION,
    SIW_MAX_SGE,
    SIW_UOBJ_MAX_KEY,
    SIW_INVAL_UOBJ_KEY,
    SIW_OP_WRITE,
    SIW_OP_READ,
    SIW_OP_READ_LOCAL_INV,
    SIW_OP_SEND,
    SIW_OP_SEND_WITH_IMM,
    SIW_OP_SEND_REMOTE_INV,
    SIW_OP_FETCH_AND_ADD,
    SIW_OP_COMP_AND_SWAP,
    SIW_OP_RECEIVE,
    SIW_OP_READ_RESPONSE,
    SIW_OP_INVAL_STAG,
    SIW_OP_REG_MR,
    SIW_NUM_OPCODES,
    SIW_MAX_INLINE,
    SIW_WQE_VALID,
    SIW_WQE_INLINE,
    SIW_WQE_SIGNALLED,
    SIW_WQE_SOLICITED,
    SIW_WQE_READ_FENCE,
    SIW_WQE_REM_INVAL,
    SIW_WQE_COMPLETED,
    SIW_NOTIFY_NOT,
    SIW_NOTIFY_SOLICITED,
    SIW_NOTIFY_NEXT_COMPLETION,
    SIW_NOTIFY_MISSED_EVENTS,
    SIW_NOTIFY_ALL,
    SIW_WC_SUCCESS,
    SIW_WC_LOC_LEN_ERR,
    SIW_WC_LOC_PROT_ERR,
    SIW_WC_LOC_QP_OP_ERR,
    SIW_WC_WR_FLUSH_ERR,
    SIW_WC_BAD_RESP_ERR,
    SIW_WC_LOC_ACCESS_ERR,
    SIW_WC_REM_ACCESS_ERR,
    SIW_WC_REM_INV_REQ_ERR,
    SIW_WC_GENERAL_ERR,
    SIW_NUM_WC_STATUS
    }
    exprs! { l;
        RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET),
        RDMA_NL_GET_TYPE(RDMA_NL_LS, RDMA_NL_LS_OP_IP_RESOLVE),
        RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_GET_STATUS),
        RDMA_NL_GET_CLIENT(0x1403),
        RDMA_NL_GET_CLIENT(0xffff),
        RDMA_NL_GET_OP(0x1403),
        RDMA_NL_GET_OP(0xffff),
        RDMA_NLA_TYPE_MASK & 0xffff,
    }
    strings! { l;
    SIW_NODE_DESC_COMMON
    }
    l
}

/// Every `pub struct`/`pub union` (with its fields), `pub const` and
/// `pub const fn` of the module's source.
#[allow(clippy::type_complexity)]
fn defined(src: &str) -> (BTreeMap<String, Vec<String>>, Vec<String>, Vec<String>) {
    let mut structs = BTreeMap::new();
    let mut consts = Vec::new();
    let mut fns = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in src.lines() {
        if let Some((name, fields)) = open.as_mut() {
            if line.starts_with('}') {
                structs.insert(core::mem::take(name), core::mem::take(fields));
                open = None;
            } else if let Some(rest) = line.trim_start().strip_prefix("pub ") {
                let field = rest.split(':').next().unwrap();
                fields.push(field.strip_prefix("r#").unwrap_or(field).to_string());
            }
            continue;
        }
        let word = |rest: &str| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap()
                .to_string()
        };
        if let Some(rest) = line
            .strip_prefix("pub struct ")
            .or_else(|| line.strip_prefix("pub union "))
        {
            open = Some((word(rest), Vec::new()));
        } else if let Some(rest) = line.strip_prefix("pub const fn ") {
            fns.push(word(rest));
        } else if let Some(rest) = line.strip_prefix("pub const ") {
            consts.push(word(rest));
        }
    }
    assert!(open.is_none(), "unterminated struct in uverbs.rs");
    (structs, consts, fns)
}

#[test]
fn uverbs_matches_kernel_headers() {
    if !Path::new("/usr/include/rdma/ib_user_verbs.h").exists() {
        println!("note: /usr/include/rdma/ib_user_verbs.h is absent (linux-libc-dev); skipped");
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let l = lists();

    // Everything the module defines is listed.
    let src = std::fs::read_to_string(manifest.join("src/uverbs.rs")).unwrap();
    let (structs, consts, fns) = defined(&src);
    let mut missing = Vec::new();
    for (name, fields) in &structs {
        match l.structs.get(name.as_str()) {
            None => missing.push(format!("struct {name}")),
            Some(listed) => missing.extend(
                fields
                    .iter()
                    .filter(|f| !listed.contains(*f))
                    .map(|f| format!("field {name}.{f}")),
            ),
        }
    }
    let in_exprs = |c: &str| {
        l.exprs.iter().any(|e| {
            e.split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                .any(|w| w == c)
        })
    };
    missing.extend(
        consts
            .iter()
            .filter(|c| !l.consts.contains(*c) && !l.strings.contains(*c) && !in_exprs(c))
            .map(|c| format!("const {c}")),
    );
    missing.extend(
        fns.iter()
            .filter(|f| !l.exprs.iter().any(|e| e.starts_with(&format!("{f}("))))
            .map(|f| format!("const fn {f}")),
    );
    assert!(
        missing.is_empty(),
        "defined in src/uverbs.rs but not checked by this test:\n  {}",
        missing.join("\n  ")
    );

    // Build and run the probe.
    let dir = std::env::temp_dir().join(format!("verbs-abi-uverbs-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header: String = l.items.iter().map(|i| format!("{}\n", i.c)).collect();
    std::fs::write(dir.join("uverbs_probe_items.h"), header).unwrap();
    let exe = dir.join("uverbs_probe");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(&dir)
        .arg(manifest.join("tests/uverbs_probe.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on tests/uverbs_probe.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "the probe failed");
    let _ = std::fs::remove_dir_all(&dir);

    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        l.items.len(),
        "the probe printed a line per item"
    );
    let mut wrong = Vec::new();
    for (item, line) in l.items.iter().zip(&lines) {
        if let Some(text) = item.rust_text {
            if *line != text {
                wrong.push(format!("{}: C {line:?}, Rust {text:?}", item.c));
            }
            continue;
        }
        let c: Vec<u64> = line.split(' ').map(|n| n.parse().unwrap()).collect();
        if c != item.rust {
            wrong.push(format!(
                "{}: {} C {:?}, Rust {:?}",
                item.c, item.what, c, item.rust
            ));
        }
    }
    let n_fields = l.items.iter().filter(|i| i.c.starts_with("FIELD")).count();
    println!(
        "checked {} structs, {} fields, {} constants, {} strings and {} expressions against the kernel headers",
        l.structs.len(),
        n_fields,
        l.consts.len(),
        l.strings.len(),
        l.exprs.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {} items differ from C:\n  {}",
        wrong.len(),
        l.items.len(),
        wrong.join("\n  ")
    );
}
