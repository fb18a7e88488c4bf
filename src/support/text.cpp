#include "support/text.hpp"

#include <algorithm>

#include <cctype>

namespace oncely::detail {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is invalid
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t sequence_length(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = at(i);
  const std::size_t left = text.size() - i;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return left >= 2 && is_continuation(at(i + 1)) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3 || !is_continuation(at(i + 1)) || !is_continuation(at(i + 2))) return 0;
    if (b0 == 0xE0 && at(i + 1) < 0xA0) return 0;   // overlong
    if (b0 == 0xED && at(i + 1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4 || !is_continuation(at(i + 1)) || !is_continuation(at(i + 2)) || !is_continuation(at(i + 3))) return 0;
    if (b0 == 0xF0 && at(i + 1) < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && at(i + 1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const std::size_t n = sequence_length(bytes, i);
    if (n == 0 || bytes[i] == '\0') {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(bytes.substr(i, n));
    i += n;
  }
  return out;
}

std::string utf8_head(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() <= max_bytes) return sanitize_utf8(bytes);
  std::size_t end = max_bytes;
  // Step back over a character the cut would split (at most 3 continuation bytes).
  for (int k = 0; k < 3 && end > 0 && is_continuation(static_cast<unsigned char>(bytes[end])); ++k) --end;
  return sanitize_utf8(bytes.substr(0, end));
}

std::string utf8_tail(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() <= max_bytes) return sanitize_utf8(bytes);
  std::size_t begin = bytes.size() - max_bytes;
  for (int k = 0; k < 3 && begin < bytes.size() && is_continuation(static_cast<unsigned char>(bytes[begin])); ++k) {
    ++begin;
  }
  return sanitize_utf8(bytes.substr(begin));
}

std::string_view last_line(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
  std::size_t end = text.size();
  while (end > 0 && blank(text[end - 1])) --end;
  std::size_t begin = end;
  while (begin > 0 && text[begin - 1] != '\n') --begin;
  while (begin < end && blank(text[begin])) ++begin;
  return text.substr(begin, end - begin);
}

std::string summary_line(std::string_view text, std::size_t max_bytes) {
  std::string flat;
  bool pending_space = false;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7f) {
      pending_space = !flat.empty();
      continue;
    }
    if (pending_space) flat += ' ';
    pending_space = false;
    flat += c;
  }
  if (flat.size() <= max_bytes) return sanitize_utf8(flat);
  return utf8_head(flat, max_bytes) + "\u2026";
}

std::string printable(std::string_view text) {
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  return out;
}

bool has_control_character(std::string_view text, bool tab_allowed) {
  return std::any_of(text.begin(), text.end(), [tab_allowed](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && !(tab_allowed && c == '\t')) || byte == 0x7f;
  });
}

std::string child_path(std::string_view parent, std::string_view key) {
  std::string out = std::string(parent) + "/";
  for (const char c : printable(key)) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string fold_lines(std::string_view text) {
  std::string out;
  bool pending_space = false;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

std::string mask_secrets(std::string_view text, const std::vector<std::string>& secrets) {
  std::vector<bool> covered(text.size(), false);
  for (const std::string& secret : secrets) {
    if (secret.empty()) continue;
    for (std::size_t at = text.find(secret); at != std::string_view::npos; at = text.find(secret, at + 1)) {
      std::fill(covered.begin() + static_cast<std::ptrdiff_t>(at),
                covered.begin() + static_cast<std::ptrdiff_t>(at + secret.size()), true);
    }
  }
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!covered[i]) {
      out += text[i];
    } else if (i == 0 || !covered[i - 1]) {
      out += "***";
    }
  }
  return out;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

}  // namespace oncely::detail
