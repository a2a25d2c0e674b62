//! Receive credits of one verbs link, sans-IO: how many frames each side may send before the
//! other has taken them off its shared receive queue.
//!
//! Every link may have at most `window` frames unconsumed at its receiver. The receiver counts
//! the frames it consumed and writes the running total into an 8-byte word of the sender's (an
//! RDMA write, which takes no posted receive and no CPU of the sender's); it does so once half
//! a window has gathered. The sender may send while `sent < window + consumed`. A receiver
//! judges a peer by its own records: a frame beyond what it granted is a protocol violation,
//! whatever the peer's word says; and a sender reads the word, which the peer writes, clamped
//! to what it actually sent.

/// Credit accounting of one link, both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credits {
    window: u32,
    /// Frames this side sent.
    sent: u64,
    /// Frames this side received (and consumed: each is handled inside the poll that took it).
    received: u64,
    /// The consumed total this side last wrote to the peer.
    reported: u64,
}

/// A peer sent more frames than it was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun;

impl Credits {
    /// A fresh link, `window` frames granted each way.
    pub fn new(window: u32) -> Credits {
        Credits { window: window.max(2), sent: 0, received: 0, reported: 0 }
    }

    /// True when one more frame may go, given the consumed total the peer last wrote.
    pub fn may_send(&self, peer_consumed: u64) -> bool {
        // The peer cannot have consumed more than was sent: a larger word is a lie or a torn
        // write, and must not let this side overrun the peer's receives.
        self.sent < u64::from(self.window) + peer_consumed.min(self.sent)
    }

    /// A frame went.
    pub fn on_send(&mut self) {
        self.sent += 1;
    }

    /// A frame arrived (and is consumed before the poll returns); refused when the peer sent
    /// beyond what this side granted it.
    pub fn on_receive(&mut self) -> Result<(), Overrun> {
        if self.received >= self.reported + u64::from(self.window) {
            return Err(Overrun);
        }
        self.received += 1;
        Ok(())
    }

    /// The consumed total to write to the peer now, when half a window gathered since the last
    /// write; it counts as reported from here on.
    pub fn report(&mut self) -> Option<u64> {
        if self.received - self.reported >= u64::from(self.window / 2) {
            self.reported = self.received;
            return Some(self.received);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_stops_at_the_window_until_the_receiver_reports() {
        let (mut a, mut b) = (Credits::new(8), Credits::new(8));
        let mut word = 0; // b's consumed total, as written into a's memory
        let mut sent = 0;
        while a.may_send(word) {
            a.on_send();
            b.on_receive().unwrap();
            sent += 1;
            if let Some(total) = b.report() {
                word = total;
            }
            if sent == 100 {
                break;
            }
        }
        assert_eq!(sent, 100, "reports every half window keep the sender going");
        let (mut a, mut b) = (Credits::new(8), Credits::new(8));
        for _ in 0..8 {
            assert!(a.may_send(0));
            a.on_send();
            b.on_receive().unwrap();
        }
        assert!(!a.may_send(0), "a full window waits for a report");
        assert_eq!(b.report(), Some(8));
        assert!(a.may_send(8));
    }

    #[test]
    fn a_peer_sending_past_its_grant_is_an_overrun() {
        let mut b = Credits::new(4);
        for _ in 0..4 {
            b.on_receive().unwrap();
        }
        assert_eq!(b.on_receive(), Err(Overrun), "the fifth frame before any report");
        assert_eq!(b.report(), Some(4));
        for _ in 0..4 {
            b.on_receive().unwrap();
        }
        assert_eq!(b.on_receive(), Err(Overrun));
    }

    #[test]
    fn a_word_claiming_more_than_was_sent_grants_nothing_extra() {
        let mut a = Credits::new(4);
        for _ in 0..4 {
            assert!(a.may_send(u64::MAX));
            a.on_send();
        }
        assert!(!a.may_send(0));
        // The peer cannot have consumed frames never sent: a forged or torn word of u64::MAX
        // still lets only `window` frames be outstanding.
        assert!(a.may_send(u64::MAX), "4 consumed of 4 sent frees the window");
        for _ in 0..4 {
            a.on_send();
        }
        assert!(!a.may_send(4), "8 sent, 4 consumed: a full window");
    }
}
