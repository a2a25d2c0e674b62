/*
 * An MPI program for exactly 2 ranks that checks, byte for byte, what Open MPI's UCX pml does over
 * libucp: point-to-point in its eager and rendezvous sizes, synchronous sends, wildcards, probes,
 * matched probes, cancellation, sends to self, a strided derived datatype, collectives, and
 * concurrent traffic from several threads. capi/tests/open_mpi.rs builds and runs it.
 *
 * Run: mpicc -pthread -o zcx_mpi_test zcx_mpi_test.c && mpirun -np 2 ./zcx_mpi_test [dir]
 * (dir: where the barrier check leaves its marker files; default $TMPDIR or /tmp).
 *
 * Output: each rank prints its pid and the libucp files it has mapped
 * ("zcx-mpi-test: rank R pid P libucp PATH") and its UCX_TLS,
 * rank 0 prints "zcx-mpi-test: ok ..." once both ranks passed a check, and
 * "zcx-mpi-test: all checks passed" after MPI_Finalize. Any mismatch prints a
 * "zcx-mpi-test: FAIL" line and aborts the job with a nonzero exit.
 */

#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SMALL 100
#define MEDIUM (64 * 1024 + 13)
#define LARGE (4 * 1024 * 1024 + 7)
#define GUARD 64
#define GUARD_BYTE 0xA5
#define WAIT_SECONDS 60.0

static int rank = -1;
static int peer = -1;
/* Where rank 1 reports each passed check to rank 0, apart from the traffic being checked. */
static MPI_Comm control = MPI_COMM_NULL;

static void fail(const char *check, const char *fmt, ...)
{
    va_list ap;
    char detail[512];
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    fprintf(stderr, "zcx-mpi-test: FAIL rank %d: %s: %s\n", rank, check, detail);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define MPI_CHECK(check, call)                                                          \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != MPI_SUCCESS) {                                                       \
            char msg_[MPI_MAX_ERROR_STRING];                                            \
            int len_ = 0;                                                               \
            MPI_Error_string(rc_, msg_, &len_);                                         \
            fail(check, "%s returned %d (%s)", #call, rc_, msg_);                       \
        }                                                                               \
    } while (0)

/* Both ranks got here without failing: rank 1's token only leaves if its own checks held. */
static void passed(const char *check)
{
    int token = 1;
    if (rank == 1) {
        MPI_CHECK(check, MPI_Send(&token, 1, MPI_INT, 0, 0, control));
    } else {
        token = 0;
        MPI_CHECK(check, MPI_Recv(&token, 1, MPI_INT, 1, 0, control, MPI_STATUS_IGNORE));
        if (token != 1) {
            fail(check, "rank 1 reported %d", token);
        }
        printf("zcx-mpi-test: ok %s\n", check);
        fflush(stdout);
    }
}

/* Byte i of the message identified by seed: not periodic in 256, so shifted data is caught. */
static uint8_t pattern(uint64_t seed, size_t i)
{
    uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (uint8_t)x;
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = pattern(seed, i);
    }
}

static void expect_bytes(const char *check, const uint8_t *buf, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++) {
        uint8_t want = pattern(seed, i);
        if (buf[i] != want) {
            fail(check, "byte %zu of %zu is 0x%02x, expected 0x%02x (seed %llu)", i, len, buf[i], want,
                 (unsigned long long)seed);
        }
    }
}

/* A receive buffer of len bytes followed by a guard that no receive may write. */
static uint8_t *recv_buffer(size_t len)
{
    uint8_t *buf = malloc(len + GUARD);
    if (buf == NULL) {
        fail("allocation", "malloc(%zu) failed", len + GUARD);
    }
    memset(buf, 0, len);
    memset(buf + len, GUARD_BYTE, GUARD);
    return buf;
}

static void expect_guard(const char *check, const uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < GUARD; i++) {
        if (buf[len + i] != GUARD_BYTE) {
            fail(check, "byte %zu past the %zu-byte message was overwritten (0x%02x)", i, len, buf[len + i]);
        }
    }
}

static uint8_t *send_buffer(size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        fail("allocation", "malloc(%zu) failed", len);
    }
    fill(buf, len, seed);
    return buf;
}

static void expect_status(const char *check, const MPI_Status *st, int source, int tag, MPI_Datatype type,
                          int count)
{
    int got = -1;
    MPI_CHECK(check, MPI_Get_count(st, type, &got));
    if (st->MPI_SOURCE != source || st->MPI_TAG != tag || got != count) {
        fail(check, "status says source %d tag %d count %d, expected source %d tag %d count %d",
             st->MPI_SOURCE, st->MPI_TAG, got, source, tag, count);
    }
}

static uint64_t seed_of(int from, int tag, size_t len)
{
    return ((uint64_t)from << 56) ^ ((uint64_t)tag << 32) ^ (uint64_t)len;
}

static const size_t sizes[] = {SMALL, MEDIUM, LARGE};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Print the libucp files this process mapped, so the harness can tell which library it ran on. */
static void report_libucp(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    char seen[8][4096];
    int nseen = 0;
    if (maps == NULL) {
        fail("libucp", "cannot open /proc/self/maps");
    }
    while (fgets(line, sizeof(line), maps) != NULL) {
        char *path = strchr(line, '/');
        if (path == NULL) {
            continue;
        }
        path[strcspn(path, "\n")] = '\0';
        const char *base = strrchr(path, '/') + 1;
        if (strncmp(base, "libucp.so", 9) != 0) {
            continue;
        }
        int dup = 0;
        for (int i = 0; i < nseen; i++) {
            dup |= strcmp(seen[i], path) == 0;
        }
        if (!dup && nseen < 8) {
            snprintf(seen[nseen++], sizeof(seen[0]), "%s", path);
        }
    }
    fclose(maps);
    for (int i = 0; i < nseen; i++) {
        printf("zcx-mpi-test: rank %d pid %d libucp %s\n", rank, (int)getpid(), seen[i]);
    }
    if (nseen == 0) {
        printf("zcx-mpi-test: rank %d pid %d libucp none\n", rank, (int)getpid());
    }
    /* The harness checks that a transport choice it exported really reached the ranks. */
    const char *tls = getenv("UCX_TLS");
    printf("zcx-mpi-test: rank %d UCX_TLS=%s\n", rank, tls ? tls : "(unset)");
    fflush(stdout);
}

static void check_blocking(void)
{
    const char *check = "blocking MPI_Send/MPI_Recv";
    for (size_t s = 0; s < NSIZES; s++) {
        size_t len = sizes[s];
        int tag = 10 + (int)s;
        /* Rank 0 sends first, then the reply comes back, so each direction is checked. */
        for (int turn = 0; turn < 2; turn++) {
            int sender = turn;
            if (rank == sender) {
                uint8_t *buf = send_buffer(len, seed_of(rank, tag, len));
                MPI_CHECK(check, MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                free(buf);
            } else {
                uint8_t *buf = recv_buffer(len);
                MPI_Status st;
                MPI_CHECK(check, MPI_Recv(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                expect_status(check, &st, peer, tag, MPI_BYTE, (int)len);
                expect_bytes(check, buf, len, seed_of(peer, tag, len));
                expect_guard(check, buf, len);
                free(buf);
            }
        }
    }
    passed("blocking MPI_Send/MPI_Recv of 100 B, 64 KiB and 4 MiB, both directions");
}

static void check_nonblocking(void)
{
    const char *check = "MPI_Isend/MPI_Irecv/MPI_Waitall";
    MPI_Request reqs[2 * NSIZES];
    MPI_Status sts[2 * NSIZES];
    uint8_t *rbuf[NSIZES], *sbuf[NSIZES];
    /* Every size in flight at once in both directions, receives posted before the sends. */
    for (size_t s = 0; s < NSIZES; s++) {
        rbuf[s] = recv_buffer(sizes[s]);
        MPI_CHECK(check, MPI_Irecv(rbuf[s], (int)sizes[s], MPI_BYTE, peer, 20 + (int)s, MPI_COMM_WORLD, &reqs[s]));
    }
    for (size_t s = 0; s < NSIZES; s++) {
        sbuf[s] = send_buffer(sizes[s], seed_of(rank, 20 + (int)s, sizes[s]));
        MPI_CHECK(check, MPI_Isend(sbuf[s], (int)sizes[s], MPI_BYTE, peer, 20 + (int)s, MPI_COMM_WORLD,
                                   &reqs[NSIZES + s]));
    }
    MPI_CHECK(check, MPI_Waitall(2 * NSIZES, reqs, sts));
    for (size_t s = 0; s < NSIZES; s++) {
        expect_status(check, &sts[s], peer, 20 + (int)s, MPI_BYTE, (int)sizes[s]);
        expect_bytes(check, rbuf[s], sizes[s], seed_of(peer, 20 + (int)s, sizes[s]));
        expect_guard(check, rbuf[s], sizes[s]);
        free(rbuf[s]);
        free(sbuf[s]);
    }
    passed("MPI_Isend/MPI_Irecv/MPI_Waitall of 100 B, 64 KiB and 4 MiB at once, both directions");
}

/* Messages on one tag match receives in the order they were sent, whatever their protocol. */
static void check_ordering(void)
{
    const char *check = "non-overtaking order on one tag";
    enum { N = 12 };
    const size_t big = 1024 * 1024 + 3;
    MPI_Request reqs[2 * N];
    MPI_Status sts[2 * N];
    uint8_t *rbuf[N], *sbuf[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = (i % 3 == 1) ? big : (size_t)(17 + 1000 * i);
        rbuf[i] = recv_buffer(big);
        MPI_CHECK(check, MPI_Irecv(rbuf[i], (int)big, MPI_BYTE, peer, 30, MPI_COMM_WORLD, &reqs[i]));
    }
    for (int i = 0; i < N; i++) {
        sbuf[i] = send_buffer(len[i], seed_of(rank, 30 + i, len[i]));
        MPI_CHECK(check, MPI_Isend(sbuf[i], (int)len[i], MPI_BYTE, peer, 30, MPI_COMM_WORLD, &reqs[N + i]));
    }
    MPI_CHECK(check, MPI_Waitall(2 * N, reqs, sts));
    for (int i = 0; i < N; i++) {
        expect_status(check, &sts[i], peer, 30, MPI_BYTE, (int)len[i]);
        expect_bytes(check, rbuf[i], len[i], seed_of(peer, 30 + i, len[i]));
        expect_guard(check, rbuf[i], big);
        free(rbuf[i]);
        free(sbuf[i]);
    }
    passed("12 messages of mixed sizes on one tag are received in the order sent");
}

static void check_ssend(void)
{
    const char *check = "MPI_Ssend";
    for (size_t s = 0; s < NSIZES; s++) {
        size_t len = sizes[s];
        if (rank == 1) {
            uint8_t *buf = send_buffer(len, seed_of(rank, 40, len));
            MPI_CHECK(check, MPI_Ssend(buf, (int)len, MPI_BYTE, 0, 40, MPI_COMM_WORLD));
            free(buf);
        } else {
            uint8_t *buf = recv_buffer(len);
            MPI_Status st;
            MPI_CHECK(check, MPI_Recv(buf, (int)len, MPI_BYTE, 1, 40, MPI_COMM_WORLD, &st));
            expect_status(check, &st, 1, 40, MPI_BYTE, (int)len);
            expect_bytes(check, buf, len, seed_of(1, 40, len));
            expect_guard(check, buf, len);
            free(buf);
        }
    }
    passed("MPI_Ssend of 100 B, 64 KiB and 4 MiB");

    /* A synchronous send may not complete until its receive is matched. Rank 1 posts that
     * receive only when rank 0 says so, after rank 0 saw the send stay incomplete for a while. */
    check = "MPI_Issend completes only once matched";
    const size_t len = SMALL;
    if (rank == 0) {
        uint8_t *buf = send_buffer(len, seed_of(0, 41, len));
        MPI_Request req;
        int done = 0, go = 1;
        MPI_CHECK(check, MPI_Issend(buf, (int)len, MPI_BYTE, 1, 41, MPI_COMM_WORLD, &req));
        double until = MPI_Wtime() + 0.3;
        while (MPI_Wtime() < until) {
            MPI_CHECK(check, MPI_Test(&req, &done, MPI_STATUS_IGNORE));
            if (done) {
                fail(check, "the synchronous send completed before rank 1 posted its receive");
            }
        }
        MPI_CHECK(check, MPI_Send(&go, 1, MPI_INT, 1, 42, MPI_COMM_WORLD));
        MPI_CHECK(check, MPI_Wait(&req, MPI_STATUS_IGNORE));
        free(buf);
    } else {
        int go = 0;
        uint8_t *buf = recv_buffer(len);
        MPI_Status st;
        MPI_CHECK(check, MPI_Recv(&go, 1, MPI_INT, 0, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(check, MPI_Recv(buf, (int)len, MPI_BYTE, 0, 41, MPI_COMM_WORLD, &st));
        expect_status(check, &st, 0, 41, MPI_BYTE, (int)len);
        expect_bytes(check, buf, len, seed_of(0, 41, len));
        free(buf);
    }
    passed("MPI_Issend stays incomplete until the receiver posts its receive");
}

static void check_wildcards(void)
{
    const char *check = "MPI_ANY_SOURCE/MPI_ANY_TAG";
    /* Rank 0 takes one message from itself and one from rank 1, learning each sender and tag
     * only from the status. */
    const size_t self_len = 333, peer_len = MEDIUM;
    if (rank == 1) {
        uint8_t *buf = send_buffer(peer_len, seed_of(1, 52, peer_len));
        MPI_CHECK(check, MPI_Send(buf, (int)peer_len, MPI_BYTE, 0, 52, MPI_COMM_WORLD));
        free(buf);
    } else {
        uint8_t *mine = send_buffer(self_len, seed_of(0, 51, self_len));
        MPI_Request sreq;
        int got_self = 0, got_peer = 0;
        MPI_CHECK(check, MPI_Isend(mine, (int)self_len, MPI_BYTE, 0, 51, MPI_COMM_WORLD, &sreq));
        for (int i = 0; i < 2; i++) {
            uint8_t *buf = recv_buffer(MEDIUM);
            MPI_Status st;
            int count = -1;
            MPI_CHECK(check, MPI_Recv(buf, MEDIUM, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            MPI_CHECK(check, MPI_Get_count(&st, MPI_BYTE, &count));
            if (st.MPI_SOURCE == 0 && st.MPI_TAG == 51 && count == (int)self_len && !got_self) {
                expect_bytes(check, buf, self_len, seed_of(0, 51, self_len));
                got_self = 1;
            } else if (st.MPI_SOURCE == 1 && st.MPI_TAG == 52 && count == (int)peer_len && !got_peer) {
                expect_bytes(check, buf, peer_len, seed_of(1, 52, peer_len));
                got_peer = 1;
            } else {
                fail(check, "unexpected status: source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);
            }
            expect_guard(check, buf, MEDIUM);
            free(buf);
        }
        MPI_CHECK(check, MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        free(mine);
    }
    passed("MPI_ANY_SOURCE/MPI_ANY_TAG receives report source, tag and count");
}

static void check_probes(void)
{
    const char *check = "MPI_Probe";
    /* Probe reports the size before the receive, for an eager and a rendezvous message. */
    for (size_t s = 1; s < NSIZES; s++) {
        size_t len = sizes[s];
        if (rank == 1) {
            uint8_t *buf = send_buffer(len, seed_of(1, 60, len));
            MPI_CHECK(check, MPI_Send(buf, (int)len, MPI_BYTE, 0, 60, MPI_COMM_WORLD));
            free(buf);
        } else {
            MPI_Status st;
            int count = -1;
            MPI_CHECK(check, MPI_Probe(1, 60, MPI_COMM_WORLD, &st));
            expect_status(check, &st, 1, 60, MPI_BYTE, (int)len);
            MPI_CHECK(check, MPI_Get_count(&st, MPI_BYTE, &count));
            uint8_t *buf = recv_buffer((size_t)count);
            MPI_CHECK(check, MPI_Recv(buf, count, MPI_BYTE, 1, 60, MPI_COMM_WORLD, &st));
            expect_status(check, &st, 1, 60, MPI_BYTE, (int)len);
            expect_bytes(check, buf, len, seed_of(1, 60, len));
            expect_guard(check, buf, len);
            free(buf);
        }
    }
    passed("MPI_Probe reports source, tag and size, then MPI_Recv gets the message");

    check = "MPI_Iprobe";
    if (rank == 1) {
        int go = 0;
        MPI_CHECK(check, MPI_Recv(&go, 1, MPI_INT, 0, 62, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        uint8_t *buf = send_buffer(MEDIUM, seed_of(1, 61, MEDIUM));
        MPI_CHECK(check, MPI_Send(buf, MEDIUM, MPI_BYTE, 0, 61, MPI_COMM_WORLD));
        free(buf);
    } else {
        MPI_Status st;
        int flag = 1, go = 1;
        /* Nothing is on its way yet: rank 1 waits for the go below. */
        for (int i = 0; i < 100; i++) {
            MPI_CHECK(check, MPI_Iprobe(MPI_ANY_SOURCE, 61, MPI_COMM_WORLD, &flag, &st));
            if (flag) {
                fail(check, "found a message before any was sent");
            }
        }
        MPI_CHECK(check, MPI_Send(&go, 1, MPI_INT, 1, 62, MPI_COMM_WORLD));
        double until = MPI_Wtime() + WAIT_SECONDS;
        while (!flag) {
            MPI_CHECK(check, MPI_Iprobe(MPI_ANY_SOURCE, 61, MPI_COMM_WORLD, &flag, &st));
            if (!flag && MPI_Wtime() > until) {
                fail(check, "no message found after %.0f s", WAIT_SECONDS);
            }
        }
        expect_status(check, &st, 1, 61, MPI_BYTE, MEDIUM);
        uint8_t *buf = recv_buffer(MEDIUM);
        MPI_CHECK(check, MPI_Recv(buf, MEDIUM, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
        expect_bytes(check, buf, MEDIUM, seed_of(1, 61, MEDIUM));
        expect_guard(check, buf, MEDIUM);
        free(buf);
    }
    passed("MPI_Iprobe finds nothing before the send and the message after it");

    check = "MPI_Mprobe/MPI_Mrecv";
    /* Two messages on one tag: each matched probe takes one out of matching, so the second probe
     * sees the second message, and they can be received in either order. */
    const size_t first = SMALL, second = LARGE;
    if (rank == 1) {
        uint8_t *a = send_buffer(first, seed_of(1, 63, first));
        uint8_t *b = send_buffer(second, seed_of(1, 63, second));
        MPI_Request reqs[2];
        MPI_CHECK(check, MPI_Isend(a, (int)first, MPI_BYTE, 0, 63, MPI_COMM_WORLD, &reqs[0]));
        MPI_CHECK(check, MPI_Isend(b, (int)second, MPI_BYTE, 0, 63, MPI_COMM_WORLD, &reqs[1]));
        MPI_CHECK(check, MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
        free(a);
        free(b);
    } else {
        MPI_Message m1, m2;
        MPI_Status st1, st2, st;
        int flag = 0;
        MPI_CHECK(check, MPI_Mprobe(1, 63, MPI_COMM_WORLD, &m1, &st1));
        expect_status(check, &st1, 1, 63, MPI_BYTE, (int)first);
        double until = MPI_Wtime() + WAIT_SECONDS;
        while (!flag) {
            MPI_CHECK(check, MPI_Improbe(1, 63, MPI_COMM_WORLD, &flag, &m2, &st2));
            if (!flag && MPI_Wtime() > until) {
                fail(check, "MPI_Improbe found no second message after %.0f s", WAIT_SECONDS);
            }
        }
        expect_status(check, &st2, 1, 63, MPI_BYTE, (int)second);
        uint8_t *b = recv_buffer(second);
        MPI_CHECK(check, MPI_Mrecv(b, (int)second, MPI_BYTE, &m2, &st));
        expect_status(check, &st, 1, 63, MPI_BYTE, (int)second);
        expect_bytes(check, b, second, seed_of(1, 63, second));
        expect_guard(check, b, second);
        uint8_t *a = recv_buffer(first);
        MPI_Request req;
        MPI_CHECK(check, MPI_Imrecv(a, (int)first, MPI_BYTE, &m1, &req));
        MPI_CHECK(check, MPI_Wait(&req, &st));
        expect_status(check, &st, 1, 63, MPI_BYTE, (int)first);
        expect_bytes(check, a, first, seed_of(1, 63, first));
        expect_guard(check, a, first);
        if (m1 != MPI_MESSAGE_NULL || m2 != MPI_MESSAGE_NULL) {
            fail(check, "received messages were not reset to MPI_MESSAGE_NULL");
        }
        /* Both were taken out of matching: nothing is left on the tag. */
        MPI_CHECK(check, MPI_Iprobe(1, 63, MPI_COMM_WORLD, &flag, &st));
        if (flag) {
            fail(check, "a message probed with MPI_Mprobe was still visible to MPI_Iprobe");
        }
        free(a);
        free(b);
    }
    passed("MPI_Mprobe/MPI_Improbe remove messages from matching; MPI_Mrecv/MPI_Imrecv get them");
}

static void check_cancel(void)
{
    const char *check = "MPI_Cancel of a receive";
    if (rank == 0) {
        int buf[4] = {0}, cancelled = 0;
        MPI_Request req;
        MPI_Status st;
        MPI_CHECK(check, MPI_Irecv(buf, 4, MPI_INT, 1, 70, MPI_COMM_WORLD, &req));
        MPI_CHECK(check, MPI_Cancel(&req));
        MPI_CHECK(check, MPI_Wait(&req, &st));
        MPI_CHECK(check, MPI_Test_cancelled(&st, &cancelled));
        if (!cancelled) {
            fail(check, "MPI_Test_cancelled says the receive was not cancelled");
        }
        if (req != MPI_REQUEST_NULL) {
            fail(check, "the request was not freed by MPI_Wait");
        }
        /* Only now may rank 1 send on that tag: the cancelled receive must not take it. */
        int go = 1;
        MPI_CHECK(check, MPI_Send(&go, 1, MPI_INT, 1, 71, MPI_COMM_WORLD));
        uint8_t *msg = recv_buffer(SMALL);
        MPI_CHECK(check, MPI_Recv(msg, SMALL, MPI_BYTE, 1, 70, MPI_COMM_WORLD, &st));
        expect_status(check, &st, 1, 70, MPI_BYTE, SMALL);
        expect_bytes(check, msg, SMALL, seed_of(1, 70, SMALL));
        free(msg);
        for (int i = 0; i < 4; i++) {
            if (buf[i] != 0) {
                fail(check, "the cancelled receive's buffer was written");
            }
        }
    } else {
        int go = 0;
        MPI_CHECK(check, MPI_Recv(&go, 1, MPI_INT, 0, 71, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        uint8_t *msg = send_buffer(SMALL, seed_of(1, 70, SMALL));
        MPI_CHECK(check, MPI_Send(msg, SMALL, MPI_BYTE, 0, 70, MPI_COMM_WORLD));
        free(msg);
    }
    passed("MPI_Cancel of an unmatched receive: MPI_Test_cancelled is true and a later send skips it");
}

static void check_self(void)
{
    const char *check = "send to self";
    for (size_t s = 0; s < NSIZES; s++) {
        size_t len = sizes[s];
        uint8_t *out = send_buffer(len, seed_of(rank, 80, len));
        uint8_t *in = recv_buffer(len);
        MPI_Request req;
        MPI_Status st;
        /* Unexpected: the send is posted before the receive. */
        MPI_CHECK(check, MPI_Isend(out, (int)len, MPI_BYTE, rank, 80, MPI_COMM_WORLD, &req));
        MPI_CHECK(check, MPI_Recv(in, (int)len, MPI_BYTE, rank, 80, MPI_COMM_WORLD, &st));
        MPI_CHECK(check, MPI_Wait(&req, MPI_STATUS_IGNORE));
        expect_status(check, &st, rank, 80, MPI_BYTE, (int)len);
        expect_bytes(check, in, len, seed_of(rank, 80, len));
        expect_guard(check, in, len);
        /* Expected: the receive is posted first. */
        fill(out, len, seed_of(rank, 81, len));
        memset(in, 0, len);
        MPI_CHECK(check, MPI_Irecv(in, (int)len, MPI_BYTE, rank, 81, MPI_COMM_WORLD, &req));
        MPI_CHECK(check, MPI_Send(out, (int)len, MPI_BYTE, rank, 81, MPI_COMM_WORLD));
        MPI_CHECK(check, MPI_Wait(&req, &st));
        expect_status(check, &st, rank, 81, MPI_BYTE, (int)len);
        expect_bytes(check, in, len, seed_of(rank, 81, len));
        expect_guard(check, in, len);
        free(out);
        free(in);
    }
    passed("each rank sends 100 B, 64 KiB and 4 MiB to itself, receive posted after and before");
}

/* The int at index i of a strided buffer: block data gets the pattern, gaps a marker. */
static int vector_value(int seed, int i)
{
    return (int)(((unsigned)seed * 2654435761u) ^ ((unsigned)i * 40503u + 1u));
}

static void check_vector(void)
{
    const char *check = "MPI_Type_vector";
    /* 3 ints of every 5; the small one fits an eager message, the large one (2.4 MB of data in
     * 4 MB) needs the large-message protocol. */
    const int counts[] = {10, 200000};
    const int block = 3, stride = 5, gap_marker = 0x7E7E7E7E;
    for (int c = 0; c < 2; c++) {
        int count = counts[c];
        size_t extent = (size_t)count * stride;
        size_t packed = (size_t)count * block;
        MPI_Datatype vec;
        MPI_CHECK(check, MPI_Type_vector(count, block, stride, MPI_INT, &vec));
        MPI_CHECK(check, MPI_Type_commit(&vec));
        int *strided = malloc(extent * sizeof(int));
        int *flat = malloc(packed * sizeof(int));
        if (strided == NULL || flat == NULL) {
            fail(check, "allocation failed");
        }
        if (rank == 0) {
            /* Strided out, strided in on rank 1; then rank 1 sends the data back contiguous and
             * rank 0 receives it strided. */
            for (size_t i = 0; i < extent; i++) {
                strided[i] = vector_value(c, (int)i);
            }
            MPI_CHECK(check, MPI_Send(strided, 1, vec, 1, 90, MPI_COMM_WORLD));
            for (size_t i = 0; i < extent; i++) {
                strided[i] = gap_marker;
            }
            MPI_Status st;
            MPI_CHECK(check, MPI_Recv(strided, 1, vec, 1, 91, MPI_COMM_WORLD, &st));
            expect_status(check, &st, 1, 91, MPI_INT, (int)packed);
        } else {
            for (size_t i = 0; i < extent; i++) {
                strided[i] = gap_marker;
            }
            MPI_Status st;
            MPI_CHECK(check, MPI_Recv(strided, 1, vec, 0, 90, MPI_COMM_WORLD, &st));
            expect_status(check, &st, 0, 90, MPI_INT, (int)packed);
        }
        for (size_t i = 0; i < extent; i++) {
            int in_block = (int)(i % (size_t)stride) < block;
            int want = in_block ? vector_value(c, (int)i) : gap_marker;
            if (strided[i] != want) {
                fail(check, "count %d: int %zu (%s) is 0x%08x, expected 0x%08x", count, i,
                     in_block ? "data" : "gap", strided[i], want);
            }
        }
        if (rank == 1) {
            for (size_t i = 0; i < packed; i++) {
                size_t at = (i / (size_t)block) * (size_t)stride + i % (size_t)block;
                flat[i] = strided[at];
            }
            MPI_CHECK(check, MPI_Send(flat, (int)packed, MPI_INT, 0, 91, MPI_COMM_WORLD));
        }
        free(strided);
        free(flat);
        MPI_CHECK(check, MPI_Type_free(&vec));
    }
    passed("MPI_Type_vector (3 of every 5 ints, 10 and 200000 blocks) strided and contiguous, gaps untouched");
}

static void check_allreduce(void)
{
    const char *check = "MPI_Allreduce";
    const int n = 1 << 20;
    int *in = malloc((size_t)n * sizeof(int));
    int *out = malloc((size_t)n * sizeof(int));
    if (in == NULL || out == NULL) {
        fail(check, "allocation failed");
    }
    for (int i = 0; i < n; i++) {
        in[i] = (rank + 1) * (i % 1000) - rank;
    }
    MPI_CHECK(check, MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
        /* (1 + 2) * (i % 1000) - (0 + 1) */
        int want = 3 * (i % 1000) - 1;
        if (out[i] != want) {
            fail(check, "sum at %d is %d, expected %d", i, out[i], want);
        }
    }
    double mine = 1.5 + rank, max = 0;
    MPI_CHECK(check, MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    if (max != 2.5) {
        fail(check, "max is %g, expected 2.5", max);
    }
    free(in);
    free(out);
    passed("MPI_Allreduce: MPI_SUM of 1 Mi ints and MPI_MAX of a double");
}

/* No rank leaves a barrier before every rank entered it: each rank leaves a marker file just
 * before entering, and the peer's marker must exist once the barrier returns. */
static void check_barrier(const char *dir, long job)
{
    const char *check = "MPI_Barrier";
    char mine[1024], theirs[1024];
    for (int round = 0; round < 20; round++) {
        snprintf(mine, sizeof(mine), "%s/zcx-mpi-barrier-%ld-%d-%d", dir, job, rank, round);
        snprintf(theirs, sizeof(theirs), "%s/zcx-mpi-barrier-%ld-%d-%d", dir, job, peer, round);
        if (rank == round % 2) {
            /* Make the rank that enters last also the slow one, alternately. */
            struct timespec nap = {0, 20 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
        FILE *f = fopen(mine, "w");
        if (f == NULL || fclose(f) != 0) {
            fail(check, "cannot create %s", mine);
        }
        MPI_CHECK(check, MPI_Barrier(MPI_COMM_WORLD));
        struct stat sb;
        if (stat(theirs, &sb) != 0) {
            fail(check, "round %d: left the barrier before rank %d entered it", round, peer);
        }
        /* Nobody removes a marker the peer still has to find. */
        MPI_CHECK(check, MPI_Barrier(MPI_COMM_WORLD));
        unlink(mine);
    }
    passed("MPI_Barrier: 20 rounds, no rank leaves before the other entered");
}

struct worker {
    int index;
    MPI_Comm comm;
    int failed;
    char error[512];
};

#define THREAD_ROUNDS 40

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const size_t lens[] = {SMALL, MEDIUM, 1024 * 1024 + 5};
    for (int round = 0; round < THREAD_ROUNDS && !w->failed; round++) {
        size_t len = lens[round % 3];
        int tag = 100 + w->index;
        uint64_t out_seed = seed_of(rank, tag, len) + (uint64_t)round * 7919;
        uint64_t in_seed = seed_of(peer, tag, len) + (uint64_t)round * 7919;
        uint8_t *out = send_buffer(len, out_seed);
        uint8_t *in = recv_buffer(len);
        MPI_Request reqs[2];
        MPI_Status sts[2];
        int count = -1;
        int rc = MPI_Irecv(in, (int)len, MPI_BYTE, peer, tag, w->comm, &reqs[0]);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Isend(out, (int)len, MPI_BYTE, peer, tag, w->comm, &reqs[1]);
        }
        if (rc == MPI_SUCCESS) {
            rc = MPI_Waitall(2, reqs, sts);
        }
        if (rc == MPI_SUCCESS) {
            rc = MPI_Get_count(&sts[0], MPI_BYTE, &count);
        }
        if (rc != MPI_SUCCESS) {
            w->failed = 1;
            snprintf(w->error, sizeof(w->error), "round %d: MPI call returned %d", round, rc);
        } else if (sts[0].MPI_SOURCE != peer || sts[0].MPI_TAG != tag || count != (int)len) {
            w->failed = 1;
            snprintf(w->error, sizeof(w->error), "round %d: status source %d tag %d count %d", round,
                     sts[0].MPI_SOURCE, sts[0].MPI_TAG, count);
        } else {
            for (size_t i = 0; i < len; i++) {
                if (in[i] != pattern(in_seed, i)) {
                    w->failed = 1;
                    snprintf(w->error, sizeof(w->error), "round %d: byte %zu of %zu is 0x%02x, expected 0x%02x",
                             round, i, len, in[i], pattern(in_seed, i));
                    break;
                }
            }
            for (size_t i = 0; i < GUARD && !w->failed; i++) {
                if (in[len + i] != GUARD_BYTE) {
                    w->failed = 1;
                    snprintf(w->error, sizeof(w->error), "round %d: wrote past the message", round);
                }
            }
        }
        free(out);
        free(in);
    }
    return NULL;
}

static void check_threads(void)
{
    const char *check = "MPI_THREAD_MULTIPLE";
    /* Each thread its own communicator and tag, all running at once on both ranks. */
    struct worker workers[2];
    pthread_t threads[2];
    for (int t = 0; t < 2; t++) {
        workers[t].index = t;
        workers[t].failed = 0;
        workers[t].error[0] = '\0';
        MPI_CHECK(check, MPI_Comm_dup(MPI_COMM_WORLD, &workers[t].comm));
    }
    for (int t = 0; t < 2; t++) {
        if (pthread_create(&threads[t], NULL, worker_main, &workers[t]) != 0) {
            fail(check, "pthread_create failed");
        }
    }
    for (int t = 0; t < 2; t++) {
        pthread_join(threads[t], NULL);
    }
    for (int t = 0; t < 2; t++) {
        if (workers[t].failed) {
            fail(check, "thread %d: %s", t, workers[t].error);
        }
        MPI_CHECK(check, MPI_Comm_free(&workers[t].comm));
    }
    passed("MPI_THREAD_MULTIPLE: 2 threads per rank, 40 exchanges each on their own communicator");
}

int main(int argc, char **argv)
{
    int provided = -1, size = 0;
    const char *dir = argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "zcx-mpi-test: FAIL: MPI_Init_thread failed\n");
        return 1;
    }
    /* Errors come back as codes, so a failing call is reported by name rather than aborting. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK("setup", MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK("setup", MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size != 2) {
        fail("setup", "run with exactly 2 ranks, not %d", size);
    }
    peer = 1 - rank;
    report_libucp();
    MPI_CHECK("setup", MPI_Comm_dup(MPI_COMM_WORLD, &control));
    MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
    if (provided != MPI_THREAD_MULTIPLE) {
        fail("MPI_Init_thread", "provided thread level %d, asked for MPI_THREAD_MULTIPLE (%d)", provided,
             MPI_THREAD_MULTIPLE);
    }
    passed("MPI_Init_thread provides MPI_THREAD_MULTIPLE");

    long job = (long)getpid();
    MPI_CHECK("setup", MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD));

    check_blocking();
    check_nonblocking();
    check_ordering();
    check_ssend();
    check_wildcards();
    check_probes();
    check_cancel();
    check_self();
    check_vector();
    check_allreduce();
    check_barrier(dir, job);
    check_threads();

    MPI_CHECK("teardown", MPI_Comm_free(&control));
    if (MPI_Finalize() != MPI_SUCCESS) {
        fprintf(stderr, "zcx-mpi-test: FAIL rank %d: MPI_Finalize failed\n", rank);
        return 1;
    }
    if (rank == 0) {
        printf("zcx-mpi-test: all checks passed\n");
        fflush(stdout);
    }
    return 0;
}
