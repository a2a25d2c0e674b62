#!/usr/bin/env bash
# The soak: peer processes exchange checked tag, stream, active-message and remote-access traffic
# while one of them is SIGKILLed and restarted every few seconds and hostile TCP connections hit
# their listeners; fails on any corrupted, lost or hung message, on a forbidden access let through,
# or when a peer that was never killed ends with more memory or descriptors than after warm-up.
#
#   SOAK_SECONDS=600 SOAK_PEERS=4 SOAK_SEED=42 scripts/soak.sh
#
# Settings (environment): SOAK_SECONDS (600), SOAK_PEERS (4), SOAK_SEED (from the clock; printed),
# SOAK_WARMUP (seconds before the baseline: SOAK_SECONDS/6, 3 to 60), SOAK_KILL_INTERVAL_MS (3000),
# SOAK_SETTLE (3: seconds of progress before a measurement), SOAK_HOSTILE_MAX (24 open at once),
# SOAK_HOSTILE_INTERVAL_MS (20 between new ones), SOAK_TLS_MIX (1: odd peers use ZCX_TLS=tcp),
# SOAK_FAIL_DEADLINE (30: seconds before a dead peer's endpoint, a request or a silent peer counts
# as hung), SOAK_RSS_SLACK_PERCENT (5), SOAK_RSS_SLACK_KIB (4096), SOAK_FD_SLACK (2), SOAK_DIR (run
# directory; a fresh one under $TMPDIR by default, removed at the end),
# SOAK_PIN_CONNECTIONS (32) and SOAK_PIN_HOLD (3): before the final measurement, that many
# connections that never complete a handshake (half announcing the largest frame, half sending part
# of a connection request) are held open to each peer never killed for that many seconds, and the
# peer's resident set with them open must stay within the same slack (SOAK_PIN_KIND=huge or
# partial: one kind alone).
set -euo pipefail
cd "$(dirname "$0")/.."
export SOAK_SECONDS="${SOAK_SECONDS:-600}" SOAK_PEERS="${SOAK_PEERS:-4}"
cargo build --release --locked -p zcx-tests --bin soak
exec target/release/soak
