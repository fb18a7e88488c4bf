#pragma once
// Running one child process to completion from a worker thread: no shell, its own process
// group, input on stdin, stdout discarded, the tail of stderr kept, a hard time limit.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::detail {

struct ProcessResult {
  enum class End { exited, signaled, timed_out };
  End end = End::exited;
  int code = 0;             ///< the exit status (exited) or the signal number (signaled)
  std::string stderr_tail;  ///< the last bytes the child wrote to stderr (raw bytes)
};

/// Starts argv[0] (a path; no PATH search, no shell) with `argv` and exactly the
/// environment `env` ("NAME=value" entries), in a new process group, with default signal
/// dispositions and an empty signal mask, and every descriptor other than 0, 1 and 2
/// closed. Writes `input` to its stdin (a child that does not read it is not an error),
/// reads and discards its stdout, keeps the last `tail_bytes` of its stderr, and returns
/// when it has exited, or after `limit`, having sent SIGKILL to its whole process group.
/// The child is always reaped, whatever happens; every descriptor opened here is closed.
/// Processes the child leaves behind in its group after exiting normally are not waited
/// for. Safe to call from many threads at once; SIGPIPE is blocked in the calling thread
/// while it runs (the process-wide disposition is left alone).
/// Throws std::system_error if the child cannot be started (e.g. ENOENT, EACCES).
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::string_view input, std::chrono::milliseconds limit, std::size_t tail_bytes = 4096);

}  // namespace oncely::detail
