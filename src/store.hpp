#pragma once
// Store: THE place for runtime SQL. Every statement the library runs at run time is a
// named constant in store.cpp, rendered for one schema when the Store is built; callers
// use the typed functions below and never assemble SQL.

#include <cstdint>
#include <string>
#include <string_view>

#include <pqxx/transaction_base>

#include "oncely/client.hpp"

namespace oncely::detail {

class Store {
 public:
  explicit Store(std::string_view schema);

  [[nodiscard]] const std::string& schema() const noexcept { return schema_; }

  /// INSERT one job; returns its id. Validates what the database would reject less clearly.
  std::int64_t enqueue(pqxx::transaction_base& tx, const NewJob& job) const;

 private:
  std::string schema_;
  std::string enqueue_;
};

/// Throws ConfigError when `job` cannot be a valid row (empty kind or queue, empty key,
/// priority outside smallint, max_attempts < 1).
void validate_new_job(const NewJob& job);

}  // namespace oncely::detail
