#include "web/auth.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "oncely/errors.hpp"

namespace oncely::web {

std::string_view to_string(Role role) { return role == Role::operator_ ? "operator" : "viewer"; }

std::vector<Credential> parse_login_file(std::string_view text) {
  std::vector<Credential> out;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string role, name, token, extra;
    if (!(words >> role) || role.starts_with('#')) continue;
    const std::string where = "login file line " + std::to_string(number);
    if (!(words >> name >> token) || (words >> extra)) throw ConfigError(where, "expected ROLE NAME TOKEN");
    Credential c;
    if (role == "operator") {
      c.role = Role::operator_;
    } else if (role == "viewer") {
      c.role = Role::viewer;
    } else {
      throw ConfigError(where, "role must be operator or viewer");
    }
    if (token.size() < kMinTokenLength) {
      throw ConfigError(where, "token shorter than " + std::to_string(kMinTokenLength) + " characters");
    }
    c.name = std::move(name);
    c.token = std::move(token);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Credential> load_credentials(const std::optional<std::string>& path) {
  std::vector<Credential> out;
  const auto from_env = [&](const char* variable, Role role, const char* name) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') return;
    if (std::string_view(value).size() < kMinTokenLength) {
      throw ConfigError(variable, "token shorter than " + std::to_string(kMinTokenLength) + " characters");
    }
    out.push_back({role, name, value});
  };
  from_env("ONCELY_WEB_OPERATOR_TOKEN", Role::operator_, "operator");
  from_env("ONCELY_WEB_VIEWER_TOKEN", Role::viewer, "viewer");
  if (path) {
    const int fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ConfigError("login-file", "cannot open " + *path);
    struct stat st {};
    const bool ok = ::fstat(fd, &st) == 0;
    ::close(fd);
    if (!ok) throw ConfigError("login-file", "cannot stat " + *path);
    if ((st.st_mode & 077) != 0) {
      throw ConfigError("login-file", *path + " is readable by others (chmod 600 it)");
    }
    std::ifstream file(*path);
    std::stringstream text;
    text << file.rdbuf();
    for (auto& c : parse_login_file(text.str())) out.push_back(std::move(c));
  }
  return out;
}

bool is_loopback(std::string_view host) noexcept {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Compare over the longer length so that a prefix costs what a mismatch does.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::optional<Credential> find_credential(const std::vector<Credential>& credentials, std::string_view token) {
  std::optional<Credential> found;
  for (const Credential& c : credentials) {  // no early exit: every token costs the same
    if (constant_time_equal(c.token, token) && !found) found = c;
  }
  return found;
}

std::optional<std::string> refuse_change(std::optional<std::string_view> sec_fetch_site, std::string_view session_csrf,
                                         std::optional<std::string_view> form_csrf) {
  if (!sec_fetch_site) return "refused: the request has no Sec-Fetch-Site header (not sent by this console's page)";
  if (*sec_fetch_site != "same-origin") {
    return "refused: the request came from another origin (Sec-Fetch-Site: " + std::string(*sec_fetch_site) + ")";
  }
  if (!form_csrf || session_csrf.empty() || !constant_time_equal(session_csrf, *form_csrf)) {
    return "refused: the form's CSRF token does not match the session (reload the page)";
  }
  return std::nullopt;
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  // getrandom(2): the kernel's CSPRNG with no file to open (none to run out of, nor to be
  // missing in a chroot); a read of up to 256 bytes is whole once the pool is initialised.
  for (std::size_t got = 0; got < bytes;) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(std::string("getrandom failed: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

SessionTable::SessionTable(std::chrono::seconds idle_limit, std::size_t max_sessions)
    : idle_limit_(idle_limit), max_sessions_(max_sessions) {}

Session SessionTable::create(Role role, std::string name) {
  Session s{random_hex(32), random_hex(32), role, std::move(name), std::chrono::steady_clock::now()};
  const std::lock_guard lock(mutex_);
  if (sessions_.size() >= max_sessions_) {
    auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
      return a.second.last_seen < b.second.last_seen;
    });
    sessions_.erase(oldest);
  }
  sessions_.emplace(s.id, s);
  return s;
}

std::optional<Session> SessionTable::find(std::string_view id) {
  const std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (now - it->second.last_seen > idle_limit_) {
    sessions_.erase(it);
    return std::nullopt;
  }
  it->second.last_seen = now;
  return it->second;
}

void SessionTable::remove(std::string_view id) {
  const std::lock_guard lock(mutex_);
  if (const auto it = sessions_.find(id); it != sessions_.end()) sessions_.erase(it);
}

}  // namespace oncely::web
