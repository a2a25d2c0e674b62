//! Property test of the tag matcher against a reference model that is obviously right: two
//! vectors scanned front to back. Random interleavings of posts (exact and wildcard masks mixed,
//! so the hash index and the wildcard list must agree on posting order), arrivals, probes with and
//! without remove, and cancels of live, matched and cancelled receives must give the same outcome
//! at every step and leave the same queues behind.
//!
//! 2000 sequences of up to 200 operations take about a second in a debug build; the sequences
//! over many tags (up to 600 operations) take a few more.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngAlgorithm;
use zcx_dataplane::proto::{
    tag_matches, Arrival, Message, MessageInfo, Posted, RecvId, TagMatcher, FULL_MASK,
};

/// Few tags, chosen so that the partial masks below make some of them collide and not others; the
/// last one differs from the first only above bit 15, which only the full mask tells apart.
const TAGS: [u64; 5] = [0x0101, 0x0102, 0x0201, 0x0202, 0x1_0101];
const MASKS: [u64; 4] = [0, FULL_MASK, 0xff00, 0x00ff];

#[derive(Clone, Debug)]
enum Op {
    Post {
        tag: u64,
        mask: u64,
    },
    Arrive {
        sender: u64,
        tag: u64,
    },
    Probe {
        tag: u64,
        mask: u64,
        remove: bool,
    },
    /// Cancels one of the receives ever queued, whether still waiting or not.
    Cancel(Index),
}

fn arb_op() -> impl Strategy<Value = Op> {
    let tag = proptest::sample::select(&TAGS[..]);
    let mask = proptest::sample::select(&MASKS[..]);
    prop_oneof![
        4 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Post { tag, mask }),
        4 => (0u64..3, tag.clone()).prop_map(|(sender, tag)| Op::Arrive { sender, tag }),
        1 => (tag, mask, any::<bool>()).prop_map(|(tag, mask, remove)| Op::Probe { tag, mask, remove }),
        1 => any::<Index>().prop_map(Op::Cancel),
    ]
}

/// Operations over many tags (mostly exact: posts with the full mask), so tag buckets empty
/// out in numbers and are swept and reused while their tags come back, with a few masked
/// receives among them.
fn arb_op_many_tags() -> impl Strategy<Value = Op> {
    let tag = (0u64..160).prop_map(|t| t * 0x101);
    let mask = prop_oneof![8 => Just(FULL_MASK), 1 => Just(0u64), 1 => Just(0xff00u64)];
    prop_oneof![
        4 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Post { tag, mask }),
        4 => (0u64..3, tag.clone()).prop_map(|(sender, tag)| Op::Arrive { sender, tag }),
        1 => (tag, mask, any::<bool>()).prop_map(|(tag, mask, remove)| Op::Probe { tag, mask, remove }),
        1 => any::<Index>().prop_map(Op::Cancel),
    ]
}

/// What one operation did, in terms both implementations can produce. Receives are named by the
/// number of the post that created them, messages carry the number of the arrival.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    PostMatched { recv: u64, message: Message<u64> },
    PostQueued,
    ArriveMatched { recv: u64, message: Message<u64> },
    ArriveQueued,
    Probed(Option<MessageInfo>),
    Removed(Option<Message<u64>>),
    Cancelled(Option<u64>),
}

struct ModelRecv {
    tag: u64,
    mask: u64,
    recv: u64,
}

/// The rules written as plainly as possible: oldest first, by linear scan.
#[derive(Default)]
struct Model {
    expected: Vec<ModelRecv>,
    unexpected: Vec<Message<u64>>,
}

impl Model {
    fn post(&mut self, tag: u64, mask: u64, recv: u64) -> Outcome {
        match self.unexpected.iter().position(|m| tag_matches(m.tag, tag, mask)) {
            Some(at) => Outcome::PostMatched { recv, message: self.unexpected.remove(at) },
            None => {
                self.expected.push(ModelRecv { tag, mask, recv });
                Outcome::PostQueued
            }
        }
    }

    fn arrive(&mut self, message: Message<u64>) -> Outcome {
        match self.expected.iter().position(|r| tag_matches(message.tag, r.tag, r.mask)) {
            Some(at) => Outcome::ArriveMatched { recv: self.expected.remove(at).recv, message },
            None => {
                self.unexpected.push(message);
                Outcome::ArriveQueued
            }
        }
    }

    fn probe(&mut self, tag: u64, mask: u64, remove: bool) -> Outcome {
        let found = self.unexpected.iter().position(|m| tag_matches(m.tag, tag, mask));
        if remove {
            Outcome::Removed(found.map(|at| self.unexpected.remove(at)))
        } else {
            Outcome::Probed(found.map(|at| self.unexpected[at].info()))
        }
    }

    fn cancel(&mut self, recv: u64) -> Outcome {
        let found = self.expected.iter().position(|r| r.recv == recv);
        Outcome::Cancelled(found.map(|at| self.expected.remove(at).recv))
    }
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut engine = TagMatcher::<u64, u64>::new();
    let mut model = Model::default();
    // Every receive that was ever queued, by post number, for cancels and to check match handles.
    let mut queued_ids: Vec<(u64, RecvId)> = Vec::new();
    let mut id_of: HashMap<u64, RecvId> = HashMap::new();

    for (step, op) in ops.iter().enumerate() {
        let step = step as u64;
        let (got, want) = match *op {
            Op::Post { tag, mask } => {
                let got = match engine.post_recv(tag, mask, step) {
                    Posted::Matched { recv, message } => Outcome::PostMatched { recv, message },
                    Posted::Queued(id) => {
                        queued_ids.push((step, id));
                        id_of.insert(step, id);
                        Outcome::PostQueued
                    }
                };
                (got, model.post(tag, mask, step))
            }
            Op::Arrive { sender, tag } => {
                // Lengths and payloads are distinct per arrival, so any mix-up of messages shows.
                let message = Message { sender, tag, length: step as usize * 3, data: step };
                let got = match engine.arrive(message.clone()) {
                    Arrival::Matched { recv_id, recv, message } => {
                        prop_assert_eq!(Some(&recv_id), id_of.get(&recv), "handle of the matched receive");
                        Outcome::ArriveMatched { recv, message }
                    }
                    Arrival::Queued => Outcome::ArriveQueued,
                };
                (got, model.arrive(message))
            }
            Op::Probe { tag, mask, remove } => {
                let got = if remove {
                    Outcome::Removed(engine.probe_remove(tag, mask))
                } else {
                    Outcome::Probed(engine.probe(tag, mask))
                };
                (got, model.probe(tag, mask, remove))
            }
            Op::Cancel(pick) => {
                if queued_ids.is_empty() {
                    continue;
                }
                let (recv, id) = queued_ids[pick.index(queued_ids.len())];
                (Outcome::Cancelled(engine.cancel(id)), model.cancel(recv))
            }
        };
        prop_assert_eq!(got, want, "step {}: {:?}", step, op);
        prop_assert_eq!(engine.expected_len(), model.expected.len());
        prop_assert_eq!(engine.unexpected_len(), model.unexpected.len());
    }

    let drained: Vec<(RecvId, u64)> = engine.drain_expected().collect();
    let want: Vec<(RecvId, u64)> = model.expected.iter().map(|r| (id_of[&r.recv], r.recv)).collect();
    prop_assert_eq!(drained, want);
    let drained: Vec<Message<u64>> = engine.drain_unexpected().collect();
    prop_assert_eq!(drained, model.unexpected);
    prop_assert_eq!((engine.expected_len(), engine.unexpected_len()), (0, 0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_matches_reference_model(ops in prop::collection::vec(arb_op(), 0..=200)) {
        run(&ops)?;
    }

    #[test]
    fn engine_matches_reference_model_over_many_tags(
        ops in prop::collection::vec(arb_op_many_tags(), 0..=600),
    ) {
        run(&ops)?;
    }
}
