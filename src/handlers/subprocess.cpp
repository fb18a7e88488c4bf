// The exec handler's process management: a shepherd process per job (PDEATHSIG, child
// subreaper), bounded pipes for stdout/stderr, timeouts and the SIGTERM-then-SIGKILL stop.
// Over 400 lines because each of those is a system-call sequence that must be read with
// the others: which process holds which descriptor, and who kills whom when.
#include "handlers/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include "process/open_file_limit.hpp"

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

// ---------------------------------------------------------------------------------------
// The shepherd and the program, after fork. A child of a multi-threaded process may only
// make async-signal-safe calls until it execs (another thread may have held the allocator's
// lock at the fork): so no allocation, no C++ library, no exceptions below, only system
// calls on memory prepared before the fork.

// What the child processes need, prepared by the parent before the fork.
struct Launch {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int in_fd = -1;      // the program's stdin (read end)
  int out_fd = -1;     // its stdout (write end)
  int err_fd = -1;     // its stderr (write end)
  int report_fd = -1;  // the shepherd's reports to the parent (write end)
  pid_t parent = 0;    // the worker process
  std::uint64_t nofile = 0;  // the program's soft RLIMIT_NOFILE; 0: the worker's
};

// The shepherd's reports on its pipe to the parent, one fixed-size record each (smaller
// than PIPE_BUF, so never interleaved or split).
struct Report {
  std::int32_t kind = 0;
  std::int32_t value = 0;
};
constexpr std::int32_t kStarted = 1;     // value: the program's pid (and process group)
constexpr std::int32_t kExecFailed = 2;  // value: errno of what failed (fork, execve)
constexpr std::int32_t kExited = 3;      // value: the program's wait status

// The fds the shepherd arranges for the program: 0, 1, 2, and the report pipe.
constexpr int kReportFd = 3;
// Exit status of a shepherd or program that could not get going (the parent learns why
// from a kExecFailed report).
constexpr int kCannotStart = 127;

void send_report(int fd, std::int32_t kind, std::int32_t value) noexcept {
  const Report report{kind, value};
  while (::write(fd, &report, sizeof report) < 0 && errno == EINTR) {
  }
}

std::int64_t monotonic_ms() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

void close_from(int first) noexcept {
  if (::close_range(static_cast<unsigned>(first), ~0U, 0) == 0) return;
  rlimit limit{};
  const rlim_t last = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? std::min<rlim_t>(limit.rlim_cur, 65536) : 1024;
  for (rlim_t fd = static_cast<rlim_t>(first); fd < last; ++fd) ::close(static_cast<int>(fd));
}

// Moves the program's three pipe ends to 0, 1, 2 and the report pipe to 3 (close-on-exec),
// and closes every other descriptor: database sockets, other jobs' pipes, fds some library
// opened without O_CLOEXEC. Copies above 3 first, so that no target is also a source.
bool arrange_fds(const Launch& launch) noexcept {
  int moved[4] = {launch.in_fd, launch.out_fd, launch.err_fd, launch.report_fd};
  for (int& fd : moved) {
    fd = ::fcntl(fd, F_DUPFD, kReportFd + 1);
    if (fd < 0) return false;
  }
  for (int target = 0; target < 3; ++target) {
    if (::dup2(moved[target], target) < 0) return false;
  }
  if (::dup3(moved[3], kReportFd, O_CLOEXEC) < 0) return false;
  close_from(kReportFd + 1);
  return true;
}

void set_default_disposition(int sig) noexcept {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(sig, &action, nullptr);
}

// Sends `sig` to `pid` and to the process group it leads, if it leads one.
void signal_with_group(pid_t pid, int sig) noexcept {
  ::kill(pid, sig);
  ::kill(-pid, sig);
}

// Sends `sig` to the program's process group and to every child of the shepherd: the
// program itself (wherever its group is now) and the orphans of its subtree, re-parented
// to the shepherd (the subreaper) with whatever group and session they made for
// themselves. A process whose parent is still alive is reached when that parent is gone.
void signal_job(pid_t program, int sig) noexcept {
  ::kill(-program, sig);
  const int fd = ::open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // without CONFIG_PROC_CHILDREN only the group is reached
  char buffer[512];
  pid_t pid = 0;
  bool digits = false;
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] >= '0' && buffer[i] <= '9') {
        pid = pid * 10 + (buffer[i] - '0');
        digits = true;
      } else if (digits) {
        signal_with_group(pid, sig);
        pid = 0;
        digits = false;
      }
    }
  }
  if (digits) signal_with_group(pid, sig);
  ::close(fd);
}

[[noreturn]] void program_main(const Launch& launch, pid_t shepherd) noexcept {
  // Dies with the shepherd; it may be gone already (then getppid() is someone else).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != shepherd) ::_exit(kCannotStart);
  ::setpgid(0, 0);  // its own process group, which it leads (the shepherd sets it too)
  // The program starts clean: an ignored signal would stay ignored across exec, and the
  // worker's threads block SIGTERM/SIGINT (and the calling thread SIGPIPE).
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) set_default_disposition(sig);  // glibc's own: EINVAL
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The worker raised its own soft limit (open_file_limit.hpp); the program may use select().
  rlimit files{};
  if (launch.nofile != 0 && ::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = static_cast<rlim_t>(launch.nofile);
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  ::execve(launch.path, launch.argv, launch.envp);
  send_report(kReportFd, kExecFailed, errno);
  ::_exit(kCannotStart);
}

// The shepherd: starts the program, reports its pid and its wait status, and does not exit
// before every process of the job is gone.
//   SIGTERM (from the parent at the end of the shutdown grace, or as the parent-death
//           signal when the worker died): SIGTERM to the job, SIGKILL after kTerminateGrace;
//   SIGUSR1 (from the parent at the time limit): SIGKILL at once;
//   the program's exit: SIGKILL to whatever it left behind.
[[noreturn]] void shepherd_main(const Launch& launch) noexcept {
  // Every signal is blocked (the parent forked so); the three it waits for must not be
  // ignored, or they would be discarded instead of kept pending.
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != launch.parent) ::_exit(kCannotStart);
  set_default_disposition(SIGTERM);
  set_default_disposition(SIGUSR1);
  set_default_disposition(SIGCHLD);
  // Its own group: a signal to the worker's group (a terminal's ^C) is not meant for it.
  ::setpgid(0, 0);
  if (!arrange_fds(launch) || ::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    send_report(launch.report_fd, kExecFailed, errno);
    ::_exit(kCannotStart);
  }
  const pid_t self = ::getpid();
  const pid_t program = ::_Fork();
  if (program < 0) {
    send_report(kReportFd, kExecFailed, errno);
    ::_exit(kCannotStart);
  }
  if (program == 0) program_main(launch, self);
  ::setpgid(program, program);  // as the program does: whichever runs first
  send_report(kReportFd, kStarted, program);
  for (int fd = 0; fd < 3; ++fd) ::close(fd);  // the pipes are the program's alone now

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  sigaddset(&wanted, SIGTERM);
  sigaddset(&wanted, SIGUSR1);
  bool terminating = false;  // SIGTERM sent to the job; SIGKILL at kill_at
  bool killing = false;      // SIGKILL to everything, every round, until nothing is left
  std::int64_t kill_at = 0;
  for (;;) {
    for (;;) {
      int status = 0;
      const pid_t reaped = ::waitpid(-1, &status, WNOHANG);
      if (reaped == program) {
        send_report(kReportFd, kExited, status);
        killing = true;  // what the program left behind goes now
      } else if (reaped > 0 || (reaped < 0 && errno == EINTR)) {
        continue;  // an orphan of the job
      } else if (reaped < 0) {
        ::_exit(0);  // ECHILD: nothing of the job is left
      } else {
        break;  // children remain
      }
    }
    if (terminating && !killing && monotonic_ms() >= kill_at) killing = true;
    if (killing) signal_job(program, SIGKILL);
    // While killing, new orphans arrive as their parents die: look again soon. Otherwise
    // sleep until a signal (SIGCHLD included) or the end of the SIGTERM grace.
    timespec timeout{0, 20'000'000};
    const timespec* wait_for = &timeout;
    if (!killing && terminating) {
      const std::int64_t left = std::max<std::int64_t>(kill_at - monotonic_ms(), 1);
      timeout = timespec{static_cast<time_t>(left / 1000), static_cast<long>(left % 1000) * 1'000'000};
    } else if (!killing) {
      wait_for = nullptr;
    }
    const int sig = ::sigtimedwait(&wanted, nullptr, wait_for);
    if (sig == SIGTERM && !terminating && !killing) {
      terminating = true;
      kill_at = monotonic_ms() + kTerminateGrace.count();
      signal_job(program, SIGTERM);
    } else if (sig == SIGUSR1) {
      killing = true;
    }
  }
}

// ---------------------------------------------------------------------------------------
// The parent's side.

// Forks the shepherd with every signal blocked in the calling thread, so that the child
// starts with all of them blocked (no handler of the worker ever runs in it, and a SIGTERM
// that comes early stays pending for the shepherd's loop).
pid_t fork_shepherd(const Launch& launch) {
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  // _Fork, not fork: no atfork handlers run, so none can take a lock another thread holds.
  const pid_t pid = ::_Fork();
  if (pid == 0) shepherd_main(launch);
  const int error = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw_errno(error, "fork");
  return pid;
}

// The one owner of a started job: its shepherd (and, through it, the program and all it
// starts). Until the shepherd is reaped, every way out (exceptions included) ends the job
// and reaps it. The shepherd's pid cannot be reused before it is reaped, nor the program's
// process group id while the shepherd lives (it reaps the program last but one).
std::atomic<int> running_shepherds{0};

class Shepherd {
 public:
  explicit Shepherd(const Launch& launch) : pid_(fork_shepherd(launch)) { running_shepherds.fetch_add(1); }
  Shepherd(const Shepherd&) = delete;
  Shepherd& operator=(const Shepherd&) = delete;
  ~Shepherd() {
    if (reaped_) return;
    request(SIGUSR1);  // kill the job at once; the shepherd exits when it is gone
    const auto give_up = Clock::now() + kEndBound;
    while (!exited() && Clock::now() < give_up) ::usleep(5000);
    if (!exited()) force();
    static_cast<void>(reap());
  }

  void set_program(pid_t program) noexcept { program_ = program; }
  /// Asks the shepherd: SIGTERM to end the job gracefully, SIGUSR1 to kill it now.
  void request(int sig) const noexcept { ::kill(pid_, sig); }
  /// The shepherd did not finish in time: SIGKILL to it (the program follows by its
  /// parent-death signal) and to the program's group.
  void force() const noexcept {
    ::kill(pid_, SIGKILL);
    if (program_ > 0) ::kill(-program_, SIGKILL);
  }
  /// Waits for the shepherd to exit; its wait status, or -1 if someone else reaped it
  /// (SIGCHLD set to SIG_IGN).
  int reap() noexcept {
    int status = 0;
    pid_t r = 0;
    do {
      r = ::waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    if (!reaped_) running_shepherds.fetch_sub(1);
    reaped_ = true;
    return r == pid_ ? status : -1;
  }

 private:
  [[nodiscard]] bool exited() const noexcept {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == pid_;
  }

  pid_t pid_;
  pid_t program_ = 0;
  bool reaped_ = false;
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
    if (report.kind == kStarted) program = report.value;
    if (report.kind == kExecFailed) exec_errno = report.value;
    if (report.kind == kExited) status = report.value;
  }

  std::array<char, 4 * sizeof(Report)> buffer_{};
  std::size_t filled_ = 0;
};

}  // namespace

int running_jobs() noexcept { return running_shepherds.load(); }

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

  std::vector<char*> argv_ptrs;
  argv_ptrs.reserve(argv.size() + 1);
  for (const std::string& arg : argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> env_ptrs;
  env_ptrs.reserve(env.size() + 1);
  for (const std::string& entry : env) env_ptrs.push_back(const_cast<char*>(entry.c_str()));
  env_ptrs.push_back(nullptr);
  const Launch launch{argv[0].c_str(), argv_ptrs.data(), env_ptrs.data(), in.read.get(), out.write.get(),
                      err.write.get(),  reports.write.get(), ::getpid(), inherited_open_file_limit()};

  SigpipeBlock sigpipe;  // before the child exists: it may be gone before our first write
  Shepherd shepherd(launch);
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
