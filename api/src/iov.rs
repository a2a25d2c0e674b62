//! IOV buffers (`ucp_dt_make_iov`): one message made of several pieces of memory.
//!
//! zcx's transports send from, and receive into, one contiguous range, so an IOV send is gathered
//! into one buffer when it is made, and an IOV receive lands in one staging buffer that
//! [`IovRecv::scatter`] copies out once the receive completed. A message sent from pieces is
//! received like any other, and a receive into pieces takes any message: the pieces are the
//! receiver's business alone, as in UCP.

use crate::buffer::{RecvBuf, SendBuf};

/// Appends `parts` to `out`, in order.
pub fn gather<'a>(out: &mut Vec<u8>, parts: impl IntoIterator<Item = &'a [u8]>) {
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// Copies `staged` into `parts`, in order, filling each before the next; returns how many bytes
/// it copied (less than `staged.len()` when the parts are smaller).
pub fn scatter<'a>(staged: &[u8], parts: impl IntoIterator<Item = &'a mut [u8]>) -> usize {
    let mut left = staged;
    for part in parts {
        if left.is_empty() {
            break;
        }
        let n = part.len().min(left.len());
        part[..n].copy_from_slice(&left[..n]);
        left = &left[n..];
    }
    staged.len() - left.len()
}

/// A send from several buffers (`ucp_dt_make_iov` for `ucp_tag_send_nbx`, `ucp_stream_send_nbx`,
/// `ucp_am_send_nbx` and `ucp_put_nbx`): the parts, sent as one message in their order. They are
/// gathered when this is made; the request gives the value back, and [`IovSend::into_parts`] the
/// parts.
pub struct IovSend<B> {
    parts: Vec<B>,
    gathered: Vec<u8>,
}

impl<B: SendBuf> IovSend<B> {
    /// The parts, to be sent in this order.
    pub fn new(parts: Vec<B>) -> IovSend<B> {
        let total = parts.iter().map(|p| p.as_bytes().len()).sum();
        let mut gathered = Vec::with_capacity(total);
        gather(&mut gathered, parts.iter().map(SendBuf::as_bytes));
        IovSend { parts, gathered }
    }

    /// The parts.
    pub fn parts(&self) -> &[B] {
        &self.parts
    }

    /// The parts, given back.
    pub fn into_parts(self) -> Vec<B> {
        self.parts
    }
}

// SAFETY: the gathered bytes are a `Vec` this value owns and never changes after `new`; its heap
// block does not move when the value does.
unsafe impl<B: SendBuf> SendBuf for IovSend<B> {
    fn as_bytes(&self) -> &[u8] {
        &self.gathered
    }
}

/// A receive into several buffers (`ucp_dt_make_iov` for `ucp_tag_recv_nbx`,
/// `ucp_stream_recv_nbx` and `ucp_get_nbx`): the message fills the parts in their order, up to
/// their total length. It lands in a staging buffer first; once the request completed,
/// [`IovRecv::scatter`] with the completion's length copies it into the parts.
pub struct IovRecv<B> {
    parts: Vec<B>,
    staging: Box<[u8]>,
}

impl<B: RecvBuf> IovRecv<B> {
    /// The parts, to be filled in this order.
    pub fn new(mut parts: Vec<B>) -> IovRecv<B> {
        let total = parts.iter_mut().map(|p| p.as_mut_bytes().len()).sum();
        IovRecv { parts, staging: vec![0u8; total].into_boxed_slice() }
    }

    /// The parts' total length: the most a receive takes.
    pub fn len(&self) -> usize {
        self.staging.len()
    }

    /// True when the parts hold no byte.
    pub fn is_empty(&self) -> bool {
        self.staging.is_empty()
    }

    /// Copies the first `length` received bytes (the completion's `info.length`) into the parts
    /// and gives them back; bytes of the parts past `length` are left as they were.
    pub fn scatter(mut self, length: usize) -> Vec<B> {
        let staged = &self.staging[..length.min(self.staging.len())];
        scatter(staged, self.parts.iter_mut().map(RecvBuf::as_mut_bytes));
        self.parts
    }
}

// SAFETY: the staging buffer is a boxed slice this value owns, fixed in place for its whole life.
unsafe impl<B: RecvBuf> RecvBuf for IovRecv<B> {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        &mut self.staging
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_fills_parts_in_order_and_stops_at_the_data() {
        let mut parts = [vec![0u8; 3], vec![], vec![0u8; 4], vec![9u8; 2]];
        let copied = scatter(b"abcdef", parts.iter_mut().map(|p| p.as_mut_slice()));
        assert_eq!(copied, 6);
        assert_eq!(parts, [b"abc".to_vec(), vec![], b"def\0".to_vec(), vec![9, 9]]);
        let mut small = [vec![0u8; 2]];
        assert_eq!(scatter(b"xyz", small.iter_mut().map(|p| p.as_mut_slice())), 2);
        assert_eq!(small[0], b"xy");
    }

    #[test]
    fn a_send_is_its_parts_gathered_and_a_receive_scatters_what_came() {
        let send = IovSend::new(vec![b"one ".to_vec(), Vec::new(), b"two".to_vec()]);
        assert_eq!(send.as_bytes(), b"one two");
        assert_eq!(send.into_parts()[2], b"two");
        let mut recv = IovRecv::new(vec![vec![0u8; 2], vec![7u8; 5]]);
        assert_eq!(recv.len(), 7);
        recv.as_mut_bytes()[..4].copy_from_slice(b"wxyz");
        assert_eq!(recv.scatter(4), [b"wx".to_vec(), vec![b'y', b'z', 7, 7, 7]]);
    }
}
