#pragma once
// The process's open-file limit (RLIMIT_NOFILE). A worker raises its soft limit to the hard
// one at start: the soft default (1024) exists for programs that use select(), and a worker
// uses poll() everywhere (libpq, libcurl, its exec pipes, the metrics endpoint), while its
// descriptors are what database reconnects and exec jobs need under load. The programs an
// exec handler starts get the limit the worker started with back (they may use select()).
// `oncely web` raises its own the same way (libpq and its HTTP server use poll() too).

#include <cstdint>

namespace oncely::detail {

struct OpenFileLimit {
  std::uint64_t before = 0;  // the soft limit found
  std::uint64_t after = 0;   // the soft limit now
  int error = 0;             // errno of a getrlimit/setrlimit that failed; 0: none
};

/// The soft RLIMIT_NOFILE to run with: the hard limit, but not beyond 2^20 (an unlimited
/// hard limit cannot be a soft one), never below the current soft limit.
[[nodiscard]] std::uint64_t raised_open_file_limit(std::uint64_t soft, std::uint64_t hard) noexcept;

/// Raises the soft limit to raised_open_file_limit(soft, hard) and
/// remembers the one found for exec children. Call once, early, from the program's main
/// thread (the CLI's worker does; a program embedding the runtime decides for itself).
OpenFileLimit raise_open_file_limit() noexcept;

/// The soft limit found by raise_open_file_limit(), for exec children; 0 when it was not
/// raised (children inherit the process's).
std::uint64_t inherited_open_file_limit() noexcept;

}  // namespace oncely::detail
