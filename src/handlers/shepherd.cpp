// Starting a job's shepherd with posix_spawn, from an image of it held in memory.
//
// Why not fork. The shepherd used to be a fork of the worker that ran its code without an
// exec. fork() copies the page tables of the whole process while it holds the process's
// memory map lock for writing: every other thread that faults a page or maps memory waits
// for it, and a worker running 1,000 jobs is 1,000 threads (their stacks are mappings of
// their own). 1,000 jobs started at once were seconds of such copies, one after another:
// the lease renewal and the watchdog did not run for 5 s, and every lease was lost
// (docs/benchmarks.md, "Starting 1,000 exec jobs"). And a shepherd that never execs keeps
// its copy for the job's whole life: each page the worker writes afterwards is copied once
// more (copy-on-write), for each shepherd still sharing it.
//
// posix_spawn (glibc: clone(CLONE_VM | CLONE_VFORK) and exec) copies nothing: the child
// borrows the worker's memory until its exec, and only the calling thread waits for that
// (and the threads starting other jobs: one start at a time, see `spawning`).
// But what a shepherd does (subreaper, parent-death signal, its wait loop) is code, not
// something posix_spawn's attributes can say, so the shepherd is a program of its own
// (shepherd_main.cpp, linked against the C library only), and the program is forked by it,
// a process of a few hundred KiB, whose fork is cheap. The program keeps its own
// set-up there, as before (its group, its signals, its limit, its exec).
//
// Where the shepherd's program comes from. It is built with the library and embedded in it
// (as the migrations are), and written once per process into a sealed memory file
// (memfd), which posix_spawn runs through /proc/self/fd. So a program that links the
// library needs nothing installed beside it, and the shepherd is always the one built
// with the library: their protocol (shepherd_protocol.hpp) cannot be of two versions.
#include "handlers/shepherd.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <system_error>

#include "handlers/shepherd_protocol.hpp"
#include "handlers/subprocess.hpp"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // Linux 6.3: an executable memfd, said explicitly (vm.memfd_noexec)
#endif

namespace oncely::detail {
namespace {

using namespace shepherd;

[[noreturn]] void throw_errno(int error, const char* what) {
  throw std::system_error(error, std::generic_category(), what);
}

// The first descriptor number a shepherd does not start with.
constexpr int kFirstFreeFd = kImageFd + 1;

// A sealed, read-only memory file of the shepherd's image. Read-only because exec refuses a
// file that is open for writing anywhere (ETXTBSY).
int load_image() {
  const std::string_view image = shepherd_image();
  int writable = ::memfd_create(kShepherdName, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (writable < 0 && errno == EINVAL) writable = ::memfd_create(kShepherdName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (writable < 0) throw_errno(errno, "memfd_create (the exec handler's shepherd)");
  std::size_t written = 0;
  while (written < image.size()) {
    const ssize_t n = ::write(writable, image.data() + written, image.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(writable);
      throw_errno(error, "writing the exec handler's shepherd");
    }
    written += static_cast<std::size_t>(n);
  }
  const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
  const std::string path = "/proc/self/fd/" + std::to_string(writable);
  // Above the descriptors a shepherd is given, so that it is never one of their targets.
  const int readable = ::fcntl(writable, F_ADD_SEALS, seals) == 0 ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  const int error = errno;
  ::close(writable);
  if (readable < 0) throw_errno(error, "opening the exec handler's shepherd");
  if (readable >= kFirstFreeFd) return readable;
  const int moved = ::fcntl(readable, F_DUPFD_CLOEXEC, kFirstFreeFd);
  const int move_error = errno;
  ::close(readable);
  if (moved < 0) throw_errno(move_error, "fcntl(F_DUPFD_CLOEXEC)");
  return moved;
}

// Open for the life of the process. A failure is not remembered: the next job tries again.
int image_fd() {
  static const int fd = load_image();
  return fd;
}

// A copy of `fd` above the shepherd's descriptors, when it is one of them (a worker that
// closed its stdin gets pipes at 0): the file actions' dup2 calls must not overwrite a
// source before it is copied.
class LiftedFd {
 public:
  explicit LiftedFd(int fd) : fd_(fd) {
    if (fd_ >= kFirstFreeFd) return;
    fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, kFirstFreeFd);
    if (fd_ < 0) throw_errno(errno, "fcntl(F_DUPFD_CLOEXEC)");
    owned_ = true;
  }
  LiftedFd(const LiftedFd&) = delete;
  LiftedFd& operator=(const LiftedFd&) = delete;
  ~LiftedFd() {
    if (owned_) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
  bool owned_ = false;
};

class SpawnActions {
 public:
  SpawnActions() { posix_spawn_file_actions_init(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions_); }
  void dup2(int from, int to) { check(posix_spawn_file_actions_adddup2(&actions_, from, to)); }
  void close_from(int first) { check(posix_spawn_file_actions_addclosefrom_np(&actions_, first)); }
  [[nodiscard]] const posix_spawn_file_actions_t* get() const noexcept { return &actions_; }

 private:
  static void check(int error) {
    if (error != 0) throw_errno(error, "posix_spawn_file_actions");
  }
  posix_spawn_file_actions_t actions_{};
};

class SpawnAttributes {
 public:
  SpawnAttributes() { posix_spawnattr_init(&attributes_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  ~SpawnAttributes() { posix_spawnattr_destroy(&attributes_); }
  [[nodiscard]] posix_spawnattr_t* get() noexcept { return &attributes_; }

 private:
  posix_spawnattr_t attributes_{};
};

// One shepherd is started at a time, process-wide. Until its exec, a child of posix_spawn
// shares the worker's memory map, and its exec takes the map's lock (for reading, to leave
// it): with hundreds of such children at once on a few cores, each preempted by the others
// while it holds the lock, the threads that mapped memory (for the lock, for writing) and
// every thread behind them waited for seconds. oncely_spawn_bench on a loaded 2-core VM:
// a ticker mapping 1 MiB every 100 ms was up to 4-7 s late with every start at once, 0.15-1 s
// one at a time; the 1,000-job lease test's closest lease came within 0.23 s of running out
// at once, 1.15 s one at a time. The price, there: the 1,000 jobs all started about a third
// later (each start waits for a CPU behind the processes of the jobs already started).
// Alone, a start took about 1 ms there.
std::mutex spawning;

pid_t spawn_shepherd(const std::vector<std::string>& argv, const std::vector<std::string>& env, const ShepherdFds& fds,
                     std::uint64_t nofile) {
  const int image = image_fd();
  const LiftedFd in(fds.in), out(fds.out), err(fds.err), report(fds.report);
  SpawnActions actions;
  actions.dup2(in.get(), 0);
  actions.dup2(out.get(), 1);
  actions.dup2(err.get(), 2);
  actions.dup2(report.get(), kReportFd);
  actions.dup2(image, kImageFd);
  // Database sockets, other jobs' pipes, descriptors a library opened without O_CLOEXEC.
  actions.close_from(kFirstFreeFd);

  // Every signal blocked from the start: no handler of the worker runs in the child before
  // its exec, and a SIGTERM that comes before the shepherd waits for it stays pending. The
  // three it waits for at their default disposition: if the worker ignores one, a pending
  // one would be discarded. Its own process group: a signal to the worker's group (a
  // terminal's ^C) is not meant for it.
  SpawnAttributes attributes;
  sigset_t all;
  sigfillset(&all);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (const int sig : {SIGTERM, SIGUSR1, SIGCHLD}) sigaddset(&defaults, sig);
  const short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP;
  if (posix_spawnattr_setflags(attributes.get(), flags) != 0 ||
      posix_spawnattr_setsigmask(attributes.get(), &all) != 0 ||
      posix_spawnattr_setsigdefault(attributes.get(), &defaults) != 0 ||
      posix_spawnattr_setpgroup(attributes.get(), 0) != 0) {
    throw_errno(EINVAL, "posix_spawnattr");
  }

  const std::string parent = std::to_string(::getpid());
  const std::string files = std::to_string(nofile);
  std::vector<char*> arguments = {const_cast<char*>(kShepherdName), const_cast<char*>(parent.c_str()),
                                  const_cast<char*>(files.c_str())};
  for (const std::string& arg : argv) arguments.push_back(const_cast<char*>(arg.c_str()));
  arguments.push_back(nullptr);
  std::vector<char*> environment;
  environment.reserve(env.size() + 1);
  for (const std::string& entry : env) environment.push_back(const_cast<char*>(entry.c_str()));
  environment.push_back(nullptr);

  static const std::string image_path = "/proc/self/fd/" + std::to_string(kImageFd);  // the child's kImageFd
  pid_t pid = 0;
  int error = 0;
  {
    const std::lock_guard one_at_a_time(spawning);
    error =
        ::posix_spawn(&pid, image_path.c_str(), actions.get(), attributes.get(), arguments.data(), environment.data());
  }
  if (error != 0) throw_errno(error, "posix_spawn (the exec handler's shepherd)");
  return pid;
}

std::atomic<int> running_shepherds{0};

}  // namespace

Shepherd::Shepherd(const std::vector<std::string>& argv, const std::vector<std::string>& env, const ShepherdFds& fds,
                   std::uint64_t nofile)
    : pid_(spawn_shepherd(argv, env, fds, nofile)) {
  running_shepherds.fetch_add(1);
}

Shepherd::~Shepherd() {
  if (reaped_) return;
  request(SIGUSR1);  // kill the job at once; the shepherd exits when it is gone
  const auto give_up = std::chrono::steady_clock::now() + kEndBound;
  while (!exited() && std::chrono::steady_clock::now() < give_up) ::usleep(5000);
  if (!exited()) force();
  static_cast<void>(reap());
}

void Shepherd::request(int sig) const noexcept { ::kill(pid_, sig); }

void Shepherd::force() const noexcept {
  ::kill(pid_, SIGKILL);
  if (program_ > 0) ::kill(-program_, SIGKILL);
}

int Shepherd::reap() noexcept {
  int status = 0;
  pid_t r = 0;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (!reaped_) running_shepherds.fetch_sub(1);
  reaped_ = true;
  return r == pid_ ? status : -1;
}

int Shepherd::running() noexcept { return running_shepherds.load(); }

bool Shepherd::exited() const noexcept {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == pid_;
}

}  // namespace oncely::detail
