#include "support/pooler.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "support/service_thread.hpp"
#include "support/steady_clock.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

// The server's own pid for this session; through PgBouncer, that of whichever server
// connection this statement ran on.
constexpr std::string_view kServerBackendPid = "SELECT pg_backend_pid()";

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

bool prepared_statements_allowed(bool configured) {
  const char* raw = std::getenv(std::string(kPreparedStatementsVariable).c_str());
  if (raw == nullptr || *raw == '\0') return configured;
  const std::string value = lower(raw);
  static constexpr std::array<std::string_view, 4> kOff{"0", "false", "off", "no"};
  static constexpr std::array<std::string_view, 4> kOn{"1", "true", "on", "yes"};
  if (std::find(kOff.begin(), kOff.end(), value) != kOff.end()) return false;
  if (std::find(kOn.begin(), kOn.end(), value) != kOn.end()) return configured;
  throw ConfigError(std::string(kPreparedStatementsVariable),
                    "must be 0 (no prepared statements) or 1, got '" + printable(raw) + "'");
}

bool is_prepared_statement_clash(std::string_view sqlstate) noexcept {
  return sqlstate == "42P05" || sqlstate == "26000";
}

std::string with_pooler_hint(std::string message) {
  // The server's English messages (lc_messages): 42P05 and 26000 of a named statement.
  const auto at = message.find("prepared statement \"");
  if (at == std::string::npos || message.find(kPreparedStatementHint) != std::string::npos) return message;
  if (message.find("already exists", at) == std::string::npos &&
      message.find("does not exist", at) == std::string::npos) {
    return message;
  }
  while (!message.empty() && (message.back() == ' ' || message.back() == '\n')) message.pop_back();
  return message + " (" + std::string(kPreparedStatementHint) + ")";
}

bool behind_pooler(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  return tx.exec1(std::string(kServerBackendPid))[0].as<int>() != conn.backendpid();
}

int server_backend_pid(pqxx::transaction_base& tx) { return tx.exec1(std::string(kServerBackendPid))[0].as<int>(); }

std::string pool_name(const DatabaseUrl& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.expose().c_str(), &error);
  if (options == nullptr) {
    PQfreemem(error);
    return url.redacted();
  }
  std::string user, host, port, dbname;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "user") user = o->val;
    if (key == "host") host = o->val;
    if (key == "port") port = o->val;
    if (key == "dbname") dbname = o->val;
  }
  PQconninfoFree(options);
  // What libpq would use for what the string leaves out.
  const auto env = [](const char* name, std::string fallback) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::string(value) : fallback;
  };
  if (user.empty()) user = env("PGUSER", "(the OS user)");
  if (host.empty()) host = env("PGHOST", "localhost");
  if (port.empty()) port = env("PGPORT", "5432");
  if (dbname.empty()) dbname = env("PGDATABASE", user);
  return printable(user + "@" + host + ":" + port + "/" + dbname);
}

struct PoolWaitWatch::State {
  std::string what;
  std::string pool;
  std::shared_ptr<spdlog::logger> log;
  std::chrono::milliseconds threshold;
  std::atomic<std::int64_t> since_ms{0};  // 0: no statement running
};

PoolWaitWatch::PoolWaitWatch(std::string what, std::string pool, std::shared_ptr<spdlog::logger> log,
                             std::chrono::milliseconds threshold)
    : state_(std::make_shared<State>()) {
  state_->what = std::move(what);
  state_->pool = std::move(pool);
  state_->log = std::move(log);
  state_->threshold = threshold;
  thread_ = std::jthread([state = state_](const std::stop_token& stop) {
    std::int64_t warned_for = 0;  // the statement (its start) already warned about, and when
    std::int64_t warned_at = 0;
    while (pause_for(stop, std::chrono::milliseconds(250))) {
      const std::int64_t since = state->since_ms.load(std::memory_order_relaxed);
      if (since == 0) continue;
      const std::int64_t now = steady_ms();
      const std::int64_t limit = state->threshold.count();
      if (now - since < limit || (warned_for == since && now - warned_at < limit)) continue;
      warned_for = since;
      warned_at = now;
      state->log->warn(
          "{} has waited {} ms for the database: a pooler's pool {} may have no server connection free (each worker "
          "thread holds one for its open batch); give the pool more server connections than the worker threads, or "
          "set ONCELY_LISTEN_DATABASE_URL to a direct connection",
          state->what, now - since, state->pool);
    }
  });
}

PoolWaitWatch::~PoolWaitWatch() = default;

void PoolWaitWatch::begin() noexcept { state_->since_ms.store(steady_ms(), std::memory_order_relaxed); }
void PoolWaitWatch::end() noexcept { state_->since_ms.store(0, std::memory_order_relaxed); }

}  // namespace oncely::detail
