#include "store/lease_completions.hpp"

#include <pqxx/pqxx>

namespace oncely::detail {
namespace {

constexpr std::string_view kTake = R"sql(
  DELETE FROM :ONCELY_SCHEMA.lease_completions WHERE lease_token = ANY ($1::bigint[]) RETURNING lease_token
)sql";

constexpr std::string_view kCompleted = R"sql(
  SELECT lease_token FROM :ONCELY_SCHEMA.lease_completions WHERE lease_token = ANY ($1::bigint[])
)sql";

constexpr std::string_view kPrune = R"sql(
  DELETE FROM :ONCELY_SCHEMA.lease_completions
   WHERE lease_token IN (SELECT lease_token FROM :ONCELY_SCHEMA.lease_completions
                          WHERE completed_at < now() - $1::bigint * interval '1 millisecond' LIMIT $2)
)sql";

}  // namespace

LeaseCompletionsTable::LeaseCompletionsTable(StatementSet& statements)
    : statements_(statements),
      take_(&statements.add("lease_completions_take", kTake)),
      completed_(&statements.add("lease_completions_completed", kCompleted)),
      prune_(&statements.add("lease_completions_prune", kPrune)) {}

std::unordered_set<std::int64_t> LeaseCompletionsTable::take(pqxx::transaction_base& tx,
                                                             const std::vector<std::int64_t>& tokens) const {
  std::unordered_set<std::int64_t> taken;
  if (tokens.empty()) return taken;
  for (const auto& row : statements_.run(tx, *take_, to_array_literal(tokens))) taken.insert(row[0].as<std::int64_t>());
  return taken;
}

std::unordered_set<std::int64_t> LeaseCompletionsTable::completed(pqxx::transaction_base& tx,
                                                                  const std::vector<std::int64_t>& tokens) const {
  std::unordered_set<std::int64_t> found;
  if (tokens.empty()) return found;
  for (const auto& row : statements_.run(tx, *completed_, to_array_literal(tokens))) {
    found.insert(row[0].as<std::int64_t>());
  }
  return found;
}

long LeaseCompletionsTable::prune(pqxx::transaction_base& tx, std::chrono::milliseconds kept, int limit) const {
  return static_cast<long>(
      statements_.run(tx, *prune_, static_cast<std::int64_t>(kept.count()), limit).affected_rows());
}

}  // namespace oncely::detail
