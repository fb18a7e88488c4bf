#include "support/http_framing.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace oncely::detail {
namespace {

// Just past the blank line ending the header, or npos.
std::size_t header_end(std::string_view in) {
  const std::size_t crlf = in.find("\r\n\r\n");
  if (crlf != std::string_view::npos) return crlf + 4;
  const std::size_t lf = in.find("\n\n");
  return lf == std::string_view::npos ? std::string_view::npos : lf + 2;
}

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x - 'A' + 'a' : x) == y;
         });
}

std::string_view trimmed(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
  return v;
}

// What the header says about a body: its length, 0 without one, nullopt when it cannot be
// waited for (chunked, a length that is not a number, two lengths).
std::optional<std::uint64_t> body_length(std::string_view header) {
  std::optional<std::uint64_t> length = 0;
  bool seen = false;
  std::size_t at = header.find('\n');  // past the request line
  while (at != std::string_view::npos && at + 1 < header.size()) {
    const std::size_t start = at + 1;
    at = header.find('\n', start);
    const std::string_view line =
        header.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    if (same_name(name, "transfer-encoding")) return std::nullopt;
    if (!same_name(name, "content-length")) continue;
    const std::string_view value = trimmed(line.substr(colon + 1));
    if (seen || value.empty() || value.size() > 18) return std::nullopt;
    std::uint64_t n = 0;
    for (const char c : value) {
      if (c < '0' || c > '9') return std::nullopt;
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    seen = true;
    length = n;
  }
  return length;
}

}  // namespace

RequestExtent request_extent(std::string_view in, std::size_t max_header, std::size_t max_body) noexcept {
  const std::size_t end = header_end(in.substr(0, std::min(in.size(), max_header)));
  if (end == std::string_view::npos) {
    return {in.size() >= max_header ? RequestExtent::Kind::header_too_large : RequestExtent::Kind::incomplete, 0};
  }
  const std::optional<std::uint64_t> body = body_length(in.substr(0, end));
  // Not waited for: httplib, finding the body missing or too long, answers 400 or 413.
  if (!body || *body > max_body) return {RequestExtent::Kind::complete, end};
  if (in.size() - end < *body) return {RequestExtent::Kind::incomplete, 0};
  return {RequestExtent::Kind::complete, end + static_cast<std::size_t>(*body)};
}

}  // namespace oncely::detail
