// BoundedHttpServer (bounded_http_server.hpp): why it exists and what it promises are in
// the header; this file is its I/O. The decisions are pure functions elsewhere: how many
// connections and descriptors (connection_limits.hpp), where a request ends
// (http_framing.hpp).

#include "support/bounded_http_server.hpp"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "oncely/errors.hpp"
#include "support/connection_limits.hpp"
#include "support/http_framing.hpp"
#include "support/memory_router.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// From accept to the end of the request: far beyond what any client on a working network
// needs (a probe's request is one segment, a console form a few), short enough that a
// client trickling bytes holds its slot for moments only.
constexpr auto kRequestDeadline = 2s;
// From the response being ready to its last byte sent (/metrics may be some 100 KiB).
constexpr auto kResponseDeadline = 5s;
constexpr std::size_t kMaxRequestHeader = 8192;  // as httplib's CPPHTTPLIB_HEADER_MAX_LENGTH
// Room for a flood of connection attempts (the kernel caps it at net.core.somaxconn): a
// probe's SYN dropped for want of it would be retried only a second later. It bounds the
// connections waiting for their first byte too (kDeferAcceptSeconds); beyond it the kernel
// hands new ones over at once (SYN cookies), and the table deals with them.
constexpr int kListenBacklog = 4096;
// A connection that has sent nothing is not handed to accept() (TCP_DEFER_ACCEPT): it waits
// in the kernel, as a request socket holding no descriptor, until its first byte or for
// about a minute (the kernel resends its SYN-ACK at 63 s, and the client's answer hands it
// over, to meet the 2 s deadline). Why: idle connections otherwise go through the accept
// queue, first in first out, ahead of the probes behind them. 2,000 of them, evicted and
// back within the second, kept a /healthz probe behind 570 to 1,530 others while this
// thread accepted and evicted them 32 a round, 0.25 to 0.8 ms each on two busy cores: up to
// 720 ms, and past the probes' 1 s now and then (metrics_starvation_pgtest.cpp). Connections
// that send bytes still share that queue with probes, and an idle flood that lasts is
// handed over all at once, once a minute.
constexpr int kDeferAcceptSeconds = 60;
// After accept fails for want of descriptors, stop accepting for this long (the listening
// socket stays readable: polling it at once would spin).
constexpr auto kAcceptPause = 100ms;

constexpr std::string_view kBusy =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
    "Retry-After: 1\r\nConnection: close\r\n\r\nbusy\n";

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

enum class Stage {
  reading,   // in the table, its request coming
  handling,  // its request with a handler thread (out of the table: it cannot be evicted)
  writing,   // in the table, its response going
};

struct Connection {
  std::uint64_t id = 0;
  int fd = -1;
  Stage stage = Stage::reading;
  Clock::time_point accepted;
  Clock::time_point deadline;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  bool too_large = false;  // closed for a request header past kMaxRequestHeader
};

struct Work {
  std::uint64_t id;
  std::string request;
};

struct Answer {
  std::uint64_t id;
  std::string response;
};

}  // namespace

struct BoundedHttpServer::Impl {
  MemoryRouter router;
  BoundedHttpOptions options;
  int listen_fd = -1;
  int wake_fd = -1;  // stop() and the handler threads' answers
  int port = 0;
  std::int64_t limit = 0;
  FdBudget budget;
  std::atomic<bool> stopping{false};

  // The I/O thread's own.
  std::vector<Connection> connections;
  std::size_t handling = 0;  // connections at Stage::handling
  std::uint64_t next_id = 1;
  Clock::time_point accept_paused_until{};

  // Shared with the handler threads.
  std::mutex mutex;
  std::condition_variable work_ready;
  std::deque<Work> queued;
  std::vector<Answer> answered;
  bool handlers_stopping = false;

  ~Impl() {
    for (const Connection& c : connections) ::close(c.fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void serve();
  void handle_requests();
  void take_answers(Clock::time_point now);
  void accept_some(Clock::time_point now);
  // Reads or writes what the socket allows; false: the connection is done (close it).
  bool read_some(Connection& c, Clock::time_point now);
  bool write_some(Connection& c);
  void respond_later(Connection& c, std::string request);
  void drop(std::size_t index, const char* reason) {
    if (reason != nullptr && options.on_dropped) options.on_dropped(reason);
    if (connections[index].stage == Stage::handling) --handling;
    ::close(connections[index].fd);
    connections[index] = std::move(connections.back());
    connections.pop_back();
  }
  void wake() noexcept {
    const std::uint64_t one = 1;
    if (::write(wake_fd, &one, sizeof one) < 0) { /* a full eventfd wakes the poll too */
    }
  }
};

void BoundedHttpServer::Impl::serve() {
  std::vector<pollfd> fds;
  while (!stopping) {
    const Clock::time_point before = Clock::now();
    const bool accepting = before >= accept_paused_until;
    Clock::time_point wake_by = before + 1s;
    if (!accepting) wake_by = std::min(wake_by, accept_paused_until);
    fds.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
    for (const Connection& c : connections) {
      // A connection being handled is not polled (-1): nothing is read from it meanwhile.
      const bool handled = c.stage == Stage::handling;
      fds.push_back({handled ? -1 : c.fd, static_cast<short>(c.stage == Stage::writing ? POLLOUT : POLLIN), 0});
      if (!handled) wake_by = std::min(wake_by, c.deadline);
    }
    const auto timeout = std::chrono::ceil<std::chrono::milliseconds>(std::max(wake_by - before, Clock::duration{0}));
    if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) < 0 && errno != EINTR) return;
    if (stopping) return;
    const Clock::time_point now = Clock::now();
    // Back to front: dropping moves the last connection into the gap, whose fds entry
    // has then been handled already.
    for (std::size_t i = connections.size(); i-- > 0;) {
      Connection& c = connections[i];
      if (c.stage == Stage::handling) continue;
      const short events = fds[i + 2].revents;
      bool keep = true;
      const char* reason = nullptr;
      if (events != 0) {
        keep = c.stage == Stage::writing ? write_some(c) : read_some(c, now);
        if (!keep && c.too_large) reason = "header_too_large";
      }
      if (keep && c.stage != Stage::handling && now >= c.deadline) {
        keep = false;
        reason = "deadline";
      }
      if (!keep) drop(i, reason);
    }
    if (fds[0].revents != 0) take_answers(now);
    if (accepting && fds[1].revents != 0) accept_some(now);
  }
}

void BoundedHttpServer::Impl::take_answers(Clock::time_point now) {
  std::uint64_t count = 0;
  if (::read(wake_fd, &count, sizeof count) < 0) { /* EAGAIN: someone else's wake-up */
  }
  std::vector<Answer> answers;
  {
    const std::lock_guard lock(mutex);
    answers.swap(answered);
  }
  for (Answer& a : answers) {
    const auto it =
        std::find_if(connections.begin(), connections.end(), [&](const Connection& c) { return c.id == a.id; });
    if (it == connections.end()) continue;
    it->out = std::move(a.response);
    it->stage = Stage::writing;
    it->deadline = now + kResponseDeadline;
    --handling;
    if (!write_some(*it)) drop(static_cast<std::size_t>(it - connections.begin()), nullptr);
  }
}

void BoundedHttpServer::Impl::accept_some(Clock::time_point now) {
  // A few at a time: the table drops its oldest when full, and a connection accepted now
  // whose request is not whole yet must still be there when the rest is read next round.
  // (A request already whole at accept, as a probe's is, is answered here and then.)
  const std::size_t batch = std::max<std::size_t>(1, budget.max_connections / 4);
  // Counted once a batch (each count reads a directory), then kept up to date here; what
  // other threads open meanwhile is what the reserve is for.
  std::int64_t open_fds = count_open_fds();
  for (std::size_t n = 0; n < batch; ++n) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until = now + kAcceptPause;
        if (options.on_dropped) options.on_dropped("no_descriptor");
      }
      return;  // EAGAIN: no more waiting; anything else concerns that one connection
    }
    if (open_fds >= 0) ++open_fds;
    // The table: connections a client holds; those with a handler are bounded apart.
    switch (admit_connection(open_fds, limit, connections.size() - handling, budget)) {
      case Admission::refuse:
        ::close(fd);
        if (open_fds >= 0) --open_fds;
        if (options.on_dropped) options.on_dropped("fd_reserve");
        continue;
      case Admission::admit_evict_oldest: {
        auto oldest = connections.end();
        for (auto it = connections.begin(); it != connections.end(); ++it) {
          if (it->stage != Stage::handling && (oldest == connections.end() || it->accepted < oldest->accepted))
            oldest = it;
        }
        if (oldest != connections.end()) {  // always, as the table is full
          drop(static_cast<std::size_t>(oldest - connections.begin()), "evicted");
          if (open_fds >= 0) --open_fds;
        }
        break;
      }
      case Admission::admit: break;
    }
    Connection c;
    c.id = next_id++;
    c.fd = fd;
    c.accepted = now;
    c.deadline = now + kRequestDeadline;
    connections.push_back(std::move(c));
    // Its first bytes are there (kDeferAcceptSeconds): no round through poll() for them.
    Connection& added = connections.back();
    if (!read_some(added, now)) {
      drop(connections.size() - 1, added.too_large ? "header_too_large" : nullptr);
      if (open_fds >= 0) --open_fds;
    }
  }
}

bool BoundedHttpServer::Impl::read_some(Connection& c, Clock::time_point now) {
  const std::size_t most = kMaxRequestHeader + options.max_body;
  char buffer[4096];
  for (;;) {
    const std::size_t room = most - c.in.size();
    if (room == 0) return false;  // cannot happen: a request ends within the limits
    const ssize_t n = ::recv(c.fd, buffer, std::min(room, sizeof buffer), 0);
    if (n == 0) return false;  // the client closed
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.in.append(buffer, static_cast<std::size_t>(n));
    const RequestExtent extent = request_extent(c.in, kMaxRequestHeader, options.max_body);
    if (extent.kind == RequestExtent::Kind::header_too_large) {
      c.too_large = true;
      return false;
    }
    if (extent.kind == RequestExtent::Kind::incomplete) continue;
    c.in.resize(extent.size);  // what follows the request is never read
    std::string request = std::move(c.in);
    c.in.clear();
    if (options.handler_threads > 0) {
      respond_later(c, std::move(request));
      return true;
    }
    c.out = router.respond(request);
    c.stage = Stage::writing;
    c.deadline = now + kResponseDeadline;
    return write_some(c);
  }
}

void BoundedHttpServer::Impl::respond_later(Connection& c, std::string request) {
  {
    const std::lock_guard lock(mutex);
    if (queued.size() < budget.max_connections) {
      queued.push_back(Work{c.id, std::move(request)});
      c.stage = Stage::handling;
      ++handling;
    }
  }
  if (c.stage == Stage::handling) {
    work_ready.notify_one();
    return;
  }
  // Every handler busy and as many requests waiting as the table holds: say so now.
  if (options.on_dropped) options.on_dropped("busy");
  c.out = std::string(kBusy);
  c.stage = Stage::writing;
  c.deadline = Clock::now() + kResponseDeadline;
}

bool BoundedHttpServer::Impl::write_some(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<std::size_t>(n);
  }
  ::shutdown(c.fd, SHUT_WR);
  return false;  // all sent: done
}

void BoundedHttpServer::Impl::handle_requests() {
  for (;;) {
    Work work;
    {
      std::unique_lock lock(mutex);
      work_ready.wait(lock, [&] { return handlers_stopping || !queued.empty(); });
      if (handlers_stopping) return;
      work = std::move(queued.front());
      queued.pop_front();
    }
    std::string response = router.respond(work.request);
    {
      const std::lock_guard lock(mutex);
      answered.push_back(Answer{work.id, std::move(response)});
    }
    wake();
  }
}

BoundedHttpServer::BoundedHttpServer(const std::string& host, int port, BoundedHttpOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  s.limit = soft_open_file_limit();
  s.budget = fd_budget(s.limit);
  s.router.set_payload_max_length(s.options.max_body);
  const std::string address =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    throw Error("cannot listen on " + address + " for " + s.options.purpose + ": cannot resolve '" + host + "'");
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
    ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &kDeferAcceptSeconds, sizeof kDeferAcceptSeconds);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      s.listen_fd = fd;
    } else {
      error = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (s.listen_fd < 0) {
    throw Error("cannot listen on " + address + " for " + s.options.purpose + ": " + std::strerror(error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);
  s.port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                             : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  s.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s.wake_fd < 0) throw Error(s.options.purpose + ": eventfd failed: " + std::strerror(errno));
}

BoundedHttpServer::~BoundedHttpServer() = default;

httplib::Server& BoundedHttpServer::routes() noexcept { return impl_->router; }

void BoundedHttpServer::run() {
  Impl& s = *impl_;
  std::vector<std::thread> handlers;
  // Stops and joins the handler threads however serve() ends; a request being handled
  // finishes (its handler's own limits bound it), the queued ones are dropped.
  struct JoinHandlers {
    Impl& s;
    std::vector<std::thread>& threads;
    ~JoinHandlers() {
      {
        const std::lock_guard lock(s.mutex);
        s.handlers_stopping = true;
        s.queued.clear();
      }
      s.work_ready.notify_all();
      for (std::thread& t : threads) t.join();
    }
  } join{s, handlers};
  for (std::size_t i = 0; i < s.options.handler_threads; ++i) handlers.emplace_back([&s] { s.handle_requests(); });
  s.serve();
}

void BoundedHttpServer::stop() noexcept {
  impl_->stopping = true;
  impl_->wake();
}

int BoundedHttpServer::port() const noexcept { return impl_->port; }
std::int64_t BoundedHttpServer::open_file_limit() const noexcept { return impl_->limit; }
std::size_t BoundedHttpServer::max_connections() const noexcept { return impl_->budget.max_connections; }

}  // namespace oncely::detail
