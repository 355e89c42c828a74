//! Tag matching (`IBV_SRQT_TM`), in software, after mlx5's hardware as
//! rdma-core's `ibv_create_srq_ex(3)`, `ibv_post_srq_ops(3)` and
//! `Documentation/tag_matching.md` describe it.
//!
//! A TM-SRQ holds a list of tagged buffers (`IBV_WR_TAG_ADD`, each with
//! a tag, a mask and one SGE) beside its ordinary receives. A SEND that
//! arrives at a QP on it starts with a tag-matching header
//! (`struct ibv_tmh`, 16 bytes: opcode, reserved, app_ctx, tag, both big
//! endian); the responder reads that header first, then asks [`decide`]
//! where the message goes:
//!
//! - `IBV_TMH_EAGER` matching a tagged buffer (`tmh.tag & mask == tag`,
//!   the oldest such buffer): the payload after the header lands in the
//!   buffer, which completes `IBV_WC_TM_RECV` with `IBV_WC_TM_MATCH |
//!   IBV_WC_TM_DATA_VALID`, its `recv_wr_id`, the tag and app_ctx in
//!   `ibv_wc_read_tm_info`;
//! - `IBV_TMH_RNDV` matching one: the requester's buffer (`struct
//!   ibv_rvh` after the header) is read into the tagged buffer by an RDMA
//!   READ the QP issues itself (`engine::rndv`): a first completion says
//!   the tag was consumed (`IBV_WC_TM_MATCH`), a second that the data is
//!   in (`IBV_WC_TM_DATA_VALID`), and a FIN message (the request's
//!   headers with `IBV_TMH_FIN`) goes back to the requester. Where that
//!   cannot be done (the buffer is too small, the QP cannot send), the
//!   headers land in the tagged buffer, which completes with
//!   `IBV_WC_TM_RNDV_INCOMPLETE`, as mlx5 leaves it to software;
//! - anything else takes an ordinary receive, whole, header included:
//!   an unmatched EAGER or RNDV message completes `IBV_WC_TM_RECV` with
//!   no TM flags (an unexpected message: the hardware's phase counter
//!   counts it), `IBV_TMH_NO_TAG` completes `IBV_WC_TM_NO_TAG`, a message
//!   too short for a header (or of another opcode) `IBV_WC_RECV`.
//!
//! Phase synchronisation: a tag posted while software has not yet seen
//! every unexpected message (the `unexpected_cnt` of its last
//! `IBV_OPS_TM_SYNC` behind the count of unexpected messages delivered)
//! takes no part in matching until an operation brings the counts level
//! (its completion carries `IBV_WC_TM_SYNC_REQ`), as the man page's
//! "tag matching must be disabled for new tags until SW and HW
//! synchronize" asks. List operations complete at once (no hardware to
//! wait for); `IBV_WR_TAG_DEL` of a tag not in the list (consumed, or
//! never added) completes with `IBV_WC_TM_ERR`, signaled or not.
//!
//! Completions of a TM-SRQ (list operations and receives) go to its own
//! CQ (`IBV_SRQ_INIT_ATTR_CQ`), like an XRC SRQ's.

use std::os::raw::c_int;
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use crate::cq::{Cq, Cqe};

pub use crate::device::{
    TM_MAX_NUM_TAGS as MAX_NUM_TAGS, TM_MAX_OPS as MAX_OPS, TM_MAX_SGE as MAX_TM_SGE,
};

/// `struct ibv_tmh` and `struct ibv_rvh`.
pub const TMH_LEN: usize = 16;
pub const RVH_LEN: usize = 16;
pub const TMH_NO_TAG: u8 = 0;
pub const TMH_RNDV: u8 = 1;
pub const TMH_FIN: u8 = 2;
pub const TMH_EAGER: u8 = 3;

/// mlx5 asks for a sync on an unexpected message this far ahead.
const MAX_SYNC_DIFF: u32 = 0x3fff;

/// A tag-matching header, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tmh {
    pub op: u8,
    pub app_ctx: u32,
    pub tag: u64,
}

impl Tmh {
    pub fn decode(b: &[u8; TMH_LEN]) -> Tmh {
        Tmh {
            op: b[0],
            app_ctx: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            tag: u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }
}

/// A rendezvous header, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rvh {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

impl Rvh {
    pub fn decode(b: &[u8]) -> Option<Rvh> {
        let b: &[u8; RVH_LEN] = b.get(..RVH_LEN)?.try_into().ok()?;
        Some(Rvh {
            va: u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            rkey: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            len: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
        })
    }
}

/// A tagged buffer in the list.
#[derive(Clone, Copy, Debug)]
pub struct Tag {
    pub tag: u64,
    pub mask: u64,
    pub wr_id: u64,
    /// Its buffer (none for an empty one).
    pub sge: Option<ibv_sge>,
    /// Posting order: the oldest match wins.
    seq: u64,
    /// Takes part in matching (posted with the phase counts level, or
    /// made so by a later sync).
    active: bool,
}

struct List {
    /// Indexed by handle.
    slots: Vec<Option<Tag>>,
    free: Vec<u32>,
    used: u32,
    seq: u64,
    /// Unexpected messages delivered (the hardware's phase count).
    hw_cnt: u32,
    /// The count software last reported (`IBV_OPS_TM_SYNC`).
    sw_cnt: u32,
}

/// A TM-SRQ's tag list and CQ. (Its `max_ops` is only checked: list
/// operations complete as they are posted, none is ever outstanding.)
pub struct TmSrq {
    pub cq: Arc<Cq>,
    pub max_num_tags: u32,
    list: Mutex<List>,
}

/// Where an arriving message goes (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum Decision {
    /// Into the tagged buffer, payload after the header.
    Eager { tag: Tag, tmh: Tmh },
    /// Read from the requester into the tagged buffer.
    Rndv { tag: Tag, tmh: Tmh },
    /// Into an ordinary receive, whole, completing with this opcode
    /// (`IBV_WC_TM_RECV` for an unexpected tagged message).
    Ordinary { opcode: ibv_wc_opcode },
}

impl TmSrq {
    pub fn new(cq: Arc<Cq>, cap: &ibv_tm_cap) -> Result<TmSrq, c_int> {
        if cap.max_num_tags == 0
            || cap.max_num_tags > MAX_NUM_TAGS
            || cap.max_ops == 0
            || cap.max_ops > MAX_OPS
        {
            return Err(libc::EINVAL);
        }
        Ok(TmSrq {
            cq,
            max_num_tags: cap.max_num_tags,
            list: Mutex::new(List {
                slots: Vec::new(),
                free: Vec::new(),
                used: 0,
                seq: 0,
                hw_cnt: 0,
                sw_cnt: 0,
            }),
        })
    }

    /// Where a message with header `tmh` (None: shorter than one) goes; a
    /// matched tag leaves the list now.
    pub fn decide(&self, tmh: Option<Tmh>) -> Decision {
        let Some(tmh) = tmh else {
            return Decision::Ordinary {
                opcode: IBV_WC_RECV,
            };
        };
        let rndv = match tmh.op {
            TMH_EAGER => false,
            TMH_RNDV => true,
            TMH_NO_TAG => {
                return Decision::Ordinary {
                    opcode: IBV_WC_TM_NO_TAG,
                }
            }
            _ => {
                return Decision::Ordinary {
                    opcode: IBV_WC_RECV,
                }
            }
        };
        let mut l = self.list.lock();
        let best = l
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (i, t)))
            .filter(|(_, t)| t.active && tmh.tag & t.mask == t.tag)
            .min_by_key(|(_, t)| t.seq)
            .map(|(i, _)| i);
        let Some(i) = best else {
            return Decision::Ordinary {
                opcode: IBV_WC_TM_RECV,
            };
        };
        let tag = l.remove(i as u32).expect("a tag just found");
        if rndv {
            Decision::Rndv { tag, tmh }
        } else {
            Decision::Eager { tag, tmh }
        }
    }

    /// A rendezvous READ into the tagged buffer `wr_id` (`len` bytes, by
    /// QP `qpn`) completed with `status`: the tag's second completion.
    pub fn data_done(&self, wr_id: u64, len: u32, qpn: u32, status: ibv_wc_status) {
        self.cq.push(Cqe {
            wr_id,
            status,
            opcode: IBV_WC_TM_RECV,
            wc_flags: IBV_WC_TM_DATA_VALID,
            byte_len: if status == IBV_WC_SUCCESS { len } else { 0 },
            qp_num: qpn,
            ..Cqe::default()
        });
    }

    /// An unexpected tagged message was delivered to an ordinary receive:
    /// the phase count moves; whether the completion asks for a sync.
    pub fn unexpected_delivered(&self) -> bool {
        let mut l = self.list.lock();
        l.hw_cnt = l.hw_cnt.wrapping_add(1);
        l.hw_cnt.wrapping_sub(l.sw_cnt) > MAX_SYNC_DIFF
    }

    /// `ibv_post_srq_ops` on this list, the SRQ's PD `pd` (for the
    /// misuse checker's look at tagged buffers).
    ///
    /// # Safety
    /// `wr` is the caller's list of operations.
    pub unsafe fn post(&self, mut wr: *mut ibv_ops_wr, bad_wr: *mut *mut ibv_ops_wr) -> c_int {
        let mut rc = 0;
        while !wr.is_null() {
            // SAFETY: wr walks the caller's list.
            let w = unsafe { &mut *wr };
            // SAFETY: per the contract.
            if let Err(e) = unsafe { self.one(w) } {
                rc = e;
                break;
            }
            wr = w.next;
        }
        if rc != 0 && !bad_wr.is_null() {
            // SAFETY: out-pointer supplied by the caller.
            unsafe { *bad_wr = wr };
        }
        rc
    }

    /// # Safety
    /// `w.tm.add.sg_list` holds `num_sge` entries for an ADD.
    unsafe fn one(&self, w: &mut ibv_ops_wr) -> Result<(), c_int> {
        let flags = w.flags as u32;
        if flags & !(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC) != 0 {
            return Err(libc::EINVAL);
        }
        let mut l = self.list.lock();
        // Checked before anything changes: a refused operation does
        // nothing.
        let sge = if w.opcode == IBV_WR_TAG_ADD {
            let n = w.tm.add.num_sge;
            if n < 0 || n as u32 > MAX_TM_SGE || (n > 0 && w.tm.add.sg_list.is_null()) {
                return Err(libc::EINVAL);
            }
            if l.used >= self.max_num_tags {
                return Err(libc::ENOMEM);
            }
            // SAFETY: per the contract (n <= 1, non-null when n > 0).
            (n > 0)
                .then(|| unsafe { *w.tm.add.sg_list })
                .filter(|s| s.length > 0)
        } else {
            None
        };
        if !matches!(w.opcode, IBV_WR_TAG_ADD | IBV_WR_TAG_DEL | IBV_WR_TAG_SYNC) {
            return Err(libc::EINVAL);
        }
        if flags & IBV_OPS_TM_SYNC != 0 {
            l.sw_cnt = w.tm.unexpected_cnt;
        }
        let level = l.sw_cnt == l.hw_cnt;
        if level {
            // Software has seen every unexpected message: tags posted
            // before it had take part from now on.
            for t in l.slots.iter_mut().flatten() {
                t.active = true;
            }
        }
        let mut status = IBV_WC_SUCCESS;
        let opcode = match w.opcode {
            IBV_WR_TAG_ADD => {
                let seq = l.seq;
                l.seq += 1;
                w.tm.handle = l.insert(Tag {
                    tag: w.tm.add.tag,
                    mask: w.tm.add.mask,
                    wr_id: w.tm.add.recv_wr_id,
                    sge,
                    seq,
                    active: level,
                });
                IBV_WC_TM_ADD
            }
            IBV_WR_TAG_DEL => {
                if l.remove(w.tm.handle).is_none() {
                    status = IBV_WC_TM_ERR;
                }
                IBV_WC_TM_DEL
            }
            _ => IBV_WC_TM_SYNC,
        };
        drop(l);
        if flags & IBV_OPS_SIGNALED != 0 || status != IBV_WC_SUCCESS {
            self.cq.push(Cqe {
                wr_id: w.wr_id,
                status,
                opcode,
                wc_flags: if level { 0 } else { IBV_WC_TM_SYNC_REQ },
                ..Cqe::default()
            });
        }
        Ok(())
    }
}

impl List {
    fn insert(&mut self, t: Tag) -> u32 {
        self.used += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(t);
                i
            }
            None => {
                self.slots.push(Some(t));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, handle: u32) -> Option<Tag> {
        let t = self.slots.get_mut(handle as usize)?.take()?;
        self.used -= 1;
        self.free.push(handle);
        Some(t)
    }
}

/// A SEND arriving at a QP on a TM-SRQ, as far as the responder got
/// with it (`engine::responder::tm`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Incoming {
    /// The message (its MSN) whose header is being read or was read.
    pub msn: Option<u32>,
    /// Its first bytes: the tag-matching header.
    pub hdr: [u8; TMH_LEN],
    pub got: usize,
    /// Where it goes; a matched tag is out of the list from here on.
    pub decision: Option<Decision>,
    /// A matched rendezvous request the QP could not read: it completes
    /// with `IBV_WC_TM_RNDV_INCOMPLETE`.
    pub rndv_incomplete: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_decode_big_endian() {
        let mut b = [0u8; TMH_LEN];
        b[0] = TMH_EAGER;
        b[4..8].copy_from_slice(&0x01020304u32.to_be_bytes());
        b[8..16].copy_from_slice(&0x1234u64.to_be_bytes());
        let t = Tmh::decode(&b);
        assert_eq!((t.op, t.app_ctx, t.tag), (TMH_EAGER, 0x01020304, 0x1234));
        let mut r = [0u8; RVH_LEN];
        r[..8].copy_from_slice(&0xdead_beefu64.to_be_bytes());
        r[8..12].copy_from_slice(&7u32.to_be_bytes());
        r[12..16].copy_from_slice(&1024u32.to_be_bytes());
        assert_eq!(
            Rvh::decode(&r),
            Some(Rvh {
                va: 0xdead_beef,
                rkey: 7,
                len: 1024
            })
        );
        assert_eq!(Rvh::decode(&r[..8]), None);
    }
}
