// The exec handler's process management, the worker's side: bounded pipes for stdin,
// stdout and stderr, the shepherd's reports, timeouts and the SIGTERM-then-SIGKILL stop.
// The shepherd itself is shepherd_main.cpp, started by shepherd.cpp.
#include "handlers/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include "handlers/shepherd.hpp"
#include "handlers/shepherd_protocol.hpp"
#include "support/open_file_limit.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_errno(int error, const char* what) {
  throw std::system_error(error, std::generic_category(), what);
}

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read;
  Fd write;
};

// O_CLOEXEC from the start: other worker threads spawn children concurrently, and a pipe
// end inherited by someone else's child would keep our pipe open (no EOF, no EPIPE).
Pipe make_pipe() {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) throw_errno(errno, "pipe2");
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

// Only our ends are non-blocking; the child's stay blocking, as programs expect.
void set_nonblocking(const Fd& fd) {
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) throw_errno(errno, "fcntl(O_NONBLOCK)");
}

// Writing to a pipe whose reader is gone raises SIGPIPE in the writing thread, whose
// default action ends the whole process. Rather than ignore SIGPIPE process-wide (the
// embedding program may rely on its own disposition), the signal is blocked in this thread
// while the child runs, and one that our own write raised is consumed before unblocking.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
    sigset_t pending;
    sigemptyset(&pending);
    already_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;
  ~SigpipeBlock() {
    if (raised_ && !already_pending_) {
      const timespec no_wait{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &no_wait) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  void raised() noexcept { raised_ = true; }

 private:
  sigset_t pipe_{};
  sigset_t previous_{};
  bool already_pending_ = false;
  bool raised_ = false;
};

// Wakes the poll loop when the stop token is requested (from another thread).
struct WakeUp {
  int fd;
  void operator()() const noexcept {
    const std::uint64_t one = 1;
    static_cast<void>(::write(fd, &one, sizeof one));
  }
};

// Reads what `fd` has now (bounded, so a chatty child cannot starve the time limit);
// closes it at EOF or on an error. `keep`: where to append, keeping its last `keep_bytes`.
void drain(Fd& fd, std::string* keep, std::size_t keep_bytes) {
  std::array<char, 16384> buffer{};
  for (int round = 0; round < 16 && fd; ++round) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n > 0) {
      if (keep != nullptr) {
        keep->append(buffer.data(), static_cast<std::size_t>(n));
        if (keep->size() > keep_bytes) keep->erase(0, keep->size() - keep_bytes);
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    fd.reset();  // EOF or a read error: nothing more will come
  }
}

using shepherd::Report;

// Collects the shepherd's fixed-size reports from its pipe (non-blocking reads).
class ReportReader {
 public:
  /// Reads what is there; returns false at EOF (the shepherd has exited) or on an error.
  bool read_from(const Fd& fd) {
    for (;;) {
      const ssize_t n = ::read(fd.get(), buffer_.data() + filled_, buffer_.size() - filled_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      filled_ += static_cast<std::size_t>(n);
      while (filled_ >= sizeof(Report)) {
        Report report;
        std::memcpy(&report, buffer_.data(), sizeof report);
        std::memmove(buffer_.data(), buffer_.data() + sizeof report, filled_ - sizeof report);
        filled_ -= sizeof report;
        take(report);
      }
    }
  }

  pid_t program = 0;
  int exec_errno = 0;
  std::optional<int> status;  // the program's wait status, once it exited

 private:
  void take(const Report& report) {
    if (report.kind == shepherd::kStarted) program = report.value;
    if (report.kind == shepherd::kExecFailed) exec_errno = report.value;
    if (report.kind == shepherd::kExited) status = report.value;
  }

  std::array<char, 4 * sizeof(Report)> buffer_{};
  std::size_t filled_ = 0;
};

}  // namespace

int running_jobs() noexcept { return Shepherd::running(); }

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::string_view input, std::chrono::milliseconds limit, std::size_t tail_bytes,
                          const std::stop_token& stop) {
  if (argv.empty()) throw_errno(EINVAL, "run_process: empty argv");
  const auto give_up = Clock::now() + limit;

  Pipe in = make_pipe();
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe reports = make_pipe();
  set_nonblocking(in.write);
  set_nonblocking(out.read);
  set_nonblocking(err.read);
  set_nonblocking(reports.read);

  SigpipeBlock sigpipe;  // before the child exists: it may be gone before our first write
  Shepherd shepherd(argv, env, ShepherdFds{in.read.get(), out.write.get(), err.write.get(), reports.write.get()},
                    inherited_open_file_limit());
  in.read.reset();
  out.write.reset();
  err.write.reset();
  reports.write.reset();  // the shepherd holds the only write end: EOF when it has exited

  Fd wake;
  std::optional<std::stop_callback<WakeUp>> on_stop;
  if (stop.stop_possible()) {
    wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake) throw_errno(errno, "eventfd");
    on_stop.emplace(stop, WakeUp{wake.get()});
  }

  ProcessResult result;
  ReportReader report;
  enum class Asked { nothing, kill, terminate };
  Asked asked = Asked::nothing;
  std::optional<Clock::time_point> end_by;  // when the shepherd must have exited
  std::size_t written = 0;
  if (input.empty()) in.write.reset();
  while (reports.read) {
    const auto now = Clock::now();
    if (asked == Asked::nothing && !report.status) {
      if (stop.stop_requested()) {
        shepherd.request(SIGTERM);
        asked = Asked::terminate;
        end_by = now + kTerminateGrace + kEndBound;
      } else if (now >= give_up) {
        shepherd.request(SIGUSR1);
        asked = Asked::kill;
        end_by = now + kEndBound;
      }
    }
    if (report.status && !end_by) end_by = now + kEndBound;  // only leftovers to kill now
    if (end_by && now >= *end_by) {
      shepherd.force();
      break;
    }
    const auto until = end_by ? *end_by : give_up;
    const auto left = std::max(std::chrono::ceil<std::chrono::milliseconds>(until - now), std::chrono::milliseconds(1));

    std::array<pollfd, 5> fds{};
    nfds_t n = 0;
    int in_at = -1, out_at = -1, err_at = -1, report_at = -1, wake_at = -1;
    const auto watch = [&](const Fd& fd, short events, int& at) {
      if (!fd) return;
      at = static_cast<int>(n);
      fds[n++] = pollfd{fd.get(), events, 0};
    };
    watch(in.write, POLLOUT, in_at);
    watch(out.read, POLLIN, out_at);
    watch(err.read, POLLIN, err_at);
    watch(reports.read, POLLIN, report_at);
    if (asked == Asked::nothing && !report.status) watch(wake, POLLIN, wake_at);  // it stays readable
    const int ready = ::poll(fds.data(), n, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "poll");  // ~Shepherd ends the job and reaps
    }
    const auto fired = [&](int at) { return at >= 0 && fds[static_cast<std::size_t>(at)].revents != 0; };
    if (fired(in_at)) {
      while (in.write && written < input.size()) {
        const ssize_t w = ::write(in.write.get(), input.data() + written, input.size() - written);
        if (w > 0) {
          written += static_cast<std::size_t>(w);
        } else if (w < 0 && errno == EINTR) {
          continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          break;
        } else {
          if (errno == EPIPE) sigpipe.raised();
          in.write.reset();  // the child closed its stdin: it does not want the rest
        }
      }
      if (written >= input.size()) in.write.reset();  // EOF tells the child the input is complete
    }
    if (fired(out_at)) drain(out.read, nullptr, 0);
    if (fired(err_at)) drain(err.read, &result.stderr_tail, tail_bytes);
    if (fired(report_at) && !report.read_from(reports.read)) reports.read.reset();
    if (report.program > 0) shepherd.set_program(report.program);
  }
  // Every process of the job is gone (or was just killed): what they wrote is in the
  // pipes; take it without waiting for an EOF.
  drain(out.read, nullptr, 0);
  drain(err.read, &result.stderr_tail, tail_bytes);
  const int shepherd_status = shepherd.reap();
  if (report.exec_errno != 0) throw_errno(report.exec_errno, "execve");

  if (asked == Asked::kill) {
    result.end = ProcessResult::End::timed_out;
  } else if (asked == Asked::terminate) {
    result.end = ProcessResult::End::stopped;
  } else if (report.status && WIFSIGNALED(*report.status)) {
    result.end = ProcessResult::End::signaled;
    result.code = WTERMSIG(*report.status);
  } else if (report.status) {
    result.end = ProcessResult::End::exited;
    result.code = WIFEXITED(*report.status) ? WEXITSTATUS(*report.status) : -1;
  } else if (shepherd_status >= 0 && WIFSIGNALED(shepherd_status)) {
    // Someone killed the shepherd; the program died with it (its parent-death signal).
    result.end = ProcessResult::End::signaled;
    result.code = WTERMSIG(shepherd_status);
  } else {
    result.end = ProcessResult::End::exited;
    result.code = -1;  // the status was lost
  }
  return result;
}

}  // namespace oncely::detail
