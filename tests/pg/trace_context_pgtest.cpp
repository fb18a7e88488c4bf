// A job carries its producer's W3C trace context (jobs.trace_context, schema version 8):
// set from plain SQL, Client::enqueue, `oncely enqueue --traceparent` and an NDJSON line;
// kept through retries, into the dead letter and into its replay; each attempt runs in a
// span of its own under the producer's (exec: TRACEPARENT, http: a traceparent header),
// and the job's log lines carry its trace id (in both modes; the trace_id field of the
// JSON log that `oncely worker --log-format json` really writes).
#include <doctest/doctest.h>

#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "oncely/runtime.hpp"
#include "support/builtin_runtime.hpp"
#include "support/captured_log.hpp"
#include "support/parsed_cli.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

constexpr const char* kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string trace_of_job(PgFixture& db, long id) {
  const auto r = db.exec("SELECT coalesce(trace_context, '(null)') FROM " + db.table("jobs") +
                         " WHERE id = " + std::to_string(id));
  return r.empty() ? "(no job)" : r[0][0].as<std::string>();
}

// "00-<trace>-<span>-01" with the producer's trace id and flags and a span of its own.
void check_child(const std::string& traceparent) {
  CAPTURE(traceparent);
  REQUIRE(traceparent.size() == 55);
  CHECK(traceparent.substr(0, 3) == "00-");
  CHECK(traceparent.substr(3, 32) == kTrace);
  CHECK(traceparent.substr(36, 16) != "00f067aa0ba902b7");
  CHECK(traceparent.substr(52) == "-01");
}

}  // namespace

TEST_CASE("trace context: plain SQL stores a traceparent; the table refuses one that is not") {
  PgFixture db;
  const long id = db.scalar<long>("INSERT INTO " + db.table("jobs") + " (kind, trace_context) VALUES ('k', '" +
                                  kParent + "') RETURNING id");
  CHECK(trace_of_job(db, id) == kParent);
  for (const std::string bad : {"junk", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(
        db.exec("INSERT INTO " + db.table("jobs") + " (kind, trace_context) VALUES ('k', '" + bad + "')"),
        doctest::Contains("jobs_trace_context_is_traceparent"), pqxx::check_violation);
  }
  // A later version may append fields.
  CHECK_NOTHROW(db.exec("INSERT INTO " + db.table("jobs") + " (kind, trace_context) VALUES ('k', '" +
                        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future')"));
}

TEST_CASE("trace context: Client::enqueue stores NewJob::traceparent, and refuses a bad one in one line") {
  PgFixture db;
  oncely::Client client(oncely::DatabaseUrl(db.url), db.schema);
  oncely::NewJob job{.kind = "k"};
  job.traceparent = kParent;
  CHECK(trace_of_job(db, client.enqueue(job)) == kParent);
  job.traceparent = "00-abc";
  CHECK_THROWS_WITH_AS(client.enqueue(job), doctest::Contains("traceparent: must be a W3C traceparent"),
                       oncely::InvalidArgument);
}

TEST_CASE("trace context: oncely enqueue --traceparent, and a bulk line's \"traceparent\"") {
  PgFixture db;
  ParsedCli one(
      {"--database-url", db.url.c_str(), "--schema", db.schema.c_str(), "enqueue", "k", "--traceparent", kParent});
  REQUIRE_FALSE(one.exit);
  REQUIRE(one.dispatch() == 0);
  CHECK(trace_of_job(db, std::stol(one.out.str())) == kParent);

  ParsedCli bad(
      {"--database-url", db.url.c_str(), "--schema", db.schema.c_str(), "enqueue", "k", "--traceparent", "nope"});
  REQUIRE_FALSE(bad.exit);
  CHECK(bad.dispatch() == 2);
  CHECK(bad.err.str().find("traceparent: must be a W3C traceparent") != std::string::npos);

  TempDir dir;
  const std::string lines = dir.write(
      "jobs.ndjson",
      std::string(R"({"kind": "bulk", "traceparent": ")") + kParent + "\"}\n" + R"({"kind": "bulk"})" + "\n", 0644);
  const std::string cli = ONCELY_CLI_PATH;
  const std::string command = "DATABASE_URL='" + db.url + "' ONCELY_SCHEMA='" + db.schema + "' " + cli +
                              " enqueue - < " + lines + " > /dev/null";
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE kind = 'bulk' AND trace_context = '" +
                        kParent + "'") == 1);
  CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") +
                        " WHERE kind = 'bulk' AND trace_context IS NULL") == 1);
}

TEST_CASE(
    "trace context: an exec handler gets TRACEPARENT, a new span per attempt; the dead letter and its replay keep the "
    "trace") {
  PgFixture db;
  TempDir dir;
  const std::string seen = dir.file("seen");
  const std::string script = dir.write("run.sh", "#!/bin/sh\necho \"$TRACEPARENT\" >> " + seen + "\nexit 1\n");
  EventRecorder events;
  CapturedLog log;
  auto runtime = runtime_with(db, fast_retries(2), {{"traced", {{"type", "exec"}, {"command", {script}}}}}, events,
                              true, "", log.logger);
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, trace_context) VALUES ('traced', '" + kParent + "')");
  {
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 20s));
  }
  std::vector<std::string> spans;
  {
    std::istringstream in(dir.read("seen"));
    for (std::string line; std::getline(in, line);) spans.push_back(line);
  }
  REQUIRE(spans.size() == 2);
  check_child(spans[0]);
  check_child(spans[1]);
  CHECK(spans[0] != spans[1]);  // each attempt is a span of its own

  CHECK(db.scalar<std::string>("SELECT trace_context FROM " + db.table("dead_letters")) == kParent);
  // The job's log lines carry the trace id.
  const std::string text = log.text();
  INFO(text);
  CHECK(log.count(std::string("trace_id=") + kTrace) == 2);  // the retry and the dead letter

  ParsedCli replay({"--database-url", db.url.c_str(), "--schema", db.schema.c_str(), "dlq", "replay", "--all"});
  REQUIRE_FALSE(replay.exit);
  REQUIRE(replay.dispatch() == 0);
  CHECK(db.scalar<std::string>("SELECT trace_context FROM " + db.table("jobs")) == kParent);
}

// What `oncely worker --log-format json` writes, parsed line by line: a traced job's lines
// have its trace id as their trace_id field, in a transaction queue and a lease queue.
TEST_CASE("trace context: oncely worker --log-format json: a traced job's real lines have trace_id, both modes") {
  PgFixture db;
  TempDir dir;
  const std::string config = dir.write("worker.json", R"({
    "queues": {"default": {"poll_interval": "100ms"},
               "long": {"mode": "lease", "lease": "3s", "poll_interval": "100ms"}},
    "handlers": {"add": {"type": "sql", "statement": "SELECT $1::int + $2::int", "params": ["/a", "/b"]}}})",
                                       0644);
  // Each queue: one job that completes and one whose payload lacks /b (a dead letter).
  db.exec("INSERT INTO " + db.table("jobs") + " (queue, kind, payload, trace_context) SELECT q, 'add', p::jsonb, '" +
          kParent +
          "' FROM unnest(ARRAY['default', 'long']) AS q, unnest(ARRAY['{\"a\": 1, \"b\": 2}', '{\"a\": 1}']) AS p");
  Process worker(oncely_cli({"--log-format", "json", "worker", "--config", config}),
                 EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}, {"SPDLOG_LEVEL", "debug"}});
  REQUIRE(wait_until([&] { return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 0; }, 20s));
  worker.signal(SIGTERM);
  const ProcessResult r = worker.wait();
  CHECK(r.exit_code == 0);
  std::multiset<std::string> seen;  // "msg queue" of each job line
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    CAPTURE(line);
    nlohmann::json json;
    REQUIRE_NOTHROW(json = nlohmann::json::parse(line));
    if (!json.contains("id") || json.value("kind", "") != "add") continue;  // not a job's line
    CHECK(json["trace_id"] == kTrace);
    seen.insert(json.value("msg", "") + " " + json.value("queue", ""));
  }
  INFO(r.err);
  CHECK(seen == std::multiset<std::string>{"job completed default", "job completed long", "job dead-lettered default",
                                           "job dead-lettered long"});
}

// Every line a lease queue logs about a job names its trace: the claim's (a lease that
// expired, taken back or with no attempt left), the keeper's (a lease lost, a job past
// its job_timeout) and the settlement's (completed, retry, dead letter, stale).
TEST_CASE("trace context: a lease-mode job's log lines carry its trace id, on every path") {
  PgFixture db;
  oncely::QueueConfig queue{.concurrency = 8, .max_attempts = 2};
  queue.mode = oncely::QueueConfig::Mode::lease;
  queue.lease = 3s;
  queue.job_timeout = 1s;
  queue.poll_interval = 100ms;
  queue.backoff.schedule = {10ms};
  CapturedLog log;
  EventRecorder events;
  oncely::Runtime runtime(
      config_for(db, queue),
      oncely::RuntimeOptions{.logger = log.logger, .on_event = events.callback(), .handle_signals = false});
  std::atomic<bool> stolen_started{false};
  runtime.handle("ok", [](oncely::JobContext&) {});
  runtime.handle("fails", [](oncely::JobContext&) { throw std::runtime_error("upstream said no"); });
  runtime.handle("slow", [](oncely::JobContext& job) {
    while (!job.stop_token().stop_requested()) std::this_thread::sleep_for(10ms);
  });
  runtime.handle("stolen", [&](oncely::JobContext& job) {
    stolen_started = true;
    for (int i = 0; i < 2000 && !job.lease_lost(); ++i) std::this_thread::sleep_for(10ms);
  });
  const std::string jobs = db.table("jobs");
  db.exec("INSERT INTO " + jobs + " (queue, kind, trace_context) SELECT 'default', k, '" + kParent +
          "' FROM unnest(ARRAY['ok', 'fails', 'slow', 'stolen']) AS k");
  // Leases that expired: one taken back (an attempt is left), one with none left.
  db.exec("INSERT INTO " + jobs +
          " (queue, kind, payload, trace_context) SELECT 'default', 'ok', jsonb_build_object('a', a), '" + kParent +
          "' FROM unnest(ARRAY[1, 2]) AS a");
  db.exec("UPDATE " + jobs + " SET lease_token = nextval('" + db.table("lease_tokens") +
          "'), attempts = (payload->>'a')::int, run_at = now() - interval '1 second' WHERE payload ? 'a'");
  const std::vector<std::string> paths{"job completed", "job retry",  "job dead-lettered", "class=lease_expired",
                                       "taken back",    "lease lost", "lease stale",       "job past its job_timeout"};
  {
    RunningRuntime running(runtime);
    REQUIRE(wait_until([&] { return stolen_started.load(); }, 20s));
    // Another worker takes the lease (a new token, far from expiring).
    db.exec("UPDATE " + jobs + " SET lease_token = nextval('" + db.table("lease_tokens") +
            "'), run_at = now() + interval '1 hour' WHERE kind = 'stolen'");
    REQUIRE(events.wait_for(Outcome::completed, 2, 30s));      // ok, and the ok taken back
    REQUIRE(events.wait_for(Outcome::dead_lettered, 3, 30s));  // fails, slow, the lease with no attempt left
    REQUIRE(events.wait_for(Outcome::lease_stale, 1, 30s));    // stolen
  }
  const std::string text = log.text();
  INFO(text);
  for (const std::string& path : paths) CHECK_MESSAGE(text.find(path) != std::string::npos, path);
  int job_lines = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" id=") == std::string::npos) continue;  // not about a job
    ++job_lines;
    CAPTURE(line);
    CHECK(line.find(std::string(" trace_id=") + kTrace) != std::string::npos);
  }
  CHECK(job_lines >= static_cast<int>(paths.size()));
}

TEST_CASE("trace context: an http handler sends a traceparent header, the producer's trace in a span of its own") {
  PgFixture db;
  httplib::Server server;
  std::mutex mutex;
  std::vector<std::string> received;
  server.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    received.push_back(req.get_header_value("traceparent"));
    res.status = 200;
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  REQUIRE(wait_until([&] { return server.is_running(); }, 5s));
  EventRecorder events;
  auto runtime = runtime_with(
      db, {}, {{"hook", {{"type", "http"}, {"url", "http://127.0.0.1:" + std::to_string(port) + "/hook"}}}}, events);
  db.exec("INSERT INTO " + db.table("jobs") + " (kind, trace_context) VALUES ('hook', '" + kParent +
          "'), ('hook', NULL)");
  {
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::completed, 2, 20s));
  }
  server.stop();
  thread.join();
  REQUIRE(received.size() == 2);
  const std::multiset<std::string> got(received.begin(), received.end());
  CHECK(got.count("") == 1);  // the job without a trace context sends no header
  for (const auto& header : received) {
    if (!header.empty()) check_child(header);
  }
}
