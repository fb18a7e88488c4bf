// The operator console under the metrics endpoint's attacks (metrics_starvation_pgtest.cpp):
// a real `oncely web`, with a real `oncely worker` running exec jobs beside it on the same
// host, while hostile clients hold connections to the console. Its overview page, which
// reads the database on sessions of its own (descriptors the flood must not take), must
// answer within kPageDeadline throughout, and the worker's jobs must complete on their
// first attempt (max_attempts 1).
#include <doctest/doctest.h>

#include <string>

#include "support/starvation.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// The metrics probe's 1 s and the page's own work: a database session opened and the
// overview's statements (its counts shared by every request within --refresh).
constexpr auto kPageDeadline = 2000ms;

bool serving(int port) {
  const auto answer = get_with_deadline(port, "/", kPageDeadline);
  return answer && answer->status == 200;
}

}  // namespace

TEST_SUITE("console_starvation") {
  TEST_CASE(
      "console_starvation: 64 slow-loris connections leave the pages answering and the worker beside it running jobs") {
    PgFixture db;
    TempDir dir;
    const int port = free_local_port();
    auto console = start_console(db, port);
    auto worker = start_exec_worker(db, dir, std::nullopt);
    REQUIRE(wait_until([&] { return serving(port); }, 20s));

    // More than the handler threads httplib's own server had (8), each held for ever by a
    // byte a second.
    ConnectionFlood flood(port, 64, ConnectionFlood::Mode::slow_loris);
    const auto attack_started = Clock::now();
    REQUIRE(wait_until([&] { return flood.open_now() == 64; }, 10s));
    enqueue_noops(db, 100);
    Probes probes(port, "/", kPageDeadline);
    CHECK(probe_until_done(probes, db, 100, attack_started, 5s) > 0);
    check_all_completed(db, 100);
    // The slow connections were cut off and came back, again and again.
    CHECK(flood.connected_total() > 64);

    const ProcessResult w = stop_process(*worker);
    CHECK_MESSAGE(w.exit_code == 0, w.err);
    const ProcessResult c = stop_process(*console);
    CHECK_MESSAGE(c.exit_code == 0, c.err);
  }

  TEST_CASE("console_starvation: 2,000 idle connections at 1024 open files leave the pages their database sessions") {
    PgFixture db;
    TempDir dir;
    const int port = free_local_port();
    auto console = start_console(db, port, 1024);
    auto worker = start_exec_worker(db, dir, std::nullopt);
    REQUIRE(wait_until([&] { return serving(port); }, 20s));

    ConnectionFlood flood(port, 2000, ConnectionFlood::Mode::idle);
    const auto attack_started = Clock::now();
    // More connections than the console has descriptors: without a cap they would hold all,
    // and a page could open no database session.
    REQUIRE(wait_until([&] { return flood.connected_total() >= 1100; }, 20s));
    enqueue_noops(db, 200);
    Probes probes(port, "/", kPageDeadline);
    CHECK(probe_until_done(probes, db, 200, attack_started, 3s) > 0);
    check_all_completed(db, 200);

    const ProcessResult w = stop_process(*worker);
    CHECK_MESSAGE(w.exit_code == 0, w.err);
    const ProcessResult c = stop_process(*console);
    CHECK_MESSAGE(c.exit_code == 0, c.err);
  }

}  // TEST_SUITE
