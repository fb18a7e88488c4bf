#include "oncely/database_url.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <vector>

#include "support/text.hpp"

namespace oncely {
namespace {

constexpr std::string_view kMask = "***";

bool is_url(std::string_view s) { return s.starts_with("postgresql://") || s.starts_with("postgres://"); }

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// A span [begin, end) of the connection string that holds a secret.
struct Span {
  std::size_t begin = std::string::npos;
  std::size_t end = std::string::npos;
  [[nodiscard]] bool found() const { return begin != std::string::npos; }
};

// postgresql://user:SECRET@host/db?password=SECRET2 -- returns every password span, in
// the order libpq reads them (the last one is the password it sends).
//
// libpq takes the user info up to the first '@' before a '/', and '?' and '#' do not end
// it: a password may hold them unencoded (`u:pa?ss#word@host`), and '@' or '/' too in a
// string libpq then misreads. Masking errs on the side of the secret: the user info runs
// to the last '@' of the string, so whatever a password holds is inside the span; an '@'
// later in the query string only masks more than needed. Query parameters named password
// are found wherever they are, their names percent-decoded as libpq decodes them
// (`?%70assword=` is a password too).
std::vector<Span> url_password_spans(std::string_view url) {
  std::vector<Span> spans;
  const std::size_t authority = url.find("://") + 3;
  const std::size_t at = url.rfind('@');
  if (at != std::string_view::npos && at >= authority) {
    const std::size_t colon = url.find(':', authority);
    if (colon != std::string_view::npos && colon < at) {
      spans.push_back({colon + 1, at});
      // And the password as libpq reads it, which ends at the first '@' (before any '/'):
      // inside the span above, so it masks nothing more, but scrub() needs its text.
      const std::size_t first = url.find_first_of("@/", authority);
      if (first != std::string_view::npos && first < at && url[first] == '@' && colon < first) {
        spans.push_back({colon + 1, first});
      }
    }
  }
  for (std::size_t pos = url.find_first_of("?&", authority); pos != std::string_view::npos;
       pos = url.find_first_of("?&", pos + 1)) {
    const std::size_t end = std::min(url.find('&', pos + 1), url.size());
    const std::size_t equals = url.find('=', pos + 1);
    if (equals == std::string_view::npos || equals >= end) continue;
    if (percent_decode(url.substr(pos + 1, equals - pos - 1)) == "password") spans.push_back({equals + 1, end});
  }
  return spans;
}

// Spans sorted, overlapping ones (a query password inside the masked user info) made one.
std::vector<Span> merged(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::vector<Span> out;
  for (const Span& span : spans) {
    if (!out.empty() && span.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, span.end);
    } else {
      out.push_back(span);
    }
  }
  return out;
}

// host=x password='se cret' user=y -- the value span, quotes included when quoted.
std::vector<Span> keyword_password_spans(std::string_view s) {
  std::vector<Span> spans;
  std::size_t pos = 0;
  while (pos < s.size()) {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    const std::size_t key_begin = pos;
    while (pos < s.size() && s[pos] != '=' && !std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    const std::string_view key = s.substr(key_begin, pos - key_begin);
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    if (pos >= s.size() || s[pos] != '=') break;  // malformed: libpq will say so
    ++pos;
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    const std::size_t value_begin = pos;
    if (pos < s.size() && s[pos] == '\'') {
      ++pos;
      while (pos < s.size() && s[pos] != '\'') pos += (s[pos] == '\\') ? 2 : 1;
      pos = std::min(pos + 1, s.size());
    } else {
      while (pos < s.size() && !std::isspace(static_cast<unsigned char>(s[pos]))) {
        pos += (s[pos] == '\\') ? 2 : 1;
      }
      pos = std::min(pos, s.size());
    }
    if (key == "password") spans.push_back({value_begin, pos});
  }
  return spans;
}

std::vector<Span> password_spans(std::string_view s) {
  return is_url(s) ? url_password_spans(s) : keyword_password_spans(s);
}

std::string unquote_keyword_value(std::string_view v) {
  if (v.size() >= 2 && v.front() == '\'') v = v.substr(1, v.size() - 2);
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    // A backslash takes the next byte as it is; a last one is dropped, as libpq drops it.
    if (v[i] == '\\' && ++i == v.size()) break;
    out.push_back(v[i]);
  }
  return out;
}

// Every password `conninfo` gives, as libpq decodes it (libpq sends the last one).
std::vector<std::string> decoded_passwords(const std::string& conninfo) {
  std::vector<std::string> out;
  for (const Span& span : password_spans(conninfo)) {
    const std::string_view raw = std::string_view(conninfo).substr(span.begin, span.end - span.begin);
    out.push_back(is_url(conninfo) ? percent_decode(raw) : unquote_keyword_value(raw));
  }
  return out;
}

}  // namespace

DatabaseUrl::DatabaseUrl(std::string conninfo) : conninfo_(std::move(conninfo)) {
  const auto passwords = decoded_passwords(conninfo_);
  if (!passwords.empty()) password_ = passwords.back();
}

std::string DatabaseUrl::redacted() const {
  std::string out = conninfo_;
  const auto spans = merged(password_spans(conninfo_));
  // Replace from the back so earlier offsets stay valid.
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) out.replace(it->begin, it->end - it->begin, kMask);
  return out;
}

std::string DatabaseUrl::scrub(std::string text) const {
  detail::replace_all(text, conninfo_, redacted());
  // Each password, not only the one libpq sends (a message may quote any), as written and
  // as decoded, in one pass: every byte of any occurrence is masked, so a shorter one
  // cannot cut a longer one that holds it (password=h password=..h..), and a password that
  // is part of the mask ("*") cannot multiply the text as it is masked again.
  std::vector<std::string> secrets = decoded_passwords(conninfo_);
  for (const Span& span : merged(password_spans(conninfo_))) {
    secrets.push_back(conninfo_.substr(span.begin, span.end - span.begin));
  }
  return detail::mask_secrets(text, secrets);
}

}  // namespace oncely
