#include "execution/attempt_record.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include "support/db.hpp"

namespace oncely::detail {

AttemptRecord::AttemptRecord(const Store& store, DatabaseUrl url, std::int64_t worker_id,
                             std::shared_ptr<spdlog::logger> log)
    : store_(store), url_(std::move(url)), worker_id_(worker_id), log_(std::move(log)) {}

AttemptRecord::~AttemptRecord() {
  if (!is_open() || id_ == 0) return;
  try {
    pqxx::nontransaction tx(*conn_);
    store_.attempts_in_flight.remove(tx, id_);
  } catch (const std::exception& e) {
    log_->warn("could not remove attempt record {}: {}", id_, one_line(url_, e.what()));
  }
}

void AttemptRecord::open() {
  if (!conn_ || !conn_->is_open()) {
    conn_ = connect(url_);
    store_.prepare(*conn_);
  }
  if (id_ == 0) {
    pqxx::nontransaction tx(*conn_);
    id_ = store_.attempts_in_flight.create(tx, worker_id_);
  }
}

bool AttemptRecord::is_open() const { return conn_ && conn_->is_open(); }

void AttemptRecord::drop_connection() noexcept { conn_.reset(); }

std::vector<UnfinishedAttempts> AttemptRecord::start(const std::vector<std::int64_t>& job_ids, int job_backend_pid,
                                                     bool exclusive) {
  pqxx::nontransaction tx(*conn_);
  return store_.attempts_in_flight.start(tx, id_, worker_id_, job_ids, job_backend_pid, exclusive);
}

void AttemptRecord::clear() {
  pqxx::nontransaction tx(*conn_);
  store_.attempts_in_flight.clear(tx, id_);
}

void AttemptRecord::retire(const std::vector<std::int64_t>& started) {
  if (!is_open() || id_ == 0) return;
  pqxx::nontransaction tx(*conn_);
  store_.attempts_in_flight.narrow(tx, id_, started);
  id_ = 0;
}

}  // namespace oncely::detail
