#pragma once
// The worker's side of a job's shepherd (shepherd_main.cpp): starting it without stalling
// the worker, and owning it until it has been reaped.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::detail {

/// The shepherd's executable image, embedded at build time (cmake/EmbedBinary.cmake).
std::string_view shepherd_image();

/// The descriptors a shepherd is given, as the worker numbers them: the program's stdin
/// (read end), its stdout and stderr (write ends), the report pipe (write end). They stay
/// the caller's, to close once the shepherd has started.
struct ShepherdFds {
  int in = -1;
  int out = -1;
  int err = -1;
  int report = -1;
};

/// The one owner of a started job: its shepherd (and, through it, the program and all it
/// starts). Until the shepherd is reaped, every way out (exceptions included) ends the job
/// and reaps it. The shepherd's pid cannot be reused before it is reaped, nor the program's
/// process group id while the shepherd lives (it reaps the program last but one).
class Shepherd {
 public:
  /// Starts the shepherd of the program argv[0] (an absolute path), which runs it with
  /// `argv`, exactly the environment `env`, and the soft open-file limit `nofile` (0: the
  /// worker's). The parent-death signal follows the calling thread. Throws
  /// std::system_error if the shepherd cannot be started.
  Shepherd(const std::vector<std::string>& argv, const std::vector<std::string>& env, const ShepherdFds& fds,
           std::uint64_t nofile);
  Shepherd(const Shepherd&) = delete;
  Shepherd& operator=(const Shepherd&) = delete;
  /// Not reaped yet: kills the job at once and reaps the shepherd (bounded by kEndBound,
  /// then SIGKILL).
  ~Shepherd();

  void set_program(pid_t program) noexcept { program_ = program; }
  /// Asks the shepherd: SIGTERM to end the job gracefully, SIGUSR1 to kill it now.
  void request(int sig) const noexcept;
  /// The shepherd did not finish in time: SIGKILL to it (the program follows by its
  /// parent-death signal) and to the program's group.
  void force() const noexcept;
  /// Waits for the shepherd to exit; its wait status, or -1 if someone else reaped it
  /// (SIGCHLD set to SIG_IGN).
  int reap() noexcept;

  /// Shepherds started and not yet reaped, in this whole process.
  static int running() noexcept;

 private:
  [[nodiscard]] bool exited() const noexcept;

  pid_t pid_;
  pid_t program_ = 0;
  bool reaped_ = false;
};

}  // namespace oncely::detail
