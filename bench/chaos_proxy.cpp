// chaos_proxy: a userspace TCP forwarder on 127.0.0.1 for bench/chaos.sh and for latency
// measurements, where the kernel has no netem.
//
//   chaos_proxy --target 127.0.0.1:5432 [--listen 0] [--port-file FILE] [--delay-ms N]
//
// - Forwards every connection made to its listening port (--listen, 0: any free port; the
//   port is printed on stdout and written to --port-file) to --target.
// - SIGUSR1: partition. It stops forwarding in both directions and stops accepting, while
//   every socket stays open: what a peer sends is acknowledged by the kernel and then goes
//   nowhere, nothing comes back, and no side is told (as behind a router that drops the
//   traffic of established connections). SIGUSR2: heal; what was sent meanwhile is then
//   delivered. SIGTERM/SIGINT: exit.
// - --delay-ms N holds every byte N ms (decimals allowed: 0.5) in each direction before
//   passing it on (a round trip through the proxy gets 2N ms more: --delay-ms 0.5 adds 1 ms
//   of round trip), in order, without limiting throughput.
//
// One thread, poll(); no dependencies beyond POSIX.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const auto byte = static_cast<char>(sig);
  static_cast<void>(::write(g_signal_pipe[1], &byte, 1));
}

// Bytes read from one side, each chunk due for the other side at `due`.
struct Chunk {
  Clock::time_point due;
  std::string bytes;
};

struct Direction {
  std::deque<Chunk> queue;
  [[nodiscard]] bool has_due(Clock::time_point now) const { return !queue.empty() && queue.front().due <= now; }
};

struct Link {
  int client = -1;
  int upstream = -1;
  bool connected = false;  // the upstream connect() has completed
  bool client_eof = false;
  bool upstream_eof = false;
  Direction up;    // client -> upstream
  Direction down;  // upstream -> client
  void close() {
    if (client >= 0) ::close(client);
    if (upstream >= 0) ::close(upstream);
    client = upstream = -1;
  }
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "chaos_proxy: %s\n", message.c_str());
  std::exit(2);
}

// Reads what `from` has into `into`, due after `delay`; false at EOF or on an error.
bool pull(int from, Direction& into, std::chrono::microseconds delay) {
  char chunk[65536];
  const ssize_t n = ::read(from, chunk, sizeof chunk);
  if (n > 0) {
    into.queue.push_back({Clock::now() + delay, std::string(chunk, static_cast<std::size_t>(n))});
    return true;
  }
  return n < 0 && (errno == EAGAIN || errno == EINTR);
}

// Writes what is due of `from` to `to`; false on an error.
bool push(int to, Direction& from, Clock::time_point now) {
  while (from.has_due(now)) {
    std::string& bytes = from.queue.front().bytes;
    const ssize_t n = ::send(to, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.erase(0, static_cast<std::size_t>(n));
      if (bytes.empty()) from.queue.pop_front();
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && errno == EAGAIN;
    }
  }
  return true;
}

sockaddr_in resolve(const std::string& target) {
  const auto colon = target.rfind(':');
  if (colon == std::string::npos) die("--target must be HOST:PORT (got '" + target + "')");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(target.substr(0, colon).c_str(), target.substr(colon + 1).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    die("cannot resolve " + target);
  }
  sockaddr_in out{};
  std::memcpy(&out, found->ai_addr, sizeof out);
  ::freeaddrinfo(found);
  return out;
}

double number(std::string_view flag, const char* value) {
  char* end = nullptr;
  const double n = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(n >= 0) || n > 3600e3) die(std::string(flag) + " needs a number from 0 up");
  return n;
}

void set_nodelay(int fd) {
  const int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
}

}  // namespace

int main(int argc, char** argv) {
  std::string target;
  std::string port_file;
  long listen_port = 0;
  std::chrono::microseconds delay{0};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) die("usage: chaos_proxy --target HOST:PORT [--listen PORT] [--port-file FILE] [--delay-ms N]");
    if (arg == "--target")
      target = argv[++i];
    else if (arg == "--listen")
      listen_port = static_cast<long>(number(arg, argv[++i]));
    else if (arg == "--port-file")
      port_file = argv[++i];
    else if (arg == "--delay-ms")
      delay = std::chrono::microseconds(static_cast<long>(number(arg, argv[++i]) * 1000));
    else
      die("unknown option " + std::string(arg));
  }
  if (target.empty()) die("--target HOST:PORT is required");
  const sockaddr_in upstream_address = resolve(target);

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) die("pipe2 failed");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT}) ::sigaction(sig, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int yes = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  local.sin_port = htons(static_cast<std::uint16_t>(listen_port));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 || ::listen(listener, 512) != 0) {
    die("cannot listen on 127.0.0.1:" + std::to_string(listen_port) + ": " + std::strerror(errno));
  }
  socklen_t length = sizeof local;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&local), &length);
  const int port = ntohs(local.sin_port);
  if (!port_file.empty()) {
    std::ofstream(port_file + ".tmp") << port << "\n";
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());  // whole, or not there
  }
  std::printf("%d\n", port);
  std::fflush(stdout);

  std::list<Link> links;
  bool partitioned = false;
  while (true) {
    const auto now = Clock::now();
    // Partitioned: only the signal pipe (a socket whose peer reset would report POLLHUP
    // without end). Else the listener, then two entries per link, in links order.
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    auto timeout = std::chrono::microseconds(1000000);
    if (!partitioned) {
      fds.push_back({listener, POLLIN, 0});
      for (const Link& link : links) {
        const short to_client = link.down.has_due(now) ? POLLOUT : 0;
        const short to_upstream = !link.connected ? POLLOUT : link.up.has_due(now) ? POLLOUT : 0;
        fds.push_back({link.client, static_cast<short>((link.client_eof ? 0 : POLLIN) | to_client), 0});
        fds.push_back({link.upstream, static_cast<short>((link.upstream_eof ? 0 : POLLIN) | to_upstream), 0});
        // Wake up when the next held chunk falls due.
        for (const Direction* d : {&link.up, &link.down}) {
          if (d->queue.empty() || d->has_due(now)) continue;
          timeout = std::min(timeout, std::chrono::ceil<std::chrono::microseconds>(d->queue.front().due - now));
        }
      }
    }
    // ppoll: a sub-millisecond delay is kept to the microsecond, not rounded up to poll()'s ms.
    const timespec wait{static_cast<time_t>(timeout.count() / 1000000),
                        static_cast<long>(timeout.count() % 1000000) * 1000};
    if (::ppoll(fds.data(), fds.size(), &wait, nullptr) < 0 && errno != EINTR) die("poll failed");
    if (fds[0].revents != 0) {
      char sig = 0;
      while (::read(g_signal_pipe[0], &sig, 1) > 0) {
        if (sig == SIGUSR1)
          partitioned = true;
        else if (sig == SIGUSR2)
          partitioned = false;
        else {
          for (Link& link : links) link.close();
          return 0;
        }
      }
      std::fprintf(stderr, "chaos_proxy: %s (%zu connections)\n", partitioned ? "partitioned" : "forwarding",
                   links.size());
      continue;  // the poll set was built for the old state
    }
    if (partitioned) continue;
    const auto after = Clock::now();
    std::size_t at = 2;
    for (auto it = links.begin(); it != links.end() && at + 1 < fds.size(); at += 2) {
      Link& link = *it;
      const short client_events = fds[at].revents;
      const short upstream_events = fds[at + 1].revents;
      bool ok = true;
      if (!link.connected && upstream_events != 0) {
        int error = 0;
        socklen_t size = sizeof error;
        ::getsockopt(link.upstream, SOL_SOCKET, SO_ERROR, &error, &size);
        ok = error == 0;
        link.connected = ok;
      }
      if (ok && link.connected) {
        if (!link.client_eof && (client_events & (POLLIN | POLLHUP | POLLERR))) {
          link.client_eof = !pull(link.client, link.up, delay);
        }
        if (!link.upstream_eof && (upstream_events & (POLLIN | POLLHUP | POLLERR))) {
          link.upstream_eof = !pull(link.upstream, link.down, delay);
        }
        ok = push(link.upstream, link.up, after) && push(link.client, link.down, after);
        // One side closed: once what it sent has been passed on (after the delay), close both.
        if ((link.client_eof && link.up.queue.empty()) || (link.upstream_eof && link.down.queue.empty())) ok = false;
      }
      if (ok) {
        ++it;
        continue;
      }
      push(link.client, link.down, Clock::time_point::max());
      push(link.upstream, link.up, Clock::time_point::max());
      link.close();
      it = links.erase(it);
    }
    if (fds[1].revents != 0) {
      const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client >= 0) {
        const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        const int rc =
            ::connect(upstream, reinterpret_cast<const sockaddr*>(&upstream_address), sizeof upstream_address);
        if (rc != 0 && errno != EINPROGRESS) {
          ::close(client);
          ::close(upstream);
        } else {
          set_nodelay(client);
          set_nodelay(upstream);
          links.push_back(Link{client, upstream, rc == 0, false, false, {}, {}});
        }
      }
    }
  }
}
