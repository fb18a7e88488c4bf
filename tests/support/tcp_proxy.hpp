#pragma once
// TcpProxy: a TCP forwarder on 127.0.0.1 for tests that need a network partition. freeze()
// stops it forwarding in both directions and accepting, while every socket stays open:
// what a peer sends is acknowledged by the kernel and then goes nowhere, and nothing comes
// back, as behind a router that drops the traffic of established connections (unlike a
// closed socket, nothing tells either side). unfreeze() resumes; what was sent meanwhile
// is then delivered. One thread, poll(); header-only.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace oncely::test {

class TcpProxy {
 public:
  /// Forwards connections made to port() to `host`:`port` (an IPv4 address or a name).
  TcpProxy(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
      throw std::runtime_error("TcpProxy: cannot resolve " + host);
    }
    std::memcpy(&target_, found->ai_addr, sizeof target_);
    ::freeaddrinfo(found);

    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int yes = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 || ::listen(listener_, 128) != 0) {
      throw std::runtime_error("TcpProxy: cannot listen");
    }
    socklen_t length = sizeof local;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&local), &length);
    port_ = ntohs(local.sin_port);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("TcpProxy: pipe2 failed");
    thread_ = std::thread([this] { run(); });
  }
  ~TcpProxy() {
    stop_ = true;
    poke();
    thread_.join();
    for (Link& link : links_) link.close();
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  [[nodiscard]] int port() const noexcept { return port_; }

  /// Stops forwarding and accepting; nothing gets through once it has returned.
  void freeze() {
    {
      std::lock_guard lock(mutex_);
      frozen_ = true;
    }
    poke();
  }
  void unfreeze() {
    {
      std::lock_guard lock(mutex_);
      frozen_ = false;
    }
    poke();
  }
  /// Connections accepted so far (frozen ones queue in the listen backlog, uncounted).
  [[nodiscard]] int accepted() const noexcept { return accepted_.load(); }

 private:
  // One client connection and its upstream, with what is read but not yet written each way.
  struct Link {
    int client = -1;
    int upstream = -1;
    std::string to_upstream;
    std::string to_client;
    bool connected = false;  // the upstream connect() has completed
    void close() {
      if (client >= 0) ::close(client);
      if (upstream >= 0) ::close(upstream);
      client = upstream = -1;
    }
  };

  void poke() {
    const char byte = 1;
    static_cast<void>(::write(wake_[1], &byte, 1));
  }

  // Reads what `from` has into `buffer` (bounded); false at EOF or an error.
  static bool pull(int from, std::string& buffer) {
    char chunk[65536];
    const ssize_t n = ::read(from, chunk, sizeof chunk);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  }
  // Writes what it can of `buffer` to `to`; false on an error.
  static bool push(int to, std::string& buffer) {
    while (!buffer.empty()) {
      const ssize_t n = ::send(to, buffer.data(), buffer.size(), MSG_NOSIGNAL);
      if (n > 0) {
        buffer.erase(0, static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return n < 0 && errno == EAGAIN;
      }
    }
    return true;
  }

  void accept_one() {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) return;
    const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int rc = ::connect(upstream, reinterpret_cast<const sockaddr*>(&target_), sizeof target_);
    if (rc != 0 && errno != EINPROGRESS) {
      ::close(client);
      ::close(upstream);
      return;
    }
    links_.push_back(Link{client, upstream, {}, {}, rc == 0});
    ++accepted_;
  }

  void run() {
    while (!stop_) {
      bool frozen = false;
      {
        std::lock_guard lock(mutex_);
        frozen = frozen_;
      }
      // Frozen: only the wake-up pipe (a socket whose peer reset would report POLLHUP
      // without end). Else two entries per link, in links_ order, after the listener.
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
      if (!frozen) {
        fds.push_back({listener_, POLLIN, 0});
        for (const Link& link : links_) {
          const short to_client = link.to_client.empty() ? POLLIN : POLLIN | POLLOUT;
          const short to_upstream = !link.connected ? POLLOUT : link.to_upstream.empty() ? POLLIN : POLLIN | POLLOUT;
          fds.push_back({link.client, to_client, 0});
          fds.push_back({link.upstream, to_upstream, 0});
        }
      }
      if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) {
        char drain[64];
        while (::read(wake_[0], drain, sizeof drain) > 0) {
        }
      }
      // Bytes move only under the lock and while not frozen: once freeze() has returned,
      // nothing more gets through.
      std::lock_guard lock(mutex_);
      if (frozen || frozen_) continue;
      std::size_t at = 2;
      for (auto it = links_.begin(); it != links_.end() && at + 1 < fds.size(); at += 2) {
        Link& link = *it;
        const short client_events = fds[at].revents;
        const short upstream_events = fds[at + 1].revents;
        bool ok = true;
        if (!link.connected && upstream_events != 0) {
          int error = 0;
          socklen_t length = sizeof error;
          ::getsockopt(link.upstream, SOL_SOCKET, SO_ERROR, &error, &length);
          ok = error == 0;
          link.connected = ok;
        }
        if (ok && link.connected) {
          if (client_events & (POLLIN | POLLHUP | POLLERR)) ok = pull(link.client, link.to_upstream);
          if (ok && (upstream_events & (POLLIN | POLLHUP | POLLERR))) ok = pull(link.upstream, link.to_client);
          if (ok) ok = push(link.upstream, link.to_upstream) && push(link.client, link.to_client);
        }
        if (ok) {
          ++it;
          continue;
        }
        // One side closed or failed: pass on what is left, then close both.
        push(link.client, link.to_client);
        push(link.upstream, link.to_upstream);
        link.close();
        it = links_.erase(it);
      }
      if (fds[1].revents != 0) accept_one();
    }
  }

  sockaddr_in target_{};
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::list<Link> links_;  // the forwarding thread's alone
  std::mutex mutex_;       // held while bytes move
  bool frozen_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace oncely::test
