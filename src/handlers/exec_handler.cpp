// The `exec` handler type: runs a declared program for each job.
//
//   {"type": "exec", "command": ["/usr/local/bin/send-email", "--quiet"], "timeout": "20s",
//    "env": {"SMTP_HOST": "localhost"}}
//
// No shell: the argv is the configuration's, the payload reaches the program only as JSON
// on stdin (and the job's identity in ONCELY_* variables), so no payload can inject a
// command. Exit 0 completes the job; 64 (EX_USAGE) and 65 (EX_DATAERR) dead-letter it; any
// other exit, a signal or the time limit retries it. The process mechanics are in
// subprocess.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "execution/retry_policy.hpp"
#include "handlers/classification.hpp"
#include "handlers/declaration.hpp"
#include "handlers/subprocess.hpp"
#include "oncely/errors.hpp"
#include "oncely/job_context.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

constexpr std::size_t kStderrTailBytes = 4096;

// Set for every run from the job; the configuration may not set them itself.
constexpr std::array<std::string_view, 7> kJobVariables = {
    "ONCELY_JOB_ID", "ONCELY_IDEMPOTENCY_KEY", "ONCELY_ATTEMPT", "ONCELY_QUEUE",
    "ONCELY_KIND",   "ONCELY_LEASE_TOKEN",     "TRACEPARENT"};

struct ExecHandler {
  std::vector<std::string> argv;                     // argv[0] resolved to an absolute path at start-up
  std::optional<std::chrono::milliseconds> timeout;  // absent: the job's deadline alone
  std::vector<std::string> environment;  // "NAME=value": PATH, HOME, LANG, LC_*, TZ, TMPDIR, and the declared env
  std::vector<std::string> secrets;      // the values "${NAME}" stood for in the declared env

  void operator()(JobContext& job) const;
};

bool is_executable_file(const std::filesystem::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::filesystem::path absolute_path(const std::filesystem::path& path) {
  std::error_code ec;
  auto absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal();
}

// The program to run, as an absolute path: checked now so that a typo stops the worker at
// start-up instead of failing every job; resolved now so that later PATH or working
// directory changes cannot change which program runs.
std::string resolve_program(const std::string& name, const std::string& at) {
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name)) throw ConfigError(at, "'" + printable(name) + "' is not an executable file");
    return absolute_path(name).string();
  }
  const char* search = std::getenv("PATH");
  const std::string_view dirs = search != nullptr ? search : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string_view dir = dirs.substr(begin, end - begin);
    if (!dir.empty()) {  // an empty entry would mean the working directory: not for a daemon
      const std::filesystem::path candidate = std::filesystem::path(dir) / name;
      if (is_executable_file(candidate)) return absolute_path(candidate).string();
    }
    begin = end + 1;
  }
  throw ConfigError(at, "'" + printable(name) + "' was not found in PATH (or write its absolute path)");
}

bool is_job_variable(std::string_view name) {
  return std::find(kJobVariables.begin(), kJobVariables.end(), name) != kJobVariables.end();
}

// What a child inherits of the worker's environment: what programs need to run, and not
// what the worker keeps secrets in (DATABASE_URL, PGPASSWORD, ONCELY_LISTEN_DATABASE_URL,
// tokens substituted into http headers). Anything else a program needs is declared in its
// "env", where "${NAME}" passes the worker's variable NAME on explicitly.
bool is_inherited(std::string_view name) {
  static constexpr std::array<std::string_view, 5> kInherited = {"PATH", "HOME", "LANG", "TZ", "TMPDIR"};
  return std::find(kInherited.begin(), kInherited.end(), name) != kInherited.end() || name.starts_with("LC_");
}

// The allowed part of the worker's environment now, with `declared` added over it. Taken
// once at start-up: reading environ on worker threads would race with any setenv.
std::vector<std::string> build_environment(const std::vector<std::pair<std::string, std::string>>& declared) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    const std::string_view name = text.substr(0, text.find('='));
    const bool overridden =
        std::any_of(declared.begin(), declared.end(), [&](const auto& d) { return d.first == name; });
    if (!overridden && is_inherited(name)) env.emplace_back(text);
  }
  for (const auto& [name, value] : declared) env.push_back(name + "=" + value);
  return env;
}

std::string signal_name(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return abbreviation != nullptr ? "SIG" + std::string(abbreviation) : "signal " + std::to_string(signal);
}

// "<message>: <the last line of stderr>", when stderr said anything.
std::string with_last_words(std::string message, const std::string& stderr_tail) {
  const std::string_view line = last_line(stderr_tail);
  if (!line.empty()) message += ": " + summary_line(line);
  return message;
}

void ExecHandler::operator()(JobContext& job) const {
  const std::string& program = argv[0];
  const auto limit = time_left(timeout, job.deadline());
  if (limit <= std::chrono::milliseconds::zero()) {
    throw HandlerError(FailureClass::timeout, "no time left before the job's deadline to run " + program,
                       {{"command", program}});
  }

  std::vector<std::string> env = environment;
  env.push_back("ONCELY_JOB_ID=" + std::to_string(job.id()));
  env.push_back("ONCELY_IDEMPOTENCY_KEY=" + job.idempotency_key());
  env.push_back("ONCELY_ATTEMPT=" + std::to_string(job.attempt()));
  env.push_back("ONCELY_QUEUE=" + job.queue());
  env.push_back("ONCELY_KIND=" + job.kind());
  // A lease job's token: a handler may complete the job itself, in its own transaction
  // beside its own writes (docs/protocol.md, "Handler-side completion").
  if (const auto token = job.lease_token()) env.push_back("ONCELY_LEASE_TOKEN=" + std::to_string(*token));
  // The attempt's span, a child of the producer's (W3C Trace Context), as OpenTelemetry's
  // environment-variable carriers name it.
  if (job.traceparent()) env.push_back("TRACEPARENT=" + *job.traceparent());
  // One line of JSON and a newline, so that `read line` in a shell script works too; from
  // the payload's text, so that every number is passed on exactly as the job holds it.
  const std::string input = exact_json::compact(job.payload_text()) + "\n";

  ProcessResult result;
  try {
    result = run_process(argv, env, input, limit, kStderrTailBytes, job.stop_token());
  } catch (const std::system_error& e) {
    // The program was there at start-up; it may be back after a deployment.
    throw HandlerError(FailureClass::retryable, "could not run " + program + ": " + e.code().message(),
                       {{"command", program}, {"errno", e.code().value()}});
  }

  // A program may print what it was given (its environment): the values substituted into
  // its env never reach the dead letter or the log.
  const std::string tail = utf8_tail(mask_secrets(result.stderr_tail, secrets), kStderrTailBytes);
  nlohmann::json detail = {{"command", program}};
  switch (result.end) {
    case ProcessResult::End::exited: {
      if (result.code == 0) return;
      detail["exit_status"] = result.code;
      detail["stderr_tail"] = tail;
      if (result.code < 0) {
        throw HandlerError(
            FailureClass::retryable,
            with_last_words(program + " ended, but its exit status was lost (is SIGCHLD ignored?)", tail),
            std::move(detail));
      }
      throw HandlerError(exit_failure_class(result.code),
                         with_last_words(program + " exited with status " + std::to_string(result.code), tail),
                         std::move(detail));
    }
    case ProcessResult::End::signaled:
      detail["signal"] = result.code;
      detail["stderr_tail"] = tail;
      throw HandlerError(FailureClass::retryable,
                         with_last_words(program + " was killed by " + signal_name(result.code), tail),
                         std::move(detail));
    case ProcessResult::End::timed_out:
      detail["timeout_ms"] = limit.count();
      detail["stderr_tail"] = tail;
      throw HandlerError(
          FailureClass::timeout,
          with_last_words(
              program + " did not finish within " + format_duration(limit) + "; its process group was killed", tail),
          std::move(detail));
    case ProcessResult::End::stopped:
      // The worker is leaving this attempt to roll back; whatever is recorded here may not
      // reach the database, and the job is redelivered either way.
      detail["stderr_tail"] = tail;
      throw HandlerError(FailureClass::retryable,
                         with_last_words(program + " was terminated at the end of the worker's shutdown grace", tail),
                         std::move(detail));
  }
}

}  // namespace

FailureClass exit_failure_class(int exit_status) {
  constexpr int kExUsage = 64;    // sysexits.h EX_USAGE: the command was used incorrectly
  constexpr int kExDataErr = 65;  // sysexits.h EX_DATAERR: the input data was incorrect
  return exit_status == kExUsage || exit_status == kExDataErr ? FailureClass::permanent : FailureClass::retryable;
}

Handler make_exec_handler(const nlohmann::json& declaration, const std::string& path) {
  check_keys(declaration, path, {"type", "command", "timeout", "env"});
  ExecHandler handler;

  const std::string command_path = path + "/command";
  const nlohmann::json& command = required(declaration, path, "command", "the program and its arguments");
  if (!command.is_array() || command.empty()) {
    throw ConfigError(command_path, "must be a non-empty array of strings (the program and its arguments)");
  }
  for (std::size_t i = 0; i < command.size(); ++i) {
    const std::string at = command_path + "/" + std::to_string(i);
    const std::string& arg = string_at(command[i], at, i == 0);
    if (arg.find('\0') != std::string::npos) throw ConfigError(at, "must not contain a NUL character");
    handler.argv.push_back(i == 0 ? resolve_program(arg, at) : arg);
  }

  if (const auto it = declaration.find("timeout"); it != declaration.end()) {
    handler.timeout = positive_duration_at(*it, path + "/timeout");
  }

  std::vector<std::pair<std::string, std::string>> declared;
  if (const auto it = declaration.find("env"); it != declaration.end()) {
    const std::string env_path = path + "/env";
    if (!it->is_object()) throw ConfigError(env_path, "must be an object of strings");
    for (const auto& [name, value] : it->items()) {
      const std::string at = child_path(env_path, name);
      if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
        throw ConfigError(at, "is not a valid environment variable name");
      }
      if (is_job_variable(name)) throw ConfigError(at, "is set by oncely for each job");
      const std::string text = substitute_env(string_at(value, at), at, &handler.secrets);
      if (text.find('\0') != std::string::npos) throw ConfigError(at, "must not contain a NUL character");
      declared.emplace_back(name, text);
    }
  }
  handler.environment = build_environment(declared);

  auto shared = std::make_shared<const ExecHandler>(std::move(handler));
  return [shared](JobContext& job) { (*shared)(job); };
}

}  // namespace oncely::detail
