#pragma once
// DatabaseUrl: a libpq connection string that cannot be logged by accident.

#include <string>

namespace oncely {

/// A libpq connection string, either a URL (postgresql://user:secret@host/db) or the
/// key=value form (host=... password=secret). It has no operator<< and no fmt formatter
/// on purpose: print redacted(), hand expose() only to libpq.
class DatabaseUrl {
 public:
  explicit DatabaseUrl(std::string conninfo);

  /// The string to pass to libpq. Never log it.
  [[nodiscard]] const std::string& expose() const noexcept { return conninfo_; }

  /// The same string with any password replaced by "***"; safe for logs and errors.
  [[nodiscard]] std::string redacted() const;

  /// Returns text (an error message, say) with every occurrence of this URL's password
  /// and of the raw URL replaced, for messages that libpq or the server built.
  [[nodiscard]] std::string scrub(std::string text) const;

 private:
  std::string conninfo_;
  std::string password_;  // empty when the string carries none
};

}  // namespace oncely
