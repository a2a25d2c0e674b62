//! The engine's tests: two engines over an in-memory network ([`pair`]), no IO.

mod pair;

mod am;
mod hostile;
mod lifecycle;
mod rma;
mod stream;
mod tag;
