#include "oncely/client.hpp"

#include <pqxx/pqxx>

#include "bulk_enqueue.hpp"
#include "db.hpp"
#include "oncely/errors.hpp"
#include "store.hpp"

namespace oncely {

struct Client::Impl {
  DatabaseUrl url;
  detail::Store store;
  std::unique_ptr<pqxx::connection> conn;  // opened on first use
};

Client::Client(DatabaseUrl url, std::string schema)
    : impl_(std::make_unique<Impl>(Impl{std::move(url), detail::Store(schema), nullptr})) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

std::int64_t Client::enqueue(const NewJob& job) {
  detail::validate_new_job(job);
  if (!impl_->conn || !impl_->conn->is_open()) impl_->conn = detail::connect(impl_->url);
  try {
    pqxx::work tx{*impl_->conn};
    const std::int64_t id = impl_->store.enqueue(tx, job);
    tx.commit();
    return id;
  } catch (const pqxx::broken_connection& e) {
    impl_->conn.reset();
    throw DatabaseError("enqueue failed, connection lost: " + detail::one_line(impl_->url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw DatabaseError("enqueue failed: " + detail::one_line(impl_->url, e.what()));
  }
}

std::int64_t Client::enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  return impl_->store.enqueue(tx, job);
}

namespace {

/// A row COPY refused, named like a validation error: "jobs[3].run_at: ...".
[[noreturn]] void throw_row_error(const detail::CopyRowError& e) {
  throw ConfigError("jobs[" + std::to_string(e.row()) + "]", e.what());
}

}  // namespace

std::vector<std::int64_t> Client::enqueue_batch(const std::vector<NewJob>& jobs) {
  detail::validate_jobs(jobs);
  if (jobs.empty()) return {};
  if (!impl_->conn || !impl_->conn->is_open()) impl_->conn = detail::connect(impl_->url);
  try {
    pqxx::work tx{*impl_->conn};
    std::vector<std::int64_t> ids = detail::copy_jobs(tx, impl_->store.schema(), jobs, /*with_ids=*/true);
    tx.commit();
    return ids;
  } catch (const detail::CopyRowError& e) {
    throw_row_error(e);
  } catch (const pqxx::broken_connection& e) {
    impl_->conn.reset();
    throw DatabaseError("enqueue failed, connection lost: " + detail::one_line(impl_->url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw DatabaseError("enqueue failed: " + detail::one_line(impl_->url, e.what()));
  }
}

std::vector<std::int64_t> Client::enqueue_batch(pqxx::transaction_base& tx, const std::vector<NewJob>& jobs) const {
  detail::validate_jobs(jobs);
  try {
    return detail::copy_jobs(tx, impl_->store.schema(), jobs, /*with_ids=*/true);
  } catch (const detail::CopyRowError& e) {
    throw_row_error(e);
  }
}

}  // namespace oncely
