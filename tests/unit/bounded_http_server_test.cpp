// The bounded HTTP server with handler threads (the console's way; metrics_server_test.cpp
// covers the deadlines and the table through the metrics endpoint): a request being
// handled is never the connection a flood evicts, a form's body reaches the handler whole,
// and requests beyond the handlers' queue are told 503 at once instead of piling up.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "support/bounded_http_server.hpp"
#include "support/http_attack.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using oncely::detail::BoundedHttpOptions;
using oncely::detail::BoundedHttpServer;

namespace {

// Polls `condition` every 10 ms until it holds or `timeout` passes (pg_fixture's, which
// this binary does not link).
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  for (const auto give_up = std::chrono::steady_clock::now() + timeout;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// A handler that holds its thread until released: a page waiting for its database.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> waiting{0};
  void pass() {
    ++waiting;
    std::unique_lock lock(mutex);
    cv.wait_for(lock, 10s, [&] { return open; });
  }
  void release() {
    {
      const std::lock_guard lock(mutex);
      open = true;
    }
    cv.notify_all();
  }
};

struct PooledServer {
  Gate gate;
  std::mutex mutex;
  std::vector<std::string> reasons;
  BoundedHttpServer server;
  std::thread thread;

  explicit PooledServer(std::size_t threads) : server("127.0.0.1", 0, options(threads)) {
    server.routes().Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      gate.pass();
      res.set_content("slow\n", "text/plain");
    });
    server.routes().Post(
        "/form", [](const httplib::Request& req, httplib::Response& res) { res.set_content(req.body, "text/plain"); });
    thread = std::thread([this] { server.run(); });
  }
  ~PooledServer() {
    gate.release();
    server.stop();
    thread.join();
  }
  BoundedHttpOptions options(std::size_t threads) {
    BoundedHttpOptions o;
    o.handler_threads = threads;
    o.max_body = 1024;
    o.on_dropped = [this](const std::string& reason) {
      const std::lock_guard lock(mutex);
      reasons.push_back(reason);
    };
    return o;
  }
  long dropped(const std::string& reason) {
    const std::lock_guard lock(mutex);
    return std::count(reasons.begin(), reasons.end(), reason);
  }
};

// What comes from `fd` until the server closes it (or `bound` passes); closes it.
std::string read_until_closed(int fd, std::chrono::milliseconds bound) {
  std::string in;
  char buffer[4096];
  for (const auto give_up = std::chrono::steady_clock::now() + bound; std::chrono::steady_clock::now() < give_up;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    in.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return in;
}

// A new connection that has sent `request`.
int send_request(int port, const std::string& request) {
  const int fd = connect_local_nonblocking(port);
  pollfd w{fd, POLLOUT, 0};
  ::poll(&w, 1, 1000);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  return fd;
}

// Sends `request` on a new connection; returns what came back until the server closed.
std::string exchange(int port, const std::string& request, std::chrono::milliseconds bound) {
  return read_until_closed(send_request(port, request), bound);
}

}  // namespace

TEST_CASE("bounded_http_server: a request with its handler survives a flood that turns the table over") {
  PooledServer s(1);
  std::string answer;
  std::thread client([&] { answer = exchange(s.server.port(), "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", 10s); });
  REQUIRE(wait_until([&] { return s.gate.waiting == 1; }, 5s));
  {
    // Twice the table in slow connections (idle ones would not even be accepted), each
    // accepted at its first byte while the handler works.
    ConnectionFlood flood(s.server.port(), 2 * s.server.max_connections(), ConnectionFlood::Mode::slow_loris);
    REQUIRE(wait_until([&] { return s.dropped("evicted") >= static_cast<long>(s.server.max_connections()); }, 10s));
    s.gate.release();
    client.join();
  }
  CHECK(answer.find("HTTP/1.1 200") == 0);
  CHECK(answer.find("\r\n\r\nslow\n") != std::string::npos);
}

TEST_CASE("bounded_http_server: a form's body reaches its handler whole; a longer one is refused unread") {
  PooledServer s(2);
  const std::string form = "token=" + std::string(1000, 'a');
  const std::string post =
      "POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(form.size()) + "\r\n\r\n";
  // The header first, the body after a pause: the request is handled only once whole.
  const int fd = send_request(s.server.port(), post);
  std::this_thread::sleep_for(200ms);  // the pause is the test: nothing may be answered yet
  ::send(fd, form.data(), form.size(), MSG_NOSIGNAL);
  const std::string in = read_until_closed(fd, 2s);
  CHECK(in.find("HTTP/1.1 200") == 0);
  CHECK(in.ends_with("\r\n\r\n" + form));

  const std::string too_long = "POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n";
  CHECK(exchange(s.server.port(), too_long, 2s).find("HTTP/1.1 413") == 0);
}

TEST_CASE("bounded_http_server: with every handler busy and the queue full, one more request is told 503 at once") {
  PooledServer s(1);
  const std::string slow = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
  // One with the handler, then as many waiting as the table holds and one more, which is
  // told 503 once the server has read them all (in whatever order it reads them).
  std::vector<int> held{send_request(s.server.port(), slow)};
  REQUIRE(wait_until([&] { return s.gate.waiting == 1; }, 5s));
  for (std::size_t i = 0; i < s.server.max_connections() + 1; ++i) held.push_back(send_request(s.server.port(), slow));
  REQUIRE(wait_until([&] { return s.dropped("busy") == 1; }, 5s));
  // The queue is full while the handler waits: a new request is answered at once.
  const auto asked = std::chrono::steady_clock::now();
  const std::string busy = exchange(s.server.port(), slow, 2s);
  CHECK(busy.find("HTTP/1.1 503") == 0);
  CHECK(busy.find("Retry-After: 1\r\n") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - asked < 1s);
  // None of those waiting was evicted: a handled connection has left the table.
  CHECK(s.dropped("evicted") == 0);
  s.gate.release();
  std::size_t answered = 0;
  std::size_t told_busy = 0;
  for (const int fd : held) {
    const std::string in = read_until_closed(fd, 5s);
    answered += in.find("HTTP/1.1 200") == 0 ? 1 : 0;
    told_busy += in.find("HTTP/1.1 503") == 0 ? 1 : 0;
  }
  CHECK(answered == held.size() - 1);
  CHECK(told_busy == 1);
}
