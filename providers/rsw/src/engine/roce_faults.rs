//! The wire's faults on a RoCEv2 port's packets (`RSW_FAULTS`' `roce:`
//! rules): a packet lost, sent twice, or sent after the next one, so that
//! loss, duplication and reordering meet RC's recovery deterministically
//! and without netem. The rules decide (`faults::PacketFaults`); this
//! carries the decision out on the port's socket.

use std::io;

use parking_lot::Mutex;

use crate::faults::{PacketAction, PacketFaults};
use crate::roce::headers::Syndrome;
use crate::roce::opcode::{Opcode, Transport};
use crate::roce::packet::Headers;
use crate::roce::rc::{classify, Kind, Place};
use crate::transport::roce::RoceSocket;

/// A packet held back by `late` until the port sends the next one.
struct Held {
    dst: [u8; 16],
    tclass: u8,
    pkt: Vec<u8>,
}

struct State {
    rules: PacketFaults,
    held: Option<Held>,
}

/// A port's packet faults.
pub struct WireFaults(Mutex<State>);

impl WireFaults {
    /// For a port opened now; None when no `roce:` rule is configured.
    pub fn for_port() -> Option<WireFaults> {
        PacketFaults::for_port().map(|rules| WireFaults(Mutex::new(State { rules, held: None })))
    }

    /// Sends `pkt` (of `classes`) as the rules say; a dropped packet
    /// reports success, as a wire would.
    pub fn send(
        &self,
        sock: &RoceSocket,
        dst: &[u8; 16],
        tclass: u8,
        pkt: &[u8],
        classes: [&str; 2],
    ) -> io::Result<usize> {
        let mut st = self.0.lock();
        let action = st.rules.next(&classes);
        if let Some(a) = action {
            log::info!("RSW_FAULTS: {a:?} a {} packet", classes[1]);
        }
        let r = match action {
            Some(PacketAction::Drop) => Ok(pkt.len()),
            Some(PacketAction::Late) if st.held.is_none() => {
                st.held = Some(Held {
                    dst: *dst,
                    tclass,
                    pkt: pkt.to_vec(),
                });
                return Ok(pkt.len());
            }
            Some(PacketAction::Dup) => {
                let r = sock.send(dst, tclass, pkt);
                if r.is_ok() {
                    let _ = sock.send(dst, tclass, pkt);
                }
                r
            }
            _ => sock.send(dst, tclass, pkt),
        };
        // A full socket leaves the held one for the next packet.
        if r.is_ok() {
            if let Some(h) = st.held.take() {
                let _ = sock.send(&h.dst, h.tclass, &h.pkt);
            }
        }
        r
    }
}

const PLACES: [Place; 4] = [Place::First, Place::Middle, Place::Last, Place::Only];

/// The classes `roce:` rules name a packet by: its operation, and its
/// operation with its place in the message (`send`, `send_middle`).
pub fn classes(h: &Headers) -> [&'static str; 2] {
    const NAMES: [(&str, [&str; 4]); 3] = [
        (
            "send",
            ["send_first", "send_middle", "send_last", "send_only"],
        ),
        (
            "write",
            ["write_first", "write_middle", "write_last", "write_only"],
        ),
        (
            "read_resp",
            [
                "read_resp_first",
                "read_resp_middle",
                "read_resp_last",
                "read_resp_only",
            ],
        ),
    ];
    let op = h.bth.opcode;
    if let Some((kind, place)) = classify(op) {
        let (k, places) = NAMES[match kind {
            Kind::Send { .. } => 0,
            Kind::Write { .. } => 1,
            Kind::ReadResponse => 2,
        }];
        let i = PLACES.iter().position(|&p| p == place).unwrap_or(0);
        return [k, places[i]];
    }
    let one = match op {
        Opcode::RcAck => match h.aeth.map(|a| a.syndrome) {
            Some(Syndrome::Ack { .. }) => "ack",
            _ => "nak",
        },
        Opcode::RcReadRequest => "read_req",
        o if o.transport() == Transport::Ud => "ud",
        _ => "other",
    };
    [one, one]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::headers::{Aeth, Bth, NakCode};

    #[test]
    fn packets_are_named_by_operation_and_place() {
        let h = |op| Headers::new(Bth::new(op, 1, 0));
        assert_eq!(classes(&h(Opcode::RcSendMiddle)), ["send", "send_middle"]);
        assert_eq!(classes(&h(Opcode::RcWriteOnlyImm)), ["write", "write_only"]);
        assert_eq!(
            classes(&h(Opcode::RcReadResponseLast)),
            ["read_resp", "read_resp_last"]
        );
        assert_eq!(classes(&h(Opcode::RcReadRequest)), ["read_req"; 2]);
        let mut a = h(Opcode::RcAck);
        a.aeth = Some(Aeth {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 0,
        });
        assert_eq!(classes(&a), ["ack"; 2]);
        a.aeth = Some(Aeth {
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
            msn: 0,
        });
        assert_eq!(classes(&a), ["nak"; 2]);
    }
}
