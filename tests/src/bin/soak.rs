//! The soak harness (see `zcx_tests::soak`): without arguments the orchestrator, configured by
//! `SOAK_*` variables; `soak peer ...` is one of the peer processes it starts.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => std::process::exit(zcx_tests::soak::orchestrator::run()),
        Some("peer") => match zcx_tests::soak::peer::PeerArgs::parse(&args[1..]) {
            Some(peer) => zcx_tests::soak::peer::run(peer),
            None => {
                eprintln!("usage: soak peer ID INCARNATION PEERS DIR SEED");
                std::process::exit(2)
            }
        },
        Some(_) => {
            eprintln!("usage: soak (settings from SOAK_* variables; see scripts/soak.sh)");
            std::process::exit(2)
        }
    }
}
