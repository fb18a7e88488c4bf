#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <shared_mutex>

#include "execution/attribution_gate.hpp"

using oncely::detail::AttributionGate;
using namespace std::chrono_literals;

TEST_CASE("attribution_gate: a suspect waits for the batches in flight, and no new batch starts beside it") {
  AttributionGate gate;
  std::shared_lock first(gate);  // a batch in flight
  std::atomic<bool> alone{false};
  auto suspect = std::async(std::launch::async, [&] {
    std::unique_lock exclusive(gate);
    alone = true;
    exclusive.unlock();
  });
  CHECK(suspect.wait_for(50ms) == std::future_status::timeout);  // waits for the batch
  // While the suspect waits, another batch must not start (or the suspect could starve).
  auto second = std::async(std::launch::async, [&] {
    std::shared_lock later(gate);
    return alone.load();
  });
  CHECK(second.wait_for(50ms) == std::future_status::timeout);
  first.unlock();
  REQUIRE(suspect.wait_for(5s) == std::future_status::ready);
  REQUIRE(second.wait_for(5s) == std::future_status::ready);
  CHECK(second.get());  // it started only after the suspect had run alone
}

TEST_CASE("attribution_gate: batches share the gate with each other") {
  AttributionGate gate;
  std::shared_lock a(gate);
  auto b = std::async(std::launch::async, [&] { std::shared_lock other(gate); });
  CHECK(b.wait_for(5s) == std::future_status::ready);
}
