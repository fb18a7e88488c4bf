// The http handler's reading of a failed response. Input: a Retry-After value, a newline,
// up to two secrets (one a line), and the response body. Retry-After gives no delay or
// one in [0, 24h]: delta-seconds exactly (capped), an HTTP date relative to now (a past
// one is 0). What is kept of the body (the message's one-line excerpt, the error detail's
// head) is valid UTF-8 within its bound (three bytes per byte kept, U+FFFD for an invalid one), on one line for the
// message, and holds no secret, not even the start of one that the excerpt's cut goes through.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "handlers/classification.hpp"
#include "handlers/declaration.hpp"
#include "support/text.hpp"

namespace {

using std::chrono::milliseconds;

bool valid_utf8(std::string_view s) { return oncely::detail::sanitize_utf8(s) == s && s.find('\0') == s.npos; }

std::string_view next_line(std::string_view& rest) {
  const std::size_t nl = rest.find('\n');
  const std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  return line;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace oncely::detail;
  const std::string_view input = oncely::fuzz::as_text(data, size);
  std::string_view rest = input;
  const std::string_view value = next_line(rest);

  constexpr std::time_t kNow = 1'790'000'000;  // 2026-09-21
  const auto delay = parse_retry_after(value, kNow);
  if (delay) {
    FUZZ_CHECK(*delay >= milliseconds(0) && *delay <= kMaxRetryAfter, input, std::to_string(delay->count()));
  }
  std::string_view trimmed = value;
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!trimmed.empty() && blank(trimmed.front())) trimmed.remove_prefix(1);
  while (!trimmed.empty() && blank(trimmed.back())) trimmed.remove_suffix(1);
  if (!trimmed.empty() && std::all_of(trimmed.begin(), trimmed.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // Delta-seconds: exact below the cap. (More than 6 digits is past 24h whatever they are.)
    std::string digits(trimmed.substr(trimmed.find_first_not_of('0') == std::string_view::npos
                                          ? trimmed.size() - 1
                                          : trimmed.find_first_not_of('0')));
    const milliseconds expected =
        digits.size() > 6 ? milliseconds(kMaxRetryAfter)
                          : std::min<milliseconds>(std::chrono::seconds(std::stoll(digits)), kMaxRetryAfter);
    FUZZ_CHECK(delay && *delay == expected, input, delay ? std::to_string(delay->count()) : "(none)");
  }
  // The same date from a later "now" never asks for a longer wait.
  if (delay) {
    const auto later = parse_retry_after(value, kNow + 3600);
    FUZZ_CHECK(later && *later <= *delay, input, later ? std::to_string(later->count()) : "(none)");
  }

  // Secrets as http headers hold them: no control characters or spaces (and no '*', which
  // the mask itself is made of).
  std::vector<std::string> secrets;
  for (int i = 0; i < 2; ++i) {
    const std::string_view line = next_line(rest);
    if (!line.empty() &&
        std::all_of(line.begin(), line.end(), [](char c) { return c > ' ' && c < 0x7f && c != '*'; })) {
      secrets.emplace_back(line);
    }
  }
  // What the handler reads of the body, and what it keeps of that.
  const auto [message, detail] = response_excerpt(rest.substr(0, response_bytes_to_keep(secrets)), secrets);
  // Each byte kept becomes at most three (an invalid one is U+FFFD).
  FUZZ_CHECK(valid_utf8(detail) && detail.size() <= 3 * 2048, input, detail);
  FUZZ_CHECK(valid_utf8(message) && message.size() <= 3 * 200 + 3, input, message);
  FUZZ_CHECK(message.find_first_of("\r\n\t") == std::string::npos, input, message);
  for (const std::string& secret : secrets) {
    FUZZ_CHECK(detail.find(secret) == std::string::npos, input, detail);
    FUZZ_CHECK(message.find(secret) == std::string::npos, input, message);
    // Nor the first bytes of a secret that the cut at 2048 bytes went through.
    for (std::size_t at = rest.find(secret); at != std::string_view::npos && at < 2048;
         at = rest.find(secret, at + 1)) {
      if (at + secret.size() <= 2048 || 2048 - at < 4) continue;
      FUZZ_CHECK(!detail.ends_with(rest.substr(at, 2048 - at)), input, detail.substr(detail.size() - (2048 - at)));
    }
  }
  return 0;
}
