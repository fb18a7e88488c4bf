// oncely-shepherd: a job's shepherd process (see run_process in subprocess.hpp). A program of
// its own, embedded in the library and started by shepherd.cpp with posix_spawn, so
// that starting a job never copies the worker's address space (see there why).
//
// It starts the program, reports its pid and its wait status on descriptor 3, and does not
// exit before every process of the job is gone.
//   SIGTERM (from the worker at the end of the shutdown grace, or as the parent-death
//           signal when the worker thread died): SIGTERM to the job, SIGKILL after
//           kTerminateGrace;
//   SIGUSR1 (from the worker at the time limit): SIGKILL at once;
//   the program's exit: SIGKILL to whatever it left behind.
// Single-threaded, and it uses nothing but the C library: no libstdc++ to load per job.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "handlers/shepherd_protocol.hpp"
#include "handlers/subprocess.hpp"

namespace {

using namespace oncely::detail::shepherd;

void send_report(std::int32_t kind, std::int32_t value) noexcept {
  const Report report{kind, value};
  while (::write(kReportFd, &report, sizeof report) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void cannot_start(int error) noexcept {
  send_report(kExecFailed, error);
  ::_exit(kCannotStart);
}

std::int64_t monotonic_ms() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

void set_default_disposition(int sig) noexcept {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(sig, &action, nullptr);
}

// A non-negative decimal number, or -1.
long long parse_count(const char* text) noexcept {
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  return errno != 0 || *end != '\0' || value < 0 ? -1 : value;
}

// Closes every descriptor from `first` on (close_range needs Linux 5.9).
bool close_from(int first) noexcept {
  if (::close_range(static_cast<unsigned>(first), ~0U, 0) == 0) return true;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  const rlim_t last = limit.rlim_cur < 65536 ? limit.rlim_cur : 65536;
  for (rlim_t fd = static_cast<rlim_t>(first); fd < last; ++fd) ::close(static_cast<int>(fd));
  return true;
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

// The program, in the shepherd's child: 0, 1 and 2 are its pipes, 3 (the report pipe) is
// closed at its exec.
[[noreturn]] void program_main(char* const* argv, char* const* envp, rlim_t nofile, pid_t shepherd) noexcept {
  // Dies with the shepherd; it may be gone already (then getppid() is someone else).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != shepherd) ::_exit(kCannotStart);
  ::setpgid(0, 0);  // its own process group, which it leads (the shepherd sets it too)
  // The program starts clean: an ignored signal would stay ignored across exec, and the
  // shepherd blocks every signal.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) set_default_disposition(sig);  // glibc's own: EINVAL
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The worker raised its own soft limit (open_file_limit.hpp); the program may use select().
  rlimit files{};
  if (nofile != 0 && ::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = nofile;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  ::execve(argv[0], argv, envp);
  send_report(kExecFailed, errno);
  ::_exit(kCannotStart);
}

// Waits for the program and the orphans of its subtree, and ends them when asked; exits
// once nothing of the job is left.
[[noreturn]] void watch(pid_t program) noexcept {
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
        send_report(kExited, status);
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
      const std::int64_t left = kill_at - monotonic_ms() > 1 ? kill_at - monotonic_ms() : 1;
      timeout = timespec{static_cast<time_t>(left / 1000), static_cast<long>(left % 1000) * 1'000'000};
    } else if (!killing) {
      wait_for = nullptr;
    }
    const int sig = ::sigtimedwait(&wanted, nullptr, wait_for);
    if (sig == SIGTERM && !terminating && !killing) {
      terminating = true;
      kill_at = monotonic_ms() + oncely::detail::kTerminateGrace.count();
      signal_job(program, SIGTERM);
    } else if (sig == SIGUSR1) {
      killing = true;
    }
  }
}

}  // namespace

int main(int argc, char** argv, char** envp) {
  // Every signal is blocked (posix_spawn set the mask so) and SIGTERM, SIGUSR1 and SIGCHLD
  // have their default disposition, not ignored: a request that comes before the loop
  // waits for it stays pending. Dies with the worker thread that started it; if that is
  // gone already, getppid() is someone else.
  const long long parent = argc > 1 ? parse_count(argv[1]) : -1;
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || parent <= 0 || ::getppid() != static_cast<pid_t>(parent)) {
    ::_exit(kCannotStart);
  }
  // Its image stays out of the program; the report pipe goes at the program's exec.
  if (!close_from(kImageFd)) cannot_start(errno);
  if (::fcntl(kReportFd, F_SETFD, FD_CLOEXEC) != 0) cannot_start(errno);
  const long long nofile = argc > 2 ? parse_count(argv[2]) : -1;
  if (nofile < 0 || argc <= kProgramArgument) cannot_start(EINVAL);
  ::prctl(PR_SET_NAME, kShepherdName);  // not "4", the last part of the path it was started by

  // The job's orphans are re-parented to the shepherd, whatever group or session they left to.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) cannot_start(errno);
  const pid_t self = ::getpid();
  const pid_t program = ::fork();
  if (program < 0) cannot_start(errno);
  if (program == 0) program_main(argv + kProgramArgument, envp, static_cast<rlim_t>(nofile), self);
  ::setpgid(program, program);  // as the program does: whichever runs first
  send_report(kStarted, program);
  for (int fd = 0; fd < 3; ++fd) ::close(fd);  // the pipes are the program's alone now
  watch(program);
}
