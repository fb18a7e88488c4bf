#pragma once
// AdminStore: the operator SQL (dead letters: list, group, replay, purge). Like Store, every
// statement is a named constant in admin_store.cpp, rendered once for one schema; every
// filter value travels as a parameter, and an absent filter is a NULL parameter.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <pqxx/transaction_base>

#include "oncely/dead_letters.hpp"

namespace oncely::detail {

class AdminStore {
 public:
  /// Throws ConfigError for an invalid schema name.
  explicit AdminStore(std::string_view schema);

  [[nodiscard]] DeadLetterList list_dead_letters(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                                 long limit, bool details) const;
  [[nodiscard]] DeadLetterGroups group_dead_letters(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                                    DeadLetterGrouping by, long limit) const;
  /// One statement replays; a second one (same transaction) reports what was skipped.
  ReplayResult replay_dead_letters(pqxx::transaction_base& tx, const DeadLetterFilter& filter,
                                   const std::optional<std::string>& to_queue) const;
  long purge_dead_letters(pqxx::transaction_base& tx, const DeadLetterFilter& filter) const;

 private:
  std::string list_, group_, replay_, already_replayed_, purge_;
};

/// Throws ConfigError when a filter value cannot be meant (an empty queue, kind, class or
/// error text: an empty --error would match everything) or a duration is negative.
void validate_filter(const DeadLetterFilter& filter);

/// Throws ConfigError("", "refusing to <verb> every dead letter: give a filter or --all")
/// when `filter` is empty and not `all`.
void require_selection(const DeadLetterFilter& filter, std::string_view verb);

}  // namespace oncely::detail
