//! The engine's tests: two engines over an in-memory network ([`pair`]), no IO.

mod pair;

mod am;
mod chaos;
mod cookie;
mod hostile;
mod lifecycle;
mod rma;
mod stream;
mod tag;

/// The API keeps the engine behind its worker's lock and moves it between threads.
#[test]
fn engine_is_send() {
    fn send<T: Send>() {}
    send::<crate::Engine>();
    send::<crate::Transmit>();
    send::<crate::RmaRequest>();
    send::<crate::Event>();
}
