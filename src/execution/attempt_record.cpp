#include "execution/attempt_record.hpp"

#include <atomic>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "support/db.hpp"

namespace oncely::detail {
namespace {

// A record statement is one short autocommit statement: waiting this long means waiting
// for a connection (a pooler's pool), not for the server.
constexpr auto kPoolWaitWarning = std::chrono::seconds(5);

}  // namespace

RecordConnection::RecordConnection(const Store& store, DatabaseUrl url, std::shared_ptr<spdlog::logger> log,
                                   bool shared)
    : store_(store), url_(std::move(url)), log_(std::move(log)), shared_(shared) {}

void RecordConnection::ensure_open() {
  if (conn_ && conn_->is_open()) return;
  conn_.reset();
  auto conn = connect(url_);
  store_.prepare(*conn);
  if (!watch_ && behind_pooler(*conn)) {
    const std::string pool = pool_name(url_);
    static std::atomic<bool> warned{false};  // once per process, not once per thread
    if (!warned.exchange(true)) {
      log_->warn(
          "the attempt records go through a connection pooler (pool {}): behind a transaction-mode pooler each "
          "worker thread then needs a second server connection while its batch holds one, and a pool smaller "
          "than the worker threads deadlocks; set ONCELY_LISTEN_DATABASE_URL to a direct connection",
          pool);
    }
    watch_ = std::make_unique<PoolWaitWatch>("an attempt record statement", pool, log_, kPoolWaitWarning);
  }
  conn_ = std::move(conn);
}

bool RecordConnection::is_open() {
  std::lock_guard lock(mutex_);
  return conn_ && conn_->is_open();
}

void RecordConnection::drop() noexcept {
  std::lock_guard lock(mutex_);
  if (!shared_ || (conn_ && !conn_->is_open())) conn_.reset();
}

AttemptRecord::AttemptRecord(const Store& store, std::shared_ptr<RecordConnection> conn, std::int64_t worker_id)
    : store_(store), conn_(std::move(conn)), worker_id_(worker_id) {}

void AttemptRecord::open() {
  conn_->run([&](pqxx::connection& c) {
    if (stats_key_ != 0) return;
    pqxx::nontransaction tx(c);
    stats_key_ = store_.attempts_in_flight.new_stats_key(tx);
  });
}

bool AttemptRecord::is_open() const { return conn_->is_open(); }

void AttemptRecord::drop_connection() noexcept { conn_->drop(); }

std::vector<UnfinishedAttempts> AttemptRecord::start(const std::vector<std::int64_t>& job_ids, int job_backend_pid,
                                                     bool exclusive) {
  return conn_->run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    StartedRecord started = store_.attempts_in_flight.start(tx, worker_id_, job_ids, job_backend_pid, exclusive);
    id_ = started.id;
    return std::move(started.unfinished);
  });
}

void AttemptRecord::clear() {
  conn_->run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    store_.attempts_in_flight.clear(tx, id_);
  });
  id_ = 0;
}

void AttemptRecord::retire(const std::vector<std::int64_t>& started) {
  if (id_ == 0 || !conn_->is_open()) return;
  conn_->run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    store_.attempts_in_flight.narrow(tx, id_, started);
  });
  id_ = 0;
}

}  // namespace oncely::detail
