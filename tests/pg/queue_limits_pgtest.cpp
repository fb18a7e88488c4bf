// Limits that hold for every worker of a queue together (migrations 22 and 23), as the lease claim
// enforces them: through lease_jobs(), the SQL protocol's claim, which is also the C++
// lease queues' (lease_lock_ready() and lease_locked()).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/schema.hpp"

using namespace oncely::test;

namespace {

struct Lease {
  long id;
  long token;
  std::string key;  // the job's concurrency_key
};

struct LimitedQueue {
  PgFixture db;

  LimitedQueue() {
    db.exec("INSERT INTO " + db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout)"
            " VALUES ('q', 'lease', '30 seconds', 5, '1 hour', '1 hour', 'none', '5 minutes')");
  }

  /// set_queue_limits('q', ...); each argument as SQL ("NULL" for none), the rates' too
  /// ("5, '1 hour'" for 5 starts an hour).
  void limit(const std::string& concurrency, const std::string& key, const std::string& per_key,
             const std::string& rate = "NULL, NULL", const std::string& per_key_rate = "NULL, NULL") {
    db.exec("SELECT " + db.table("set_queue_limits") + "('q', " + concurrency + ", " + key + ", " + per_key + ", " +
            rate + ", " + per_key_rate + ")");
  }

  /// What limits_retry_in('q') says, in seconds; -1 for NULL.
  double retry_in() {
    return db.scalar<double>("SELECT coalesce(extract(epoch FROM " + db.table("limits_retry_in") + "('q')), -1)");
  }

  /// `n` jobs whose payload's "tenant" is `tenant`.
  void enqueue(const std::string& tenant, int n) {
    db.exec("INSERT INTO " + db.table("jobs") +
            " (queue, kind, payload) SELECT 'q', 'k', jsonb_build_object('tenant', " + db.conn->quote(tenant) +
            ", 'i', i) FROM generate_series(1, " + std::to_string(n) + ") i");
  }

  std::vector<Lease> lease(pqxx::connection& conn, int max_jobs) {
    pqxx::work tx(conn);
    std::vector<Lease> leased;
    for (const auto& row :
         tx.exec("SELECT l.id, l.lease_token, j.concurrency_key FROM " + db.table("lease_jobs") + "('q', " +
                 std::to_string(max_jobs) + ") l JOIN " + db.table("jobs") + " j ON j.id = l.id")) {
      leased.push_back({row[0].as<long>(), row[1].as<long>(), row[2].as<std::string>()});
    }
    tx.commit();
    return leased;
  }
  std::vector<Lease> lease(int max_jobs) { return lease(*db.conn, max_jobs); }

  void complete(const Lease& job) {
    db.exec("SELECT " + db.table("complete_jobs") + "(ARRAY[" + std::to_string(job.id) + "]::bigint[], ARRAY[" +
            std::to_string(job.token) + "]::bigint[])");
  }

  /// Jobs holding a live lease now, by key.
  std::map<std::string, int> running() {
    std::map<std::string, int> by_key;
    for (const auto& row : db.exec("SELECT concurrency_key, count(*) FROM " + db.table("jobs") +
                                   " WHERE lease_token IS NOT NULL AND run_at > now() GROUP BY 1")) {
      by_key[row[0].as<std::string>()] = row[1].as<int>();
    }
    return by_key;
  }
};

std::map<std::string, int> count_by_key(const std::vector<Lease>& leases) {
  std::map<std::string, int> n;
  for (const auto& l : leases) ++n[l.key];
  return n;
}

}  // namespace

TEST_CASE(
    "a queue's concurrency limit: no more live leases than the limit; a completion, a failure, a release "
    "and an expiry each give a slot back") {
  LimitedQueue q;
  q.limit("4", "NULL", "NULL");
  q.enqueue("", 20);

  auto first = q.lease(10);
  CHECK(first.size() == 4);
  CHECK(q.lease(10).empty());

  q.complete(first[0]);
  CHECK(q.lease(10).size() == 1);

  q.db.exec("SELECT " + q.db.table("fail_job") + "(" + std::to_string(first[1].id) + ", " +
            std::to_string(first[1].token) + ", 'boom')");
  q.db.exec("SELECT " + q.db.table("release_jobs") + "(ARRAY[" + std::to_string(first[2].token) + "]::bigint[])");
  CHECK(q.lease(10).size() == 2);
  CHECK(q.lease(10).empty());

  // A worker that stopped renewing: its lease expires, and its slot with it.
  q.db.exec("UPDATE " + q.db.table("jobs") +
            " SET run_at = now() - interval '1 second' WHERE id = " + std::to_string(first[3].id));
  const auto after_expiry = q.lease(10);
  REQUIRE(after_expiry.size() == 1);
  CHECK(after_expiry[0].id == first[3].id);  // the expired job itself, first in claim order
  CHECK(q.running()[""] == 4);
}

TEST_CASE("per-key concurrency: at most that many live leases of one key; the other keys go on") {
  LimitedQueue q;
  q.limit("NULL", "'/tenant'", "1");
  q.enqueue("A", 3);
  q.enqueue("B", 3);
  q.enqueue("C", 3);

  const auto first = q.lease(10);
  CHECK(count_by_key(first) == std::map<std::string, int>{{"A", 1}, {"B", 1}, {"C", 1}});
  CHECK(q.lease(10).empty());

  const auto a = first[0].key == "A" ? first[0] : first[1].key == "A" ? first[1] : first[2];
  q.complete(a);
  const auto next = q.lease(10);
  REQUIRE(next.size() == 1);
  CHECK(next[0].key == "A");
}

TEST_CASE("fairness: a key with a long backlog enqueued first delays another by one turn, not by its backlog") {
  LimitedQueue q;
  q.limit("4", "'/tenant'", "NULL");
  q.enqueue("A", 200);
  q.enqueue("B", 3);

  const auto first = q.lease(10);
  CHECK(count_by_key(first) == std::map<std::string, int>{{"A", 2}, {"B", 2}});
  for (const auto& job : first) q.complete(job);
  CHECK(count_by_key(q.lease(10)) == std::map<std::string, int>{{"A", 3}, {"B", 1}});
}

TEST_CASE(
    "keys: a producer's concurrency_key, a payload without the pointer's member, and jobs enqueued before "
    "the queue had limits") {
  LimitedQueue q;
  q.enqueue("early", 2);  // no limits yet: no key
  CHECK(q.db.scalar<long>("SELECT count(*) FROM " + q.db.table("jobs") + " WHERE concurrency_key IS NULL") == 2);

  q.limit("NULL", "'concurrency_key'", "1");
  CHECK(q.db.scalar<long>("SELECT count(*) FROM " + q.db.table("jobs") + " WHERE concurrency_key = ''") == 2);

  q.db.exec("INSERT INTO " + q.db.table("jobs") +
            " (queue, kind, payload, concurrency_key) VALUES ('q', 'k', '{}', 'x'), ('q', 'k', '{}', 'x')");
  q.limit("NULL", "'/customer/id'", "1");
  q.db.exec(
      "INSERT INTO " + q.db.table("jobs") +
      " (queue, kind, payload) VALUES ('q', 'k', '{\"customer\": {\"id\": 7}}'), ('q', 'k', '{\"customer\": 7}')");
  CHECK(q.db.scalar<std::string>("SELECT string_agg(coalesce(concurrency_key, 'NULL'), ',' ORDER BY id) FROM " +
                                 q.db.table("jobs")) == ",,x,x,7,");
  // Keys '', 'x', '7': one job of each at a time.
  CHECK(count_by_key(q.lease(10)) == std::map<std::string, int>{{"", 1}, {"x", 1}, {"7", 1}});
}

TEST_CASE("the limits of a queue that does not make sense are refused with a check violation") {
  LimitedQueue q;
  for (const char* bad :
       {"0, NULL, NULL", "NULL, 'tenant', NULL", "NULL, '/a~2b', NULL", "4, NULL, 1", "NULL, '/t', 0",
        "100001, NULL, NULL", "NULL, NULL, NULL, 0, '0 seconds'", "NULL, NULL, NULL, 5, NULL",
        "NULL, NULL, NULL, 10001, '1 second'", "NULL, NULL, NULL, 5, '25 hours'",
        "NULL, NULL, NULL, NULL, NULL, 5, '1 second'", "NULL, '/t', NULL, NULL, NULL, 0, '1 second'"}) {
    CAPTURE(bad);
    CHECK(sqlstate_of(*q.db.conn, "SELECT " + q.db.table("set_queue_limits") + "('q', " + std::string(bad) + ")") ==
          "23514");
  }
  // Every limit NULL: the queue's limits removed.
  q.limit("2", "NULL", "NULL");
  q.limit("NULL", "NULL", "NULL");
  CHECK(q.db.scalar<long>("SELECT count(*) FROM " + q.db.table("queue_limits")) == 0);
}

TEST_CASE("two claims at once: the second waits for the first to commit and counts its leases") {
  LimitedQueue q;
  q.limit("5", "NULL", "NULL");
  q.enqueue("", 20);

  pqxx::connection first_conn(q.db.url);
  pqxx::work first(first_conn);
  const auto first_leased =
      first.exec("SELECT id FROM " + q.db.table("lease_jobs") + "('q', 3)");  // holds the queue's claim lock
  REQUIRE(first_leased.size() == 3);

  auto second = std::async(std::launch::async, [&] {
    pqxx::connection conn(q.db.url);
    return q.lease(conn, 10).size();
  });
  CHECK(second.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);  // waits on the lock
  first.commit();
  CHECK(second.get() == 2);  // 5 - 3
  CHECK(q.running()[""] == 5);
}

TEST_CASE("oncely queue set and show: a lease queue's limits, each removed with none") {
  LimitedQueue q;
  const EnvChanges env{{"DATABASE_URL", q.db.url}, {"ONCELY_SCHEMA", q.db.schema}};
  const ProcessResult set = run_process(
      oncely_cli({"queue", "set", "q", "limits.concurrency=4", "limits.key=/tenant", "limits.per_key_concurrency=1"}),
      env);
  CAPTURE(set.err);
  REQUIRE(set.exit_code == 0);
  CHECK(set.out.find("limits        concurrency 4, key /tenant, per key 1 (every worker together)") !=
        std::string::npos);
  CHECK(q.db.scalar<std::string>("SELECT concat_ws(',', concurrency, key, per_key_concurrency) FROM " +
                                 q.db.table("queue_limits")) == "4,/tenant,1");

  const ProcessResult show = run_process(oncely_cli({"queue", "show", "q", "--json"}), env);
  REQUIRE(show.exit_code == 0);
  CHECK(nlohmann::json::parse(show.out)["limits"] ==
        nlohmann::json{{"concurrency", 4}, {"key", "/tenant"}, {"per_key_concurrency", 1}});

  const ProcessResult refused = run_process(oncely_cli({"queue", "set", "q", "limits.key=none"}), env);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err == "oncely: error: limits.per_key_concurrency: needs a key: what a job's key is\n");

  REQUIRE(run_process(oncely_cli({"queue", "set", "q", "limits.per_key_concurrency=none", "limits.key=none",
                                  "limits.concurrency=none"}),
                      env)
              .exit_code == 0);
  CHECK(q.db.scalar<long>("SELECT count(*) FROM " + q.db.table("queue_limits")) == 0);
}

TEST_CASE("limits set in SQL on a queue without a stored policy: queue show shows them, queue set keeps them") {
  PgFixture db;
  db.exec("SELECT " + db.table("set_queue_limits") + "('sql_only', 3, NULL, NULL)");
  const EnvChanges env{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}};
  const ProcessResult show = run_process(oncely_cli({"queue", "show", "sql_only", "--json"}), env);
  REQUIRE(show.exit_code == 0);
  CHECK(nlohmann::json::parse(show.out)["stored"] == false);
  CHECK(nlohmann::json::parse(show.out)["limits"] == nlohmann::json{{"concurrency", 3}});
  // It used to read the defaults without limits, and write them back: the limits were gone.
  const ProcessResult set = run_process(oncely_cli({"queue", "set", "sql_only", "mode=lease"}), env);
  CAPTURE(set.err);
  REQUIRE(set.exit_code == 0);
  CHECK(db.scalar<long>("SELECT concurrency FROM " + db.table("queue_limits") + " WHERE queue = 'sql_only'") == 3);
}

TEST_CASE("a queue's rate: no more starts in any period than its count; the window moves on with time") {
  LimitedQueue q;
  q.limit("NULL", "NULL", "NULL", "5, '1 hour'");
  q.enqueue("", 20);
  CHECK(q.retry_in() == -1);  // nothing started yet: nothing holds the queue back

  const auto first = q.lease(3);
  CHECK(first.size() == 3);
  for (const auto& job : first) q.complete(job);  // completing gives no start back
  CHECK(q.lease(10).size() == 2);
  CHECK(q.lease(10).empty());
  // The queue is held back until the first start leaves the window: about an hour.
  CHECK(q.retry_in() > 3500);
  CHECK(q.retry_in() <= 3600);

  // Forty minutes later for the first three starts, twenty for the next two: still five in the hour.
  const std::string windows = q.db.table("queue_rate_windows");
  q.db.exec("UPDATE " + windows +
            " SET starts = ARRAY(SELECT s - CASE WHEN n <= 3 THEN interval '61 minutes' ELSE interval '20 minutes' END"
            " FROM unnest(starts) WITH ORDINALITY u(s, n) ORDER BY n)");
  CHECK(q.lease(10).size() == 3);                                               // the three that left the window
  CHECK(q.db.scalar<long>("SELECT cardinality(starts) FROM " + windows) == 5);  // the window keeps the last five
  CHECK(q.lease(10).empty());
}

TEST_CASE("a per-key rate: each key's starts are counted apart") {
  LimitedQueue q;
  q.limit("NULL", "'/tenant'", "NULL", "NULL, NULL", "2, '1 hour'");
  q.enqueue("A", 5);
  q.enqueue("B", 5);
  CHECK(count_by_key(q.lease(10)) == std::map<std::string, int>{{"A", 2}, {"B", 2}});
  CHECK(q.lease(10).empty());
  CHECK(q.retry_in() > 3500);
  q.enqueue("C", 5);
  CHECK(count_by_key(q.lease(10)) == std::map<std::string, int>{{"C", 2}});
  CHECK(q.db.scalar<long>("SELECT count(*) FROM " + q.db.table("key_rate_windows")) == 3);
}

TEST_CASE("limits_retry_in: the first live lease's expiry of a queue at its concurrency limit") {
  LimitedQueue q;
  q.limit("2", "NULL", "NULL");
  q.enqueue("", 5);
  REQUIRE(q.lease(10).size() == 2);  // leases of 30 seconds
  CHECK(q.retry_in() > 28);
  CHECK(q.retry_in() <= 30);
}

TEST_CASE("a leased job of a limited queue that ends its lease wakes the queue's workers at commit; others do not") {
  LimitedQueue q;
  q.limit("2", "NULL", "NULL");
  q.enqueue("", 4);
  q.db.exec("INSERT INTO " + q.db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout)"
            " VALUES ('free', 'lease', '30 seconds', 5, '1 hour', '1 hour', 'none', '5 minutes')");
  q.db.exec("INSERT INTO " + q.db.table("jobs") + " (queue, kind, payload) VALUES ('free', 'k', '{}')");
  const auto leased = q.lease(10);
  REQUIRE(leased.size() == 2);
  const auto free_job = q.db.exec("SELECT id, lease_token FROM " + q.db.table("lease_jobs") + "('free', 1)")[0];

  pqxx::connection listener(q.db.url);
  struct Collector : pqxx::notification_receiver {
    using pqxx::notification_receiver::notification_receiver;
    std::vector<std::string> payloads;
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
  } collector(listener, oncely::detail::jobs_channel(q.db.schema));
  const auto heard = [&] {
    q.db.exec("SELECT pg_notify(" + q.db.conn->quote(oncely::detail::jobs_channel(q.db.schema)) + ", 'sentinel')");
    REQUIRE(wait_until(
        [&] {
          listener.await_notification(0, 50000);
          return !collector.payloads.empty() && collector.payloads.back() == "sentinel";
        },
        std::chrono::seconds(5)));
    std::vector<std::string> got(collector.payloads.begin(), collector.payloads.end() - 1);
    collector.payloads.clear();
    return got;
  };

  q.db.exec("SELECT " + q.db.table("complete_jobs") + "(ARRAY[" + free_job[0].c_str() + "]::bigint[], ARRAY[" +
            free_job[1].c_str() + "]::bigint[])");
  CHECK(heard().empty());  // a queue without limits: no slot to announce
  q.complete(leased[0]);
  CHECK(heard() == std::vector<std::string>{"q"});
  q.db.exec("SELECT " + q.db.table("release_jobs") + "(ARRAY[" + std::to_string(leased[1].token) + "]::bigint[])");
  CHECK(heard() == std::vector<std::string>{"q"});

  // A transaction that frees slots and claims again, as a C++ lease queue settles and claims
  // in one: when its claim asks for at least as many jobs as it settles, it says so first
  // (JobLeasesTable::take_back_freed_slots()) and its commit announces nothing (no other
  // worker could use the slots); otherwise the slots it frees are announced.
  const auto settle_and_claim = [&](const std::vector<Lease>& done, int max_jobs) {
    pqxx::work tx(*q.db.conn);
    if (max_jobs >= static_cast<int>(done.size())) tx.exec("SELECT set_config('oncely.slots_announced', 'q', true)");
    for (const auto& job : done)
      tx.exec("SELECT " + q.db.table("complete_jobs") + "(ARRAY[" + std::to_string(job.id) + "]::bigint[], ARRAY[" +
              std::to_string(job.token) + "]::bigint[])");
    std::vector<Lease> leased_again;
    for (const auto& row :
         tx.exec("SELECT id, lease_token FROM " + q.db.table("lease_jobs") + "('q', " + std::to_string(max_jobs) + ")"))
      leased_again.push_back({row[0].as<long>(), row[1].as<long>(), ""});
    tx.commit();
    return leased_again;
  };
  q.enqueue("", 4);
  const auto running = q.lease(10);
  REQUIRE(running.size() == 2);
  CHECK(heard() == std::vector<std::string>{"q"});  // the new jobs' (the insert trigger's)
  const auto again = settle_and_claim(running, 2);
  REQUIRE(again.size() == 2);
  CHECK(heard().empty());
  CHECK(settle_and_claim(again, 1).size() == 1);
  CHECK(heard() == std::vector<std::string>{"q"});

  // The announcement taken for one queue holds for that queue only: a transaction that takes
  // q's slots back and frees one of another limited queue, r, announces r's.
  q.db.exec("INSERT INTO " + q.db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout)"
            " VALUES ('r', 'lease', '30 seconds', 5, '1 hour', '1 hour', 'none', '5 minutes')");
  q.db.exec("SELECT " + q.db.table("set_queue_limits") + "('r', 1, NULL, NULL)");
  q.db.exec("INSERT INTO " + q.db.table("jobs") + " (queue, kind, payload) VALUES ('r', 'k', '{}')");
  const auto r_job = q.db.exec("SELECT id, lease_token FROM " + q.db.table("lease_jobs") + "('r', 1)")[0];
  CHECK(heard() == std::vector<std::string>{"r"});  // the new job's
  {
    pqxx::work tx(*q.db.conn);
    tx.exec("SELECT set_config('oncely.slots_announced', 'q', true)");
    tx.exec("SELECT " + q.db.table("complete_jobs") + "(ARRAY[" + r_job[0].c_str() + "]::bigint[], ARRAY[" +
            r_job[1].c_str() + "]::bigint[])");
    tx.commit();
  }
  CHECK(heard() == std::vector<std::string>{"r"});
}

TEST_CASE("what the limits hold back: queue_limits_held(), oncely stats, in lease and in transaction mode") {
  LimitedQueue q;
  q.limit("NULL", "'/tenant'", "1");
  q.enqueue("A", 3);
  q.enqueue("B", 1);
  q.enqueue("C", 2);
  REQUIRE(q.lease(2).size() == 2);  // two keys run (the fair claim: one job of each of two keys)
  const auto held = [&](const std::string& queue) {
    const auto r = q.db.exec("SELECT running, held_back, keys_at_limit FROM " + q.db.table("queue_limits_held") + "(" +
                             q.db.conn->quote(queue) + ")");
    REQUIRE(r.size() == 1);
    return std::vector<long>{r[0][0].as<long>(), r[0][1].as<long>(), r[0][2].as<long>()};
  };
  // Two keys at their limit of 1: their 1 or 2 other jobs wait; the third key's do not.
  const auto lease_mode = held("q");
  CHECK(lease_mode[0] == 2);
  CHECK(lease_mode[2] == 2);
  CHECK(lease_mode[1] ==
        q.db.scalar<long>("SELECT count(*) FROM " + q.db.table("jobs") +
                          " WHERE lease_token IS NULL AND concurrency_key IN (SELECT concurrency_key FROM " +
                          q.db.table("jobs") + " WHERE lease_token IS NOT NULL)"));

  const EnvChanges env{{"DATABASE_URL", q.db.url}, {"ONCELY_SCHEMA", q.db.schema}};
  const ProcessResult stats = run_process(oncely_cli({"stats", "--queue", "q", "--json"}), env);
  REQUIRE(stats.exit_code == 0);
  const auto queue = nlohmann::json::parse(stats.out)["queues"][0];
  CHECK(queue["running_under_limits"] == 2);
  CHECK(queue["held_by_limit"] == lease_mode[1]);
  CHECK(queue["keys_at_limit"] == 2);
  const ProcessResult text = run_process(oncely_cli({"stats", "--queue", "q"}), env);
  CHECK(text.out.find("  limits        2 running, " + std::to_string(lease_mode[1]) +
                      " held back, 2 key(s) at their limit") != std::string::npos);
  // queue show too, below the limits it shows.
  const ProcessResult show = run_process(oncely_cli({"queue", "show", "q"}), env);
  CHECK(show.out.find("  held now      2 running, " + std::to_string(lease_mode[1]) +
                      " held back, 2 key(s) at their limit") != std::string::npos);
  const ProcessResult show_json = run_process(oncely_cli({"queue", "show", "q", "--json"}), env);
  REQUIRE(show_json.exit_code == 0);
  CHECK(nlohmann::json::parse(show_json.out)["held"]["held_by_limit"] == lease_mode[1]);

  // A transaction-mode queue: its running jobs hold their slots through their claims' transactions.
  q.db.exec("INSERT INTO " + q.db.table("queue_policies") +
            " (queue, mode, lease, max_attempts, backoff_base, backoff_cap, backoff_jitter, job_timeout)"
            " VALUES ('t', 'transaction', '30 seconds', 5, '1 hour', '1 hour', 'none', '5 minutes')");
  q.db.exec("SELECT " + q.db.table("set_queue_limits") + "('t', 2, NULL, NULL)");
  q.db.exec("INSERT INTO " + q.db.table("jobs") +
            " (queue, kind, payload) SELECT 't', 'k', '{}' FROM generate_series(1, 6)");
  CHECK(held("t") == std::vector<long>{0, 0, 0});
  // Two batches, each with a slot of the queue: the first takes three jobs (a batch runs its
  // jobs one after another, one slot for all), the second two.
  pqxx::connection first_conn(q.db.url);
  pqxx::connection second_conn(q.db.url);
  pqxx::connection third_conn(q.db.url);
  pqxx::work first(first_conn);
  pqxx::work second(second_conn);
  pqxx::work third(third_conn);
  const std::string claim = "SELECT * FROM " + q.db.table("lock_ready_limited") + "('t', ";
  CHECK(first.exec(claim + "3)").size() == 3);
  CHECK(second.exec(claim + "2)").size() == 2);
  // Both slots held: the jobs not running wait (a batch's jobs count too, until their turn).
  CHECK(held("t") == std::vector<long>{2, 4, 0});
  // A third batch finds the last job but no slot: a NULL row says it was held back.
  const auto none = third.exec(claim + "3)");
  REQUIRE(none.size() == 1);
  CHECK(none[0][0].is_null());
  third.abort();
  second.abort();  // a slot free: nothing is held back
  CHECK(held("t") == std::vector<long>{1, 0, 0});
  // Given jobs (crash suspects) of a queue without a key: all it may take, in one batch with
  // one slot (one job per key is for a queue with a key; these jobs all have the key '').
  {
    const std::string ids =
        q.db.scalar<std::string>("SELECT array_agg(id)::text FROM " + q.db.table("jobs") + " WHERE queue = 't'");
    pqxx::connection suspects_conn(q.db.url);
    pqxx::work suspects(suspects_conn);
    CHECK(suspects.exec(claim + "3, '" + ids + "'::bigint[])").size() == 3);  // the 3 the first batch does not hold
  }
  first.abort();
  CHECK(held("t") == std::vector<long>{0, 0, 0});
}

TEST_CASE("transaction mode: a claim waits for the queue's slot before it picks a job; a batch holds one job per key") {
  LimitedQueue q;
  q.db.exec("UPDATE " + q.db.table("queue_policies") + " SET mode = 'transaction' WHERE queue = 'q'");
  q.limit("1", "'/tenant'", "NULL");
  q.enqueue("A", 5);
  const std::string claim = "SELECT * FROM " + q.db.table("lock_ready_limited") + "('q', 10";
  const std::string unlocked =
      "SELECT count(*) FROM (SELECT 1 FROM " + q.db.table("jobs") + " FOR UPDATE SKIP LOCKED) free";
  // The queue's only slot: a batch of A's backlog takes one job of it, not ten.
  pqxx::connection running_conn(q.db.url);
  pqxx::work running(running_conn);
  CHECK(running.exec(claim + ")").size() == 1);
  // A second claim waits for the slot. Meanwhile it has locked nothing: the job it will run
  // is chosen when it has its turn (it used to lock A's next job first, and a key enqueued
  // during the wait came after every claim waiting).
  std::promise<int> waiting_pid;
  auto waiting = std::async(std::launch::async, [&] {
    pqxx::connection conn(q.db.url);
    waiting_pid.set_value(conn.backendpid());
    pqxx::work tx(conn);
    std::vector<std::string> keys;
    for (const auto& row : tx.exec(claim + ", NULL, interval '20 seconds')"))
      keys.push_back(row[0].is_null() ? "held back"
                                      : tx.exec1("SELECT concurrency_key FROM " + q.db.table("jobs") +
                                                 " WHERE id = " + row[0].c_str())[0]
                                            .as<std::string>());
    return keys;
  });
  const std::string pid = std::to_string(waiting_pid.get_future().get());
  REQUIRE(wait_until(
      [&] { return q.db.scalar<long>("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = " + pid) == 1; },
      std::chrono::seconds(10)));
  CHECK(q.db.scalar<long>(unlocked) == 4);
  q.enqueue("B", 1);
  running.commit();  // the slot comes back: the waiting claim takes one job of each key
  auto keys = waiting.get();
  std::sort(keys.begin(), keys.end());
  std::string got;
  for (const auto& key : keys) got += key + ";";
  CAPTURE(got);
  CHECK(keys == std::vector<std::string>{"A", "B"});
}

TEST_CASE("a claim of a queue with a concurrency limit and no key starts where the caller's claim start says") {
  LimitedQueue q;
  q.limit("10", "NULL", "NULL");
  q.enqueue("", 3);
  // After the first job: the burn-down's completed jobs leave their index entries at the head
  // of the queue, and a claim from the head steps over every one of them (it used to).
  const auto first = q.db.exec("SELECT priority, (extract(epoch FROM run_at) * 1000000)::bigint, id FROM " +
                               q.db.table("jobs") + " ORDER BY priority, run_at, id LIMIT 1")[0];
  pqxx::work tx(*q.db.conn);
  const auto claimed = tx.exec("SELECT id FROM " + q.db.table("lease_lock_ready") + "('q', 10, " + first[0].c_str() +
                               "::smallint, " + first[1].c_str() + ", " + first[2].c_str() + ")");
  CHECK(claimed.size() == 2);
  for (const auto& row : claimed) CHECK(row[0].as<long>() != first[2].as<long>());
  tx.abort();
  // From the head: all three.
  pqxx::work from_head(*q.db.conn);
  CHECK(from_head.exec("SELECT id FROM " + q.db.table("lease_lock_ready") + "('q', 10, NULL, NULL, NULL)").size() == 3);
}
