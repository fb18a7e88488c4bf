#pragma once
// Who may use the console and how a request proves it: the one place for logins, sessions,
// CSRF and the same-origin rule. Pure decisions (what a login file says, whether an
// address is loopback, whether a POST may change anything) are separate from the session
// table, so unit tests reach them without a server.

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::web {

enum class Role { viewer, operator_ };
[[nodiscard]] std::string_view to_string(Role role);

/// One login: a secret token and the role and name it gives (the name is what the audit
/// log says did something).
struct Credential {
  Role role = Role::viewer;
  std::string name;
  std::string token;
};

/// Shortest token accepted: a guessable token is no login.
inline constexpr std::size_t kMinTokenLength = 16;

/// A login file's text: one login a line, "ROLE NAME TOKEN" (ROLE operator or viewer),
/// blank lines and lines starting with '#' ignored. Throws ConfigError naming the line.
std::vector<Credential> parse_login_file(std::string_view text);

/// The logins from ONCELY_WEB_OPERATOR_TOKEN / ONCELY_WEB_VIEWER_TOKEN (names "operator",
/// "viewer") and, when `path` is given, from that file, which must be readable by its
/// owner only (ConfigError otherwise: a token others can read is no secret).
std::vector<Credential> load_credentials(const std::optional<std::string>& path);

/// 127.0.0.0/8, ::1 and "localhost".
[[nodiscard]] bool is_loopback(std::string_view host) noexcept;

/// Equal, in time that depends on the lengths only (never on where they differ).
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

/// The credential whose token is `token`, every one compared in constant time.
[[nodiscard]] std::optional<Credential> find_credential(const std::vector<Credential>& credentials,
                                                        std::string_view token);

/// Why a state-changing request is refused, or nothing when it may go on. A change needs
/// `Sec-Fetch-Site: same-origin` (the browser's word that the page that sent it is ours:
/// another port of this host is same-site, not same-origin, and is refused too; a client
/// that sends no such header is refused) and the session's CSRF token in the form.
[[nodiscard]] std::optional<std::string> refuse_change(std::optional<std::string_view> sec_fetch_site,
                                                       std::string_view session_csrf,
                                                       std::optional<std::string_view> form_csrf);

/// Hex of `bytes` bytes from the kernel's random source (session ids, CSRF tokens, nonces).
[[nodiscard]] std::string random_hex(std::size_t bytes);

struct Session {
  std::string id;
  std::string csrf;
  Role role = Role::viewer;
  std::string name;
  std::chrono::steady_clock::time_point last_seen;
};

/// The sessions, in memory (a restart logs everyone out). Thread-safe.
class SessionTable {
 public:
  explicit SessionTable(std::chrono::seconds idle_limit = std::chrono::hours(12), std::size_t max_sessions = 10000);
  /// A new session; the oldest is dropped when the table is full.
  Session create(Role role, std::string name);
  /// The session with this id, unless it has been idle too long; touches it.
  std::optional<Session> find(std::string_view id);
  void remove(std::string_view id);

 private:
  std::mutex mutex_;
  std::map<std::string, Session, std::less<>> sessions_;
  std::chrono::seconds idle_limit_;
  std::size_t max_sessions_;
};

}  // namespace oncely::web
