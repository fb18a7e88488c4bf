#pragma once
// Hostile HTTP clients for tests of the metrics endpoint, and a probe with a deadline.
// ConnectionFlood keeps `count` connections to 127.0.0.1:port open on one thread (poll()):
// idle ones that never send a byte, or slow-loris ones that send one byte of a request
// header that never ends, per connection per tick. A connection the server closes is
// opened again at the next tick, as an attacker would. get_with_deadline() is a plain
// HTTP/1.1 GET that gives up at its deadline. Header-only.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace oncely::test {

/// A TCP port on 127.0.0.1 that was free a moment ago (for a child's --metrics-addr).
inline int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    throw std::runtime_error("free_local_port: bind failed");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

inline int connect_local_nonblocking(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct HttpAnswer {
  int status = 0;
  std::string body;
  std::chrono::milliseconds elapsed{};
};

/// GET `path` from 127.0.0.1:`port`; nullopt when no complete response came within
/// `deadline` (connecting included).
inline std::optional<HttpAnswer> get_with_deadline(int port, const std::string& path,
                                                   std::chrono::milliseconds deadline) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto give_up = start + deadline;
  const int fd = connect_local_nonblocking(port);
  if (fd < 0) return std::nullopt;
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::size_t sent = 0;
  std::string in;
  std::optional<HttpAnswer> answer;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, static_cast<short>(sent < request.size() ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    if (sent < request.size()) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) break;
      if (n > 0) sent += static_cast<std::size_t>(n);
      continue;
    }
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) {  // the server closed: the response is complete (Connection: close)
      const std::size_t end = in.find("\r\n\r\n");
      if (in.rfind("HTTP/1.", 0) == 0 && end != std::string::npos && in.size() > 12) {
        answer = HttpAnswer{std::stoi(in.substr(9, 3)), in.substr(end + 4),
                            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)};
      }
      break;
    }
    in.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

class ConnectionFlood {
 public:
  enum class Mode { idle, slow_loris };

  ConnectionFlood(int port, std::size_t count, Mode mode, std::chrono::milliseconds tick = std::chrono::seconds(1))
      : port_(port), mode_(mode), tick_(tick), connections_(count) {
    thread_ = std::thread([this] { run(); });
  }
  ~ConnectionFlood() {
    stop_ = true;
    thread_.join();
    for (const Connection& c : connections_) {
      if (c.fd >= 0) ::close(c.fd);
    }
  }
  ConnectionFlood(const ConnectionFlood&) = delete;
  ConnectionFlood& operator=(const ConnectionFlood&) = delete;

  /// Connections established so far (reconnections included), and established now.
  [[nodiscard]] std::size_t connected_total() const { return connected_total_.load(); }
  [[nodiscard]] std::size_t open_now() const { return open_now_.load(); }

 private:
  struct Connection {
    int fd = -1;
    bool established = false;
    std::size_t sent = 0;  // bytes of the endless header sent
  };

  // A header that never ends: a request line, then one header line that goes on for ever.
  static char byte_at(std::size_t i) {
    static const std::string start = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    return i < start.size() ? start[i] : 'a';
  }

  void close_connection(Connection& c) {
    if (c.fd >= 0) ::close(c.fd);
    c = Connection{};
  }

  void run() {
    using Clock = std::chrono::steady_clock;
    auto next_tick = Clock::now();
    std::vector<pollfd> fds(connections_.size());
    while (!stop_) {
      if (Clock::now() >= next_tick) {
        next_tick += tick_;
        for (Connection& c : connections_) {
          if (c.fd < 0) {
            c.fd = connect_local_nonblocking(port_);
          } else if (c.established && mode_ == Mode::slow_loris) {
            const char b = byte_at(c.sent);
            if (::send(c.fd, &b, 1, MSG_NOSIGNAL) == 1) ++c.sent;
          }
        }
      }
      for (std::size_t i = 0; i < connections_.size(); ++i) {
        const Connection& c = connections_[i];
        fds[i] = {c.fd, static_cast<short>(c.established ? POLLIN | POLLRDHUP : POLLOUT), 0};
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now());
      ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long>(wait.count(), 0, 100)));
      std::size_t open = 0;
      for (std::size_t i = 0; i < connections_.size(); ++i) {
        Connection& c = connections_[i];
        const short events = fds[i].revents;
        if (c.fd >= 0 && events != 0) {
          if (!c.established) {
            int error = 0;
            socklen_t length = sizeof error;
            ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length);
            if (error != 0 || (events & (POLLERR | POLLHUP)) != 0) {
              close_connection(c);
            } else {
              c.established = true;
              connected_total_.fetch_add(1);
            }
          } else {
            // Anything from the server (a response, its close): this one is done.
            close_connection(c);
          }
        }
        if (c.established) ++open;
      }
      open_now_ = open;
    }
  }

  const int port_;
  const Mode mode_;
  const std::chrono::milliseconds tick_;
  std::vector<Connection> connections_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> connected_total_{0};
  std::atomic<std::size_t> open_now_{0};
  std::thread thread_;
};

}  // namespace oncely::test
