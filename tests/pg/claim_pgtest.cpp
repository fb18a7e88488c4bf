// The claim statement against a real Postgres: which jobs it takes, in which order, and how
// much of the claim index it reads to find them (from EXPLAIN's buffer counts, which do not
// depend on timing).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "store/store.hpp"
#include "support/pg_fixture.hpp"

using namespace oncely::test;
using oncely::detail::ClaimedJob;
using oncely::detail::ClaimKey;

namespace {

const oncely::detail::TransactionLimits kNoLimits{"0", "0", "0"};

struct ClaimProbe {
  PgFixture db;
  oncely::detail::Store store{db.schema, true};

  ClaimProbe() { store.prepare(*db.conn); }

  std::vector<ClaimedJob> claim(pqxx::work& tx, int limit, const std::optional<ClaimKey>& after = {}) const {
    return store.jobs.claim(tx, "default", limit, kNoLimits, after);
  }

  std::vector<std::string> claimed_kinds(int limit, const std::optional<ClaimKey>& after = {}) {
    pqxx::work tx(*db.conn);
    std::vector<std::string> kinds;
    for (const ClaimedJob& job : claim(tx, limit, after)) kinds.push_back(job.kind);
    return kinds;  // rolled back
  }

  // Shared buffers the claim's scans of the jobs table touch, whatever the plan (EXPLAIN
  // ANALYZE, rolled back).
  long buffers_read(int limit, const std::optional<ClaimKey>& after) {
    pqxx::work tx(*db.conn);
    tx.conn().prepare_now("oncely_claim");
    const auto arg = [&](auto value) { return after ? tx.quote(value) : std::string("NULL"); };
    const std::string sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE oncely_claim('default', " +
                            std::to_string(limit) + ", '0', '0', '0', " + arg(after ? after->priority : 0) + ", " +
                            arg(after ? after->run_at_us : 0) + ", " + arg(after ? after->id : 0) + ")";
    return jobs_scan_buffers(nlohmann::json::parse(tx.exec(sql)[0][0].c_str())[0]["Plan"]);
  }

  static long jobs_scan_buffers(const nlohmann::json& node) {
    long sum = 0;
    if (node.value("Relation Name", "") == "jobs" && node.value("Node Type", "").ends_with("Scan")) {
      sum += node["Shared Hit Blocks"].get<long>() + node["Shared Read Blocks"].get<long>();
    }
    for (const auto& child : node.value("Plans", nlohmann::json::array())) sum += jobs_scan_buffers(child);
    return sum;
  }
};

}  // namespace

TEST_SUITE("claim") {
  TEST_CASE("claim: ready jobs in (priority, run_at, id) order across priority levels, never a future one") {
    ClaimProbe probe;
    probe.db.exec("INSERT INTO " + probe.db.table("jobs") +
                  " (kind, priority, run_at) VALUES "
                  "('p1-older', 1, now() - interval '2 hours'), ('p0', 0, now() - interval '1 minute'),"
                  "('p0-later', 0, now() + interval '1 hour'), ('p-5', -5, now() - interval '1 second'),"
                  "('p2', 2, now()), ('p1-newer', 1, now() - interval '1 hour'),"
                  "('p7-later', 7, now() + interval '1 day')");
    CHECK(probe.claimed_kinds(10) == std::vector<std::string>{"p-5", "p0", "p1-older", "p1-newer", "p2"});
    CHECK(probe.claimed_kinds(3) == std::vector<std::string>{"p-5", "p0", "p1-older"});

    // Jobs locked by another transaction are skipped, the next ones taken.
    pqxx::connection other{probe.db.url};
    pqxx::work holding(other);
    oncely::detail::Store store{probe.db.schema, false};
    REQUIRE(store.jobs.claim(holding, "default", 2, kNoLimits, std::nullopt).size() == 2);
    CHECK(probe.claimed_kinds(10) == std::vector<std::string>{"p1-older", "p1-newer", "p2"});
  }

  TEST_CASE(
      "claim: the transaction-mode claim, its one-at-a-time fallback and the lease claim take the same jobs in the "
      "same order") {
    // One scan (store/ready_jobs.hpp) for all three: from the head and after a key, across
    // priority levels, past jobs scheduled for later.
    ClaimProbe probe;
    probe.db.exec("INSERT INTO " + probe.db.table("jobs") +
                  " (kind, priority, run_at) SELECT 'job-' || i, (i * 7) % 5 - 2, "
                  "now() - (i % 9) * interval '1 minute' + CASE WHEN i % 11 = 0 THEN interval '1 hour' ELSE '0' END "
                  "FROM generate_series(1, 60) AS i");
    const auto ids_of = [](const std::vector<ClaimedJob>& jobs) {
      std::vector<std::int64_t> ids;
      for (const ClaimedJob& job : jobs) ids.push_back(job.id);
      return ids;
    };
    for (const int limit : {1, 7, 25, 100}) {
      CAPTURE(limit);
      std::optional<ClaimKey> after;
      std::vector<std::int64_t> claimed;
      {
        pqxx::work tx(*probe.db.conn);
        const auto jobs = probe.claim(tx, limit);
        claimed = ids_of(jobs);
        if (!jobs.empty()) after = jobs.back().key;
      }
      pqxx::work tx(*probe.db.conn);
      CHECK(probe.store.jobs.lock_ready(tx, "default", limit, std::nullopt) == claimed);
      tx.abort();
      pqxx::work lease_tx(*probe.db.conn);
      CHECK(probe.store.leases.lock_ready(lease_tx, "default", limit, std::nullopt).ids == claimed);
      lease_tx.abort();
      // And after the last job of that claim.
      std::vector<std::int64_t> next;
      {
        pqxx::work after_tx(*probe.db.conn);
        next = ids_of(probe.claim(after_tx, limit, after));
      }
      pqxx::work tx2(*probe.db.conn);
      CHECK(probe.store.jobs.lock_ready(tx2, "default", limit, after) == next);
      tx2.abort();
      pqxx::work lease_tx2(*probe.db.conn);
      CHECK(probe.store.leases.lock_ready(lease_tx2, "default", limit, after).ids == next);
    }
    CHECK(probe.claimed_kinds(100).size() == 55);  // the 5 scheduled for later are not taken
  }

  TEST_CASE("claim: a run_at of -infinity is claimed first and infinity never, without breaking the claim") {
    ClaimProbe probe;
    // Schema version 6 refuses them (forged_state_pgtest.cpp), but rows inserted before it
    // (its CHECK is NOT VALID) may still hold them.
    probe.db.exec("ALTER TABLE " + probe.db.table("jobs") + " DROP CONSTRAINT jobs_run_at_in_range");
    probe.db.exec("INSERT INTO " + probe.db.table("jobs") +
                  " (kind, run_at) VALUES "
                  "('now', now()), ('never', 'infinity'), ('first', '-infinity')");
    pqxx::work tx(*probe.db.conn);
    const auto jobs = probe.claim(tx, 10);
    REQUIRE(jobs.size() == 2);
    CHECK(jobs[0].kind == "first");
    CHECK_FALSE(jobs[0].key.has_value());  // no position to start a later claim after
    CHECK(jobs[1].kind == "now");
    CHECK(jobs[1].key.has_value());
  }

  TEST_CASE("claim: after a key it takes only the jobs after it, and from the head the rest") {
    ClaimProbe probe;
    probe.db.exec("INSERT INTO " + probe.db.table("jobs") +
                  " (kind, priority) SELECT 'job-' || i, i / 4 FROM generate_series(0, 11) AS i");
    ClaimKey fifth;
    {
      pqxx::work tx(*probe.db.conn);
      const auto jobs = probe.claim(tx, 5);
      REQUIRE(jobs.size() == 5);
      fifth = jobs.back().key.value();
      CHECK(jobs.back().kind == "job-4");
    }
    CHECK(probe.claimed_kinds(3, fifth) == std::vector<std::string>{"job-5", "job-6", "job-7"});
    CHECK(probe.claimed_kinds(100, fifth).size() == 7);
    CHECK(probe.claimed_kinds(2) == std::vector<std::string>{"job-0", "job-1"});
  }

  TEST_CASE("claim: a burn-down does not walk the index entries of the jobs it already did") {
    // 40,000 jobs done and deleted, 2,000 to go: their index entries stay until vacuum. From
    // the head a claim reads past all of them; after the previous claim's last job, it does not.
    ClaimProbe probe;
    probe.db.exec("INSERT INTO " + probe.db.table("jobs") + " (kind) SELECT 'job' FROM generate_series(1, 42000)");
    ClaimKey last_done;
    {
      pqxx::work tx(*probe.db.conn);
      last_done = probe.claim(tx, 40000).back().key.value();
    }
    probe.db.exec("DELETE FROM " + probe.db.table("jobs") + " WHERE id <= " + std::to_string(last_done.id));
    const long from_head = probe.buffers_read(500, std::nullopt);
    const long after_last = probe.buffers_read(500, last_done);
    CAPTURE(from_head);
    CAPTURE(after_last);
    CHECK(from_head > 100);
    CHECK(after_last < 40);
  }

  TEST_CASE("claim: jobs scheduled for later are not walked to find the ready ones") {
    ClaimProbe probe;
    probe.db.exec(
        "INSERT INTO " + probe.db.table("jobs") +
        " (kind, priority, run_at) SELECT 'later', 0, now() + interval '1 day' FROM generate_series(1, 30000)");
    probe.db.exec("INSERT INTO " + probe.db.table("jobs") + " (kind, priority) VALUES ('now-p0', 0), ('now-p1', 1)");
    probe.db.exec("ANALYZE " + probe.db.table("jobs"));
    CHECK(probe.claimed_kinds(100) == std::vector<std::string>{"now-p0", "now-p1"});
    const long read = probe.buffers_read(100, std::nullopt);
    CAPTURE(read);
    CHECK(read < 40);
  }

}  // TEST_SUITE
