//! Two workers in one process: connect by sockaddr and by worker address, and every operation
//! kind, checked byte for byte — once over loopback TCP alone, once with shared memory, which the
//! endpoints then use (same host).

mod common;

/// The suite, for one value of `ZCX_TLS`.
macro_rules! suite {
    ($tls:literal) => {
        const TLS: &str = $tls;

        use std::net::SocketAddr;
        use std::sync::{Arc, Mutex};

        use crate::common::net::{progress_until, wait};
        use zcx::{
            AmProto, AmSendParams, AtomicOp, AtomicSize, CloseMode, Context, Endpoint, EpParams, EpRkey,
            Features, ListenerParams, MemHandle, MemMapParams, Prot, RequestParams, Status, TagSendParams,
            Worker, WorkerParams,
        };

        fn context() -> Context {
            let features = Features::TAG | Features::RMA | Features::AM | Features::STREAM | Features::AMO64;
            let config = zcx::Config::from_vars([("ZCX_TLS", TLS)]).expect("config");
            Context::new(&zcx::ContextParams::new(features), &config).expect("context")
        }

        /// A connected client/server pair over 127.0.0.1.
        struct Pair {
            client: Worker,
            server: Worker,
            client_ep: Endpoint,
            server_ep: Endpoint,
            _listener: zcx::Listener,
        }

        impl Pair {
            fn new() -> Pair {
                let ctx = context();
                let client = ctx.create_worker(&WorkerParams::default()).unwrap();
                let server = ctx.create_worker(&WorkerParams::default()).unwrap();
                let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
                let slot = Arc::clone(&accepted);
                let server_clone = server.clone();
                let listener = server
                    .listen(ListenerParams {
                        sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                        conn_handler: Some(Box::new(move |request| {
                            let ep = server_clone.create_endpoint(EpParams::conn_request(request)).unwrap();
                            *slot.lock().unwrap() = Some(ep);
                        })),
                        ..Default::default()
                    })
                    .unwrap();
                let client_ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
                progress_until(&[&client, &server], "accept", || accepted.lock().unwrap().is_some());
                let server_ep = accepted.lock().unwrap().take().unwrap();
                Pair { client, server, client_ep, server_ep, _listener: listener }
            }

            fn both(&self) -> [&Worker; 2] {
                [&self.client, &self.server]
            }

            /// `len` bytes the server mapped for remote reads and writes: the handle, its address
            /// and the client's key to it.
            fn server_region(&self, len: usize) -> (MemHandle, u64, EpRkey) {
                let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
                let memh = self.server.context().mem_map(&MemMapParams::alloc(len).prot(prot)).unwrap();
                let rkey = self.client_ep.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap();
                let base = memh.address() as u64;
                (memh, base, rkey)
            }
        }

        fn pattern(len: usize, seed: u8) -> Vec<u8> {
            (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
        }

        /// The transport same-host endpoints must end up on for this suite's `ZCX_TLS`.
        fn expected_transport() -> &'static str {
            if TLS.contains("shm") {
                "shm"
            } else {
                "uring"
            }
        }

        #[test]
        fn endpoints_use_the_transport_zcx_tls_selects() {
            let pair = Pair::new();
            progress_until(&pair.both(), "the client to connect", || {
                pair.client_ep.query().unwrap().status == Status::Ok
            });
            assert_eq!(pair.client_ep.query().unwrap().transports, [expected_transport()]);
            assert_eq!(pair.server_ep.query().unwrap().transports, [expected_transport()]);
            // The lane keeps the sockaddrs of the connection that set it up.
            let attr = pair.client_ep.query().unwrap();
            assert!(attr.remote_sockaddr.is_some() && attr.local_sockaddr.is_some(), "{attr:?}");
        }

        #[test]
        fn listener_port_zero_reports_the_real_port() {
            let ctx = context();
            let w = ctx.create_worker(&WorkerParams::default()).unwrap();
            let listener = w
                .listen(ListenerParams {
                    sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                    accept_handler: Some(Box::new(|_| {})),
                    ..Default::default()
                })
                .unwrap();
            assert_ne!(listener.sockaddr().port(), 0);
            let busy = w.listen(ListenerParams {
                sockaddr: Some(listener.sockaddr()),
                accept_handler: Some(Box::new(|_| {})),
                ..Default::default()
            });
            assert_eq!(busy.unwrap_err(), Status::Busy);
        }

        #[test]
        fn listener_and_endpoint_parameter_rules() {
            let ctx = context();
            let w = ctx.create_worker(&WorkerParams::default()).unwrap();
            let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
            assert_eq!(w.listen(ListenerParams::default()).unwrap_err(), Status::InvalidParam);
            assert_eq!(
                w.listen(ListenerParams { sockaddr: Some(addr), ..Default::default() }).unwrap_err(),
                Status::InvalidParam
            );
            assert_eq!(
                w.listen(ListenerParams {
                    sockaddr: Some(addr),
                    conn_handler: Some(Box::new(|_| {})),
                    accept_handler: Some(Box::new(|_| {})),
                    ..Default::default()
                })
                .unwrap_err(),
                Status::InvalidParam
            );
            assert_eq!(w.create_endpoint(EpParams::default()).unwrap_err(), Status::InvalidParam);
            let both = EpParams { remote_address: Some(w.address().to_vec()), ..EpParams::sockaddr(addr) };
            assert_eq!(w.create_endpoint(both).unwrap_err(), Status::InvalidParam);
            let local_only = EpParams {
                remote_address: Some(w.address().to_vec()),
                local_sockaddr: Some(addr),
                ..Default::default()
            };
            assert_eq!(w.create_endpoint(local_only).unwrap_err(), Status::InvalidParam);
        }

        #[test]
        fn tag_messages_of_every_size_arrive_intact() {
            let pair = Pair::new();
            for &len in &[0usize, 1, 8, 4096, 65535, 65536, 300_000, 4 << 20] {
                let data = pattern(len, len as u8);
                let recv =
                    pair.server.tag_recv(vec![0u8; len], 7, u64::MAX, RequestParams::default()).unwrap();
                let send = pair.client_ep.tag_send(data.clone(), 7, TagSendParams::default()).unwrap();
                let got = wait(&pair.both(), recv).unwrap();
                assert_eq!(got.info.length, len);
                assert_eq!(got.info.sender_tag, 7);
                assert!(got.buf == data, "payload of {len} bytes differs");
                let sent = wait(&pair.both(), send).unwrap();
                assert_eq!(sent.buf, data);
            }
        }

        #[test]
        fn unexpected_messages_masks_probe_and_truncation() {
            let pair = Pair::new();
            // Unexpected: sent before the receive is posted, eager and rendezvous.
            pair.client_ep.tag_send(pattern(100, 1), 0x1234_0001, TagSendParams::default()).unwrap();
            let big = pattern(200_000, 2);
            let big_send =
                pair.client_ep.tag_send(big.clone(), 0x1234_0002, TagSendParams::default()).unwrap();
            progress_until(&pair.both(), "probe", || {
                pair.server.tag_probe(0x1234_0000, 0xffff_0000).is_some()
            });
            let info = pair.server.tag_probe(0x1234_0001, u64::MAX).unwrap();
            assert_eq!(info.length, 100);
            let msg = pair.server.tag_probe_remove(0x1234_0001, u64::MAX).unwrap();
            let got =
                wait(&pair.both(), msg.recv(vec![0u8; 100], RequestParams::default()).unwrap()).unwrap();
            assert_eq!(got.buf, pattern(100, 1));
            // Mask: any tag with the high half 0x1234.
            let got = wait(
                &pair.both(),
                pair.server
                    .tag_recv(vec![0u8; 200_000], 0x1234_0000, 0xffff_0000, RequestParams::default())
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(got.info.sender_tag, 0x1234_0002);
            assert!(got.buf == big);
            wait(&pair.both(), big_send).unwrap();
            // Truncation, eager and rendezvous.
            let recv = pair.server.tag_recv(vec![0u8; 10], 9, u64::MAX, RequestParams::default()).unwrap();
            pair.client_ep.tag_send(pattern(20, 3), 9, TagSendParams::default()).unwrap();
            assert_eq!(wait(&pair.both(), recv).unwrap_err(), Status::MessageTruncated);
            let recv = pair.server.tag_recv(vec![0u8; 1000], 10, u64::MAX, RequestParams::default()).unwrap();
            let send = pair.client_ep.tag_send(pattern(100_000, 4), 10, TagSendParams::default()).unwrap();
            assert_eq!(wait(&pair.both(), recv).unwrap_err(), Status::MessageTruncated);
            wait(&pair.both(), send).unwrap();
        }

        #[test]
        fn sync_send_completes_only_after_the_match() {
            let pair = Pair::new();
            let send = pair
                .client_ep
                .tag_send(pattern(64, 5), 11, TagSendParams { sync: true, ..Default::default() })
                .unwrap();
            for _ in 0..2000 {
                pair.client.progress();
                pair.server.progress();
            }
            assert_eq!(send.status(), Status::InProgress, "sync send completed before any receive");
            let recv = pair.server.tag_recv(vec![0u8; 64], 11, u64::MAX, RequestParams::default()).unwrap();
            wait(&pair.both(), recv).unwrap();
            wait(&pair.both(), send).unwrap();
        }

        #[test]
        fn cancelled_receive_leaves_its_buffer_untouched() {
            let ctx = context();
            let w = ctx.create_worker(&WorkerParams::default()).unwrap();
            let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
            // SAFETY: the handle's 4096 bytes are mapped and owned by this test.
            unsafe { std::ptr::write_bytes(memh.address(), 0xAB, 4096) };
            let fired = Arc::new(Mutex::new(None));
            let f = Arc::clone(&fired);
            let recv = w
                .tag_recv(
                    memh.slice(0, 4096).unwrap(),
                    1,
                    u64::MAX,
                    RequestParams::with_callback(move |s, _| *f.lock().unwrap() = Some(s)),
                )
                .unwrap();
            recv.cancel();
            assert_eq!(recv.status(), Status::Canceled);
            w.progress();
            assert_eq!(*fired.lock().unwrap(), Some(Status::Canceled));
            // SAFETY: as above.
            let bytes = unsafe { std::slice::from_raw_parts(memh.address(), 4096) };
            assert!(bytes.iter().all(|&b| b == 0xAB));
        }

        #[test]
        fn stream_waitall_and_partial() {
            let pair = Pair::new();
            let data = pattern(1 << 20, 9);
            let send = pair.client_ep.stream_send(data.clone(), RequestParams::default()).unwrap();
            let got = wait(
                &pair.both(),
                pair.server_ep.stream_recv(vec![0u8; 1 << 20], true, RequestParams::default()).unwrap(),
            )
            .unwrap();
            assert_eq!(got.info.length, 1 << 20);
            assert!(got.buf == data);
            wait(&pair.both(), send).unwrap();
            pair.server_ep.stream_send(b"hello".to_vec(), RequestParams::default()).unwrap();
            let got = wait(
                &pair.both(),
                pair.client_ep.stream_recv(vec![0u8; 100], false, RequestParams::default()).unwrap(),
            )
            .unwrap();
            assert_eq!(&got.buf[..got.info.length], b"hello");
        }

        /// An AM's header and data as the handler saw them.
        type HeaderAndData = (Vec<u8>, Vec<u8>);

        #[test]
        fn active_messages_eager_and_rendezvous() {
            let pair = Pair::new();
            let seen: Arc<Mutex<Vec<HeaderAndData>>> = Arc::default();
            let s = Arc::clone(&seen);
            pair.server.set_am_handler(
                3,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    let header = msg.header().to_vec();
                    if msg.is_rndv() {
                        let len = msg.data_len();
                        let req = msg.recv_data(vec![0u8; len]).unwrap();
                        let s = Arc::clone(&s);
                        std::thread::spawn(move || {
                            let done = req.wait().unwrap();
                            s.lock().unwrap().push((header, done.buf));
                        });
                    } else {
                        let data = msg.data().unwrap().to_vec();
                        if let Some(ep) = msg.reply_ep() {
                            ep.am_send(4, b"ack", Vec::new(), AmSendParams::default()).unwrap();
                        }
                        s.lock().unwrap().push((header, data));
                    }
                    Status::Ok
                })),
            );
            let acks = Arc::new(Mutex::new(0));
            let a = Arc::clone(&acks);
            pair.client.set_am_handler(
                4,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    assert_eq!(msg.header(), b"ack");
                    *a.lock().unwrap() += 1;
                    Status::Ok
                })),
            );
            let header = [7u8; 64];
            pair.client_ep
                .am_send(3, &header, pattern(1000, 1), AmSendParams { reply: true, ..Default::default() })
                .unwrap();
            let big = pattern(3 << 20, 2);
            let send = pair
                .client_ep
                .am_send(3, &header, big.clone(), AmSendParams { proto: AmProto::Rndv, ..Default::default() })
                .unwrap();
            progress_until(&pair.both(), "two AMs and an ack", || {
                seen.lock().unwrap().len() == 2 && *acks.lock().unwrap() == 1
            });
            wait(&pair.both(), send).unwrap();
            let seen = seen.lock().unwrap();
            assert_eq!(seen[0], (header.to_vec(), pattern(1000, 1)));
            assert!(seen[1].0 == header && seen[1].1 == big);
        }

        /// A handler that replaces itself while it runs keeps running on what it captured (the
        /// progress call holds the handler table it took), and the rest of its batch still goes
        /// to the handler registered when the batch's messages arrived; later messages go to the
        /// new one.
        #[test]
        fn an_am_handler_may_replace_itself_while_it_runs() {
            let pair = Pair::new();
            let first: Arc<Mutex<Vec<u8>>> = Arc::default();
            let second: Arc<Mutex<Vec<u8>>> = Arc::default();
            let (f, s, server) = (Arc::clone(&first), Arc::clone(&second), pair.server.clone());
            pair.server.set_am_handler(
                7,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    let s = Arc::clone(&s);
                    server.set_am_handler(
                        7,
                        Some(Box::new(move |msg: &mut zcx::AmMessage| {
                            s.lock().unwrap().push(msg.header()[0]);
                            Status::Ok
                        })),
                    );
                    // Captured state, used after the replacement dropped this handler's entry.
                    f.lock().unwrap().push(msg.header()[0]);
                    Status::Ok
                })),
            );
            for i in 0..4u8 {
                pair.client_ep.am_send(7, &[i], Vec::new(), AmSendParams::default()).unwrap();
            }
            progress_until(&pair.both(), "four AMs", || {
                first.lock().unwrap().len() + second.lock().unwrap().len() == 4
            });
            let (first, second) = (first.lock().unwrap().clone(), second.lock().unwrap().clone());
            assert!(!first.is_empty(), "the first handler ran");
            let all: Vec<u8> = first.iter().chain(&second).copied().collect();
            assert_eq!(all, [0, 1, 2, 3], "in order, each message once");
        }

        /// A handler may close its own endpoint, which takes the connection under its message
        /// away, and still read the message whole; keeping it afterwards gives an intact copy.
        #[test]
        fn an_am_handler_that_closes_its_endpoint_still_reads_its_message() {
            let pair = Pair::new();
            let seen: Arc<Mutex<Vec<HeaderAndData>>> = Arc::default();
            let kept: Arc<Mutex<Vec<zcx::AmDesc>>> = Arc::default();
            let (s, k) = (Arc::clone(&seen), Arc::clone(&kept));
            pair.server.set_am_handler(
                8,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    let ep = msg.reply_ep().expect("a reply endpoint").clone();
                    let close = ep.close(CloseMode::Force).expect("close");
                    drop((ep, close));
                    s.lock().unwrap().push((msg.header().to_vec(), msg.data().unwrap().to_vec()));
                    k.lock().unwrap().push(msg.keep().expect("data to keep"));
                    Status::InProgress
                })),
            );
            let reply = AmSendParams { reply: true, ..Default::default() };
            pair.client_ep.am_send(8, b"hdr", pattern(40, 5), reply).unwrap();
            progress_until(&pair.both(), "the AM", || !seen.lock().unwrap().is_empty());
            for _ in 0..100 {
                pair.client.progress();
                pair.server.progress();
            }
            assert_eq!(*seen.lock().unwrap(), vec![(b"hdr".to_vec(), pattern(40, 5))]);
            let desc = kept.lock().unwrap().pop().unwrap();
            assert_eq!((desc.header(), desc.data()), (&b"hdr"[..], Some(&pattern(40, 5)[..])));
        }

        /// Two threads progressing the server's worker at once, while the client streams
        /// messages, run each message's handler exactly once: none lost, none twice.
        #[test]
        fn two_threads_progressing_one_worker_run_each_am_handler_once() {
            const COUNT: u32 = 20_000;
            let pair = Pair::new();
            let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
            let s = Arc::clone(&seen);
            pair.server.set_am_handler(
                10,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    let n = u32::from_le_bytes(msg.header().try_into().expect("4 bytes"));
                    assert_eq!(msg.data().unwrap(), &pattern(8, n as u8)[..], "message {n}");
                    s.lock().unwrap().push(n);
                    Status::Ok
                })),
            );
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let helpers: Vec<_> = (0..2)
                .map(|_| {
                    let (server, stop) = (pair.server.clone(), Arc::clone(&stop));
                    std::thread::spawn(move || {
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            server.progress();
                        }
                    })
                })
                .collect();
            let mut sends = Vec::new();
            for n in 0..COUNT {
                sends.push(
                    pair.client_ep
                        .am_send(10, &n.to_le_bytes(), pattern(8, n as u8), AmSendParams::default())
                        .unwrap(),
                );
                if sends.len() == 64 {
                    for send in sends.drain(..) {
                        wait(&[&pair.client], send).unwrap();
                    }
                }
            }
            for send in sends.drain(..) {
                wait(&[&pair.client], send).unwrap();
            }
            progress_until(&[&pair.client], "every AM", || seen.lock().unwrap().len() >= COUNT as usize);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for helper in helpers {
                helper.join().expect("a progress thread panicked");
            }
            let mut seen = std::mem::take(&mut *seen.lock().unwrap());
            seen.sort_unstable();
            assert!(seen.iter().copied().eq(0..COUNT), "each message once");
        }

        #[test]
        fn kept_and_declined_active_messages() {
            let pair = Pair::new();
            // Handler 5 keeps every message (eager small, eager large, rendezvous) for later;
            // handler 6 ignores its rendezvous message, which declines it.
            let kept: Arc<Mutex<Vec<zcx::AmDesc>>> = Arc::default();
            let k = Arc::clone(&kept);
            pair.server.set_am_handler(
                5,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    k.lock().unwrap().push(msg.keep().expect("data to keep"));
                    assert!(msg.keep().is_none(), "kept twice");
                    Status::InProgress
                })),
            );
            let ignored = Arc::new(Mutex::new(0));
            let i = Arc::clone(&ignored);
            pair.server.set_am_handler(
                6,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    assert!(msg.is_rndv());
                    *i.lock().unwrap() += 1;
                    Status::Ok
                })),
            );
            let small = pattern(8, 1);
            let large = pattern(4000, 2);
            let big = pattern(2 << 20, 3);
            let rndv = AmSendParams { proto: AmProto::Rndv, ..Default::default() };
            pair.client_ep.am_send(5, b"s", small.clone(), AmSendParams::default()).unwrap();
            pair.client_ep.am_send(5, b"l", large.clone(), AmSendParams::default()).unwrap();
            let kept_rndv = pair.client_ep.am_send(5, b"r", big.clone(), rndv).unwrap();
            let declined = pair
                .client_ep
                .am_send(6, b"d", big.clone(), AmSendParams { proto: AmProto::Rndv, ..Default::default() })
                .unwrap();
            progress_until(&pair.both(), "three kept AMs and an ignored one", || {
                kept.lock().unwrap().len() == 3 && *ignored.lock().unwrap() == 1
            });
            // The declined message's sender completes although nobody fetched its data.
            wait(&pair.both(), declined).unwrap();
            let mut descs = std::mem::take(&mut *kept.lock().unwrap());
            let rndv_desc = descs.pop().unwrap();
            // Kept eager data stays readable after its handler returned, inline or pooled.
            assert_eq!((descs[0].header(), descs[0].data()), (&b"s"[..], Some(&small[..])));
            assert_eq!((descs[1].header(), descs[1].data()), (&b"l"[..], Some(&large[..])));
            let copied =
                wait(&pair.both(), pair.server.am_recv_data(descs.remove(1), vec![0u8; 4000]).unwrap())
                    .unwrap();
            assert_eq!(copied.buf, large);
            drop(descs);
            // A kept rendezvous is fetched later, from outside the handler.
            assert!(rndv_desc.is_rndv() && rndv_desc.data().is_none() && rndv_desc.data_len() == big.len());
            let fetched =
                wait(&pair.both(), pair.server.am_recv_data(rndv_desc, vec![0u8; big.len()]).unwrap())
                    .unwrap();
            assert_eq!(fetched.buf, big);
            wait(&pair.both(), kept_rndv).unwrap();
        }

        /// Messages to an id with no handler are dropped, whatever way they travel: a rendezvous
        /// is declined so its sender completes, and the worker goes on delivering what follows
        /// (a handler registered later gets only later messages, in order).
        #[test]
        fn active_messages_without_a_handler_are_dropped_and_release_their_sender() {
            let pair = Pair::new();
            let rndv = AmSendParams { proto: AmProto::Rndv, ..Default::default() };
            let small = pair.client_ep.am_send(9, b"h", pattern(8, 1), AmSendParams::default()).unwrap();
            let pooled = pair.client_ep.am_send(9, b"h", pattern(4000, 2), AmSendParams::default()).unwrap();
            let declined = pair.client_ep.am_send(9, b"h", pattern(2 << 20, 3), rndv).unwrap();
            for request in [small, pooled, declined] {
                let done = wait(&pair.both(), request).expect("the sender of an unhandled AM completes");
                assert!(!done.buf.is_empty());
            }
            let seen: Arc<Mutex<Vec<HeaderAndData>>> = Arc::default();
            let s = Arc::clone(&seen);
            pair.server.set_am_handler(
                9,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    s.lock().unwrap().push((msg.header().to_vec(), msg.data().unwrap_or(&[]).to_vec()));
                    Status::Ok
                })),
            );
            pair.client_ep.am_send(9, b"later", pattern(16, 4), AmSendParams::default()).unwrap();
            progress_until(&pair.both(), "the AM sent after the handler", || {
                !seen.lock().unwrap().is_empty()
            });
            // Give any stray delivery of the dropped ones a chance to show up.
            for _ in 0..100 {
                pair.client.progress();
                pair.server.progress();
            }
            assert_eq!(*seen.lock().unwrap(), vec![(b"later".to_vec(), pattern(16, 4))]);
        }

        #[test]
        fn put_get_and_atomics_through_the_target() {
            let pair = Pair::new();
            let len = 8 << 20;
            let (memh, base, rkey) = pair.server_region(len);
            for &(off, n) in &[(0usize, 8usize), (100, 5000), (4096, 3 << 20)] {
                let data = pattern(n, off as u8);
                wait(
                    &pair.both(),
                    pair.client_ep
                        .put(data.clone(), base + off as u64, &rkey, RequestParams::default())
                        .unwrap(),
                )
                .unwrap();
                // SAFETY: the range is inside the mapped handle.
                let there = unsafe { std::slice::from_raw_parts(memh.address().add(off), n) };
                assert!(there == data.as_slice(), "put of {n} bytes at {off} differs");
                let back = wait(
                    &pair.both(),
                    pair.client_ep
                        .get(vec![0u8; n], base + off as u64, &rkey, RequestParams::default())
                        .unwrap(),
                )
                .unwrap();
                assert!(back.buf == data, "get of {n} bytes at {off} differs");
            }
            let word = base + 64;
            // SAFETY: 8-byte aligned word inside the handle.
            unsafe { (memh.address().add(64) as *mut u64).write(10) };
            let old = |op, size, value, compare| {
                wait(
                    &pair.both(),
                    pair.client_ep
                        .atomic(op, size, value, compare, word, &rkey, RequestParams::default())
                        .unwrap(),
                )
                .unwrap()
                .info
                .value
            };
            assert_eq!(old(AtomicOp::Add, AtomicSize::U64, 5, 0), 10);
            assert_eq!(old(AtomicOp::Swap, AtomicSize::U64, 100, 0), 15);
            assert_eq!(old(AtomicOp::Cswap, AtomicSize::U64, 7, 100), 100);
            assert_eq!(old(AtomicOp::Cswap, AtomicSize::U64, 9, 100), 7);
            assert_eq!(old(AtomicOp::And, AtomicSize::U64, 0b110, 0), 7);
            assert_eq!(old(AtomicOp::Or, AtomicSize::U64, 0b1000, 0), 0b110);
            assert_eq!(old(AtomicOp::Xor, AtomicSize::U64, 0b1111, 0), 0b1110);
            assert_eq!(old(AtomicOp::Add, AtomicSize::U32, 1, 0), 0b0001);
            assert_eq!(
                pair.client_ep
                    .atomic(AtomicOp::Add, AtomicSize::U64, 1, 0, word + 4, &rkey, RequestParams::default())
                    .unwrap_err(),
                Status::InvalidParam
            );
            // Out of bounds: refused, at once (shared memory checks the key here) or by the target;
            // either way nothing is touched.
            // SAFETY: `memh` maps `len` bytes at its address and is alive; nothing writes them
            // during the copy (the put below is issued after it).
            let before = unsafe { std::slice::from_raw_parts(memh.address(), len) }.to_vec();
            let r = pair.client_ep.put(vec![1u8; 16], base + len as u64 - 8, &rkey, RequestParams::default());
            assert_eq!(r.and_then(|r| wait(&pair.both(), r)).unwrap_err(), Status::InvalidAddr);
            // SAFETY: as above; the refused put has completed, so nothing writes the region.
            assert!(unsafe { std::slice::from_raw_parts(memh.address(), len) } == before.as_slice());
            wait(&pair.both(), pair.client_ep.flush().unwrap()).unwrap();
            wait(&pair.both(), pair.client.flush().unwrap()).unwrap();
        }

        #[test]
        fn implicit_puts_complete_with_a_flush_that_reports_refusals() {
            let pair = Pair::new();
            let len = 4 << 20;
            let (memh, base, rkey) = pair.server_region(len);
            // SAFETY: the handle maps `len` bytes for the whole test.
            let region = || unsafe { std::slice::from_raw_parts(memh.address(), len) }.to_vec();
            // A key claiming more than the region passes the initiator's own check, so this goes to
            // the target, which refuses it: the call succeeds, the next flush reports the refusal,
            // and the flush after it is clean.
            let mut longer = zcx_control::RkeyWire::decode(&memh.rkey_pack().unwrap()).unwrap();
            longer.length += 4096;
            longer.shm = None;
            let longer = pair.client_ep.rkey_unpack(&longer.encode()).unwrap();
            let before = region();
            pair.client_ep.put_nbi(&[1u8; 16], base + len as u64 - 8, &longer).unwrap();
            assert_eq!(wait(&pair.both(), pair.client_ep.flush().unwrap()).unwrap_err(), Status::InvalidAddr);
            assert!(region() == before, "a refused put wrote");
            wait(&pair.both(), pair.client_ep.flush().unwrap()).unwrap();
            // One buffer for every put, overwritten as soon as each call returned: eager, fragmented
            // and (once the key is vouched for, over shared memory) direct puts.
            let mut buf = vec![0u8; 3 << 20];
            let puts = [(0usize, 8usize), (100, 5000), (8192, 3 << 20), (16, 8), (40, 0)];
            for (i, &(off, n)) in puts.iter().enumerate() {
                buf[..n].copy_from_slice(&pattern(n, i as u8));
                pair.client_ep.put_nbi(&buf[..n], base + off as u64, &rkey).unwrap();
                buf.fill(0xEE);
            }
            // Many to one word: the last one stays.
            for round in 0..200u64 {
                pair.client_ep.put_nbi(&round.to_le_bytes(), base + 24, &rkey).unwrap();
            }
            wait(&pair.both(), pair.client_ep.flush().unwrap()).unwrap();
            let there = region();
            for (i, &(off, n)) in puts.iter().enumerate() {
                assert!(there[off..off + n] == pattern(n, i as u8)[..], "implicit put {i} differs");
            }
            assert_eq!(there[24..32], 199u64.to_le_bytes());
            // Out of bounds once more: refused here at once (a vouched key over shared memory) or
            // by the target, reported by the worker's flush then.
            let before = region();
            match pair.client_ep.put_nbi(&[2u8; 16], base + len as u64 - 8, &rkey) {
                Err(status) => assert_eq!(status, Status::InvalidAddr),
                Ok(()) => {
                    assert_eq!(
                        wait(&pair.both(), pair.client.flush().unwrap()).unwrap_err(),
                        Status::InvalidAddr
                    )
                }
            }
            assert!(region() == before, "a refused put wrote");
            wait(&pair.both(), pair.client.flush().unwrap()).unwrap();
        }

        #[test]
        fn a_closed_endpoint_stops_every_remote_access_with_its_keys() {
            let pair = Pair::new();
            progress_until(&pair.both(), "the client to connect", || {
                pair.client_ep.query().unwrap().status == Status::Ok
            });
            let ctx = pair.server.context().clone();
            let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
            let base = memh.address() as u64;
            let rkey = pair.client_ep.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap();
            // The first put is vouched for by the owner; later ones may go straight to the memory.
            for round in 0..3u8 {
                let put = pair.client_ep.put(vec![round + 1; 8], base, &rkey, RequestParams::default());
                wait(&pair.both(), put.unwrap()).unwrap();
            }
            // SAFETY: 8 bytes of the mapped handle.
            let word = || unsafe { std::slice::from_raw_parts(memh.address(), 8) }.to_vec();
            assert_eq!(word(), vec![3u8; 8]);
            let close = pair.client_ep.close(CloseMode::Force).unwrap();
            let _ = wait(&pair.both(), close);
            let put = pair.client_ep.put(vec![9u8; 8], base, &rkey, RequestParams::default());
            let status = put.and_then(|r| wait(&pair.both(), r)).unwrap_err();
            assert_ne!(status, Status::Ok);
            let get = pair.client_ep.get(vec![0u8; 8], base, &rkey, RequestParams::default());
            assert!(get.and_then(|r| wait(&pair.both(), r)).is_err());
            let amo = pair.client_ep.atomic(
                AtomicOp::Add,
                AtomicSize::U64,
                1,
                0,
                base,
                &rkey,
                RequestParams::default(),
            );
            assert!(amo.and_then(|r| wait(&pair.both(), r)).is_err());
            assert_eq!(word(), vec![3u8; 8], "a closed endpoint's key still wrote");
        }

        #[test]
        fn connect_by_worker_address() {
            let ctx = context();
            let a = ctx.create_worker(&WorkerParams::default()).unwrap();
            let b = ctx.create_worker(&WorkerParams::default()).unwrap();
            let ep = a.create_endpoint(EpParams::remote_address(b.address())).unwrap();
            let recv = b.tag_recv(vec![0u8; 5], 1, u64::MAX, RequestParams::default()).unwrap();
            ep.tag_send(b"hello".to_vec(), 1, TagSendParams::default()).unwrap();
            let got = wait(&[&a, &b], recv).unwrap();
            assert_eq!(got.buf, b"hello");
            wait(&[&a, &b], ep.close(CloseMode::Flush).unwrap()).unwrap();
        }

        #[test]
        fn query_reports_names_addresses_and_user_data() {
            let pair = Pair::new();
            progress_until(&pair.both(), "client connected", || {
                pair.client_ep.query().unwrap().status == Status::Ok
            });
            let attr = pair.client_ep.query().unwrap();
            assert_eq!(attr.remote_sockaddr, Some(pair._listener.sockaddr()));
            assert!(attr.local_sockaddr.is_some());
            assert!(!attr.name.is_empty());
            let server_attr = pair.server_ep.query().unwrap();
            assert_eq!(server_attr.remote_sockaddr, attr.local_sockaddr);
        }

        #[test]
        fn a_small_message_overtakes_a_large_transfer() {
            let pair = Pair::new();
            let big_len = 32 << 20;
            // The large message lands in registered memory, so the test can see its first bytes arrive.
            let landing = pair.server.context().mem_map(&MemMapParams::alloc(big_len)).unwrap();
            // SAFETY: the handle maps `big_len` bytes.
            unsafe { std::ptr::write_bytes(landing.address(), 0, big_len) };
            let big_recv = pair
                .server
                .tag_recv(landing.slice(0, big_len).unwrap(), 1, u64::MAX, RequestParams::default())
                .unwrap();
            let small_recv =
                pair.server.tag_recv(vec![0u8; 8], 2, u64::MAX, RequestParams::default()).unwrap();
            let big_send = pair.client_ep.tag_send(pattern(big_len, 1), 1, TagSendParams::default()).unwrap();
            // Wait until the large payload streams (its first byte, 1, has landed) before the small send.
            progress_until(&pair.both(), "first fragment", || {
                // SAFETY: inside the mapping; the value is only read.
                let first = unsafe { std::ptr::read_volatile(landing.address()) };
                first != 0
            });
            pair.client_ep.tag_send(pattern(8, 2), 2, TagSendParams::default()).unwrap();
            progress_until(&pair.both(), "small message", || small_recv.is_done());
            assert_eq!(small_recv.status(), Status::Ok);
            assert!(!big_recv.is_done(), "the small message waited for the whole large transfer");
            wait(&pair.both(), big_recv).unwrap();
            // SAFETY: as above; the transfer is complete.
            let landed = unsafe { std::slice::from_raw_parts(landing.address(), big_len) };
            assert!(landed == pattern(big_len, 1).as_slice());
            wait(&pair.both(), big_send).unwrap();
        }

        /// `len` bytes whose first four say `seq`.
        fn numbered(seq: u32, len: usize) -> Vec<u8> {
            let mut data = pattern(len, seq as u8);
            data[..4].copy_from_slice(&seq.to_le_bytes());
            data
        }

        /// Eager tag and AM sends in bursts far larger than a shared-memory ring, with the
        /// receiver polled only now and then: some go straight into the ring, some queue behind a
        /// full one and go out as it drains. Every message still arrives once, whole and in the
        /// order it was sent, whichever way it went.
        #[test]
        fn bursts_past_a_full_ring_keep_their_order() {
            let pair = Pair::new();
            progress_until(&pair.both(), "the client to connect", || {
                pair.client_ep.query().unwrap().status == Status::Ok
            });
            let count = 1500u32;
            let len = 8 << 10;
            let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
            let s = Arc::clone(&seen);
            pair.server.set_am_handler(
                6,
                Some(Box::new(move |msg: &mut zcx::AmMessage| {
                    let data = msg.data().unwrap();
                    let seq = u32::from_le_bytes(data[..4].try_into().unwrap());
                    assert!(data == numbered(seq, len).as_slice(), "AM {seq} arrived damaged");
                    s.lock().unwrap().push(seq);
                    Status::Ok
                })),
            );
            let mut sends = Vec::new();
            for seq in 0..count {
                let tag = pair.client_ep.tag_send(numbered(seq, len), 5, TagSendParams::default()).unwrap();
                let am = pair.client_ep.am_send(6, &[], numbered(seq, len), AmSendParams::default()).unwrap();
                sends.push((tag, am));
                // Now and then the client drains its queue, and the server its ring, a little.
                if seq % 97 == 0 {
                    pair.client.progress();
                }
                if seq % 131 == 0 {
                    pair.server.progress();
                }
            }
            for seq in 0..count {
                let recv =
                    pair.server.tag_recv(vec![0u8; len], 5, u64::MAX, RequestParams::default()).unwrap();
                let got = wait(&pair.both(), recv).unwrap();
                let got_seq = u32::from_le_bytes(got.buf[..4].try_into().unwrap());
                assert_eq!(got_seq, seq, "tag message out of order");
                assert!(got.buf == numbered(seq, len), "tag message {seq} arrived damaged");
            }
            progress_until(&pair.both(), "every AM", || seen.lock().unwrap().len() == count as usize);
            assert!(seen.lock().unwrap().iter().copied().eq(0..count), "AMs out of order");
            for (tag, am) in sends {
                wait(&pair.both(), tag).unwrap();
                wait(&pair.both(), am).unwrap();
            }
        }

        /// A stream send too large for one frame goes out in fragments over many polls; small
        /// stream sends made meanwhile wait behind it, so the receiver reads one byte stream in
        /// the order of the sends.
        #[test]
        fn small_stream_sends_wait_behind_a_fragmented_one() {
            let pair = Pair::new();
            progress_until(&pair.both(), "the client to connect", || {
                pair.client_ep.query().unwrap().status == Status::Ok
            });
            // A first small send, so later ones find the endpoint settled.
            let mut expected = b"start".to_vec();
            let mut sends =
                vec![pair.client_ep.stream_send(b"start".to_vec(), RequestParams::default()).unwrap()];
            for round in 0..4u8 {
                let big = pattern(3 << 20, round);
                expected.extend_from_slice(&big);
                sends.push(pair.client_ep.stream_send(big, RequestParams::default()).unwrap());
                for i in 0..20u8 {
                    let small = vec![round.wrapping_mul(20).wrapping_add(i); 100];
                    expected.extend_from_slice(&small);
                    sends.push(pair.client_ep.stream_send(small, RequestParams::default()).unwrap());
                    pair.client.progress();
                }
            }
            let got = wait(
                &pair.both(),
                pair.server_ep
                    .stream_recv(vec![0u8; expected.len()], true, RequestParams::default())
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(got.info.length, expected.len());
            let first_difference = got.buf.iter().zip(&expected).position(|(a, b)| a != b);
            assert_eq!(first_difference, None, "the byte stream is out of order");
            for send in sends {
                wait(&pair.both(), send).unwrap();
            }
        }

        #[test]
        fn worker_params_are_reported_back() {
            let ctx = context();
            let params = WorkerParams {
                name: Some("reporter".into()),
                thread_mode: zcx::ThreadMode::Multi,
                cpu_mask: Some(zcx::CpuSet::single(0).unwrap()),
                client_id: 77,
                events: zcx::WakeupEvents::TAG_RECV | zcx::WakeupEvents::RX,
            };
            let w = ctx.create_worker(&params).unwrap();
            assert_eq!(w.name(), "reporter");
            assert_eq!(w.thread_mode(), zcx::ThreadMode::Multi);
            assert_eq!(w.wakeup_events(), zcx::WakeupEvents::TAG_RECV | zcx::WakeupEvents::RX);
            assert!(w.cpu_mask().unwrap().contains(0));
            let address = zcx_control::WorkerAddressWire::decode(w.address()).unwrap();
            assert_eq!(address.name, "reporter");
            assert!(address
                .transports
                .iter()
                .any(|t| matches!(t, zcx_control::TransportAddress::Uring { .. })));
        }

        #[test]
        fn client_id_reaches_the_conn_request() {
            let ctx = context();
            let client =
                ctx.create_worker(&WorkerParams { client_id: 0xC1_1E47, ..WorkerParams::default() }).unwrap();
            let server = ctx.create_worker(&WorkerParams::default()).unwrap();
            let seen = Arc::new(Mutex::new(None));
            let s = Arc::clone(&seen);
            let listener = server
                .listen(ListenerParams {
                    sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                    conn_handler: Some(Box::new(move |req| {
                        *s.lock().unwrap() =
                            Some((req.client_id(), req.client_addr(), req.client_ep_name().to_owned()));
                    })),
                    ..Default::default()
                })
                .unwrap();
            let params = EpParams {
                flags: zcx::EpFlags::CLIENT_SERVER | zcx::EpFlags::SEND_CLIENT_ID,
                name: Some("named-ep".into()),
                local_sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                ..EpParams::sockaddr(listener.sockaddr())
            };
            let ep = client.create_endpoint(params).unwrap();
            progress_until(&[&client, &server], "conn request", || seen.lock().unwrap().is_some());
            let (id, addr, name) = seen.lock().unwrap().take().unwrap();
            assert_eq!(id, 0xC1_1E47);
            assert_eq!(name, "named-ep");
            assert_eq!(addr, ep.query().unwrap().local_sockaddr);
            assert_eq!(ep.query().unwrap().name, "named-ep");
        }

        /// Runs `f` on another thread and fails if it does not finish in 10 s (a deadlock), instead of
        /// hanging the suite.
        fn finishes(what: &str, f: impl FnOnce() + Send + 'static) {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                f();
                let _ = tx.send(());
            });
            assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "{what} deadlocked");
        }

        #[test]
        fn dropping_handlers_that_own_endpoints_does_not_deadlock() {
            let pair = Pair::new();
            // A listener whose accept handler holds the only reference to the endpoint it accepted.
            let (listener, accepted) = crate::common::net::accepting_listener(&pair.server);
            let ep = pair.client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
            progress_until(&pair.both(), "accept", || accepted.lock().unwrap().is_some());
            drop(accepted);
            finishes("dropping the listener", move || drop(listener));
            // An AM handler owning an endpoint, replaced and then removed.
            let owned = pair.server_ep.clone();
            pair.server.set_am_handler(
                9,
                Some(Box::new(move |_msg: &mut zcx::AmMessage| {
                    let _ = &owned;
                    Status::Ok
                })),
            );
            let server = pair.server.clone();
            let owned = pair.server_ep.clone();
            finishes("replacing an AM handler", move || {
                server.set_am_handler(
                    9,
                    Some(Box::new(move |_msg: &mut zcx::AmMessage| {
                        let _ = &owned;
                        Status::Ok
                    })),
                );
                server.set_am_handler(9, None);
            });
            drop(ep);
        }
    };
}

mod over_tcp {
    suite!("tcp");
}

mod over_shm {
    suite!("shm,tcp");
}
