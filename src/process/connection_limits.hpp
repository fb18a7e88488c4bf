#pragma once
// File descriptors and the metrics endpoint: how many descriptors the job path keeps in
// reserve, how many connections the metrics server may hold, and what it does with one
// more. Pure decisions (tests/unit/connection_limits_test.cpp); metrics_server.cpp and the
// worker's start-up do the I/O.
//
// Why: every descriptor the metrics endpoint holds is one the job path (database
// connections and their reconnects, exec pipes, HTTP sockets) cannot open, and a client
// can open connections much faster than anyone notices. So the endpoint holds at most
// max_connections, never pushes the process past limit - reserve, and a full table makes
// room by dropping its oldest connection (a slow or idle one: a probe that sends its
// request at once is answered within milliseconds of being accepted).

#include <cstddef>
#include <cstdint>

namespace oncely::detail {

struct FdBudget {
  std::int64_t reserve = 0;     // descriptors kept free for the job path
  std::size_t max_connections;  // metrics connections held at once
};

/// The budget for a process whose open-file limit (RLIMIT_NOFILE, soft) is `limit`:
/// reserve a quarter (at least 64, at most half the limit); connections a quarter of the
/// rest, between 8 and 128.
[[nodiscard]] FdBudget fd_budget(std::int64_t limit) noexcept;

enum class Admission {
  admit,               // serve it
  admit_evict_oldest,  // serve it; close the oldest connection to stay within the cap
  refuse,              // close it at once: the descriptors left belong to the job path
};

/// What to do with a connection just accepted. `open_fds` counts every descriptor of the
/// process, this connection's included (-1: unknown, as when the count itself found no
/// descriptor free); `held` the metrics connections already held, not this one.
[[nodiscard]] Admission admit_connection(std::int64_t open_fds, std::int64_t limit, std::size_t held,
                                         const FdBudget& budget) noexcept;

/// The soft RLIMIT_NOFILE to run with: the hard limit, but not beyond 2^20 (an unlimited
/// hard limit cannot be a soft one), never below the current soft limit.
[[nodiscard]] std::uint64_t raised_open_file_limit(std::uint64_t soft, std::uint64_t hard) noexcept;

}  // namespace oncely::detail
