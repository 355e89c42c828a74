//! The storage of an `ibv_wr_start` .. `ibv_wr_complete` batch (see
//! `qp::ex` for the calls that fill it), preallocated with the QP.

use std::os::raw::c_int;

use verbs_abi::*;

use crate::ring::NO_SGE;

pub struct Builder {
    pub(crate) wrs: Vec<ibv_send_wr>,
    pub(crate) sges: Vec<ibv_sge>,
    pub(crate) inline: Vec<u8>,
    pub(crate) max_sge: usize,
    pub(crate) max_inline: usize,
    pub(crate) count: usize,
    pub(crate) err: c_int,
}

impl Builder {
    pub fn new(max_wr: usize, max_sge: usize, max_inline: usize) -> Builder {
        Builder {
            wrs: vec![ibv_send_wr::zeroed(); max_wr],
            sges: vec![NO_SGE; max_wr * max_sge],
            inline: vec![0; max_wr * max_inline],
            max_sge,
            max_inline,
            count: 0,
            err: 0,
        }
    }

    /// For QPs created without `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    pub fn empty() -> Builder {
        Builder::new(0, 0, 0)
    }

    pub(crate) fn reset(&mut self) {
        self.count = 0;
        self.err = 0;
    }

    pub(crate) fn fail(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }

    /// The WR being built (the last one started).
    pub(crate) fn last(&mut self) -> Option<(usize, &mut ibv_send_wr)> {
        if self.count == 0 {
            self.fail(libc::EINVAL);
            return None;
        }
        let i = self.count - 1;
        Some((i, &mut self.wrs[i]))
    }
}
