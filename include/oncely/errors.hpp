#pragma once
// oncely's exception types, shaped by what the caller should do about them.

#include <chrono>
#include <stdexcept>
#include <string>

namespace oncely {

/// Base of every error oncely throws on purpose.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Input the user must fix (a bad schema name, URL, duration, config file...).
/// path() names where the problem is, e.g. "/queues/bulk/backof" in a config file.
class ConfigError : public Error {
 public:
  ConfigError(std::string path, const std::string& what)
      : Error(path.empty() ? what : path + ": " + what), path_(std::move(path)) {}
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// The message without its "path: " prefix, to raise it again at another path.
  [[nodiscard]] std::string reason() const { return std::string(what()).substr(path_.empty() ? 0 : path_.size() + 2); }

 private:
  std::string path_;
};

/// A value given in code or on the command line that can never be valid: a job's fields
/// (empty kind, a priority beyond smallint, a key over its bound), a dead-letter filter.
/// A ConfigError too (its path names the field), so that one handler serves every kind of
/// bad input; the command line exits 2 for both.
class InvalidArgument : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// The database cannot be used as it is: unreachable, or a schema this binary cannot serve.
/// Messages never contain a password.
struct DatabaseError : Error {
  using Error::Error;
};

/// Thrown by a handler: this job can never succeed. It goes to dead_letters at once
/// (class "permanent") without further attempts.
struct PermanentError : Error {
  using Error::Error;
};

/// Thrown by a handler: retry this job after delay() instead of the queue's backoff.
/// Still counts as a failed attempt; the last allowed attempt dead-letters as usual.
class RetryAfter : public Error {
 public:
  explicit RetryAfter(std::chrono::milliseconds delay, const std::string& why = "retry requested")
      : Error(why), delay_(delay) {}
  [[nodiscard]] std::chrono::milliseconds delay() const noexcept { return delay_; }

 private:
  std::chrono::milliseconds delay_;
};

}  // namespace oncely
