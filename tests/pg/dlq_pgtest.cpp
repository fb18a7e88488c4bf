#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "support/exact_json.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

/// A dead letter as a test wants it; inserted directly with SQL.
struct Row {
  std::string queue = "default";
  std::string kind = "send_email";
  std::string payload = R"({"to": "a@example.com"})";
  std::optional<std::string> key{};
  int priority = 0;
  int attempts = 5;
  std::optional<int> max_attempts{};
  std::string last_error = "connection refused";
  std::string error_class = "exhausted";
  std::string failed_ago = "1 hour";  // an interval: failed_at = now() - this
};

std::int64_t add(PgFixture& db, const Row& r) {
  static std::atomic<std::int64_t> job_ids{1000};
  pqxx::work tx{*db.conn};
  const auto id =
      tx.exec_params1(
            "INSERT INTO " + db.table("dead_letters") +
                " (job_id, queue, kind, payload, idempotency_key, priority, attempts, max_attempts, last_error,"
                "  error_class, errors, error_detail, created_at, failed_at)"
                " VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10,"
                "  jsonb_build_array(jsonb_build_object('attempt', $7::int, 'error', $9::text, 'class', $10::text)),"
                "  '{\"exception\": \"std::runtime_error\"}', now() - $11::interval - interval '1 hour',"
                "  now() - $11::interval)"
                " RETURNING id",
            ++job_ids, r.queue, r.kind, r.payload, r.key, r.priority, r.attempts, r.max_attempts, r.last_error,
            r.error_class, r.failed_ago)[0]
          .as<std::int64_t>();
  tx.commit();
  return id;
}

EnvChanges env_of(const PgFixture& db) { return EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}}; }

ProcessResult dlq(const PgFixture& db, std::vector<std::string> args) {
  args.insert(args.begin(), "dlq");
  return run_process(oncely_cli(std::move(args)), env_of(db));
}

std::set<std::int64_t> ids_of(const PgFixture& db, const oncely::DeadLetterFilter& filter) {
  std::set<std::int64_t> ids;
  for (const auto& d : oncely::list_dead_letters(oncely::DatabaseUrl(db.url), db.schema, filter, 0).dead_letters) {
    ids.insert(d.id);
  }
  return ids;
}

long count(PgFixture& db, const std::string& table, const std::string& where = "true") {
  return db.scalar<long>("SELECT count(*) FROM " + db.table(table) + " WHERE " + where);
}

}  // namespace

TEST_SUITE("dlq") {
  TEST_CASE("dlq: replay twice enqueues once and marks the dead letter with that job") {
    PgFixture db;
    const auto id = add(db, {.queue = "mail",
                             .kind = "send_receipt",
                             .payload = R"({"payment_id": 7})",
                             .key = "pay-7",
                             .priority = 3,
                             .attempts = 4,
                             .max_attempts = 4});
    add(db, {.queue = "mail", .kind = "other"});  // not selected

    const ProcessResult first = dlq(db, {"replay", "--id", std::to_string(id)});
    CAPTURE(first.err);
    REQUIRE(first.exit_code == 0);
    CHECK(first.out.starts_with("replayed 1 dead letter:\n"));
    REQUIRE(count(db, "jobs") == 1);
    const pqxx::row job = db.exec(
        "SELECT id, queue, kind, payload->>'payment_id', idempotency_key, priority, max_attempts,"
        " attempts, errors::text, last_error IS NULL, run_at <= now() FROM " +
        db.table("jobs"))[0];
    const auto job_id = job[0].as<std::int64_t>();
    CHECK(first.out.find("dead letter " + std::to_string(id) + " -> job " + std::to_string(job_id)) !=
          std::string::npos);
    CHECK(job[1].as<std::string>() == "mail");
    CHECK(job[2].as<std::string>() == "send_receipt");
    CHECK(job[3].as<std::string>() == "7");
    CHECK(job[4].as<std::string>() == "pay-7");
    CHECK(job[5].as<int>() == 3);
    CHECK(job[6].as<int>() == 4);
    CHECK(job[7].as<int>() == 0);
    CHECK(job[8].as<std::string>() == "[]");
    CHECK(job[9].as<bool>());
    CHECK(job[10].as<bool>());
    CHECK(db.scalar<std::int64_t>("SELECT replayed_job_id FROM " + db.table("dead_letters") +
                                  " WHERE replayed_at IS NOT NULL AND id = " + std::to_string(id)) == job_id);

    const ProcessResult second = dlq(db, {"replay", "--id", std::to_string(id)});
    CAPTURE(second.err);
    REQUIRE(second.exit_code == 0);
    CHECK(second.out.starts_with("replayed 0 dead letters\n"));
    CHECK(second.out.find("skipped 1 dead letter already replayed: " + std::to_string(id) + " (as job " +
                          std::to_string(job_id) + ")") != std::string::npos);
    CHECK(count(db, "jobs") == 1);
    CHECK(count(db, "dead_letters", "replayed_at IS NOT NULL") == 1);
  }

  TEST_CASE("dlq: concurrent replays of the same dead letters enqueue each one once") {
    PgFixture db;
    for (int i = 0; i < 40; ++i) add(db, {.queue = i % 2 ? "a" : "b", .key = "k-" + std::to_string(i)});
    const oncely::DatabaseUrl url(db.url);
    oncely::DeadLetterFilter all;
    all.all = true;

    const auto check_each_once = [&] {
      CHECK(count(db, "jobs") == count(db, "dead_letters"));
      CHECK(count(db, "dead_letters", "replayed_at IS NULL") == 0);
      // Every mark names a job that exists, and no two marks name the same job.
      CHECK(db.scalar<long>("SELECT count(DISTINCT d.replayed_job_id) FROM " + db.table("dead_letters") + " d JOIN " +
                            db.table("jobs") +
                            " j ON j.id = d.replayed_job_id AND j.idempotency_key = d.idempotency_key") ==
            count(db, "dead_letters"));
    };

    SUBCASE("a replay waits for one holding the locks, then skips what it replayed") {
      pqxx::connection holder{db.url};
      pqxx::work tx{holder};
      const oncely::ReplayResult first = oncely::replay_dead_letters(tx, db.schema, all);
      CHECK(first.replayed.size() == 40);
      auto second = std::async(std::launch::async, [&] { return oncely::replay_dead_letters(url, db.schema, all); });
      // The second replay is blocked on the first one's row locks.
      REQUIRE(wait_until(
          [&] {
            return db.scalar<long>(
                       "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                       " AND query LIKE '%" +
                       db.schema + "%dead_letters%'") > 0;
          },
          10s));
      tx.commit();
      const oncely::ReplayResult after = second.get();
      CHECK(after.replayed.empty());
      CHECK(after.already_replayed == 40);
      check_each_once();
    }

    SUBCASE("two replay processes racing") {
      Process a(oncely_cli({"dlq", "replay", "--all"}), env_of(db));
      Process b(oncely_cli({"dlq", "replay", "--queue", "a"}), env_of(db));
      const ProcessResult ra = a.wait();
      const ProcessResult rb = b.wait();
      CAPTURE(ra.err);
      CAPTURE(rb.err);
      CHECK(ra.exit_code == 0);
      CHECK(rb.exit_code == 0);
      check_each_once();
    }

    SUBCASE("threads racing, many rounds") {
      for (int round = 0; round < 5; ++round) {
        for (int i = 0; i < 20; ++i) add(db, {.key = "r" + std::to_string(round) + "-" + std::to_string(i)});
        std::atomic<bool> go{false};
        std::vector<std::future<oncely::ReplayResult>> replays;
        for (int t = 0; t < 3; ++t) {
          replays.push_back(std::async(std::launch::async, [&] {
            while (!go) std::this_thread::yield();
            return oncely::replay_dead_letters(url, db.schema, all);
          }));
        }
        go = true;
        std::size_t replayed = 0;
        for (auto& r : replays) replayed += r.get().replayed.size();
        CHECK(replayed == static_cast<std::size_t>(round == 0 ? 60 : 20));
      }
      check_each_once();
    }
  }

  TEST_CASE("dlq: replay --to-queue enqueues to that queue and leaves the dead letter's queue") {
    PgFixture db;
    const auto id = add(db, {.queue = "mail"});
    const ProcessResult r = dlq(db, {"replay", "--queue", "mail", "--to-queue", "mail_slow"});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.starts_with("replayed 1 dead letter to queue mail_slow:\n"));
    CHECK(db.scalar<std::string>("SELECT queue FROM " + db.table("jobs")) == "mail_slow");
    CHECK(db.scalar<std::string>("SELECT queue FROM " + db.table("dead_letters") +
                                 " WHERE id = " + std::to_string(id)) == "mail");
  }

  TEST_CASE("dlq: replay and purge refuse without a filter, with one line and exit 2") {
    PgFixture db;
    add(db, {});
    for (const char* verb : {"replay", "purge"}) {
      const ProcessResult r = dlq(db, {verb});
      CAPTURE(verb);
      CHECK(r.exit_code == 2);
      CHECK(lines(r.err) == 1);
      CHECK(r.err ==
            std::string("oncely: error: refusing to ") + verb + " every dead letter: give a filter or --all\n");
      CHECK(r.out.empty());
    }
    CHECK(count(db, "dead_letters", "replayed_at IS NULL") == 1);
    CHECK(count(db, "jobs") == 0);

    // The library refuses the same way.
    CHECK_THROWS_AS(oncely::replay_dead_letters(oncely::DatabaseUrl(db.url), db.schema, {}), oncely::ConfigError);
    CHECK_THROWS_AS(oncely::purge_dead_letters(oncely::DatabaseUrl(db.url), db.schema, {}), oncely::ConfigError);
  }

  TEST_CASE("dlq: --dry-run shows what would happen and changes nothing") {
    PgFixture db;
    const auto a = add(db, {.queue = "mail", .last_error = "SMTP 421 try later"});
    const auto b = add(db, {.queue = "mail"});
    add(db, {.queue = "billing"});
    REQUIRE(dlq(db, {"replay", "--id", std::to_string(b)}).exit_code == 0);
    const long jobs_before = count(db, "jobs");

    const ProcessResult replay = dlq(db, {"replay", "--queue", "mail", "--dry-run"});
    CAPTURE(replay.err);
    REQUIRE(replay.exit_code == 0);
    CHECK(replay.out.starts_with("dry run: would replay 1 dead letter; nothing was changed\n"));
    CHECK(replay.out.find("SMTP 421 try later") != std::string::npos);
    CHECK(replay.out.find("1 dead letter was already replayed and would be skipped") != std::string::npos);
    CHECK(count(db, "dead_letters", "id = " + std::to_string(a) + " AND replayed_at IS NULL") == 1);

    const ProcessResult purge = dlq(db, {"purge", "--all", "--dry-run"});
    CAPTURE(purge.err);
    REQUIRE(purge.exit_code == 0);
    CHECK(purge.out.starts_with("dry run: would purge 3 dead letters; nothing was changed\n"));
    CHECK(count(db, "dead_letters") == 3);
    CHECK(count(db, "jobs") == jobs_before);
  }

  TEST_CASE("dlq: each filter selects what it should") {
    PgFixture db;
    const auto a = add(db, {.queue = "mail",
                            .kind = "send_email",
                            .last_error = "SMTP timeout after 30s",
                            .error_class = "exhausted",
                            .failed_ago = "10 days"});
    const auto b = add(db, {.queue = "mail",
                            .kind = "send_email",
                            .last_error = "invalid address: bob@",
                            .error_class = "permanent",
                            .failed_ago = "2 hours"});
    const auto c = add(db, {.queue = "billing",
                            .kind = "charge",
                            .last_error = "HTTP 503 from gateway",
                            .error_class = "exhausted",
                            .failed_ago = "25 hours"});
    const auto d = add(db, {.queue = "billing",
                            .kind = "refund",
                            .last_error = "Job TIMEOUT: 300000ms",
                            .error_class = "timeout",
                            .failed_ago = "30 minutes"});
    const auto e = add(db, {.queue = "mail", .kind = "send_email", .failed_ago = "3 hours"});
    {
      oncely::DeadLetterFilter only_e;
      only_e.ids = {e};
      REQUIRE(oncely::replay_dead_letters(oncely::DatabaseUrl(db.url), db.schema, only_e).replayed.size() == 1);
    }
    using Ids = std::set<std::int64_t>;
    oncely::DeadLetterFilter f;
    CHECK(ids_of(db, f) == Ids{a, b, c, d});  // not replayed only, by default
    f.include_replayed = true;
    CHECK(ids_of(db, f) == Ids{a, b, c, d, e});

    const auto select = [&](auto set) {
      oncely::DeadLetterFilter filter;
      set(filter);
      return ids_of(db, filter);
    };
    CHECK(select([](auto& x) { x.queue = "mail"; }) == Ids{a, b});
    CHECK(select([](auto& x) { x.kind = "charge"; }) == Ids{c});
    CHECK(select([](auto& x) { x.error_class = "exhausted"; }) == Ids{a, c});
    CHECK(select([](auto& x) { x.error_text = "timeout"; }) == Ids{a, d});  // any case
    CHECK(select([](auto& x) { x.error_text = "503 FROM"; }) == Ids{c});
    CHECK(select([](auto& x) { x.error_text = "100%"; }) == Ids{});  // no pattern characters
    CHECK(select([&](auto& x) { x.ids = {b, d}; }) == Ids{b, d});
    CHECK(select([](auto& x) { x.older_than = 3 * 24h; }) == Ids{a});
    CHECK(select([](auto& x) { x.newer_than = 1h; }) == Ids{d});
    CHECK(select([](auto& x) {
            x.newer_than = 24h;
            x.older_than = 1h;
          }) == Ids{b});
    CHECK(select([](auto& x) {
            x.queue = "billing";
            x.error_class = "exhausted";
          }) == Ids{c});
    CHECK(select([](auto& x) {
            x.queue = "mail";
            x.include_replayed = true;
          }) == Ids{a, b, e});

    SUBCASE("the command line passes the same filters") {
      const ProcessResult r = dlq(db, {"list", "--json", "--class", "exhausted", "--older-than", "1d"});
      CAPTURE(r.err);
      REQUIRE(r.exit_code == 0);
      const auto list = nlohmann::json::parse(r.out);
      REQUIRE(list.is_array());
      REQUIRE(list.size() == 2);
      CHECK(list[0].at("id") == c);  // newest failure first
      CHECK(list[1].at("id") == a);
      CHECK(list[0].at("queue") == "billing");
      CHECK(list[0].at("kind") == "charge");
      CHECK(list[0].at("error_class") == "exhausted");
      CHECK(list[0].at("last_error") == "HTTP 503 from gateway");
      CHECK(list[0].at("attempts") == 5);
      CHECK(list[0].at("replayed_job_id").is_null());
      CHECK(list[0].at("failed_at").get<std::string>().ends_with("Z"));

      const ProcessResult table = dlq(db, {"list", "--error", "timeout", "--newer-than", "1h"});
      CAPTURE(table.err);
      REQUIRE(table.exit_code == 0);
      CHECK(lines(table.out) == 2);  // header and one row
      CHECK(table.out.starts_with("ID "));
      CHECK(table.out.find("Job TIMEOUT: 300000ms") != std::string::npos);

      const ProcessResult by_id = dlq(db, {"list", "--json", "--id", std::to_string(e)});  // replayed, named by id
      REQUIRE(by_id.exit_code == 0);
      CHECK(nlohmann::json::parse(by_id.out).at(0).at("replayed_job_id").is_number());

      const ProcessResult none = dlq(db, {"list", "--kind", "nothing_like_this"});
      REQUIRE(none.exit_code == 0);
      CHECK(none.out == "no dead letters match\n");
    }

    SUBCASE("purge deletes exactly what the filter selects, replayed or not") {
      const ProcessResult r = dlq(db, {"purge", "--queue", "mail"});
      CAPTURE(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(r.out == "purged 3 dead letters\n");
      CHECK(count(db, "dead_letters") == 2);
      CHECK(count(db, "dead_letters", "queue = 'mail'") == 0);
    }
  }

  TEST_CASE("dlq: show prints everything about the selected dead letters as JSON") {
    PgFixture db;
    const auto id = add(db, {.queue = "mail",
                             .kind = "send_receipt",
                             .payload = R"({"payment_id": 7, "note": "h\u00e9"})",
                             .key = "pay-7",
                             .priority = -2,
                             .attempts = 3,
                             .max_attempts = 3,
                             .last_error = "boom",
                             .error_class = "permanent"});
    const ProcessResult r = dlq(db, {"show", "--id", std::to_string(id)});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto shown = nlohmann::json::parse(r.out);
    REQUIRE(shown.size() == 1);
    const auto& d = shown[0];
    CHECK(d.at("id") == id);
    CHECK(d.at("job_id").is_number());
    CHECK(d.at("payload") == nlohmann::json({{"payment_id", 7}, {"note", "h\xC3\xA9"}}));
    CHECK(d.at("idempotency_key") == "pay-7");
    CHECK(d.at("priority") == -2);
    CHECK(d.at("max_attempts") == 3);
    CHECK(d.at("errors").at(0).at("error") == "boom");
    CHECK(d.at("error_detail").at("exception") == "std::runtime_error");
    CHECK(d.at("created_at").is_string());
    CHECK(d.at("failed_at").is_string());
    CHECK(d.at("replayed_at").is_null());
    CHECK(d.at("key_processed") == false);
  }

  TEST_CASE("dlq: group-by error counts the same error, numbers aside, most frequent first") {
    PgFixture db;
    add(db, {.kind = "charge", .last_error = "payment 17 not found", .failed_ago = "3 hours"});
    add(db, {.kind = "charge", .last_error = "payment 2301 not found", .failed_ago = "2 hours"});
    const auto newest = add(db, {.kind = "charge", .last_error = "payment 5 not found", .failed_ago = "1 hour"});
    add(db, {.kind = "notify", .last_error = "HTTP 503 from crm", .error_class = "timeout"});
    add(db, {.kind = "notify", .last_error = "HTTP 502 from crm", .error_class = "timeout"});
    add(db, {.kind = "notify", .last_error = "unique", .error_class = "permanent"});

    const oncely::DeadLetterGroups groups =
        oncely::group_dead_letters(oncely::DatabaseUrl(db.url), db.schema, {}, oncely::DeadLetterGrouping::error, 0);
    REQUIRE(groups.groups.size() == 3);
    CHECK(groups.total_groups == 3);
    CHECK(groups.groups[0].key == "payment # not found");
    CHECK(groups.groups[0].count == 3);
    CHECK(groups.groups[0].example_id == newest);
    CHECK(groups.groups[0].example_error == "payment 5 not found");
    CHECK(groups.groups[0].first_failed_at < groups.groups[0].last_failed_at);
    CHECK(groups.groups[1].key == "HTTP # from crm");
    CHECK(groups.groups[1].count == 2);
    CHECK(groups.groups[2].count == 1);

    const ProcessResult table = dlq(db, {"list", "--group-by", "error"});
    CAPTURE(table.err);
    REQUIRE(table.exit_code == 0);
    CHECK(lines(table.out) == 4);
    CHECK(table.out.find("payment # not found") < table.out.find("HTTP # from crm"));

    const ProcessResult json = dlq(db, {"list", "--group-by", "class", "--json"});
    REQUIRE(json.exit_code == 0);
    const auto by_class = nlohmann::json::parse(json.out);
    REQUIRE(by_class.size() == 3);
    CHECK(by_class[0].at("key") == "exhausted");
    CHECK(by_class[0].at("count") == 3);
    CHECK(by_class[1].at("key") == "timeout");
    CHECK(by_class[1].at("count") == 2);

    const ProcessResult limited = dlq(db, {"list", "--group-by", "kind", "--limit", "1"});
    REQUIRE(limited.exit_code == 0);
    CHECK(limited.out.find("(showing the 1 largest of 2 groups") != std::string::npos);
  }

  TEST_CASE("dlq: replay warns when the key was processed since, and still enqueues") {
    PgFixture db;
    const auto id = add(db, {.kind = "charge", .key = "pay-9"});
    db.exec("INSERT INTO " + db.table("processed_jobs") +
            " (kind, idempotency_key, job_id, queue)"
            " VALUES ('charge', 'pay-9', 77, 'default')");
    const ProcessResult dry = dlq(db, {"replay", "--id", std::to_string(id), "--dry-run"});
    REQUIRE(dry.exit_code == 0);
    CHECK(dry.err.find("oncely: warning: dead letter " + std::to_string(id)) != std::string::npos);
    const ProcessResult r = dlq(db, {"replay", "--id", std::to_string(id)});
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("was processed since it failed; the job will be skipped as a duplicate") != std::string::npos);
    CHECK(lines(r.err) == 1);
    CHECK(count(db, "jobs") == 1);
  }

  TEST_CASE("dlq: an unreachable database is one line and the password is masked") {
    const ProcessResult r = run_process(oncely_cli({"dlq", "list"}),
                                        EnvChanges{{"DATABASE_URL", "postgresql://app:Sup3rS3cret@127.0.0.1:1/jobs"}});
    CHECK(r.exit_code == 1);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("Sup3rS3cret") == std::string::npos);
  }

  TEST_CASE("dlq: --job-id selects by the job id the logs print; --id given a job id says so") {
    PgFixture db;
    const std::int64_t id = add(db, {.kind = "send_receipt"});
    add(db, {.kind = "other"});
    const auto job_id =
        db.scalar<std::int64_t>("SELECT job_id FROM " + db.table("dead_letters") + " WHERE id = " + std::to_string(id));
    REQUIRE(job_id != id);

    const ProcessResult by_job = dlq(db, {"show", "--job-id", std::to_string(job_id)});
    CHECK(by_job.exit_code == 0);
    const auto shown = nlohmann::json::parse(by_job.out);
    REQUIRE(shown.size() == 1);
    CHECK(shown[0].at("id") == id);

    const ProcessResult mistaken = dlq(db, {"show", "--id", std::to_string(job_id)});
    CAPTURE(mistaken.err);
    CHECK(mistaken.exit_code == 1);
    CHECK(mistaken.out.empty());
    CHECK(lines(mistaken.err) == 1);
    CHECK(mistaken.err == "oncely: error: no dead letter " + std::to_string(job_id) + "; did you mean --job-id " +
                              std::to_string(job_id) + "? (--id takes dead-letter ids)\n");

    const ProcessResult nothing = dlq(db, {"show", "--id", "999999"});
    CHECK(nothing.exit_code == 1);
    CHECK(nothing.err == "oncely: error: no dead letter 999999\n");

    const ProcessResult listed = dlq(db, {"list", "--job-id", std::to_string(job_id), "--json"});
    CHECK(nlohmann::json::parse(listed.out).size() == 1);
  }

}  // TEST_SUITE

TEST_CASE("dlq: show prints each payload exactly as stored, even numbers no double can hold") {
  PgFixture db;
  const auto precise = add(db, {.payload = R"({"cents": 12345678901234567.89, "fee": 0.10000000000000000555})"});
  const auto huge = add(db, {.payload = R"({"cents": 1e400})", .last_error = "\u0001oncely-payload-0\u0001"});
  const auto plain = add(db, {.payload = R"([1, "two", {"three": null}])"});
  const ProcessResult r =
      dlq(db, {"show", "--id", std::to_string(precise), "--id", std::to_string(huge), "--id", std::to_string(plain)});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  // The digits as written (jsonb's text: 1e400 is stored expanded), not rounded through a double.
  // (jsonb keeps an object's keys shorter first.)
  CHECK(r.out.find(R"("payload": {"fee":0.10000000000000000555,"cents":12345678901234567.89})") != std::string::npos);
  CHECK(r.out.find(R"({"cents":1)" + std::string(400, '0') + "}") != std::string::npos);
  CHECK(r.out.find(R"("payload": [1,"two",{"three":null}])") != std::string::npos);
  CHECK(r.out.find("oncely-payload") == r.out.find("oncely-payload-0"));  // only the last_error's own text
  // Still one JSON document (read exactly: nlohmann cannot hold 1e400), and the library's
  // view says which payloads a double could not hold.
  CHECK_NOTHROW(oncely::detail::exact_json::validate(r.out));
  oncely::DeadLetterFilter only_huge;
  only_huge.ids = {huge};
  const auto listed = oncely::list_dead_letters(oncely::DatabaseUrl(db.url), db.schema, only_huge, 0, true);
  REQUIRE(listed.dead_letters.size() == 1);
  CHECK(listed.dead_letters[0].payload.is_null());
  CHECK(listed.dead_letters[0].payload_text.find("1000000000") != std::string::npos);
}
