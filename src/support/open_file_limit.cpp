#include "support/open_file_limit.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

namespace oncely::detail {
namespace {

std::atomic<std::uint64_t> inherited{0};
constexpr std::uint64_t kOpenFileCeiling = std::uint64_t{1} << 20;  // Linux's default fs.nr_open

}  // namespace

std::uint64_t raised_open_file_limit(std::uint64_t soft, std::uint64_t hard) noexcept {
  return std::max(soft, std::min(hard, kOpenFileCeiling));
}

OpenFileLimit raise_open_file_limit() noexcept {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return OpenFileLimit{0, 0, errno};
  OpenFileLimit result{limit.rlim_cur, limit.rlim_cur, 0};
  const std::uint64_t target = raised_open_file_limit(limit.rlim_cur, limit.rlim_max);
  if (target == limit.rlim_cur) return result;
  limit.rlim_cur = static_cast<rlim_t>(target);
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    result.error = errno;
    return result;
  }
  inherited = result.before;
  result.after = target;
  return result;
}

std::uint64_t inherited_open_file_limit() noexcept { return inherited.load(); }

}  // namespace oncely::detail
