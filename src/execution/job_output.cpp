#include "execution/job_output.hpp"

#include <string_view>

#include <nlohmann/json.hpp>

#include "oncely/errors.hpp"
#include "support/exact_json.hpp"

namespace oncely::detail {
namespace {

/// Whether JSON text `text` escapes a NUL character (\u0000 after an odd run of backslashes).
bool escapes_nul(std::string_view text) {
  for (std::size_t at = text.find("u0000"); at != std::string_view::npos; at = text.find("u0000", at + 1)) {
    std::size_t backslashes = 0;
    while (backslashes < at && text[at - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 1) return true;
  }
  return false;
}

}  // namespace

void check_output_size(std::size_t bytes) {
  if (bytes > kMaxOutputBytes) {
    throw PermanentError("output is " + std::to_string(bytes) + " bytes of JSON, over the limit of " +
                         std::to_string(kMaxOutputBytes) + " (64 KiB)");
  }
}

std::string checked_output(std::string text) {
  check_output_size(text.size());
  // Before the parse, which fails on it too: a number of a million digits would not fit
  // jsonb's numeric, so those beyond a double's range are refused, as in payloads.
  if (const auto number = exact_json::first_number_beyond_double(text)) {
    throw PermanentError("output number " + abbreviated_number(*number) + " is out of range for a double");
  }
  if (!nlohmann::json::accept(text)) throw PermanentError("output is not JSON");
  // jsonb refuses the NUL character: the completion that stores it would fail.
  if (escapes_nul(text)) throw PermanentError("output holds a \\u0000 character, which Postgres jsonb cannot store");
  return text;
}

std::string abbreviated_number(const std::string& number) {
  if (number.size() <= 40) return number;
  return number.substr(0, 20) + "..." + number.substr(number.size() - 8) + " (" + std::to_string(number.size()) +
         " characters)";
}

}  // namespace oncely::detail
