#pragma once
// Helpers for tests that run oncely_test_worker processes against a fixture's schema.

#include <memory>
#include <string>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"

namespace oncely::test {

/// oncely_test_worker running against `db`'s schema with the given config JSON.
struct WorkerProcess {
  std::unique_ptr<Process> process;
  WorkerProcess(const PgFixture& db, const std::string& config)
      : process(std::make_unique<Process>(std::vector<std::string>{ONCELY_TEST_WORKER_PATH, config},
                                          EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}})) {}
};

inline void create_balances(PgFixture& db) {
  db.exec("CREATE TABLE " + db.table("balances") + " (account int PRIMARY KEY, cents bigint NOT NULL)");
}

inline long sum_of_balances(PgFixture& db) {
  return db.scalar<long>("SELECT coalesce(sum(cents), 0) FROM " + db.table("balances"));
}

inline long count_of(PgFixture& db, const std::string& table) {
  return db.scalar<long>("SELECT count(*) FROM " + db.table(table));
}

/// `count` increment jobs of 1 cent over 100 accounts, each with its own key.
inline void enqueue_increments(PgFixture& db, int count, const std::string& kind = "increment", int sleep_ms = 0) {
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, idempotency_key, payload) SELECT '" + kind +
          "', 'k-' || i, jsonb_build_object('account', i % 100, 'cents', 1, 'sleep_ms', " + std::to_string(sleep_ms) +
          ") FROM generate_series(1, " + std::to_string(count) + ") AS i");
}

}  // namespace oncely::test
