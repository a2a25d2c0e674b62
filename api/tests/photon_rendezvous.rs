//! Photon's rendezvous: one side posts a registered receive buffer, the other waits for it, learns
//! it with `get_buffer_remote`, puts into it and sends a FIN.

mod common;

use std::time::{Duration, Instant};

use common::net::accepting_listener;
use zcx::photon::{self, Registry};
use zcx::{Context, EpParams, Features, RequestParams, WorkerParams};

#[test]
fn put_into_a_buffer_learned_through_the_rendezvous() {
    let ctx = Context::with_features(Features::TAG | Features::RMA).unwrap();
    let server = ctx.create_worker(&WorkerParams::default()).unwrap();
    let client = ctx.create_worker(&WorkerParams::default()).unwrap();
    let (listener, accepted) = accepting_listener(&server);
    // Both workers are driven by their own progress threads, as a Photon program's would be.
    let _server_progress = server.start_progress_thread().unwrap();
    let _client_progress = client.start_progress_thread().unwrap();
    let client_ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let server_ep = loop {
        if let Some(ep) = accepted.lock().unwrap().take() {
            break ep;
        }
        assert!(Instant::now() < deadline, "no connection");
        std::thread::sleep(Duration::from_millis(1));
    };

    // The server registers a buffer and posts it to the client.
    let registry = Registry::new(&ctx);
    let mut target = vec![0u8; 1 << 20].into_boxed_slice();
    let addr = target.as_mut_ptr();
    // SAFETY: `target` outlives its registration (unregistered below, before it drops).
    unsafe { registry.register_buffer(addr, target.len()).unwrap() };
    photon::post_recv_buffer(&registry, &server_ep, addr, target.len(), 42).unwrap();

    // The client waits for it, learns it, puts into it, and says FIN.
    let request = photon::wait_recv_buffer(&client_ep, 42).unwrap();
    let remote = photon::get_buffer_remote(&request);
    assert_eq!(remote.addr, addr as u64);
    assert_eq!(remote.size, 1 << 20);
    assert_eq!(remote.priv_keys, registry.get_buffer_private(addr, 1 << 20).unwrap());
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    client_ep.put(data.clone(), remote.addr, &remote.rkey, RequestParams::default()).unwrap().wait().unwrap();
    photon::send_fin(&client_ep, 42).unwrap();

    photon::wait_fin(&server_ep, 42).unwrap();
    assert!(target[..] == data[..], "the put did not land in the posted buffer");
    registry.unregister_buffer(addr, 1 << 20).unwrap();
}
