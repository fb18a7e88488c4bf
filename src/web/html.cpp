#include "web/html.hpp"

#include <cmath>
#include <cstdio>

namespace oncely::web {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

std::string percent_encode(std::string_view v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string query_string(const QueryPairs& pairs) {
  std::string out;
  for (const auto& [key, value] : pairs) {
    if (!value) continue;
    out += out.empty() ? '?' : '&';
    out += percent_encode(key) + "=" + percent_encode(*value);
  }
  return out;
}

std::string hidden(std::string_view name, std::string_view value) {
  return "<input type=\"hidden\" name=\"" + escape(name) + "\" value=\"" + escape(value) + "\">";
}

std::string short_time(std::string_view iso) {
  if (iso.size() < 19) return escape(iso);
  std::string out(iso.substr(0, 19));
  out[10] = ' ';
  return escape(out);
}

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %%", fraction * 100);
  return buffer;
}

std::string age(double s) {
  char buffer[32];
  if (s < 120) {
    std::snprintf(buffer, sizeof buffer, "%.0f s", s);
  } else if (s < 7200) {
    std::snprintf(buffer, sizeof buffer, "%.0f min", s / 60);
  } else if (s < 172800) {
    std::snprintf(buffer, sizeof buffer, "%.0f h", s / 3600);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f d", s / 86400);
  }
  return buffer;
}

std::string rate(double value) {
  char buffer[32];
  if (std::fabs(value - std::round(value)) < 0.005) {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f", value);
  }
  return buffer;
}

std::string job_links(const std::vector<std::int64_t>& ids) {
  std::string html;
  for (const std::int64_t id : ids) {
    const std::string text = std::to_string(id);
    html += (html.empty() ? "" : ", ") + std::string("<a href=\"/jobs/") + text + "\">" + text + "</a>";
  }
  return html;
}

}  // namespace oncely::web
