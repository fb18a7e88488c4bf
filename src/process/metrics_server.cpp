// MetricsServer: /metrics, /healthz and /readyz on one thread that no client can hold.
//
// cpp-httplib's own server (0.11 in Debian 12) gives each connection a pool thread from
// accept to close, reads with select() and a per-read timeout only, and queues accepted
// sockets without bound: 16 connections sending a header byte a second held every thread
// (no probe answered), and idle connections queued by the thousand used up the process's
// descriptors (exec jobs failed with EMFILE). So here one thread does all socket I/O with
// poll(), non-blocking: a connection gets kHeaderDeadline from accept to send its whole
// request header and kResponseDeadline to take the response, one request each (no
// keep-alive); the table of connections is bounded and drops its oldest when full, and
// the descriptors the job path needs are never taken (connection_limits.hpp). httplib
// still parses and routes each complete request, from memory, through
// Server::process_request.

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "process/connection_limits.hpp"
#include "process/metrics.hpp"
#include "oncely/errors.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// From accept to the blank line ending the request header: far beyond what any client on
// a working network needs (a probe's request is one segment), short enough that a client
// trickling bytes holds its slot for moments only.
constexpr auto kHeaderDeadline = 2s;
// From the response being ready to its last byte sent (/metrics may be some 100 KiB).
constexpr auto kResponseDeadline = 5s;
constexpr std::size_t kMaxRequestHeader = 8192;  // as httplib's CPPHTTPLIB_HEADER_MAX_LENGTH
// Room for a flood of connection attempts (the kernel caps it at net.core.somaxconn): a
// probe's SYN dropped for want of it would be retried only a second later.
constexpr int kListenBacklog = 4096;
// After accept fails for want of descriptors, stop accepting for this long (the listening
// socket stays readable: polling it at once would spin).
constexpr auto kAcceptPause = 100ms;

constexpr auto kReadyWithin = 15s;

// A request already read, and the response httplib writes, in memory.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view request) : request_(request) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, request_.size() - position_);
    std::memcpy(ptr, request_.data() + position_, n);
    position_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    response_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string&, int&) const override {}
  void get_local_ip_and_port(std::string&, int&) const override {}
  // No socket: httplib must not select() on one (it refuses fds >= FD_SETSIZE anyway).
  socket_t socket() const override { return INVALID_SOCKET; }
  std::string take_response() { return std::move(response_); }

 private:
  std::string_view request_;
  std::size_t position_ = 0;
  std::string response_;
};

// httplib's routing and HTTP handling, without its sockets and threads.
class Router final : public httplib::Server {
 public:
  std::string respond(std::string_view request) {
    MemoryStream stream(request);
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, {});
    return stream.take_response();
  }
};

// Where the request header ends (just past the blank line), or npos.
std::size_t header_end(const std::string& in) {
  const std::size_t crlf = in.find("\r\n\r\n");
  if (crlf != std::string::npos) return crlf + 4;
  const std::size_t lf = in.find("\n\n");
  return lf == std::string::npos ? std::string::npos : lf + 2;
}

// Every descriptor of the process; -1 when not even the directory can be opened.
std::int64_t count_open_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  std::int64_t n = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // not the directory's own
}

std::int64_t soft_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return static_cast<std::int64_t>(limit.rlim_cur);
}

struct Connection {
  int fd = -1;
  Clock::time_point accepted;
  Clock::time_point deadline;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  bool writing = false;
};

}  // namespace

struct MetricsServer::Server {
  Router router;
  Metrics* metrics = nullptr;
  int listen_fd = -1;
  int wake_fd = -1;
  std::int64_t limit = 0;
  FdBudget budget;
  std::vector<Connection> connections;
  Clock::time_point accept_paused_until{};

  ~Server() {
    for (const Connection& c : connections) ::close(c.fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void run();
  void accept_some(Clock::time_point now);
  // Reads or writes what the socket allows; false: the connection is done (close it).
  bool read_some(Connection& c, Clock::time_point now);
  bool write_some(Connection& c);
  void drop(std::size_t index, const char* reason) {
    if (reason != nullptr) metrics->count_dropped_connection(reason);
    ::close(connections[index].fd);
    connections[index] = std::move(connections.back());
    connections.pop_back();
  }
};

void MetricsServer::Server::run() {
  std::vector<pollfd> fds;
  for (;;) {
    const Clock::time_point before = Clock::now();
    const bool accepting = before >= accept_paused_until;
    Clock::time_point wake_by = before + 1s;
    if (!accepting) wake_by = std::min(wake_by, accept_paused_until);
    fds.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
      wake_by = std::min(wake_by, c.deadline);
    }
    const auto timeout = std::chrono::ceil<std::chrono::milliseconds>(std::max(wake_by - before, Clock::duration{0}));
    if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // stopping
    const Clock::time_point now = Clock::now();
    // Back to front: dropping moves the last connection into the gap, whose fds entry
    // has then been handled already.
    for (std::size_t i = connections.size(); i-- > 0;) {
      Connection& c = connections[i];
      const short events = fds[i + 2].revents;
      bool keep = true;
      const char* reason = nullptr;
      if (events != 0) {
        keep = c.writing ? write_some(c) : read_some(c, now);
        if (!keep && !c.writing && c.in.size() >= kMaxRequestHeader) reason = "header_too_large";
      }
      if (keep && now >= c.deadline) {
        keep = false;
        reason = "deadline";
      }
      if (!keep) drop(i, reason);
    }
    if (accepting && fds[1].revents != 0) accept_some(now);
  }
}

void MetricsServer::Server::accept_some(Clock::time_point now) {
  // A few at a time: the table drops its oldest when full, and a probe accepted now must
  // still be there when its request is read on the next round.
  const std::size_t batch = std::max<std::size_t>(1, budget.max_connections / 4);
  // Counted once a batch (each count reads a directory), then kept up to date here; what
  // other threads open meanwhile is what the reserve is for.
  std::int64_t open_fds = count_open_fds();
  for (std::size_t n = 0; n < batch; ++n) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until = now + kAcceptPause;
        metrics->count_dropped_connection("no_descriptor");
      }
      return;  // EAGAIN: no more waiting; anything else concerns that one connection
    }
    if (open_fds >= 0) ++open_fds;
    switch (admit_connection(open_fds, limit, connections.size(), budget)) {
      case Admission::refuse:
        ::close(fd);
        if (open_fds >= 0) --open_fds;
        metrics->count_dropped_connection("fd_reserve");
        continue;
      case Admission::admit_evict_oldest: {
        const auto oldest = std::min_element(connections.begin(), connections.end(),
                                             [](const Connection& a, const Connection& b) { return a.accepted < b.accepted; });
        drop(static_cast<std::size_t>(oldest - connections.begin()), "evicted");
        if (open_fds >= 0) --open_fds;
        break;
      }
      case Admission::admit:
        break;
    }
    Connection c;
    c.fd = fd;
    c.accepted = now;
    c.deadline = now + kHeaderDeadline;
    connections.push_back(std::move(c));
  }
}

bool MetricsServer::Server::read_some(Connection& c, Clock::time_point now) {
  char buffer[4096];
  for (;;) {
    const std::size_t room = kMaxRequestHeader - c.in.size();
    if (room == 0) return false;  // no blank line within the limit
    const ssize_t n = ::recv(c.fd, buffer, std::min(room, sizeof buffer), 0);
    if (n == 0) return false;  // the client closed
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.in.append(buffer, static_cast<std::size_t>(n));
    const std::size_t end = header_end(c.in);
    if (end == std::string::npos) continue;
    // A body (these are GET endpoints) is not waited for: httplib sees only what came.
    c.out = router.respond(c.in);
    c.in.clear();
    c.writing = true;
    c.deadline = now + kResponseDeadline;
    return write_some(c);
  }
}

bool MetricsServer::Server::write_some(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<std::size_t>(n);
  }
  ::shutdown(c.fd, SHUT_WR);
  return false;  // all sent: done
}

MetricsServer::MetricsServer(const std::string& address, Metrics& metrics,
                             const std::atomic<std::int64_t>& last_db_contact_ms)
    : server_(std::make_unique<Server>()) {
  const std::size_t colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0) {
    try {
      std::size_t used = 0;
      port = std::stoi(address.substr(colon + 1), &used);
      if (used != address.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port < 0 || port > 65535) throw ConfigError("--metrics-addr", "expected HOST:PORT, got '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);

  Server& s = *server_;
  s.metrics = &metrics;
  s.limit = soft_open_file_limit();
  s.budget = fd_budget(s.limit);
  s.router.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  // Liveness, from this process's own state only: this thread answers (it shares nothing
  // with the jobs and their connections); how long ago the heartbeat last reached the
  // database is information, not a condition (that is /readyz).
  s.router.Get("/healthz", [&last_db_contact_ms](const httplib::Request&, httplib::Response& res) {
    const std::int64_t last = last_db_contact_ms.load();
    const std::string contact =
        last == 0 ? "never" : std::to_string((steady_ms() - last) / 1000) + " s ago";
    res.set_content("ok\nlast database contact: " + contact + "\n", "text/plain");
  });
  s.router.Get("/readyz", [&last_db_contact_ms](const httplib::Request&, httplib::Response& res) {
    const bool ready = steady_ms() - last_db_contact_ms.load() <
                       std::chrono::duration_cast<std::chrono::milliseconds>(kReadyWithin).count();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "database not reached in the last 15 s\n", "text/plain");
  });

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    throw Error("cannot listen on " + address + " for metrics: cannot resolve '" + host + "'");
  }
  int error = 0;
  for (const addrinfo* a = found; a != nullptr && s.listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      s.listen_fd = fd;
    } else {
      error = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (s.listen_fd < 0) throw Error("cannot listen on " + address + " for metrics: " + std::strerror(error));
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                            : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  s.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s.wake_fd < 0) throw Error(std::string("metrics: eventfd failed: ") + std::strerror(errno));
  thread_ = std::thread([&s] { s.run(); });
}

MetricsServer::~MetricsServer() {
  const std::uint64_t one = 1;
  if (::write(server_->wake_fd, &one, sizeof one) < 0) { /* a full eventfd wakes the poll too */ }
  if (thread_.joinable()) thread_.join();
}

std::int64_t MetricsServer::open_file_limit() const noexcept { return server_->limit; }
std::size_t MetricsServer::max_connections() const noexcept { return server_->budget.max_connections; }

}  // namespace oncely::detail
