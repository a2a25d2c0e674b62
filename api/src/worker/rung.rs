//! The poll a rung doorbell brings: the message behind it handled on its own.
//!
//! While a worker is quiet its busy-polling caller only looks at the doorbells (see [`quiet`]),
//! so when one rings, the message behind it is what the caller waits for: the answer of a
//! ping-pong, the next request of a server loop. The general poll runs every transport that gave
//! doorbells, each link's bookkeeping (socket checks, queues, placements, closes), the event sink
//! and the worker's own queues and loans. Here the transport instead offers the frame at the head
//! of the rung link's ring as it lies there (`SameHostFastPath::take_rung_frame`, given the link
//! the doorbell names, so no other link is looked at); the worker hands it to the same
//! [`dispatch::on_frame`] the general poll uses, which gives it to the protocol engine
//! (`handle_frame_lending_direct`: the receive it completes comes straight back), and the
//! transport releases its room once it is handled.
//!
//! The frame is offered for lending as the general poll offers it, so an active message is read
//! by its handler in place, and its handler runs straight from here, once the lock is released,
//! not from the general poll's tail; it borrows the handler table rather than counting a
//! reference to it (see `am_lent`). What is left to the general poll: a worker with a lent
//! message or deferred work of its own, and a link with more to do than a read. Whenever the
//! frame left work behind (a completion callback, a sync send's acknowledgement to send, a
//! rendezvous to start: anything the engine or the worker's queues hold), the general poll's
//! tail runs right after it, under the same lock and without polling again, so that work is done
//! in the same call, and re-arms the watch when the work left the worker quiet. When the frame
//! left nothing, the watch stays armed: the link's doorbell shows whether another frame waits,
//! so the caller's next call needs no full poll to re-arm it.
//! Frames of a link are taken in order, and only at its head.

use std::sync::Arc;

use zcx_dataplane::{LendSlot, LinkId, SameHostFastPath as _};

use super::state::Core;
use super::{dispatch, quiet, WorkerShared};

impl WorkerShared {
    /// `progress` after the quiet watch saw a doorbell ring: the rung frame handled on its own
    /// when it can be, with the general poll's tail only when it left something to run.
    #[inline(never)]
    pub(super) fn rung_progress(self: &Arc<Self>, rung: LinkId) -> usize {
        let slot = LendSlot::new();
        let mut guard = self.lock();
        let Core { tl, st } = &mut *guard;
        // A lent message must be given back, and deferred work run, by the general poll.
        if st.lent.is_none() && st.deferred.is_empty() {
            st.events = 0;
            let mut take = |link, bytes: &[u8]| {
                st.events += 1;
                dispatch::on_frame(st, link, bytes, Some(&slot))
            };
            if tl.take_rung_frame(rung, &mut take, &slot) {
                #[cfg(test)]
                {
                    st.rung_takes += 1;
                }
                if st.deferred.is_empty() && st.nothing_after_poll() {
                    // The usual end: the frame left nothing behind (no callback, no reply to
                    // send), or only an active message lent to its handler, which runs here as
                    // the general poll's tail would run it.
                    let Some(lent) = self.take_lent(&slot, st) else {
                        // The link's doorbell shows whether more waits behind this frame.
                        guard.unlock_unchanged();
                        return 1;
                    };
                    drop(guard);
                    // SAFETY: the loan was taken by this call and `lent_in_use` is set, so no
                    // call ends it before `deliver` returns.
                    unsafe { lent.deliver(self, &self.lent_in_use) };
                    return 1;
                }
                return self.full_progress_locked(guard, quiet::Check::Doorbell(rung), &slot, false);
            }
        }
        self.full_progress_locked(guard, quiet::Check::Doorbell(rung), &slot, true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use crate::worker::test_pair::{progress_until, shm_pair, wait};
    use crate::{Endpoint, RequestParams, Status, TagSendParams, Worker};

    /// Sends messages from the client until its endpoint writes through its lane: until then a
    /// message passes the client's own poll.
    fn warm_up_lane(client: &Worker, server: &Worker, client_ep: &Endpoint) {
        for _ in 0..20 {
            let recv = server.tag_recv(vec![0u8; 8], 1, u64::MAX, RequestParams::default()).expect("recv");
            client_ep.tag_send(vec![1u8; 8], 1, TagSendParams::default()).expect("send");
            wait(&[client, server], recv).expect("warm-up message");
        }
    }

    /// A quiet worker's watch is armed expecting a message exactly while one is awaited (here a
    /// posted tag receive), which picks the barrier of its skipped calls (`SpinWaits`).
    #[test]
    fn the_watch_is_armed_expecting_a_message_while_a_receive_is_posted() {
        let Some((client, server, client_ep, _server_ep, _listener)) = shm_pair() else { return };
        let settle = || {
            for _ in 0..4 {
                server.progress();
            }
        };
        settle();
        let watch = &server.shared.quiet;
        assert!(watch.is_armed() && !watch.expects_message(), "armed expecting with nothing posted");
        let recv = server.tag_recv(vec![0u8; 8], 7, u64::MAX, RequestParams::default()).expect("recv");
        settle();
        assert!(
            watch.is_armed() && watch.expects_message(),
            "armed without expecting the posted receive's message"
        );
        client_ep.tag_send(vec![1u8; 8], 7, TagSendParams::default()).expect("send");
        wait(&[&client, &server], recv).expect("message");
        settle();
        assert!(watch.is_armed() && !watch.expects_message(), "still expecting after the receive completed");
    }

    /// A ping-pong's receiver does not poll in full between messages: a frame the rung path
    /// took that left nothing behind, and a receive posted with nothing to answer, leave the
    /// watch armed, so each next message is again found by its doorbell, and no call between
    /// messages has to make the full poll that re-arms the watch.
    #[test]
    fn a_receiver_stays_armed_across_messages_taken_by_the_rung_path() {
        let Some((client, server, client_ep, _server_ep, _listener)) = shm_pair() else { return };
        let both = [&client, &server];
        warm_up_lane(&client, &server, &client_ep);
        let watch = &server.shared.quiet;
        let mut recv = server.tag_recv(vec![0u8; 8], 2, u64::MAX, RequestParams::default()).expect("recv");
        progress_until(&[&server], "the watch armed", || watch.is_armed());
        // Read without disarming the watch, as any other lock taken would.
        let takes = || {
            let guard = server.shared.lock();
            let takes = guard.st.rung_takes;
            guard.unlock_unchanged();
            takes
        };
        let (mut rung, mut disarmed) = (0, 0);
        let rounds = 100u8;
        for n in 0..rounds {
            let before = takes();
            client_ep.tag_send(vec![n; 8], 2, TagSendParams::default()).expect("send");
            let got = wait(&both, recv).expect("message");
            assert_eq!(got.buf, vec![n; 8], "message {n}");
            rung += takes() - before;
            recv = server.tag_recv(got.buf, 2, u64::MAX, RequestParams::default()).expect("recv");
            if !watch.is_armed() {
                // The full poll a busy-polling caller would make next.
                disarmed += 1;
                progress_until(&[&server], "the watch armed", || watch.is_armed());
            }
        }
        // A periodic poll (the coarse clock moved; often on a loaded machine) may take a message
        // now and then, and leave the watch to the next call; the rest go by the doorbell, and
        // the watch stays armed.
        assert!(rung * 2 >= u64::from(rounds), "{rung} of {rounds} messages taken by the rung path");
        assert!(disarmed * 2 <= rounds, "disarmed after {disarmed} of {rounds} messages");
        assert!(watch.expects_message(), "the reposted receive is awaited");
        drop(recv);
    }

    /// A synchronous exchange does not poll in full between messages either: the rung path's
    /// tail, which sends the acknowledgement a synchronous message asks for, re-arms the watch
    /// when that left the worker quiet, and a synchronous send that went out whole leaves it
    /// armed to wait for its own acknowledgement by the doorbell.
    #[test]
    fn a_synchronous_exchange_leaves_the_watch_armed() {
        let Some((client, server, client_ep, server_ep, _listener)) = shm_pair() else { return };
        let both = [&client, &server];
        let sync = || TagSendParams { sync: true, ..TagSendParams::default() };
        warm_up_lane(&client, &server, &client_ep);
        let watch = &server.shared.quiet;
        let (mut after_ack, mut after_send) = (0, 0);
        let rounds = 50u8;
        for n in 0..rounds {
            let recv = server.tag_recv(vec![0u8; 8], 4, u64::MAX, RequestParams::default()).expect("recv");
            progress_until(&[&server], "the watch armed", || watch.is_armed());
            let sent = client_ep.tag_send(vec![n; 8], 4, sync()).expect("sync send");
            let got = wait(&both, recv).expect("message");
            assert_eq!(got.buf, vec![n; 8], "message {n}");
            after_ack += u32::from(watch.is_armed());
            wait(&both, sent).expect("the client's send acknowledged");
            let answer = client.tag_recv(vec![0u8; 8], 5, u64::MAX, RequestParams::default()).expect("recv");
            progress_until(&[&server], "the watch armed", || watch.is_armed());
            let reply = server_ep.tag_send(vec![!n; 8], 5, sync()).expect("sync send");
            after_send += u32::from(watch.is_armed());
            assert_eq!(wait(&both, answer).expect("answer").buf, vec![!n; 8], "answer {n}");
            wait(&both, reply).expect("the server's send acknowledged");
        }
        // A periodic poll may take a message now and then and leave the watch to the next call.
        assert!(after_ack * 2 >= u32::from(rounds), "armed after {after_ack} of {rounds} acknowledgements");
        assert!(after_send * 2 >= u32::from(rounds), "armed after {after_send} of {rounds} sync sends");
    }

    /// Messages that reach a server spinning on its doorbells are handled as the general poll
    /// handles them, in order: expected and unexpected tag messages with their truncation and
    /// callbacks, sync sends (whose acknowledgement the general poll's tail sends) and stream
    /// data.
    #[test]
    fn a_rung_doorbell_delivers_messages_as_the_general_poll_does() {
        let Some((client, server, client_ep, server_ep, _listener)) = shm_pair() else { return };
        let both = [&client, &server];
        // Quiet: the server's watch arms and its calls only look at the doorbells.
        let settle = || {
            for _ in 0..4 {
                server.progress();
            }
        };
        warm_up_lane(&client, &server, &client_ep);
        let callbacks = Arc::new(AtomicUsize::new(0));
        let rung_before = server.shared.lock().st.rung_takes;
        let rounds = 300u64;
        for n in 0..rounds {
            let body: Vec<u8> = (0..(n % 40) as u8 + 1).map(|i| i ^ n as u8).collect();
            let tag = 0x100 + n % 3;
            let kind = n % 6;
            if kind == 5 {
                let recv = server_ep.stream_recv(vec![0u8; body.len()], true, RequestParams::default());
                settle();
                let sent = client_ep.stream_send(body.clone(), RequestParams::default()).expect("send");
                let got = wait(&both, recv.expect("recv")).expect("stream data");
                assert_eq!(got.buf, body, "message {n}");
                wait(&both, sent).expect("send completes");
                continue;
            }
            let cap = if kind == 1 { body.len() / 2 } else { 64 };
            let params = if kind == 2 {
                let count = Arc::clone(&callbacks);
                RequestParams::with_callback(move |status, info| {
                    assert_eq!(status, Status::Ok);
                    assert_eq!(info.sender_tag, tag);
                    count.fetch_add(1, Ordering::Relaxed);
                })
            } else {
                RequestParams::default()
            };
            let send_params = TagSendParams { sync: kind == 3, ..Default::default() };
            let (recv, sent) = if kind == 4 {
                // Unexpected: it reaches the spinning server before its receive is posted.
                settle();
                let sent = client_ep.tag_send(body.clone(), tag, send_params).expect("send");
                server.progress();
                (server.tag_recv(vec![0u8; cap], tag, u64::MAX, params).expect("recv"), sent)
            } else {
                let recv = server.tag_recv(vec![0u8; cap], tag, u64::MAX, params).expect("recv");
                settle();
                (recv, client_ep.tag_send(body.clone(), tag, send_params).expect("send"))
            };
            let got = wait(&both, recv);
            if cap < body.len() {
                assert_eq!(got.unwrap_err(), Status::MessageTruncated, "message {n}");
            } else {
                let got = got.unwrap_or_else(|status| panic!("message {n}: {status}"));
                assert_eq!(got.info.sender_tag, tag, "message {n}");
                assert_eq!(&got.buf[..got.info.length], &body[..], "message {n}");
            }
            // A sync send completes once the server's acknowledgement is back.
            wait(&both, sent).expect("send completes");
        }
        progress_until(&both, "the callbacks", || callbacks.load(Ordering::Relaxed) == 50);
        // Most messages were taken off the ring by the rung path: not every one, as the call
        // that finds a doorbell rung may be the periodic one, which polls in full.
        let rung = server.shared.lock().st.rung_takes - rung_before;
        assert!(rung * 2 >= rounds, "{rung} of {rounds} messages taken by the rung path");
    }

    type AliveAndData = (bool, Vec<u8>);

    /// Sets its flag when dropped: tells when a handler closure holding it is freed.
    struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A handler running on a lent message may replace its own handler: the loan holds no
    /// reference to the handler table, so the worker keeps the replaced table until the loan
    /// ends. The handler is still alive after the replacement, and it is freed once the loan
    /// ended, not leaked.
    #[test]
    fn a_lent_handler_that_replaces_itself_stays_alive_until_its_loan_ends() {
        let Some((client, server, client_ep, _server_ep, _listener)) = shm_pair() else { return };
        let both = [&client, &server];
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Whether the first handler was alive after replacing itself, and the data each saw.
        let seen: Arc<Mutex<Vec<AliveAndData>>> = Arc::default();
        let flag = DropFlag(Arc::clone(&dropped));
        let sink = Arc::clone(&seen);
        let worker = server.clone();
        server.set_am_handler(
            9,
            Some(Box::new(move |msg: &mut crate::AmMessage<'_>| {
                let replacement_sink = Arc::clone(&sink);
                worker.set_am_handler(
                    9,
                    Some(Box::new(move |msg: &mut crate::AmMessage<'_>| {
                        replacement_sink
                            .lock()
                            .expect("sink")
                            .push((true, msg.data().expect("eager").to_vec()));
                        Status::Ok
                    })),
                );
                // This closure's table was replaced above; it must not have been freed.
                let alive = !flag.0.load(Ordering::SeqCst);
                sink.lock().expect("sink").push((alive, msg.data().expect("eager").to_vec()));
                Status::Ok
            })),
        );
        let takes = || server.shared.lock().st.rung_takes;
        let before = takes();
        for n in 0..2u8 {
            for _ in 0..4 {
                server.progress();
            }
            let sent =
                client_ep.am_send(9, &[], vec![n; 4], crate::AmSendParams::default()).expect("am send");
            progress_until(&both, "the active message", || {
                seen.lock().expect("seen").len() == usize::from(n) + 1
            });
            wait(&both, sent).expect("am send completes");
        }
        if takes() - before < 2 {
            eprintln!("skipped: the messages were not both taken by the rung path");
            return;
        }
        assert_eq!(*seen.lock().expect("seen"), vec![(true, vec![0u8; 4]), (true, vec![1u8; 4])]);
        progress_until(&both, "the replaced handler's drop", || dropped.load(Ordering::SeqCst));
    }

    /// An active message's header and data as its handler saw them.
    type HeaderAndData = (Vec<u8>, Vec<u8>);

    /// Active messages are taken by the rung path too and lent to their handler in place, as
    /// the general poll lends them; the loan ends on a later call, and the ring goes on.
    #[test]
    fn a_rung_doorbell_lends_active_messages_to_their_handler() {
        let Some((client, server, client_ep, _server_ep, _listener)) = shm_pair() else { return };
        let both = [&client, &server];
        let got: Arc<Mutex<Vec<HeaderAndData>>> = Arc::default();
        let sink = Arc::clone(&got);
        server.set_am_handler(
            9,
            Some(Box::new(move |msg: &mut crate::AmMessage<'_>| {
                let data = msg.data().expect("eager").to_vec();
                sink.lock().expect("sink").push((msg.header().to_vec(), data));
                Status::Ok
            })),
        );
        let settle = || {
            for _ in 0..4 {
                server.progress();
            }
        };
        let takes = || server.shared.lock().st.rung_takes;
        let rounds = 200u8;
        let before = takes();
        for n in 0..rounds {
            settle();
            let body = vec![n; 1 + usize::from(n % 50)];
            let sent = client_ep.am_send(9, &[n, 7], body, crate::AmSendParams::default()).expect("am send");
            progress_until(&both, "the active message", || {
                got.lock().expect("sink").len() == usize::from(n) + 1
            });
            wait(&both, sent).expect("am send completes");
        }
        let taken = takes() - before;
        assert!(taken * 2 >= u64::from(rounds), "{taken} of {rounds} active messages taken by the rung path");
        for (n, (header, data)) in got.lock().expect("sink").iter().enumerate() {
            assert_eq!(header, &[n as u8, 7], "message {n}");
            assert_eq!(data, &vec![n as u8; 1 + n % 50], "message {n}");
        }
    }
}
