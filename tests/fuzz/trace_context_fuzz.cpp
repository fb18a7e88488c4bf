// W3C traceparent: is_traceparent agrees with migration 0008's CHECK (the same rule written
// as a regular expression and the SQL conditions), and a child of a valid parent is a
// valid version-00 traceparent with the parent's trace id and flags and a new span id.
#include <cstdint>
#include <random>
#include <regex>
#include <string>

#include "fuzz_check.hpp"
#include "support/trace_context.hpp"

namespace {

// Migration 0008: trace_context ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
// AND left(.., 2) <> 'ff' AND (left(.., 2) <> '00' OR length = 55) AND trace id and span
// id not all zeros AND length <= 512. ('$' in a POSIX regex is the end of the text here:
// the fuzzer's newlines must not end it early, so \n is refused before the match.)
bool check_constraint(const std::string& t) {
  static const std::regex pattern("[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?", std::regex::extended);
  if (t.size() > 512 || !std::regex_match(t, pattern)) return false;
  if (t.compare(0, 2, "ff") == 0) return false;
  if (t.compare(0, 2, "00") == 0 && t.size() != 55) return false;
  if (t.substr(3, 32) == std::string(32, '0') || t.substr(36, 16) == std::string(16, '0')) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace oncely::detail;
  const std::string text(oncely::fuzz::as_text(data, size));
  const bool valid = is_traceparent(text);
  if (size <= 600) FUZZ_CHECK(valid == check_constraint(text), text, valid ? "accepted" : "refused");
  const std::string_view id = trace_id_of(text);
  FUZZ_CHECK(id.empty() != valid, text, std::string(id));
  std::mt19937_64 rng(size);
  const auto child = child_traceparent(text, rng);
  FUZZ_CHECK(child.has_value() == valid, text, child.value_or("(none)"));
  if (!child) return 0;
  FUZZ_CHECK(is_traceparent(*child), text, *child);
  FUZZ_CHECK(child->size() == 55 && child->compare(0, 3, "00-") == 0, text, *child);
  FUZZ_CHECK(trace_id_of(*child) == id, text, *child);
  FUZZ_CHECK(child->substr(53, 2) == text.substr(53, 2), text, *child);
  FUZZ_CHECK(trace_field(text) == " trace_id=" + std::string(id), text, trace_field(text));
  return 0;
}
