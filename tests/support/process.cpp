#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <system_error>

namespace oncely::test {
namespace {

void check(int rc, const char* what) {
  if (rc < 0) throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace

Process::Process(const std::vector<std::string>& argv, const EnvChanges& env, const std::string& stdin_data) {
  int out_pipe[2], err_pipe[2], in_pipe[2];
  check(pipe2(out_pipe, O_CLOEXEC), "pipe");
  check(pipe2(err_pipe, O_CLOEXEC), "pipe");
  check(pipe2(in_pipe, O_CLOEXEC), "pipe");
  pid_ = fork();
  check(pid_, "fork");
  if (pid_ == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    for (const auto& [name, value] : env) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(in_pipe[0]);
  // Small inputs only (fits the pipe buffer); the tests send a few KiB at most.
  if (!stdin_data.empty()) {
    if (write(in_pipe[1], stdin_data.data(), stdin_data.size()) < 0) { /* child may have exited */
    }
  }
  close(in_pipe[1]);
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
}

Process::~Process() {
  if (!waited_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    wait();
  }
}

ProcessResult Process::wait() {
  ProcessResult result;
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buffer[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  if (status_) {
    status = *status_;
  } else {
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  waited_ = true;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool Process::exited() {
  if (status_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  return status_.has_value();
}

void Process::signal(int signal) {
  if (!status_ && !waited_) ::kill(pid_, signal);
}

ProcessResult run_process(const std::vector<std::string>& argv, const EnvChanges& env, const std::string& stdin_data) {
  Process p(argv, env, stdin_data);
  return p.wait();
}

std::vector<std::string> oncely_cli(std::vector<std::string> args) {
  args.insert(args.begin(), ONCELY_CLI_PATH);
  return args;
}

}  // namespace oncely::test
