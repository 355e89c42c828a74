//! The misuse checker's exit summary (`RDMA_CHECK`): the objects never
//! destroyed and the events never acknowledged, read from every object
//! table. The checker's ledger (`check`) sits below the objects; this
//! sits above them all, and the ledger runs it at exit through the hook
//! the top layer registers (`check::Above::exit_summary`).

use verbs_abi::*;
use verbs_rt::check::summary;

use crate::cq::{Cq, CQS};
use crate::qp::QPS;

/// The objects never destroyed, then the events never acknowledged.
pub(crate) fn report() {
    let mut leaked: Vec<(&str, Vec<(usize, String)>)> = Vec::new();
    let qps: Vec<(usize, String)> = QPS
        .entries()
        .into_iter()
        .map(|(h, w)| {
            let n = w
                .upgrade()
                .map_or(String::new(), |q| format!(" qpn={}", q.qpn));
            (h, n)
        })
        .collect();
    leaked.push(("qp", qps));
    leaked.push(("cq", plain(CQS.entries())));
    leaked.push(("srq", plain(crate::srq::SRQS.entries())));
    leaked.push(("mr", plain(crate::mr::MRS.entries())));
    leaked.push(("mw", plain(crate::mw::MWS.entries())));
    leaked.push(("ah", plain(crate::ah::AHS.entries())));
    leaked.push(("pd", plain(crate::pd::PDS.entries())));
    leaked.push(("channel", plain(crate::channel::CHANNELS.entries())));
    for (kind, objs) in &leaked {
        if !objs.is_empty() {
            summary(&format!("leaked {} {kind}(s): {}", objs.len(), list(objs)));
        }
    }
    for (h, _) in CQS.entries() {
        // SAFETY: a live CQ of ours (in the table).
        let c = unsafe { Cq::from_ibv(h as *mut ibv_cq) };
        let (comp, asy) = (c.comp_events.unacked(), c.async_events.unacked());
        if comp + asy > 0 {
            summary(&format!(
                "unacked events on cq {h:#x}: {comp} completion, {asy} async"
            ));
        }
    }
    for (h, w) in QPS.entries() {
        if let Some(q) = w.upgrade() {
            let asy = q.async_events.unacked();
            if asy > 0 {
                summary(&format!("unacked events on qp {h:#x}: {asy} async"));
            }
        }
    }
}

/// Table entries as the summary lists them: the handle alone.
fn plain<T>(e: Vec<(usize, T)>) -> Vec<(usize, String)> {
    e.into_iter().map(|(h, _)| (h, String::new())).collect()
}

fn list(entries: &[(usize, String)]) -> String {
    let mut s: Vec<String> = entries
        .iter()
        .take(8)
        .map(|(h, extra)| format!("{h:#x}{extra}"))
        .collect();
    if entries.len() > 8 {
        s.push(format!("and {} more", entries.len() - 8));
    }
    s.join(", ")
}
