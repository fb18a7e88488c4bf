#pragma once
// The numbers the command line takes. Every numeric option and argument is checked by a
// rule from here, and a mistyped one is refused in one line that names the option, says
// what it expects and quotes what was given:
//   --id: expected a job id (a positive integer), got "xyz"
//   --limit: expected a number of jobs (an integer from 1 to 10000), got "1e3"
// CLI11 2.1's own checks (CLI::Range, PositiveNumber, NonNegativeNumber) compare doubles and
// print their bounds with std::to_string: DBL_MAX as 309 digits. Its conversion is strtoll
// with base 0, so "010" would be 8 and "0x10" 16; the integer check hands CLI11 the plain
// decimal it read instead.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace oncely::cli {

/// What an integer option accepts: [min, max], and what the number is, for the error line.
struct IntegerRule {
  std::string_view what;  // "a job id"
  std::int64_t min;
  std::int64_t max;
};

/// The same for a decimal number (digits with an optional fraction: no exponent, no nan).
struct DecimalRule {
  std::string_view what;  // "a percentage"
  double min;
  double max;
};

/// Why `text` is refused ("expected a job id (a positive integer), got \"0\""), or nothing
/// when it is an integer in range: an optional sign and decimal digits, nothing else.
[[nodiscard]] std::optional<std::string> integer_refusal(std::string_view text, const IntegerRule& rule);
/// The same for a decimal number.
[[nodiscard]] std::optional<std::string> decimal_refusal(std::string_view text, const DecimalRule& rule);

/// `text` (already accepted by integer_refusal) as the integer it spells.
[[nodiscard]] std::int64_t integer_value(std::string_view text);

/// CLI11 validators of the rules; CLI11 puts the option's name in front of the refusal.
/// Give them to Option::transform, not check: check() would convert the text as typed
/// (strtoll, base 0), not the plain decimal integer() leaves.
[[nodiscard]] CLI::Validator integer(const IntegerRule& rule);
[[nodiscard]] CLI::Validator decimal(const DecimalRule& rule);

inline constexpr std::int64_t kMaxId = std::numeric_limits<std::int64_t>::max();  // bigint identity columns
inline constexpr IntegerRule kJobId{"a job id", 1, kMaxId};
inline constexpr IntegerRule kDeadLetterId{"a dead-letter id", 1, kMaxId};
inline constexpr IntegerRule kBatchId{"a batch id", 1, kMaxId};
inline constexpr IntegerRule kPort{"a port", 0, 65535};

}  // namespace oncely::cli
