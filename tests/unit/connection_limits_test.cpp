#include <doctest/doctest.h>

#include <cstdint>

#include "support/connection_limits.hpp"
#include "support/open_file_limit.hpp"

using oncely::detail::Admission;
using oncely::detail::admit_connection;
using oncely::detail::fd_budget;
using oncely::detail::FdBudget;
using oncely::detail::raised_open_file_limit;

TEST_CASE("connection_limits: the reserve and the connection cap for each open-file limit") {
  struct Row {
    std::int64_t limit;
    std::int64_t reserve;
    std::size_t max_connections;
  };
  const Row rows[] = {
      {16, 8, 8},              // tiny: half kept back, the minimum of connections
      {64, 32, 8},             // the reserve never passes half the limit
      {128, 64, 16},           // at least 64 kept back
      {256, 64, 48},           // a quarter would be less than 64
      {1024, 256, 128},        // the common default: a quarter; connections capped
      {4096, 1024, 128},       //
      {524288, 131072, 128},   // systemd's hard limit
      {1048576, 262144, 128},  //
  };
  for (const Row& row : rows) {
    CAPTURE(row.limit);
    const FdBudget budget = fd_budget(row.limit);
    CHECK(budget.reserve == row.reserve);
    CHECK(budget.max_connections == row.max_connections);
    // What the cap lets the endpoint hold always leaves the reserve free (above 64).
    if (row.limit >= 128) {
      CHECK(static_cast<std::int64_t>(budget.max_connections) <= row.limit - budget.reserve);
    }
  }
}

TEST_CASE("connection_limits: a new connection is served, makes room, or is refused") {
  const FdBudget budget = fd_budget(1024);  // reserve 256, 128 connections
  struct Row {
    std::int64_t open_fds;
    std::size_t held;
    Admission expected;
  };
  const Row rows[] = {
      {40, 0, Admission::admit},
      {168, 127, Admission::admit},               // the 128th
      {169, 128, Admission::admit_evict_oldest},  // one more: the oldest goes
      {768, 10, Admission::admit},                // exactly limit - reserve open
      {769, 10, Admission::refuse},               // one past: the job path's descriptors
      {769, 128, Admission::refuse},              // refusing wins over evicting
      {1024, 0, Admission::refuse},               // full (other parts of the process)
      {-1, 0, Admission::refuse},                 // not even /proc/self/fd could be opened
  };
  for (const Row& row : rows) {
    CAPTURE(row.open_fds);
    CAPTURE(row.held);
    CHECK(admit_connection(row.open_fds, 1024, row.held, budget) == row.expected);
  }
}

TEST_CASE("connection_limits: the soft open-file limit is raised to the hard one, within 2^20") {
  struct Row {
    std::uint64_t soft;
    std::uint64_t hard;
    std::uint64_t expected;
  };
  const std::uint64_t unlimited = ~std::uint64_t{0};  // RLIM_INFINITY
  const Row rows[] = {
      {1024, 524288, 524288},  // systemd's defaults
      {1024, 1024, 1024},      // nothing to raise
      {256, 4096, 4096},       //
      {1024, unlimited, 1048576},
      {1024, 4194304, 1048576},       // a hard limit past fs.nr_open's default
      {2097152, unlimited, 2097152},  // never lowered
  };
  for (const Row& row : rows) {
    CAPTURE(row.soft);
    CAPTURE(row.hard);
    CHECK(raised_open_file_limit(row.soft, row.hard) == row.expected);
  }
}
