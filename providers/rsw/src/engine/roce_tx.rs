//! The packets an RC or UC QP on a RoCEv2 port has ready, sent together:
//! the segments of a message, a burst of READ responses, the requests a
//! window opening lets go, the ACKs of what one receive took, leave with
//! one `sendmmsg` rather than one `sendmsg` each. They leave in the order
//! queued; what a full socket buffer does not take stays queued, in
//! order, for the next flush. An ACK queued right behind an ACK to the
//! same place replaces it: the later one acknowledges all the earlier did
//! (IBA's coalesced acknowledgements).

use std::io::{self, ErrorKind};

use crate::transport::roce::{Outgoing, SEND_BATCH};

/// Where a flush sends: the port's socket (or a test's stand-in).
pub trait Sink {
    /// Sends the first of `pkts`, or more, in order: how many went; an
    /// error when none did (`ErrorKind::WouldBlock`: no room now).
    fn send_many<'a>(
        &self,
        pkts: impl Iterator<Item = (Outgoing<'a>, [&'static str; 2])>,
    ) -> io::Result<usize>;
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    /// Where its bytes start in `TxQueue::bytes`.
    at: usize,
    len: usize,
    dst: [u8; 16],
    tclass: u8,
    /// What `RSW_FAULTS`' `roce:` rules call it.
    classes: [&'static str; 2],
    /// A positive ACK, which one queued after it makes redundant.
    ack: bool,
}

/// A QP's packets not yet handed to the socket.
#[derive(Default)]
pub struct TxQueue {
    /// The packets' bytes, one after the other (kept between flushes:
    /// no allocation per packet once grown).
    bytes: Vec<u8>,
    pkts: Vec<Queued>,
}

/// What one flush did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Packets the socket took (or lost, as a wire would).
    pub pkts: u64,
    /// System calls made, and those of them that carried more than one
    /// packet.
    pub calls: u64,
    pub batches: u64,
}

impl TxQueue {
    /// Packets queued at most: one `sendmmsg`'s worth.
    pub const CAP: usize = SEND_BATCH;

    #[cfg(test)]
    fn len(&self) -> usize {
        self.pkts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.pkts.len() >= Self::CAP
    }

    /// Queues a packet of `len` bytes, which `encode` writes into the
    /// slice it is given; its error queues nothing. The caller flushes a
    /// full queue first. True where an ACK it follows was dropped for it.
    pub fn push(
        &mut self,
        (dst, tclass, classes, ack): (&[u8; 16], u8, [&'static str; 2], bool),
        len: usize,
        encode: impl FnOnce(&mut [u8]) -> io::Result<()>,
    ) -> io::Result<bool> {
        debug_assert!(!self.is_full());
        let keep = self.bytes.len();
        self.bytes.resize(keep + len, 0);
        if let Err(e) = encode(&mut self.bytes[keep..]) {
            self.bytes.truncate(keep);
            return Err(e);
        }
        let mut at = keep;
        let replaces = ack && self.pkts.last().is_some_and(|l| l.ack && l.dst == *dst);
        if replaces {
            // The last one's bytes end where this one's start.
            if let Some(old) = self.pkts.pop() {
                self.bytes.drain(old.at..keep);
                at = old.at;
            }
        }
        self.pkts.push(Queued {
            at,
            len,
            dst: *dst,
            tclass,
            classes,
            ack,
        });
        Ok(replaces)
    }

    /// Hands the queued packets to `sink`, in order, until it takes no
    /// more; what it did not take stays queued, in order.
    pub fn flush(&mut self, sink: &impl Sink) -> Flushed {
        let mut f = Flushed::default();
        let mut sent = 0;
        while sent < self.pkts.len() {
            let (bytes, pkts) = (&self.bytes, &self.pkts[sent..]);
            let batch = pkts.len().min(SEND_BATCH);
            let out = pkts[..batch].iter().map(|q| {
                let o = Outgoing {
                    dst: &q.dst,
                    tclass: q.tclass,
                    pkt: &bytes[q.at..q.at + q.len],
                };
                (o, q.classes)
            });
            f.calls += 1;
            match sink.send_many(out) {
                // Fewer than given: the socket buffer is full, or the next
                // packet fails; the next call tells which.
                Ok(n) => {
                    let n = n.clamp(1, batch);
                    sent += n;
                    f.pkts += n as u64;
                    if n > 1 {
                        f.batches += 1;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Lost, as on a wire (no route, too long): the rest go.
                    log::debug!("RoCEv2: a packet lost: {e}");
                    sent += 1;
                    f.pkts += 1;
                }
            }
        }
        self.drop_first(sent);
        f
    }

    /// Forgets the first `n` packets (sent), keeping the rest in order.
    fn drop_first(&mut self, n: usize) {
        if n >= self.pkts.len() {
            self.pkts.clear();
            self.bytes.clear();
            return;
        }
        if n == 0 {
            return;
        }
        let from = self.pkts[n].at;
        self.bytes.drain(..from);
        self.pkts.drain(..n);
        for q in &mut self.pkts {
            q.at -= from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A packet as the socket took it: bytes, destination, traffic class.
    type Took = (Vec<u8>, [u8; 16], u8);

    /// A socket that takes `room` packets, then is full, and tells what it
    /// took and in how many calls.
    struct Fake {
        room: RefCell<usize>,
        took: RefCell<Vec<Took>>,
        calls: RefCell<Vec<usize>>,
        /// Fails the packet whose first byte is this (not WouldBlock).
        bad: Option<u8>,
    }

    impl Fake {
        fn new(room: usize) -> Fake {
            Fake {
                room: RefCell::new(room),
                took: RefCell::default(),
                calls: RefCell::default(),
                bad: None,
            }
        }
    }

    impl Sink for Fake {
        fn send_many<'a>(
            &self,
            pkts: impl Iterator<Item = (Outgoing<'a>, [&'static str; 2])>,
        ) -> io::Result<usize> {
            let mut n = 0;
            let mut failed = false;
            for (o, _) in pkts {
                if Some(o.pkt[0]) == self.bad && n == 0 {
                    failed = true;
                }
                if Some(o.pkt[0]) == self.bad || *self.room.borrow() == 0 {
                    break;
                }
                *self.room.borrow_mut() -= 1;
                self.took
                    .borrow_mut()
                    .push((o.pkt.to_vec(), *o.dst, o.tclass));
                n += 1;
            }
            self.calls.borrow_mut().push(n);
            if failed {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            if n == 0 {
                return Err(io::Error::from(ErrorKind::WouldBlock));
            }
            Ok(n)
        }
    }

    const DST: [u8; 16] = [7; 16];

    /// Packet `i`: `i + 1` bytes of value `i`, traffic class `i`.
    fn push(q: &mut TxQueue, i: u8, ack: bool) -> bool {
        let len = i as usize + 1;
        q.push((&DST, i, ["x"; 2], ack), len, |b| {
            assert_eq!(b.len(), len);
            b.fill(i);
            Ok(())
        })
        .unwrap()
    }

    fn pkt(i: u8) -> Took {
        (vec![i; i as usize + 1], DST, i)
    }

    /// A socket that takes 5 of 12: the 7 others stay queued in order,
    /// packets queued meanwhile go after them, and all leave in the order
    /// queued, each with its bytes and traffic class.
    #[test]
    fn a_partial_send_keeps_the_rest_in_order() {
        let mut q = TxQueue::default();
        for i in 0..12 {
            push(&mut q, i, false);
        }
        let sink = Fake::new(5);
        let f = q.flush(&sink);
        assert_eq!(
            f,
            Flushed {
                pkts: 5,
                calls: 2,
                batches: 1,
            }
        );
        assert_eq!(q.len(), 7);
        for i in 12..15 {
            push(&mut q, i, false);
        }
        // Full: nothing goes, nothing is lost.
        let f = q.flush(&sink);
        assert_eq!((f.pkts, f.calls, q.len()), (0, 1, 10));
        *sink.room.borrow_mut() = 100;
        let f = q.flush(&sink);
        assert_eq!((f.pkts, f.calls, f.batches), (10, 1, 1));
        assert!(q.is_empty());
        let want: Vec<_> = (0..15).map(pkt).collect();
        assert_eq!(*sink.took.borrow(), want);
        assert_eq!(*sink.calls.borrow(), vec![5, 0, 0, 10]);
    }

    /// A queue over one `sendmmsg`'s worth goes in calls of at most that
    /// many; a packet the socket refuses for good is lost alone.
    #[test]
    fn long_queues_go_in_batches_and_a_bad_packet_alone_is_lost() {
        let mut q = TxQueue::default();
        for i in 0..TxQueue::CAP as u8 {
            assert!(!q.is_full());
            push(&mut q, i, false);
        }
        assert!(q.is_full());
        let mut sink = Fake::new(1000);
        sink.bad = Some(3);
        let f = q.flush(&sink);
        assert_eq!(f.pkts, TxQueue::CAP as u64);
        assert_eq!(*sink.calls.borrow(), vec![3, 0, TxQueue::CAP - 4]);
        let want: Vec<_> = (0..TxQueue::CAP as u8)
            .filter(|&i| i != 3)
            .map(pkt)
            .collect();
        assert_eq!(*sink.took.borrow(), want);
    }

    /// An ACK right behind an ACK replaces it; behind anything else (a
    /// NAK, data), or once the earlier one has left, it queues.
    #[test]
    fn an_ack_replaces_the_ack_it_follows() {
        let mut q = TxQueue::default();
        assert!(!push(&mut q, 1, true));
        assert!(push(&mut q, 2, true));
        assert!(push(&mut q, 3, true));
        assert!(!push(&mut q, 9, false));
        assert!(!push(&mut q, 4, true));
        // Another destination: not the same acknowledgement.
        let other = q
            .push((&[8; 16], 5, ["x"; 2], true), 1, |b| {
                b[0] = 5;
                Ok(())
            })
            .unwrap();
        assert!(!other);
        // A failed encoding leaves the ACK it would have replaced.
        let e = q.push((&[8; 16], 6, ["x"; 2], true), 7, |_| {
            Err(io::Error::from_raw_os_error(libc::EMSGSIZE))
        });
        assert!(e.is_err());
        let sink = Fake::new(100);
        assert_eq!(q.flush(&sink).pkts, 4);
        let mut want = vec![pkt(3), pkt(9), pkt(4)];
        want.push((vec![5], [8; 16], 5));
        assert_eq!(*sink.took.borrow(), want);
        assert!(!push(&mut q, 6, true));
        assert_eq!(q.flush(&sink).pkts, 1);
    }
}
