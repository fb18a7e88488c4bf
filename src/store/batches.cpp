#include "store/batches.hpp"

#include <algorithm>
#include <string>

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

constexpr std::string_view kOpenBatch = R"sql(
  SELECT :ONCELY_SCHEMA.open_batch($1::jsonb, $2::jsonb, $3::jsonb)
)sql";

constexpr std::string_view kCloseBatch = R"sql(
  SELECT :ONCELY_SCHEMA.close_batch($1::bigint)
)sql";

// A batch's row: its members (completed, dead and those not settled yet), and those of them
// that wait for parents.
constexpr std::string_view kBatchColumns = R"sql(
  SELECT b.id, b.completed + b.dead + (SELECT count(*) FROM :ONCELY_SCHEMA.batch_members m WHERE m.batch_id = b.id),
         b.completed, b.dead,
         (SELECT count(*) FROM :ONCELY_SCHEMA.jobs j WHERE j.batch_id = b.id AND j.parents_left IS NOT NULL),
         to_char(b.created_at AT TIME ZONE 'UTC', :ISO_UTC), b.created_by,
         to_char(b.closed_at AT TIME ZONE 'UTC', :ISO_UTC), to_char(b.finished_at AT TIME ZONE 'UTC', :ISO_UTC),
         coalesce(array_to_string(b.callback_job_ids, ','), '')
    FROM :ONCELY_SCHEMA.batches b)sql";

// The callbacks' descriptions hold payloads, which the viewer role may not read (roles.sql):
// read apart, when the caller's role may.
constexpr std::string_view kMayReadCallbacks = R"sql(
  SELECT bool_and(has_column_privilege(':ONCELY_SCHEMA.batches'::regclass, c, 'SELECT'))
    FROM unnest(ARRAY['on_success', 'on_failure', 'on_finish']) AS c
)sql";

constexpr std::string_view kCallbacks = R"sql(
  SELECT b.on_success::text, b.on_failure::text, b.on_finish::text FROM :ONCELY_SCHEMA.batches b WHERE b.id = $1
)sql";

std::string list_sql() {
  return std::string(kBatchColumns) + R"sql(
   WHERE (NOT $1::boolean OR b.finished_at IS NULL) AND ($3::bigint IS NULL OR b.id < $3::bigint)
   ORDER BY b.id DESC
   LIMIT $2
)sql";
}

std::string find_sql() { return std::string(kBatchColumns) + "\n   WHERE b.id = $1\n"; }

std::optional<std::string> text_or_none(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<std::string>(f.as<std::string>());
}

BatchStatus batch_of(const pqxx::row& r) {
  BatchStatus b;
  b.id = r[0].as<std::int64_t>();
  b.total = r[1].as<std::int64_t>();
  b.completed = r[2].as<std::int64_t>();
  b.dead = r[3].as<std::int64_t>();
  b.waiting = r[4].as<std::int64_t>();
  b.created_at = r[5].as<std::string>();
  b.created_by = r[6].as<std::string>();
  b.closed_at = text_or_none(r[7]);
  b.finished_at = text_or_none(r[8]);
  const std::string ids = r[9].as<std::string>();
  for (std::size_t at = 0; at < ids.size();) {
    const std::size_t comma = std::min(ids.find(',', at), ids.size());
    b.callback_job_ids.push_back(std::stoll(ids.substr(at, comma - at)));
    at = comma + 1;
  }
  return b;
}

}  // namespace

BatchesTable::BatchesTable(StatementSet& statements)
    : statements_(statements),
      open_(&statements.add("open_batch", kOpenBatch)),
      close_(&statements.add("close_batch", kCloseBatch)),
      list_(&statements.add("list_batches", list_sql())),
      find_(&statements.add("find_batch", find_sql())),
      may_read_callbacks_(&statements.add("may_read_batch_callbacks", kMayReadCallbacks)),
      callbacks_(&statements.add("batch_callbacks", kCallbacks)) {}

std::int64_t BatchesTable::open(pqxx::transaction_base& tx, const std::optional<std::string>& on_success,
                                const std::optional<std::string>& on_failure,
                                const std::optional<std::string>& on_finish) const {
  return statements_.run(tx, *open_, on_success, on_failure, on_finish).at(0).at(0).as<std::int64_t>();
}

void BatchesTable::close(pqxx::transaction_base& tx, std::int64_t id) const { statements_.run(tx, *close_, id); }

std::vector<BatchStatus> BatchesTable::list(pqxx::transaction_base& tx, bool unfinished, int limit,
                                            std::optional<std::int64_t> before) const {
  std::vector<BatchStatus> out;
  for (const auto& r : statements_.run(tx, *list_, unfinished, limit, before)) out.push_back(batch_of(r));
  return out;
}

std::optional<BatchStatus> BatchesTable::find(pqxx::transaction_base& tx, std::int64_t id, bool callbacks) const {
  const pqxx::result r = statements_.run(tx, *find_, id);
  if (r.empty()) return std::nullopt;
  BatchStatus b = batch_of(r[0]);
  if (callbacks && statements_.run(tx, *may_read_callbacks_).at(0).at(0).as<bool>()) {
    const pqxx::row c = statements_.run(tx, *callbacks_, id).at(0);
    b.on_success = text_or_none(c[0]);
    b.on_failure = text_or_none(c[1]);
    b.on_finish = text_or_none(c[2]);
    b.callbacks_read = true;
  }
  return b;
}

}  // namespace oncely::detail
