#include "oncely/client.hpp"

#include <pqxx/pqxx>

#include "api/bulk_enqueue.hpp"
#include "api/send_span.hpp"
#include "oncely/errors.hpp"
#include "store/job_copy.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/exact_json.hpp"
#include "support/telemetry.hpp"
#include "support/text.hpp"

namespace oncely {

struct Client::Impl {
  Impl(DatabaseUrl u, std::string_view schema, bool prepared) : url(std::move(u)), store(schema, prepared) {}

  DatabaseUrl url;
  detail::Store store;
  std::unique_ptr<pqxx::connection> conn;  // opened on first use

  pqxx::connection& connection();  // the open connection, (re)connected if need be
};

Client::Client(DatabaseUrl url, std::string schema, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(url), schema, options.prepared_statements)) {
  (void)detail::process_tracer();  // an OTEL_* variable that cannot be meant is an error here, not at an enqueue
}

pqxx::connection& Client::Impl::connection() {
  if (!conn || !conn->is_open()) {
    conn = detail::connect(url);
    store.prepare(*conn);
  }
  return *conn;
}
bool flush_telemetry(std::chrono::milliseconds timeout) {
  return detail::flush_telemetry(std::chrono::steady_clock::now() + timeout);
}

SpanExportCounts span_export_counts() {
  const detail::Tracer* tracer = detail::process_tracer();
  if (tracer == nullptr) return {};
  const detail::ExportCounts c = tracer->counts();
  return {c.exported, c.dropped_queue_full, c.dropped_export_failed};
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

std::int64_t Client::enqueue(const NewJob& job) { return enqueue_with_outcome(job).id; }

Enqueued Client::enqueue_with_outcome(const NewJob& given) {
  detail::validate_new_job(given);
  detail::validate_unique_key(given);
  detail::SendSpan span(given);
  const NewJob& job = span.job(given);
  pqxx::connection& conn = impl_->connection();
  try {
    // One statement in autocommit: one round trip, where BEGIN/INSERT/COMMIT took three.
    pqxx::nontransaction tx{conn};
    const Enqueued done = job.unique_key
                              ? detail::enqueue_unique(tx, impl_->store, job)
                              : Enqueued{impl_->store.jobs.enqueue_prepared(tx, job), EnqueueOutcome::inserted};
    span.done(done.id);
    return done;
  } catch (const pqxx::broken_connection& e) {
    // The statement may have committed before the connection went: nobody can tell.
    impl_->conn.reset();
    throw DatabaseError("enqueue outcome unknown, connection lost (enqueue again with the same idempotency key): " +
                        detail::one_line(impl_->url, e.what()));
  } catch (const pqxx::sql_error& e) {
    // run_at is the statement's only timestamp: a text the server cannot read as one is
    // the caller's input to fix, not the database's failure.
    if (job.run_at && (e.sqlstate() == "22007" || e.sqlstate() == "22008")) {
      throw ConfigError("run_at", "'" + detail::printable(*job.run_at) + "' is not a timestamp Postgres understands");
    }
    // Parents and batches the database refused (migration 24): a parent that is no job, a
    // batch that does not exist or is closed.
    if (e.sqlstate() == "23503" || e.sqlstate() == "OC105" || e.sqlstate() == "22023") {
      throw ConfigError(job.batch_id && !job.depends_on.empty() ? "depends_on/batch_id"
                        : job.batch_id                          ? "batch_id"
                                                                : "depends_on",
                        detail::primary_message(e.what()));
    }
    // The CHECK of schema version 6 (infinity and years beyond 9999 refused).
    if (e.sqlstate() == "23514" && std::string_view(e.what()).find("jobs_run_at_in_range") != std::string_view::npos) {
      throw ConfigError("run_at", "must be a time between 1970-01-01 and 9999-12-31 (UTC)");
    }
    throw detail::schema_error(impl_->url, impl_->store.schema(), "enqueue failed", e);
  }
}

std::int64_t Client::enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  return enqueue_with_outcome(tx, job).id;
}

Enqueued Client::enqueue_with_outcome(pqxx::transaction_base& tx, const NewJob& given) const {
  if (given.unique_key) {
    detail::validate_new_job(given);
    detail::validate_unique_key(given);
  }
  detail::SendSpan span(given);
  const NewJob& job = span.job(given);
  const Enqueued done = job.unique_key ? detail::enqueue_unique(tx, impl_->store, job)
                                       : Enqueued{impl_->store.jobs.enqueue(tx, job), EnqueueOutcome::inserted};
  span.done(done.id);
  return done;
}

namespace {

/// A row COPY refused, named like a validation error: "jobs[3].run_at: ...".
[[noreturn]] void throw_row_error(const detail::CopyRowError& e) {
  throw ConfigError("jobs[" + std::to_string(e.row()) + "]", e.what());
}

}  // namespace

std::vector<std::int64_t> Client::enqueue_batch(const std::vector<NewJob>& given) {
  detail::validate_jobs(given);
  if (given.empty()) return {};
  detail::SendSpan span(given);
  const std::vector<NewJob>& jobs = span.jobs(given);
  pqxx::connection& conn = impl_->connection();
  try {
    pqxx::work tx{conn};
    std::vector<std::int64_t> ids = detail::copy_jobs(tx, impl_->store.jobs, jobs, /*with_ids=*/true);
    tx.commit();
    span.done(ids.size() == 1 ? std::optional(ids.front()) : std::nullopt);
    return ids;
  } catch (const detail::CopyRowError& e) {
    throw_row_error(e);
  } catch (const pqxx::broken_connection& e) {
    impl_->conn.reset();
    throw DatabaseError("enqueue failed, connection lost: " + detail::one_line(impl_->url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(impl_->url, impl_->store.schema(), "enqueue failed", e);
  }
}

namespace {

/// A callback's description as the text open_batch() gets: the text given (checked), or the
/// JSON value's.
std::optional<std::string> description_text(const std::optional<nlohmann::json>& value,
                                            const std::optional<std::string>& text, const char* name) {
  if (text) {
    try {
      detail::exact_json::validate(*text);
    } catch (const detail::exact_json::SyntaxError& e) {
      throw ConfigError(name, detail::exact_json::describe(e));
    }
    return text;
  }
  return value ? std::optional<std::string>(value->dump()) : std::nullopt;
}

/// The schema functions' refusals (SQLSTATE 22023 a bad description, P0002 no such batch,
/// 22P05 a text jsonb cannot hold) are the caller's input to fix.
[[noreturn]] void throw_batch_error(const DatabaseUrl& url, std::string_view schema, const char* what,
                                    const pqxx::sql_error& e) {
  if (e.sqlstate() == "22023" || e.sqlstate() == "P0002" || e.sqlstate() == "22P05") {
    throw ConfigError(what, detail::primary_message(e.what()));
  }
  throw detail::schema_error(url, schema, std::string(what) + " failed", e);
}

}  // namespace

std::int64_t Client::open_batch(pqxx::transaction_base& tx, const BatchCallbacks& callbacks) const {
  try {
    return impl_->store.batches.open(
        tx, description_text(callbacks.on_success, callbacks.on_success_json, "on_success_json"),
        description_text(callbacks.on_failure, callbacks.on_failure_json, "on_failure_json"),
        description_text(callbacks.on_finish, callbacks.on_finish_json, "on_finish_json"));
  } catch (const pqxx::sql_error& e) {
    throw_batch_error(impl_->url, impl_->store.schema(), "open_batch", e);
  }
}

std::int64_t Client::open_batch(const BatchCallbacks& callbacks) {
  pqxx::connection& conn = impl_->connection();
  try {
    pqxx::nontransaction tx{conn};
    return open_batch(tx, callbacks);
  } catch (const pqxx::broken_connection& e) {
    impl_->conn.reset();
    throw DatabaseError("open_batch outcome unknown, connection lost: " + detail::one_line(impl_->url, e.what()));
  }
}

void Client::close_batch(pqxx::transaction_base& tx, std::int64_t id) const {
  try {
    impl_->store.batches.close(tx, id);
  } catch (const pqxx::sql_error& e) {
    throw_batch_error(impl_->url, impl_->store.schema(), "close_batch", e);
  }
}

void Client::close_batch(std::int64_t id) {
  pqxx::connection& conn = impl_->connection();
  try {
    pqxx::nontransaction tx{conn};
    close_batch(tx, id);
  } catch (const pqxx::broken_connection& e) {
    impl_->conn.reset();
    throw DatabaseError("close_batch outcome unknown, connection lost (closing again is safe): " +
                        detail::one_line(impl_->url, e.what()));
  }
}

std::vector<std::int64_t> Client::enqueue_batch(pqxx::transaction_base& tx, const std::vector<NewJob>& given) const {
  detail::validate_jobs(given);
  detail::SendSpan span(given);
  const std::vector<NewJob>& jobs = span.jobs(given);
  try {
    std::vector<std::int64_t> ids = detail::copy_jobs(tx, impl_->store.jobs, jobs, /*with_ids=*/true);
    span.done(ids.size() == 1 ? std::optional(ids.front()) : std::nullopt);
    return ids;
  } catch (const detail::CopyRowError& e) {
    throw_row_error(e);
  }
}

}  // namespace oncely
