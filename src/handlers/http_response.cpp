// The http handler's reading of a response, pure (declared in handlers/classification.hpp):
// which statuses retry, the delay a Retry-After header asks for, and what of the body is
// kept. Apart from the
// handler's libcurl transfer so that unit tests and tests/fuzz call it directly.
#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "handlers/classification.hpp"
#include "handlers/declaration.hpp"
#include "support/text.hpp"

namespace oncely::detail {

FailureClass http_failure_class(long status) {
  if (status == 408 || status == 429 || (status >= 500 && status <= 599)) return FailureClass::retryable;
  return FailureClass::permanent;
}

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value, std::time_t now) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!value.empty() && blank(value.front())) value.remove_prefix(1);
  while (!value.empty() && blank(value.back())) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  // Capped in seconds, before milliseconds: a date millions of years ahead would overflow.
  const std::int64_t cap = std::chrono::duration_cast<std::chrono::seconds>(kMaxRetryAfter).count();
  const auto capped = [cap](std::int64_t seconds) -> std::chrono::milliseconds {
    return std::chrono::seconds(std::clamp<std::int64_t>(seconds, 0, cap));
  };
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::int64_t seconds = 0;
    for (const char c : value) seconds = std::min<std::int64_t>(seconds * 10 + (c - '0'), cap + 1);
    return capped(seconds);
  }
  const std::time_t at = curl_getdate(std::string(value).c_str(), nullptr);
  if (at == static_cast<std::time_t>(-1)) return std::nullopt;
  return capped(static_cast<std::int64_t>(at) - static_cast<std::int64_t>(now));
}

std::size_t response_bytes_to_keep(const std::vector<std::string>& secrets) {
  std::size_t longest = 0;
  for (const std::string& secret : secrets) longest = std::max(longest, secret.size());
  return kResponseDetailBytes + longest;
}

ResponseExcerpt response_excerpt(std::string_view body_head, const std::vector<std::string>& secrets) {
  // Scrubbed before it is cut: a secret that runs past the cut is masked whole.
  const std::string scrubbed = mask_secrets(std::string(body_head), secrets);
  return {summary_line(scrubbed, kResponseMessageBytes), utf8_head(scrubbed, kResponseDetailBytes)};
}

}  // namespace oncely::detail
