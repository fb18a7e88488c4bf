#pragma once
// File descriptors and the HTTP endpoints (the worker's metrics endpoint, the operator
// console: bounded_http_server.hpp): how many descriptors the rest of the process keeps in
// reserve, how many connections an endpoint may hold, and what it does with one more. Pure
// decisions (tests/unit/connection_limits_test.cpp); bounded_http_server.cpp and the
// start-up of `oncely worker` and `oncely web` do the I/O.
//
// Why: every descriptor an endpoint holds is one the process's real work (a worker's
// database connections and their reconnects, exec pipes, HTTP sockets; the console's
// database sessions) cannot open, and a client can open connections much faster than
// anyone notices. So an endpoint holds at most max_connections, never pushes the process
// past limit - reserve, and a full table makes room by dropping its oldest connection (a
// slow or idle one: a probe that sends its request at once is answered within
// milliseconds of being accepted).

#include <cstddef>
#include <cstdint>

namespace oncely::detail {

struct FdBudget {
  std::int64_t reserve = 0;     // descriptors kept free for the rest of the process
  std::size_t max_connections;  // connections an endpoint holds at once
};

/// The budget for a process whose open-file limit (RLIMIT_NOFILE, soft) is `limit`:
/// reserve a quarter (at least 64, at most half the limit); connections a quarter of the
/// rest, between 8 and 128.
[[nodiscard]] FdBudget fd_budget(std::int64_t limit) noexcept;

enum class Admission {
  admit,               // serve it
  admit_evict_oldest,  // serve it; close the oldest connection to stay within the cap
  refuse,              // close it at once: the descriptors left belong to the rest of the process
};

/// What to do with a connection just accepted. `open_fds` counts every descriptor of the
/// process, this connection's included (-1: unknown, as when the count itself found no
/// descriptor free); `held` the connections in the endpoint's table (those a client holds,
/// sending its request or taking its response; not those with a handler), not this one.
[[nodiscard]] Admission admit_connection(std::int64_t open_fds, std::int64_t limit, std::size_t held,
                                         const FdBudget& budget) noexcept;

}  // namespace oncely::detail
