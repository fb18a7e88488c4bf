#pragma once
// PgBouncer: a local PgBouncer 1.18 (Debian's) in transaction mode in front of the test
// database, started by a test and stopped with it. A missing binary skips the test unless
// ONCELY_REQUIRE_PGBOUNCER=1 (scripts/test.sh, CI), which fails it instead.

#include <libpq-fe.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <pqxx/pqxx>

#include "support/http_attack.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace oncely::test {

/// The server's own URL: ONCELY_TEST_DIRECT_DATABASE_URL when the whole suite runs through
/// a pooler (tests/pgbouncer.sh), else ONCELY_TEST_DATABASE_URL.
inline std::string direct_database_url() {
  const char* direct = std::getenv("ONCELY_TEST_DIRECT_DATABASE_URL");
  return direct != nullptr && *direct != '\0' ? std::string(direct) : test_database_url();
}

inline std::string pgbouncer_binary() {
  const char* path = std::getenv("ONCELY_PGBOUNCER");
  return path != nullptr && *path != '\0' ? std::string(path) : std::string("/usr/sbin/pgbouncer");
}

/// Whether a PgBouncer test can run; false means skip (said once on stderr). Throws when
/// ONCELY_REQUIRE_PGBOUNCER=1 and the binary is missing.
inline bool pgbouncer_available() {
  if (::access(pgbouncer_binary().c_str(), X_OK) == 0) return true;
  const char* required = std::getenv("ONCELY_REQUIRE_PGBOUNCER");
  if (required != nullptr && std::string(required) == "1") {
    throw std::runtime_error(pgbouncer_binary() +
                             " not found but ONCELY_REQUIRE_PGBOUNCER=1 (apt-get install pgbouncer)");
  }
  return false;
}

class PgBouncer {
 public:
  /// Transaction mode, `pool_size` server connections per (database, user), in front of
  /// `server_url`'s host, port, database and user.
  explicit PgBouncer(int pool_size, const std::string& server_url = direct_database_url()) : port_(free_local_port()) {
    std::string host = "127.0.0.1", port = "5432", dbname, user;
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(server_url.c_str(), &error);
    if (options == nullptr) throw std::runtime_error("PgBouncer: cannot read the server URL");
    for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
      if (o->val == nullptr) continue;
      const std::string key = o->keyword;
      if (key == "host") host = o->val;
      if (key == "port") port = o->val;
      if (key == "dbname") dbname = o->val;
      if (key == "user") user = o->val;
    }
    PQconninfoFree(options);
    if (user.empty()) user = "postgres";
    if (dbname.empty()) dbname = user;
    ::chmod(dir_.path().c_str(), 0755);
    if (::getuid() == 0) {  // it refuses to run as root: it runs as postgres, and writes its log here
      if (const passwd* pg = ::getpwnam("postgres")) {
        if (::chown(dir_.path().c_str(), pg->pw_uid, pg->pw_gid) != 0)
          throw std::runtime_error("PgBouncer: chown failed");
      }
    }
    dir_.write("users.txt", "\"" + user + "\" \"\"\n", 0644);
    const std::string ini =
        "[databases]\n" + dbname + " = host=" + host + " port=" + port + " dbname=" + dbname + " user=" + user +
        "\n[pgbouncer]\n"
        "listen_addr = 127.0.0.1\nlisten_port = " +
        std::to_string(port_) + "\nunix_socket_dir =\nauth_type = trust\nauth_file = " + dir_.file("users.txt") +
        "\npool_mode = transaction\ndefault_pool_size = " + std::to_string(pool_size) +
        "\nmin_pool_size = 0\nreserve_pool_size = 0\nmax_client_conn = 1000\n"
        "max_db_connections = " +
        std::to_string(pool_size) + "\nadmin_users = " + user +
        "\nignore_startup_parameters = extra_float_digits,options\n"
        "log_connections = 0\nlog_disconnections = 0\nlogfile = " +
        dir_.file("pgbouncer.log") + "\n" + (::getuid() == 0 ? "user = postgres\n" : "");
    dir_.write("pgbouncer.ini", ini, 0644);
    process_ =
        std::make_unique<Process>(std::vector<std::string>{pgbouncer_binary(), "-q", dir_.file("pgbouncer.ini")});
    url = "postgresql://" + user + "@127.0.0.1:" + std::to_string(port_) + "/" + dbname;
    admin_url = "postgresql://" + user + "@127.0.0.1:" + std::to_string(port_) + "/pgbouncer";
    // Up once it answers a query through to the server.
    if (!wait_until(
            [&] {
              try {
                pqxx::connection c(url);
                pqxx::nontransaction tx(c);
                tx.exec("SELECT 1");
                return true;
              } catch (const std::exception&) {
                return !process_->exited() && false;
              }
            },
            std::chrono::seconds(10))) {
      throw std::runtime_error("PgBouncer did not start: " + log());
    }
  }
  ~PgBouncer() {
    if (process_) {
      process_->signal(SIGTERM);  // immediate shutdown: its server connections close
      process_->wait();
    }
  }
  PgBouncer(const PgBouncer&) = delete;
  PgBouncer& operator=(const PgBouncer&) = delete;

  /// Its log (for a failure message).
  [[nodiscard]] std::string log() const {
    std::ifstream in(dir_.file("pgbouncer.log"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  [[nodiscard]] int port() const noexcept { return port_; }

  std::string url;        // through the pooler
  std::string admin_url;  // its admin console (SHOW POOLS, SHOW SERVERS)

 private:
  TempDir dir_;
  int port_;
  std::unique_ptr<Process> process_;
};

}  // namespace oncely::test
