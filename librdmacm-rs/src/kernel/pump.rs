//! The CM thread's part: it takes each event off a kernel CM file and
//! queues it on the channel of the id it is about. What rdma-core does
//! with an event waits until the program takes it (`retrieve`).

use core::mem::size_of;
use std::sync::Arc;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use super::file::{resp_ptr, KFile};
use super::id::{self, Target};
use super::retrieve::Raw;
use crate::channel::{EventBox, Post};
use crate::engine::FileTarget;

impl FileTarget for KFile {
    fn on_ready(self: Arc<Self>) {
        drain(&self);
    }
}

/// Reads events until the file has none (it is non-blocking).
pub fn drain(f: &Arc<KFile>) {
    loop {
        let mut r = rdma_ucm_event_resp::default();
        let cmd = rdma_ucm_get_event {
            response: resp_ptr(&mut r),
        };
        if f.cmd(
            RDMA_USER_CM_CMD_GET_EVENT,
            &cmd,
            size_of::<rdma_ucm_event_resp>(),
        )
        .is_err()
        {
            return;
        }
        queue(f, r);
    }
}

fn queue(f: &Arc<KFile>, r: rdma_ucm_event_resp) {
    let request = r.event == RDMA_CM_EVENT_CONNECT_REQUEST;
    let target = if r.uid != 0 {
        id::target(r.uid)
    } else if r.event == RDMA_CM_EVENT_ESTABLISHED {
        // Old kernels report a zero uid here; anything else without one
        // is for an id nobody holds (rdma-core drops it too).
        id::by_handle(f, r.id).map(Target::Id)
    } else {
        None
    };
    let (k, mc) = match target {
        Some(Target::Id(k)) => (k, None),
        Some(Target::Mc(k, uid)) => (k, Some(uid)),
        None => {
            if request {
                id::destroy_handle(f, r.id);
            }
            return;
        }
    };
    let Some(owner) = k.id.upgrade() else {
        if request {
            id::destroy_handle(f, r.id);
        }
        return;
    };
    let subject = if request {
        id::new_child(&owner, &k, f, r.id)
    } else {
        owner.clone()
    };
    let mut ev = EventBox::new(&owner, &subject, r.event, r.status as i32);
    ev.post = Post::Kernel;
    ev.ext = Some(Box::new(Raw { resp: r, mc }));
    if !owner.post(ev) && request {
        // The listener is going away: so does the request.
        if let Some(ck) = id::lookup(&subject) {
            id::destroy(&subject, &ck);
        }
        subject.destroy();
    }
}
