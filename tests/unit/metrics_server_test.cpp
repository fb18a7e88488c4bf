// The metrics endpoint's own limits, in process (no database): the header deadline, one
// request per connection, the header size limit, a full table making room, and idle
// connections never reaching the table.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <vector>

#include "process/metrics.hpp"
#include "support/http_attack.hpp"
#include "support/steady_clock.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Endpoint {
  oncely::detail::Metrics metrics;
  std::atomic<std::int64_t> last_contact{oncely::detail::steady_ms()};
  oncely::detail::MetricsServer server{"127.0.0.1:0", metrics, last_contact};
};

// Blocks until the server closes `fd` (or `bound` passes); returns when it did.
std::optional<Clock::duration> wait_closed(int fd, Clock::time_point since, std::chrono::milliseconds bound) {
  const auto give_up = Clock::now() + bound;
  char buffer[256];
  while (Clock::now() < give_up) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 50) > 0) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return Clock::now() - since;
    }
  }
  return std::nullopt;
}

int connect_blocking(int port) {
  const int fd = connect_local_nonblocking(port);
  pollfd p{fd, POLLOUT, 0};
  ::poll(&p, 1, 1000);
  return fd;
}

}  // namespace

TEST_CASE("metrics_server: a request header trickled a byte at a time is cut off at 2 s") {
  Endpoint e;
  const auto start = Clock::now();
  const int fd = connect_blocking(e.server.port());
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  std::optional<Clock::duration> closed;
  for (std::size_t i = 0; !closed && Clock::now() - start < 5s; ++i) {
    const char b = i < request.size() ? request[i] : 'a';
    ::send(fd, &b, 1, MSG_NOSIGNAL);
    closed = wait_closed(fd, start, 100ms);
  }
  ::close(fd);
  REQUIRE(closed);
  CHECK(*closed >= 1900ms);
  CHECK(*closed < 3s);
  CHECK(e.metrics.render().find("oncely_metrics_connections_dropped_total{reason=\"deadline\"} 1\n") !=
        std::string::npos);
}

TEST_CASE("metrics_server: one request per connection, answered with Connection: close") {
  Endpoint e;
  const auto answer = get_with_deadline(e.server.port(), "/healthz", 1000ms);
  REQUIRE(answer);
  CHECK(answer->status == 200);
  CHECK(answer->body == "ok\nlast database contact: 0 s ago\n");
  // A client asking for keep-alive still gets one response, then the close.
  const int fd = connect_blocking(e.server.port());
  const std::string two = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
  ::send(fd, two.data(), two.size(), MSG_NOSIGNAL);
  std::string in;
  char buffer[4096];
  for (const auto give_up = Clock::now() + 2s; Clock::now() < give_up;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    in.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  CHECK(in.find("Connection: close\r\n") != std::string::npos);
  CHECK(in.find("HTTP/1.1 200") == 0);
  CHECK(in.find("HTTP/1.1", 1) == std::string::npos);
}

TEST_CASE("metrics_server: a header past 8 KiB without its end is closed at once") {
  Endpoint e;
  const auto start = Clock::now();
  const int fd = connect_blocking(e.server.port());
  const std::string request = "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(9000, 'a');
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  const auto closed = wait_closed(fd, start, 1500ms);
  ::close(fd);
  REQUIRE(closed);
  CHECK(e.metrics.render().find("reason=\"header_too_large\"} 1\n") != std::string::npos);
}

TEST_CASE("metrics_server: with every slot held by slow connections a probe still answers, the oldest dropped") {
  Endpoint e;
  const std::size_t slots = e.server.max_connections();
  std::vector<int> slow;
  for (std::size_t i = 0; i < slots; ++i) {
    slow.push_back(connect_blocking(e.server.port()));
    ::send(slow.back(), "G", 1, MSG_NOSIGNAL);  // the first byte of a request that never ends
  }
  const auto answer = get_with_deadline(e.server.port(), "/healthz", 1000ms);
  REQUIRE(answer);
  CHECK(answer->status == 200);
  CHECK(e.metrics.render().find("reason=\"evicted\"} 1\n") != std::string::npos);
  // The first slow connection was the one dropped; the next is still held.
  CHECK(wait_closed(slow[0], Clock::now(), 500ms));
  CHECK_FALSE(wait_closed(slow[1], Clock::now(), 200ms));
  for (const int fd : slow) ::close(fd);
}

TEST_CASE(
    "metrics_server: connections that send nothing stay in the kernel: none taken, none evicted, a probe answered") {
  Endpoint e;
  std::vector<int> idle;
  for (std::size_t i = 0; i < 2 * e.server.max_connections(); ++i) idle.push_back(connect_blocking(e.server.port()));
  const auto answer = get_with_deadline(e.server.port(), "/healthz", 1000ms);
  REQUIRE(answer);
  CHECK(answer->status == 200);
  CHECK(e.metrics.render().find("reason=\"evicted\"") == std::string::npos);
  // Beyond the 2 s request deadline, and still not closed: never accepted.
  CHECK_FALSE(wait_closed(idle[0], Clock::now(), 2500ms));
  CHECK(e.metrics.render().find("reason=\"deadline\"") == std::string::npos);
  for (const int fd : idle) ::close(fd);
}
