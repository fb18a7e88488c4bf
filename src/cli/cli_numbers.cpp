#include "cli/cli_numbers.hpp"

#include <charconv>
#include <system_error>

#include "support/text.hpp"

namespace oncely::cli {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// What was given, in quotes; a long text only by its head, so that a pasted 400-digit
// number is not repeated back in full.
std::string quoted(std::string_view text) {
  constexpr std::size_t kShown = 40;
  if (text.size() <= kShown) return "\"" + std::string(text) + "\"";
  return "\"" + detail::utf8_head(text, kShown) + "...\" (" + std::to_string(text.size()) + " characters)";
}

std::string refusal(std::string_view what, const std::string& range, std::string_view text) {
  return "expected " + std::string(what) + " (" + range + "), got " + quoted(text);
}

// The range in words. An open-ended one (up to the largest id) reads better without its
// 19 digits, except for a number beyond it.
std::string integer_range(const IntegerRule& rule, bool beyond_max) {
  if (rule.max == kMaxId && !beyond_max) {
    if (rule.min == 1) return "a positive integer";
    if (rule.min == 0) return "a non-negative integer";
  }
  return "an integer from " + std::to_string(rule.min) + " to " + std::to_string(rule.max);
}

std::string decimal_text(double v) {
  char buffer[64];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v, std::chars_format::fixed).ptr;
  return std::string(buffer, end);
}

std::string decimal_range(const DecimalRule& rule) {
  return "a number from " + decimal_text(rule.min) + " to " + decimal_text(rule.max);
}

// The range as --help shows it after the type: "INT:1..10000", "INT:POSITIVE" (as CLI11's
// own checks named the open-ended ones).
std::string integer_tag(const IntegerRule& rule) {
  if (rule.max == kMaxId && rule.min == 1) return "POSITIVE";
  if (rule.max == kMaxId && rule.min == 0) return "NONNEGATIVE";
  return std::to_string(rule.min) + ".." + std::to_string(rule.max);
}

// An optional sign, then the rest: from_chars takes '-' but not '+'.
std::string_view without_plus(std::string_view text) { return text.starts_with('+') ? text.substr(1) : text; }

// Digits only, after the sign: no space, no "0x", no exponent, no "nan".
bool spells_integer(std::string_view text) {
  text = without_plus(text);
  if (text.starts_with('-')) text.remove_prefix(1);
  if (text.empty()) return false;
  for (const char c : text) {
    if (!is_digit(c)) return false;
  }
  return true;
}

// Digits with at most one '.' among them, after the sign, and at least one digit.
bool spells_decimal(std::string_view text) {
  text = without_plus(text);
  if (text.starts_with('-')) text.remove_prefix(1);
  bool digit = false;
  bool point = false;
  for (const char c : text) {
    if (is_digit(c)) {
      digit = true;
    } else if (c == '.' && !point) {
      point = true;
    } else {
      return false;
    }
  }
  return digit;
}

}  // namespace

std::optional<std::string> integer_refusal(std::string_view text, const IntegerRule& rule) {
  if (!spells_integer(text)) return refusal(rule.what, integer_range(rule, false), text);
  const std::string_view digits = without_plus(text);
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error == std::errc::result_out_of_range) {  // beyond 64 bits: too large or too small
    return refusal(rule.what, integer_range(rule, !digits.starts_with('-')), text);
  }
  if (value < rule.min || value > rule.max) return refusal(rule.what, integer_range(rule, value > rule.max), text);
  return std::nullopt;
}

std::optional<std::string> decimal_refusal(std::string_view text, const DecimalRule& rule) {
  if (!spells_decimal(text)) return refusal(rule.what, decimal_range(rule), text);
  const std::string_view digits = without_plus(text);
  double value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  // Beyond a double (400 digits, or a fraction that small) is out of every range.
  if (error != std::errc() || end != digits.data() + digits.size() || value < rule.min || value > rule.max) {
    return refusal(rule.what, decimal_range(rule), text);
  }
  return std::nullopt;
}

std::int64_t integer_value(std::string_view text) {
  const std::string_view digits = without_plus(text);
  std::int64_t value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return value;
}

CLI::Validator integer(const IntegerRule& rule) {
  // CLI11 converts the text it is left with by strtoll(base 0): "010" would be read as 8.
  // Leaving it the decimal spelling of what was read makes "010" 10, as it reads.
  return CLI::Validator(
      [rule](std::string& text) {
        if (auto why = integer_refusal(text, rule)) return std::move(*why);
        text = std::to_string(integer_value(text));
        return std::string();
      },
      integer_tag(rule));
}

CLI::Validator decimal(const DecimalRule& rule) {
  return CLI::Validator([rule](std::string& text) { return decimal_refusal(text, rule).value_or(std::string()); },
                        decimal_text(rule.min) + ".." + decimal_text(rule.max));
}

}  // namespace oncely::cli
