#pragma once
// Runs the oncely binary (or any program) as a child process for CLI tests.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace oncely::test {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number
  std::string out;
  std::string err;
};

/// Environment changes for the child: a value sets the variable, nullopt unsets it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

/// A started child with stdout/stderr captured; wait() collects them.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const EnvChanges& env = {}, const std::string& stdin_data = "");
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ProcessResult wait();
  /// Whether the child has exited (does not block; wait() still collects its output).
  bool exited();
  /// Sends `signal` to the child (if it has not been reaped yet).
  void signal(int signal);
  [[nodiscard]] int pid() const { return pid_; }

 private:
  int pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool waited_ = false;
  std::optional<int> status_;  // set once reaped
};

/// Starts, waits, returns.
ProcessResult run_process(const std::vector<std::string>& argv, const EnvChanges& env = {},
                          const std::string& stdin_data = "");

/// The oncely binary built by this tree, then `args`.
std::vector<std::string> oncely_cli(std::vector<std::string> args);

}  // namespace oncely::test
