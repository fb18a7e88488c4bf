#include "store/cron_slots.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

// Times cross as milliseconds since the epoch, exact both ways (a timestamptz holds
// microseconds; floor() keeps a read value at or before the stored one).
// One row per name asked for, and now() once: the scheduler's only read.
constexpr std::string_view kReadCronSlots = R"sql(
  SELECT floor(extract(epoch FROM now()) * 1000)::bigint,
         c.name IS NOT NULL,
         coalesce(c.fingerprint, ''),
         floor(extract(epoch FROM c.covered_until) * 1000)::bigint,
         floor(extract(epoch FROM c.last_enqueued_slot) * 1000)::bigint,
         e.name
    FROM unnest($1::text[]) WITH ORDINALITY AS e(name, n)
    LEFT JOIN :ONCELY_SCHEMA.cron_slots c ON c.name = e.name
   ORDER BY e.n
)sql";

// Every row, with now() on each (and one row of NULLs besides when the table is empty).
constexpr std::string_view kReadAllCronSlots = R"sql(
  SELECT floor(extract(epoch FROM now()) * 1000)::bigint,
         c.name IS NOT NULL,
         coalesce(c.fingerprint, ''),
         floor(extract(epoch FROM c.covered_until) * 1000)::bigint,
         floor(extract(epoch FROM c.last_enqueued_slot) * 1000)::bigint,
         c.name
    FROM (SELECT 1) AS one
    LEFT JOIN :ONCELY_SCHEMA.cron_slots c ON true
   ORDER BY c.name
)sql";

// The one statement that enqueues a slot's job. The upsert moves the entry's row only
// forward (WHERE covered_until < the new one); a second worker with the same slots waits
// for the first's row lock, re-checks that WHERE against the committed row, and then
// moves nothing and so enqueues nothing. The jobs are only those after the position it
// replaced (prior_covered_until, set from the locked row), not after the position this
// worker read before: with catch_up "all" two workers may hold overlapping slot lists. A
// new row (no conflict) enqueues nothing: a new entry starts at now; and a new entry's first
// statement ($11) moves no row another worker created meanwhile, since that would skip the
// slots between the two workers' clocks. One statement, so a
// worker killed at any point leaves the row moved and its jobs in place, or neither.
constexpr std::string_view kAdvanceCronSlot = R"sql(
  WITH advanced AS (
    INSERT INTO :ONCELY_SCHEMA.cron_slots AS c (name, fingerprint, covered_until)
    VALUES ($1, $2, timestamptz 'epoch' + $3::bigint * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint,
           covered_until = EXCLUDED.covered_until,
           prior_covered_until = c.covered_until,
           last_enqueued_slot = coalesce(
             (SELECT max(timestamptz 'epoch' + ms * interval '1 millisecond')
                FROM unnest($4::bigint[]) AS s(ms)
               WHERE timestamptz 'epoch' + ms * interval '1 millisecond' > c.covered_until),
             c.last_enqueued_slot),
           updated_at = now()
     WHERE c.covered_until < EXCLUDED.covered_until AND NOT $11::boolean
    RETURNING c.prior_covered_until
  ), inserted AS (
    INSERT INTO :ONCELY_SCHEMA.jobs (queue, kind, payload, idempotency_key, priority, max_attempts, run_at)
    SELECT $6, $7, $8::jsonb, s.key, $9::smallint, $10::integer, s.slot
      FROM advanced,
           LATERAL (SELECT timestamptz 'epoch' + u.ms * interval '1 millisecond' AS slot, u.key
                      FROM unnest($4::bigint[], $5::text[]) AS u(ms, key)) AS s
     WHERE s.slot > advanced.prior_covered_until
     ORDER BY s.slot
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM advanced), (SELECT count(*) FROM inserted)
)sql";

std::optional<cron::Instant> instant(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return cron::Instant{std::chrono::milliseconds(f.as<std::int64_t>())};
}

CronSlotsRead rows_of(const pqxx::result& result) {
  CronSlotsRead out;
  for (const auto& r : result) {
    out.now = *instant(r[0]);
    if (r[5].is_null()) continue;  // read_all of an empty table
    CronSlotsRead::Row row;
    if (r[1].as<bool>()) row.covered_until = instant(r[3]);
    row.fingerprint = r[2].as<std::string>();
    row.last_enqueued_slot = instant(r[4]);
    row.name = r[5].as<std::string>();
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace

CronSlotsTable::CronSlotsTable(StatementSet& statements)
    : statements_(statements),
      read_(&statements.add("read_cron_slots", kReadCronSlots)),
      read_all_(&statements.add("read_all_cron_slots", kReadAllCronSlots)),
      advance_(&statements.add("advance_cron_slot", kAdvanceCronSlot)) {}

CronSlotsRead CronSlotsTable::read(pqxx::transaction_base& tx, const std::vector<std::string>& names) const {
  return rows_of(statements_.run(tx, *read_, to_array_literal(names)));
}

CronSlotsRead CronSlotsTable::read_all(pqxx::transaction_base& tx) const {
  return rows_of(statements_.run(tx, *read_all_));
}

std::optional<long> CronSlotsTable::advance(pqxx::transaction_base& tx, const CronAdvance& a) const {
  std::vector<std::int64_t> ms;
  for (const auto t : a.slots) ms.push_back(t.time_since_epoch().count());
  const auto r = statements_.run(
      tx, *advance_, a.name, a.fingerprint, static_cast<std::int64_t>(a.covered_until.time_since_epoch().count()),
      to_array_literal(ms), to_array_literal(a.keys), a.queue, a.kind, a.payload, a.priority, a.max_attempts, a.first);
  if (r.at(0).at(0).as<long>() == 0) return std::nullopt;
  return r.at(0).at(1).as<long>();
}

}  // namespace oncely::detail
