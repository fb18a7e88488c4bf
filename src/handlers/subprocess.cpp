#include "handlers/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <system_error>
#include <utility>

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

class SpawnActions {
 public:
  SpawnActions() {
    if (const int rc = posix_spawn_file_actions_init(&actions_); rc != 0) throw_errno(rc, "posix_spawn_file_actions_init");
  }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_{};
};

class SpawnAttributes {
 public:
  SpawnAttributes() {
    if (const int rc = posix_spawnattr_init(&attributes_); rc != 0) throw_errno(rc, "posix_spawnattr_init");
  }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attributes_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  posix_spawnattr_t* get() { return &attributes_; }

 private:
  posix_spawnattr_t attributes_{};
};

void check(int rc, const char* what) {
  if (rc != 0) throw_errno(rc, what);
}

// The started child: until reaped, it (and its process group, which it leads) is killed
// and reaped on every way out, exceptions included. Its pid cannot be reused before it is
// reaped, which makes the kill of its group safe.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (!reaped_) {
      kill_group();
      reap();
    }
  }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  void kill_group() const noexcept { ::kill(-pid_, SIGKILL); }
  // The wait status, or -1 if someone else reaped it (SIGCHLD set to SIG_IGN).
  int reap() noexcept {
    int status = 0;
    pid_t r = 0;
    do {
      r = ::waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    reaped_ = true;
    return r == pid_ ? status : -1;
  }
  // Whether the child has exited, without reaping it (fallback when pidfd_open is missing).
  [[nodiscard]] bool exited() const noexcept {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

 private:
  pid_t pid_;
  bool reaped_ = false;
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

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::string_view input, std::chrono::milliseconds limit, std::size_t tail_bytes) {
  if (argv.empty()) throw_errno(EINVAL, "run_process: empty argv");
  const auto give_up = Clock::now() + limit;

  Pipe in = make_pipe();
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  set_nonblocking(in.write);
  set_nonblocking(out.read);
  set_nonblocking(err.read);

  SpawnActions actions;
  check(posix_spawn_file_actions_adddup2(actions.get(), in.read.get(), STDIN_FILENO), "adddup2");
  check(posix_spawn_file_actions_adddup2(actions.get(), out.write.get(), STDOUT_FILENO), "adddup2");
  check(posix_spawn_file_actions_adddup2(actions.get(), err.write.get(), STDERR_FILENO), "adddup2");
  // Whatever else this process has open (database sockets, other children's pipes, fds
  // some library opened without O_CLOEXEC) stays out of the child.
  check(posix_spawn_file_actions_addclosefrom_np(actions.get(), 3), "addclosefrom_np");

  SpawnAttributes attributes;
  sigset_t none;
  sigemptyset(&none);
  sigset_t all_default;
  sigfillset(&all_default);
  sigdelset(&all_default, SIGKILL);
  sigdelset(&all_default, SIGSTOP);
  check(posix_spawnattr_setflags(attributes.get(), POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF),
        "posix_spawnattr_setflags");
  check(posix_spawnattr_setpgroup(attributes.get(), 0), "posix_spawnattr_setpgroup");  // its own group
  // The runtime blocks SIGTERM/SIGINT in its threads and this thread blocks SIGPIPE; an
  // ignored signal would stay ignored across exec. The child starts clean.
  check(posix_spawnattr_setsigmask(attributes.get(), &none), "posix_spawnattr_setsigmask");
  check(posix_spawnattr_setsigdefault(attributes.get(), &all_default), "posix_spawnattr_setsigdefault");

  std::vector<char*> argv_ptrs;
  argv_ptrs.reserve(argv.size() + 1);
  for (const std::string& arg : argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> env_ptrs;
  env_ptrs.reserve(env.size() + 1);
  for (const std::string& entry : env) env_ptrs.push_back(const_cast<char*>(entry.c_str()));
  env_ptrs.push_back(nullptr);

  SigpipeBlock sigpipe;  // before the child exists: it may be gone before our first write
  pid_t pid = 0;
  // glibc's posix_spawn reports a failed execve (ENOENT, EACCES, ENOEXEC...) as its result.
  if (const int rc = posix_spawn(&pid, argv[0].c_str(), actions.get(), attributes.get(), argv_ptrs.data(),
                                 env_ptrs.data());
      rc != 0) {
    throw_errno(rc, "posix_spawn");
  }
  Child child(pid);
  in.read.reset();
  out.write.reset();
  err.write.reset();

  // Readable once the child has exited. Without it (kernel < 5.3) we poll in short slices.
  // Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
  Fd exit_fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));

  ProcessResult result;
  std::size_t written = 0;
  if (input.empty()) in.write.reset();
  bool exited = false;
  while (!exited) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up - Clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      child.kill_group();
      child.reap();
      drain(err.read, &result.stderr_tail, tail_bytes);  // its last words, if any are buffered
      result.end = ProcessResult::End::timed_out;
      return result;
    }
    std::array<pollfd, 4> fds{};
    nfds_t n = 0;
    int in_at = -1, out_at = -1, err_at = -1, exit_at = -1;
    const auto watch = [&](const Fd& fd, short events, int& at) {
      if (!fd) return;
      at = static_cast<int>(n);
      fds[n++] = pollfd{fd.get(), events, 0};
    };
    watch(in.write, POLLOUT, in_at);
    watch(out.read, POLLIN, out_at);
    watch(err.read, POLLIN, err_at);
    watch(exit_fd, POLLIN, exit_at);
    const auto slice = exit_fd ? left : std::min(left, std::chrono::milliseconds(10));
    const int ready = ::poll(fds.data(), n, static_cast<int>(std::min<std::int64_t>(slice.count(), 60'000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "poll");  // ~Child kills and reaps
    }
    if (in_at >= 0 && fds[static_cast<std::size_t>(in_at)].revents != 0) {
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
    if (out_at >= 0 && fds[static_cast<std::size_t>(out_at)].revents != 0) drain(out.read, nullptr, 0);
    if (err_at >= 0 && fds[static_cast<std::size_t>(err_at)].revents != 0) drain(err.read, &result.stderr_tail, tail_bytes);
    exited = exit_at >= 0 ? fds[static_cast<std::size_t>(exit_at)].revents != 0 : (!exit_fd && child.exited());
  }
  // What the child wrote before exiting is in the pipes; take it, but do not wait for EOF:
  // something it left running in the background may hold the pipes open indefinitely.
  drain(out.read, nullptr, 0);
  drain(err.read, &result.stderr_tail, tail_bytes);
  const int status = child.reap();
  if (status >= 0 && WIFSIGNALED(status)) {
    result.end = ProcessResult::End::signaled;
    result.code = WTERMSIG(status);
  } else {
    result.end = ProcessResult::End::exited;
    result.code = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return result;
}

}  // namespace oncely::detail
