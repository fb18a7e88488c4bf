#include "support/trace_context.hpp"

#include <algorithm>

namespace oncely::detail {
namespace {

constexpr std::size_t kVersion00Length = 55;
constexpr std::size_t kMaxLength = 512;

bool lower_hex(std::string_view s) noexcept {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool all_zero(std::string_view s) noexcept {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; });
}

}  // namespace

bool is_traceparent(std::string_view t) noexcept {
  if (t.size() < kVersion00Length || t.size() > kMaxLength) return false;
  if (t[2] != '-' || t[35] != '-' || t[52] != '-') return false;
  const std::string_view version = t.substr(0, 2), trace = t.substr(3, 32), span = t.substr(36, 16),
                         flags = t.substr(53, 2);
  if (!lower_hex(version) || !lower_hex(trace) || !lower_hex(span) || !lower_hex(flags)) return false;
  if (version == "ff" || all_zero(trace) || all_zero(span)) return false;
  if (version == "00") return t.size() == kVersion00Length;
  if (t.size() == kVersion00Length) return true;
  if (t[kVersion00Length] != '-') return false;
  const std::string_view rest = t.substr(kVersion00Length + 1);
  return std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '!' && c <= '~'; });
}

std::optional<std::string> child_traceparent(std::string_view parent, std::mt19937_64& rng) {
  if (!is_traceparent(parent)) return std::nullopt;
  std::uint64_t span = 0;
  while (span == 0) span = rng();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "00-";
  out += parent.substr(3, 32);
  out += '-';
  for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(span >> shift) & 0xf];
  out += '-';
  out += parent.substr(53, 2);
  return out;
}

std::string_view trace_id_of(std::string_view traceparent) noexcept {
  return is_traceparent(traceparent) ? traceparent.substr(3, 32) : std::string_view();
}

std::string trace_field(const std::optional<std::string>& trace_context) {
  if (!trace_context) return {};
  const std::string_view id = trace_id_of(*trace_context);
  return id.empty() ? std::string() : " trace_id=" + std::string(id);
}

}  // namespace oncely::detail
