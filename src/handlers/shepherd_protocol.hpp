#pragma once
// What the worker (shepherd.cpp) and a job's shepherd (shepherd_main.cpp, a program of its
// own) agree on: how the shepherd is started, and the reports it sends back.
//
// Started with descriptors 0, 1, 2: the program's stdin, stdout and stderr (pipes to the
// worker); 3: the report pipe (write end); 4: the shepherd's own image (see shepherd.cpp),
// and nothing else. Its argument vector:
//   [0]    kShepherdName
//   [1]    the worker's pid: the shepherd dies with the worker thread that started it, and
//          checks that this is still its parent once it has asked for that
//   [2]    the program's soft RLIMIT_NOFILE, decimal; 0: leave the inherited one
//   [3 ..] the program's argument vector, [3] its absolute path
// Its environment is the program's, exactly: not in the arguments, which every user of the
// machine can read (/proc/PID/cmdline, ps), while an environment may hold the secrets of an
// exec handler's "env" and is readable by its user alone, as the program's own is. (The
// shepherd's dynamic loader reads it too: an LD_PRELOAD declared for the program is loaded
// into the shepherd as well.)

#include <cstdint>

namespace oncely::detail::shepherd {

inline constexpr const char* kShepherdName = "oncely-shepherd";
inline constexpr int kProgramArgument = 3;  // where the program's argument vector starts

// The descriptors the shepherd starts with.
inline constexpr int kReportFd = 3;
inline constexpr int kImageFd = 4;

// The shepherd's reports on its pipe to the worker, one fixed-size record each (smaller
// than PIPE_BUF, so never interleaved or split).
struct Report {
  std::int32_t kind = 0;
  std::int32_t value = 0;
};
inline constexpr std::int32_t kStarted = 1;     // value: the program's pid (and process group)
inline constexpr std::int32_t kExecFailed = 2;  // value: errno of what failed (fork, execve)
inline constexpr std::int32_t kExited = 3;      // value: the program's wait status

// Exit status of a shepherd or program that could not get going (the worker learns why from
// a kExecFailed report, when there was one).
inline constexpr int kCannotStart = 127;

}  // namespace oncely::detail::shepherd
