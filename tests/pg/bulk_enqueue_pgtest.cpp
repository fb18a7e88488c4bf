#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;

namespace {

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

/// A file of test input, removed when the test ends. Large inputs go through a file: the
/// process helper writes stdin before it reads output, which only suits small inputs.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    char name[] = "/tmp/oncely_bulk_XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path_ = name;
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

EnvChanges env_of(const PgFixture& db) { return EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}}; }

/// `oncely enqueue - [extra...] < file`, through /bin/sh (paths passed as arguments, not
/// spliced into the script).
ProcessResult enqueue_file(const PgFixture& db, const TempFile& file, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{"/bin/sh", "-c", R"(f=$1; shift; exec "$0" enqueue - "$@" < "$f")", oncely_cli({})[0],
                                file.path()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_process(argv, env_of(db));
}

std::string numbered_lines(int n, const std::function<std::string(int)>& line) {
  std::string text;
  for (int i = 1; i <= n; ++i) text += line(i) + "\n";
  return text;
}

std::string plain_job(int i) { return R"({"kind": "k", "payload": {"n": )" + std::to_string(i) + "}}"; }

long count(PgFixture& db, const std::string& where = "true") {
  return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE " + where);
}

/// How many transactions wrote the jobs (each row's xmin is the transaction that inserted it).
long transactions(PgFixture& db) {
  return db.scalar<long>("SELECT count(DISTINCT xmin::text) FROM " + db.table("jobs"));
}

/// The write end of a FIFO that a child reads as its stdin: the test decides when each
/// line arrives, and when the input ends (close()).
class FifoWriter {
 public:
  /// Opens `path` once a reader has opened it (fails the test after 10 s without one).
  explicit FifoWriter(const std::string& path) {
    REQUIRE(wait_until(
        [&] {
          fd_ = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO until a reader is there
          return fd_ >= 0;
        },
        std::chrono::seconds(10)));
  }
  ~FifoWriter() { close(); }
  FifoWriter(const FifoWriter&) = delete;
  FifoWriter& operator=(const FifoWriter&) = delete;

  void write(const std::string& text) {
    REQUIRE(::write(fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace

TEST_SUITE("bulk") {
  TEST_CASE("bulk: 10,000 lines load with the right columns and defaults") {
    PgFixture db;
    // Line i: every 10th in queue q2, every 7th keyed, every 5th with priority, every 3rd
    // "+1h", every 11th an absolute run_at, every 4th max_attempts; the rest take defaults.
    const TempFile input(numbered_lines(10000, [](int i) {
      std::string line = R"({"kind": "k)" + std::to_string(i % 3) + R"(", "payload": {"n": )" + std::to_string(i) + "}";
      if (i % 10 == 0) line += R"(, "queue": "q2")";
      if (i % 7 == 0) line += R"(, "key": "key-)" + std::to_string(i) + R"(")";
      if (i % 5 == 0) line += R"(, "priority": -)" + std::to_string(i % 100);
      if (i % 3 == 0)
        line += R"(, "run_at": "+1h")";
      else if (i % 11 == 0)
        line += R"(, "run_at": "2031-02-03 04:05:06+00")";
      if (i % 4 == 0) line += R"(, "max_attempts": 9)";
      return line + "}";
    }));
    const ProcessResult r = enqueue_file(db, input);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out == "enqueued 10000 jobs\n");
    CHECK(r.err.empty());

    CHECK(count(db) == 10000);
    CHECK(db.scalar<long>("SELECT sum((payload->>'n')::int) FROM " + db.table("jobs")) == 10000L * 10001 / 2);
    CHECK(count(db, "kind = 'k' || ((payload->>'n')::int % 3)") == 10000);
    CHECK(count(db, "queue = 'q2'") == 1000);
    CHECK(count(db, "queue = 'default'") == 9000);
    CHECK(count(db, "idempotency_key IS NOT NULL") == 10000 / 7);
    CHECK(count(db, "idempotency_key = 'key-' || (payload->>'n')") == 10000 / 7);
    CHECK(
        count(db, "priority = CASE WHEN (payload->>'n')::int % 5 = 0 THEN -((payload->>'n')::int % 100) ELSE 0 END") ==
        10000);
    CHECK(count(db, "max_attempts = 9") == 2500);
    CHECK(count(db, "max_attempts IS NULL") == 7500);
    CHECK(count(db, "attempts = 0 AND errors = '[]' AND last_error IS NULL") == 10000);
    // Defaults: run_at is the enqueue transaction's now(), exactly what DEFAULT gives.
    const long delayed = 3333;
    const long absolute = count(db, "(payload->>'n')::int % 3 <> 0 AND (payload->>'n')::int % 11 = 0");
    CHECK(count(db, "run_at BETWEEN created_at + interval '59 minutes' AND created_at + interval '61 minutes'") ==
          delayed);
    CHECK(count(db, "run_at = '2031-02-03 04:05:06+00'") == absolute);
    CHECK(count(db, "run_at = created_at") == 10000 - delayed - absolute);
    // Ids follow the input order.
    CHECK(db.scalar<long>("SELECT count(*) FROM (SELECT (payload->>'n')::int AS n, lag((payload->>'n')::int) OVER "
                          "(ORDER BY id) AS previous FROM " +
                          db.table("jobs") + ") t WHERE previous > n") == 0);
  }

  TEST_CASE("bulk: a bad line stops the load, and the batches before it stay") {
    PgFixture db;
    struct Case {
      const char* bad_line;
      const char* reason;  // detected by us, or by the server during the COPY
    };
    for (const Case& c : {Case{R"({"kind": "k", "priority": 99999})", "priority: must be between -32768 and 32767"},
                          Case{R"({"kind": "k", "run_at": "next tuesday-ish"})",
                               "run_at: invalid input syntax for type timestamp with time zone"}}) {
      CAPTURE(c.bad_line);
      db.exec("TRUNCATE " + db.table("jobs"));
      const TempFile input(numbered_lines(10000, [&](int i) { return i == 7500 ? c.bad_line : plain_job(i); }));
      const ProcessResult r = enqueue_file(db, input);
      CAPTURE(r.err);
      CHECK(r.exit_code != 0);
      CHECK(r.out.empty());
      CHECK(lines(r.err) == 1);
      CHECK(r.err.starts_with(std::string("oncely: error: stdin line 7500: ") + c.reason));
      CHECK(r.err.ends_with("; 5000 jobs from lines 1..5000 were enqueued before it\n"));
      CHECK(count(db) == 5000);
      CHECK(db.scalar<int>("SELECT max((payload->>'n')::int) FROM " + db.table("jobs")) == 5000);
    }
  }

  TEST_CASE("bulk: --batch-size sets the transaction size") {
    PgFixture db;
    const TempFile input(numbered_lines(1000, [](int i) { return i == 950 ? std::string("{}") : plain_job(i); }));
    const ProcessResult r = enqueue_file(db, input, {"--batch-size", "100"});
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err ==
          "oncely: error: stdin line 950: kind: missing (every job needs a kind); 900 jobs from lines "
          "1..900 were enqueued before it\n");
    CHECK(count(db) == 900);
  }

  TEST_CASE("bulk: --batch-size 1 commits every job on its own, other sizes every N jobs") {
    PgFixture db;
    const TempFile input(numbered_lines(10, plain_job));
    struct Case {
      std::vector<std::string> options;
      long transactions;
    };
    for (const Case& c : {Case{{"--batch-size", "1"}, 10}, Case{{"--batch-size", "3"}, 4}, Case{{}, 1}}) {
      CAPTURE(c.transactions);
      db.exec("TRUNCATE " + db.table("jobs"));
      const ProcessResult r = enqueue_file(db, input, c.options);
      CAPTURE(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(r.out == "enqueued 10 jobs\n");
      CHECK(count(db) == 10);
      CHECK(transactions(db) == c.transactions);
      CHECK(count(db, "run_at = created_at AND queue = 'default' AND priority = 0") == 10);
    }

    // One INSERT per job reports a bad line like the COPY does, keeping the jobs before it.
    for (const auto& [bad_line, reason] :
         {std::pair{R"({"kind": "k", "run_at": "next tuesday-ish"})",
                    "run_at: invalid input syntax for type timestamp with time zone"},
          std::pair{R"({"kind": "k", "priority": 99999})", "priority: must be between -32768 and 32767"}}) {
      CAPTURE(bad_line);
      db.exec("TRUNCATE " + db.table("jobs"));
      const TempFile bad(numbered_lines(10, [&](int i) { return i == 7 ? std::string(bad_line) : plain_job(i); }));
      const ProcessResult r = enqueue_file(db, bad, {"--batch-size", "1"});
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(r.err.starts_with(std::string("oncely: error: stdin line 7: ") + reason));
      CHECK(r.err.ends_with("; 6 jobs from lines 1..6 were enqueued before it\n"));
      CHECK(count(db) == 6);
    }

    // "+DURATION" and absolute run_at go through the INSERT as they do through the COPY.
    db.exec("TRUNCATE " + db.table("jobs"));
    const TempFile timed(R"({"kind": "later", "run_at": "+1h"})"
                         "\n"
                         R"({"kind": "fixed", "run_at": "2031-02-03 04:05:06+00", "queue": "q", "key": "x"})"
                         "\n");
    const ProcessResult r = enqueue_file(db, timed, {"--batch-size", "1"});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(count(db,
                "kind = 'later' AND run_at BETWEEN created_at + interval '59 minutes' AND created_at + interval "
                "'61 minutes'") == 1);
    CHECK(count(db, "kind = 'fixed' AND run_at = '2031-02-03 04:05:06+00' AND queue = 'q' AND idempotency_key = 'x'") ==
          1);
  }

  TEST_CASE("bulk: a slow producer's jobs are enqueued as they arrive, not held back for a full batch") {
    PgFixture db;
    const TempDir dir;
    const std::string fifo = dir.file("stdin");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // Default batch size (5000): only the pauses in the input can make these jobs commit.
    Process enqueue({"/bin/sh", "-c", R"(exec "$0" enqueue - < "$1")", oncely_cli({})[0], fifo}, env_of(db));
    FifoWriter producer(fifo);
    const auto committed = [&](long n) { return wait_until([&] { return count(db) == n; }, std::chrono::seconds(10)); };

    producer.write(plain_job(1) + "\n");
    CHECK(committed(1));
    producer.write(plain_job(2) + "\n" + plain_job(3) + "\n");
    CHECK(committed(3));
    producer.write(plain_job(4).substr(0, 10));  // half a line is not a job yet
    producer.write(plain_job(4).substr(10) + "\n");
    CHECK(committed(4));
    producer.close();
    const ProcessResult r = enqueue.wait();
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == "enqueued 4 jobs\n");
    CHECK(count(db) == 4);
    CHECK(db.scalar<long>("SELECT sum((payload->>'n')::int) FROM " + db.table("jobs")) == 10);
  }

  TEST_CASE("bulk: blank lines are skipped and still counted in line numbers") {
    PgFixture db;
    const EnvChanges env = env_of(db);
    const ProcessResult ok = run_process(oncely_cli({"enqueue", "-"}), env,
                                         "\n" + plain_job(1) + "\n   \n" + plain_job(2) + "\r\n\n\t\n" + plain_job(3));
    CAPTURE(ok.err);
    REQUIRE(ok.exit_code == 0);
    CHECK(ok.out == "enqueued 3 jobs\n");
    CHECK(count(db) == 3);

    const ProcessResult bad =
        run_process(oncely_cli({"enqueue", "-"}), env, "\n" + plain_job(4) + "\n\n{\"kind\": 1}\n");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err == "oncely: error: stdin line 4: kind: must be a string, got number; no jobs were enqueued\n");
    CHECK(count(db) == 3);

    const ProcessResult empty = run_process(oncely_cli({"enqueue", "-"}), env, "");
    CHECK(empty.exit_code == 0);
    CHECK(empty.out == "enqueued 0 jobs\n");
  }

  TEST_CASE("bulk: the command line's options are the defaults of every line") {
    PgFixture db;
    const ProcessResult r = run_process(
        oncely_cli({"enqueue", "-", "--queue", "bulk", "--priority", "4", "--max-attempts", "2", "--run-at", "+10m"}),
        env_of(db),
        R"({"kind": "a"})"
        "\n"
        R"({"kind": "b", "queue": "own", "run_at": "2030-01-01 00:00:00+00"})"
        "\n");
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(count(db,
                "kind = 'a' AND queue = 'bulk' AND priority = 4 AND max_attempts = 2 AND"
                " run_at BETWEEN created_at + interval '9 minutes' AND created_at + interval '11 minutes'") == 1);
    CHECK(count(db, "kind = 'b' AND queue = 'own' AND priority = 4 AND run_at = '2030-01-01 00:00:00+00'") == 1);

    for (const auto& args : std::vector<std::vector<std::string>>{{"enqueue", "-", "--key", "k"},
                                                                  {"enqueue", "-", R"({"a": 1})"},
                                                                  {"enqueue", "-", "--priority", "40000"}}) {
      const ProcessResult refused = run_process(oncely_cli(args), env_of(db),
                                                R"({"kind": "a"})"
                                                "\n");
      CAPTURE(refused.err);
      CHECK(refused.exit_code == 2);
      CHECK(lines(refused.err) == 1);
    }
    CHECK(count(db) == 2);
  }

  TEST_CASE("bulk: Client::enqueue_batch returns the ids in order and stores the jobs") {
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    std::vector<oncely::NewJob> jobs;
    for (int i = 0; i < 300; ++i) {
      jobs.push_back({.kind = "batch", .payload = {{"i", i}}, .queue = i % 2 ? "odd" : "even"});
    }
    jobs[5].run_at = "2030-01-01T00:00:00Z";
    jobs[5].delay = std::chrono::hours(1);  // a run_at text plus a delay: added by the database
    jobs[6].delay = std::chrono::minutes(5);
    jobs[7].idempotency_key = "seven";
    const std::vector<std::int64_t> ids = client.enqueue_batch(jobs);
    REQUIRE(ids.size() == jobs.size());
    CHECK(std::is_sorted(ids.begin(), ids.end()));
    CHECK(count(db) == 300);
    for (const std::size_t i : {std::size_t{0}, std::size_t{7}, std::size_t{299}}) {
      CHECK(db.scalar<int>("SELECT (payload->>'i')::int FROM " + db.table("jobs") +
                           " WHERE id = " + std::to_string(ids[i])) == static_cast<int>(i));
    }
    CHECK(db.scalar<std::string>("SELECT to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') FROM " +
                                 db.table("jobs") + " WHERE id = " + std::to_string(ids[5])) == "2030-01-01 01:00");
    CHECK(count(db, "id = " + std::to_string(ids[6]) + " AND run_at > created_at + interval '4 minutes'") == 1);
    CHECK(db.scalar<std::string>("SELECT idempotency_key FROM " + db.table("jobs") +
                                 " WHERE id = " + std::to_string(ids[7])) == "seven");
    // A later single enqueue gets a later id: the batch drew its ids from the same sequence.
    CHECK(client.enqueue({.kind = "after"}) > ids.back());
    CHECK(client.enqueue_batch({}).empty());

    SUBCASE("invalid jobs are refused before anything is sent, naming the job") {
      std::vector<oncely::NewJob> bad(3, oncely::NewJob{.kind = "k"});
      bad[2].max_attempts = 0;
      try {
        (void)client.enqueue_batch(bad);
        FAIL("expected a ConfigError");
      } catch (const oncely::ConfigError& e) {
        CHECK(std::string(e.what()) == "jobs[2].max_attempts: must be at least 1");
      }
      bad[2].max_attempts.reset();
      bad[1].run_at = "not a time";
      try {
        (void)client.enqueue_batch(bad);
        FAIL("expected a ConfigError");
      } catch (const oncely::ConfigError& e) {
        CHECK(std::string(e.what()).starts_with("jobs[1]: run_at: invalid input syntax for type timestamp"));
      }
      CHECK(count(db) == 301);
      CHECK(client.enqueue_batch({oncely::NewJob{.kind = "still works"}}).size() == 1);  // the connection is usable
    }
  }

  TEST_CASE("bulk: the Client batch API inside a rolled-back transaction leaves nothing") {
    PgFixture db;
    oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
    pqxx::connection app{db.url};
    std::vector<oncely::NewJob> jobs(1000, oncely::NewJob{.kind = "tx"});
    {
      pqxx::work tx{app};
      const auto ids = client.enqueue_batch(tx, jobs);
      CHECK(ids.size() == 1000);
      CHECK(tx.exec1("SELECT count(*) FROM " + db.table("jobs"))[0].as<long>() == 1000);  // visible inside
      tx.abort();
    }
    CHECK(count(db) == 0);
    {
      pqxx::work tx{app};
      const auto ids = client.enqueue_batch(tx, jobs);
      tx.exec0("INSERT INTO " + db.table("jobs") + " (kind) VALUES ('same transaction')");
      tx.commit();
      CHECK(count(db, "id = " + std::to_string(ids.front())) == 1);
    }
    CHECK(count(db) == 1001);
  }

}  // TEST_SUITE
