#pragma once
// Running one child process to completion from a worker thread: no shell, its own process
// group, input on stdin, stdout discarded, the tail of stderr kept, a hard time limit, and
// nothing of it left behind when it ends, whichever way (see run_process).

#include <chrono>
#include <cstddef>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::detail {

/// How long a job's processes get between SIGTERM and SIGKILL when the worker ends them
/// before they finish: at the end of the shutdown grace, or when the worker died.
inline constexpr std::chrono::milliseconds kTerminateGrace{2000};

/// After run_process asked its processes to end, how much longer it waits for them before
/// it gives up on its shepherd (kills it and the program's group outright).
inline constexpr std::chrono::milliseconds kEndBound{1000};

struct ProcessResult {
  /// stopped: `stop` was requested (the worker's shutdown grace is over) and the processes
  /// were terminated (SIGTERM, then SIGKILL after kTerminateGrace).
  enum class End { exited, signaled, timed_out, stopped };
  End end = End::exited;
  int code = 0;             ///< the exit status (exited) or the signal number (signaled)
  std::string stderr_tail;  ///< the last bytes the child wrote to stderr (raw bytes)
};

/// Starts argv[0] (a path; no PATH search, no shell) with `argv` and exactly the
/// environment `env` ("NAME=value" entries), in a new process group, with default signal
/// dispositions and an empty signal mask, and every descriptor other than 0, 1 and 2
/// closed. Writes `input` to its stdin (a child that does not read it is not an error),
/// reads and discards its stdout, keeps the last `tail_bytes` of its stderr, and returns
/// when it has exited, after `limit` (everything of it killed: timed_out), or once `stop`
/// is requested (terminated: stopped).
///
/// Process hygiene. The program is not started directly: a small shepherd process (a
/// program of its own, embedded in the library and started from the calling thread with
/// posix_spawn, which copies nothing of the worker; shepherd.cpp says why) forks it and
/// owns it. The shepherd is the child subreaper of everything the program starts, so that even
/// descendants that left the program's process group and session (setsid, a daemon's
/// double fork) become its children when their parents die; when the program ends, on its
/// own, at the time limit or at `stop`, the shepherd kills the program's group and every
/// process re-parented to it, round after round, and exits once it has no child left. So
/// when run_process returns, nothing the program started is still running (short of a
/// process that changed its user or cannot be killed). Both die with their parent
/// (PR_SET_PDEATHSIG, checked against a parent already gone): the program with the
/// shepherd, and the shepherd with the calling thread, whose death (with the worker
/// process, SIGKILL included) makes it terminate the job's processes (SIGTERM, SIGKILL
/// after kTerminateGrace). The parent-death signal follows the *thread* that started the
/// shepherd, which is why that happens here, on the thread that waits for the job to its end.
///
/// The shepherd and the child are always reaped, whatever happens; every descriptor opened
/// here is closed. Safe to call from many threads at once; SIGPIPE is blocked in the
/// calling thread while it runs (the process-wide disposition is left alone).
/// Throws std::system_error if the child cannot be started (e.g. ENOENT, EACCES).
/// How many jobs' processes run_process is running now, in this whole process (each from
/// its start until every process of it is gone and reaped). Processes are a property of
/// the process, not of one Runtime: the shutdown waits for this to reach 0, bounded.
int running_jobs() noexcept;

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::string_view input, std::chrono::milliseconds limit, std::size_t tail_bytes = 4096,
                          const std::stop_token& stop = {});

}  // namespace oncely::detail
