//! Handing events to the application and taking back its acks.

use super::*;

impl CmId {
    // -- event retrieval -----------------------------------------------------

    /// Work done when the application takes `ev` off its channel.
    pub fn on_retrieve(ev: &mut EventBox) {
        match ev.post {
            Post::None | Post::Kernel => {}
            Post::McastJoin => CmId::on_join_retrieved(ev),
            Post::ConnectRequest => {
                let Some(listener) = cm_id(&ev.owner) else {
                    return;
                };
                listener.pending_reqs.fetch_sub(1, Ordering::Relaxed);
                // rdma-core makes the new id when the request is retrieved,
                // on the listener's channel of that moment: follow the
                // listener if it migrated since the request arrived.
                let ls = listener.st.lock();
                let Some(id) = cm_id(&ev.subject) else {
                    return;
                };
                let mut ns = id.st.lock();
                if !ls.sync && !ns.sync && !Arc::ptr_eq(&ns.chan, &ls.chan) {
                    let old = std::mem::replace(&mut ns.chan, ls.chan.clone());
                    for e in old.take_for(&id) {
                        ns.chan.push(e);
                    }
                    id.cs(&mut ns).channel = ls.chan.c_ptr();
                }
            }
            Post::QpToErr => {
                let Some(id) = cm_id(&ev.subject) else {
                    return;
                };
                let mut st = id.st.lock();
                if !st.destroyed {
                    qp_to_err(id.qp(&mut st));
                }
            }
            Post::ConnectReply => {
                let Some(id) = cm_id(&ev.subject) else {
                    return;
                };
                let mut st = id.st.lock();
                if st.destroyed {
                    return;
                }
                let qp = id.qp(&mut st);
                if qp.is_null() {
                    ev.ev.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
                    return;
                }
                let reply = id.ece.lock().remote;
                let up = id
                    .ece_from_reply(qp, reply)
                    .and_then(|()| id.qp_to_rts(&mut st, qp))
                    .and_then(|()| id.ece_after_reply(qp));
                match up {
                    Ok(()) => {
                        ev.ev.event = RDMA_CM_EVENT_ESTABLISHED;
                        if st.phase == Phase::RepReceived {
                            id.send(&mut st, &Msg::Rtu);
                            st.phase = Phase::Established;
                        }
                    }
                    Err(e) => {
                        trace!("id {:p}: QP to RTS failed: errno {}", id.raw, e);
                        ev.ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
                        ev.ev.status = -e;
                        qp_to_err(qp);
                        if st.phase == Phase::RepReceived {
                            let m = Msg::Rej {
                                reason: REJ_CONSUMER_DEFINED,
                                pdata: Vec::new(),
                            };
                            id.send(&mut st, &m);
                            st.phase = Phase::Closed;
                            id.hang_up(&mut st);
                        }
                    }
                }
            }
        }
    }
}
