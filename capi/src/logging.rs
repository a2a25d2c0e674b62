//! Logging for programs that know nothing of `tracing`: warnings and errors go to stderr, more
//! with `ZCX_LOG_LEVEL` (or `RUST_LOG`), once per process.

/// Installs the stderr logger unless the process has one.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("RUST_LOG")
            .or_else(|_| std::env::var("ZCX_LOG_LEVEL"))
            .unwrap_or_else(|_| "warn".to_owned());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    });
}
