// The built-in handler types (sql, exec, http) run by a real Runtime against a real
// Postgres; the handlers come from build_builtin_handlers, as a worker builds them from its
// configuration file.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "handlers/builtin_handlers.hpp"
#include "oncely/runtime.hpp"
#include "support/builtin_runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/temp_dir.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

namespace {

bool all_jobs_gone(PgFixture& db) { return count(db, "jobs") == 0; }

// The attempt of the job's completion, from the events (0 if it did not complete).
int completed_attempt(EventRecorder& events, long job_id) {
  for (const auto& e : events.events()) {
    if (e.id == job_id && e.outcome == Outcome::completed) return e.attempt;
  }
  return 0;
}

// Not running any more: no such process, or a zombie nobody has reaped yet (the container's
// init may not reap orphans).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Children of this process that have exited but were not reaped.
int zombie_children() {
  int zombies = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(line.substr(paren + 2));
    char state = 0;
    pid_t parent = 0;
    fields >> state >> parent;
    if (state == 'Z' && parent == ::getpid()) ++zombies;
  }
  return zombies;
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// An HTTP server on 127.0.0.1 (a random port) for one test; records what it was sent.
class TestServer {
 public:
  struct Request {
    std::string path;
    std::string idempotency_key;
    std::string content_type;
    std::string authorization;
    std::string source;
    std::string body;
  };

  TestServer() = default;
  ~TestServer() { stop(); }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  httplib::Server& routes() { return server_; }

  void start() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(wait_until([this] { return server_.is_running(); }, 5s));
  }
  void stop() {
    release_slow();
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }

  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  // Records the request; returns how many requests `path` has had, this one included.
  int record(const httplib::Request& req) {
    std::lock_guard lock(mutex_);
    requests_.push_back({req.path, req.get_header_value("Idempotency-Key"), req.get_header_value("Content-Type"),
                         req.get_header_value("Authorization"), req.get_header_value("X-Source"), req.body});
    return static_cast<int>(
        std::count_if(requests_.begin(), requests_.end(), [&](auto& r) { return r.path == req.path; }));
  }
  std::vector<Request> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

  // For a handler that must outlast the client's timeout: returns when released (or 10 s).
  void wait_until_released() {
    std::unique_lock lock(mutex_);
    released_cv_.wait_for(lock, 10s, [this] { return released_; });
  }
  void release_slow() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    released_cv_.notify_all();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
  std::vector<Request> requests_;
};

// A TCP port on 127.0.0.1 that nothing listens on (bound, then closed).
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace

TEST_SUITE("handlers") {
  // ---------------------------------------------------------------------------------- sql

  TEST_CASE("handlers: sql applies an upsert-increment exactly once, with parameters of every JSON type") {
    bool prepared = true;
    SUBCASE("as a prepared statement") {}
    SUBCASE("as unnamed statements (a transaction-mode pooler)") { prepared = false; }
    PgFixture db;
    const std::string accounts = db.table("accounts");
    db.exec("CREATE TABLE " + accounts +
            " (user_id text PRIMARY KEY, cents bigint NOT NULL, ratio numeric, active boolean, note text,"
            "  profile jsonb, tags jsonb, updates int NOT NULL DEFAULT 1)");
    const nlohmann::json declarations = {
        {"update_balance",
         {{"type", "sql"},
          {"statement", "INSERT INTO " + accounts +
                            " (user_id, cents, ratio, active, note, profile, tags) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                            " ON CONFLICT (user_id) DO UPDATE SET cents = accounts.cents + EXCLUDED.cents,"
                            " updates = accounts.updates + 1"},
          {"params", {"/user", "/cents", "/ratio", "/active", "/note", "/profile", "/tags"}}}}};
    const nlohmann::json u1 = {{"user", "u1"},   {"cents", 100},    {"ratio", 2.5},
                               {"active", true}, {"note", nullptr}, {"profile", {{"plan", "pro"}}},
                               {"tags", {"a"}}};
    nlohmann::json u1_again = u1;
    u1_again["cents"] = 50;
    const nlohmann::json u2 = {{"user", "u2'); DROP TABLE accounts; --"},
                               {"cents", 9007199254740993LL},
                               {"ratio", 0.125},
                               {"active", false},
                               {"note", "it's \"quoted\" and $1"},
                               {"profile", {{"a", {{"b", {1, "x", nullptr}}}}}},
                               {"tags", nlohmann::json::array()}};
    enqueue(db, "update_balance", u1, "pay-1");
    enqueue(db, "update_balance", u1, "pay-1");  // a duplicate: must not apply twice
    enqueue(db, "update_balance", u1_again, "pay-2");
    enqueue(db, "update_balance", u2, "pay-3");

    EventRecorder events;
    auto runtime = runtime_with(db, {}, declarations, events, prepared);
    RunningRuntime running(*runtime);
    REQUIRE(wait_until([&] { return all_jobs_gone(db); }, 20s));
    CHECK(running.stop() == 0);

    CHECK(events.count(Outcome::completed) == 3);
    CHECK(events.count(Outcome::deduplicated) == 1);
    CHECK(count(db, "dead_letters") == 0);
    const pqxx::row a =
        db.exec("SELECT cents, updates, ratio::text, active, note IS NULL, profile->>'plan', tags::text FROM " +
                accounts + " WHERE user_id = 'u1'")[0];
    CHECK(a[0].as<long>() == 150);
    CHECK(a[1].as<int>() == 2);
    CHECK(a[2].as<std::string>() == "2.5");
    CHECK(a[3].as<bool>());
    CHECK(a[4].as<bool>());
    CHECK(a[5].as<std::string>() == "pro");
    CHECK(a[6].as<std::string>() == R"(["a"])");
    const pqxx::row b =
        db.exec("SELECT cents::text, ratio::text, active, note, profile->'a'->'b'->>1, tags::text FROM " + accounts +
                " WHERE user_id = 'u2''); DROP TABLE accounts; --'")[0];
    CHECK(b[0].as<std::string>() == "9007199254740993");  // 64-bit integers stay exact
    CHECK(b[1].as<std::string>() == "0.125");
    CHECK_FALSE(b[2].as<bool>());
    CHECK(b[3].as<std::string>() == "it's \"quoted\" and $1");
    CHECK(b[4].as<std::string>() == "x");
    CHECK(b[5].as<std::string>() == "[]");
  }

  TEST_CASE("handlers: sql with a missing pointer dead-letters at once as permanent, naming the pointer") {
    PgFixture db;
    db.exec("CREATE TABLE " + db.table("balances") + " (user_id text PRIMARY KEY, cents bigint NOT NULL)");
    const nlohmann::json declarations = {{"update_balance",
                                          {{"type", "sql"},
                                           {"statement", "INSERT INTO " + db.table("balances") + " VALUES ($1, $2)"},
                                           {"params", {"/user_id", "/cents"}}}}};
    const long id = enqueue(db, "update_balance", {{"user_id", "u1"}, {"amount", 5}});
    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(5), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
    running.stop();
    const DeadLetterRow dl = dead_letter(db, id);
    CHECK(dl.error_class == "permanent");
    CHECK(dl.attempts == 1);
    CHECK(dl.last_error == "payload has no /cents (parameter $2)");
    CHECK(dl.detail["pointer"] == "/cents");
    CHECK(events.count(Outcome::retried) == 0);
    CHECK(count(db, "balances") == 0);
  }

  TEST_CASE(
      "handlers: sql constraint violations and undefined tables are permanent, and the rest of the batch commits") {
    PgFixture db;
    const std::string balances = db.table("balances");
    db.exec("CREATE TABLE " + balances + " (user_id text PRIMARY KEY, cents bigint NOT NULL)");
    db.exec("INSERT INTO " + balances + " VALUES ('taken', 1)");
    const nlohmann::json declarations = {
        {"insert_balance",
         {{"type", "sql"},
          {"statement", "INSERT INTO " + balances + " VALUES ($1, $2)"},
          {"params", {"/user_id", "/cents"}}}},
        // A table missing when the job runs (one missing at start-up stops the worker instead).
        {"read_missing", {{"type", "sql"}, {"statement", "SELECT $1::text::regclass"}, {"params", {"/table"}}}}};
    const long ok_before = enqueue(db, "insert_balance", {{"user_id", "a"}, {"cents", 1}});
    const long duplicate = enqueue(db, "insert_balance", {{"user_id", "taken"}, {"cents", 2}});
    const long null_cents = enqueue(db, "insert_balance", {{"user_id", "b"}, {"cents", nullptr}});
    const long missing_table = enqueue(db, "read_missing", {{"table", db.table("no_such_table")}});
    const long ok_after = enqueue(db, "insert_balance", {{"user_id", "c"}, {"cents", 3}});

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(5), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 3, 15s));
    REQUIRE(wait_until([&] { return all_jobs_gone(db); }, 15s));
    running.stop();

    for (const auto& [id, sqlstate] :
         {std::pair{duplicate, "23505"}, {null_cents, "23502"}, {missing_table, "42P01"}}) {
      CAPTURE(sqlstate);
      const DeadLetterRow dl = dead_letter(db, id);
      CHECK(dl.error_class == "permanent");
      CHECK(dl.attempts == 1);
      CHECK(dl.detail["sqlstate"] == sqlstate);
      CHECK(dl.last_error.starts_with("SQLSTATE " + std::string(sqlstate) + ": "));
    }
    CHECK(events.count(Outcome::retried) == 0);
    CHECK(completed_attempt(events, ok_before) == 1);
    CHECK(completed_attempt(events, ok_after) == 1);
    CHECK(db.scalar<std::string>("SELECT string_agg(user_id || '=' || cents, ',' ORDER BY user_id) FROM " + balances) ==
          "a=1,c=3,taken=1");
  }

  TEST_CASE("handlers: sql deadlocks, serialization failures and lock timeouts are retried") {
    PgFixture db;
    db.exec("CREATE FUNCTION " + db.table("raise_code") +
            "(code text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'raised %', code USING ERRCODE = code; END $$");
    const nlohmann::json declarations = {
        {"raise",
         {{"type", "sql"}, {"statement", "SELECT " + db.table("raise_code") + "($1)"}, {"params", {"/code"}}}}};
    std::map<long, std::string> jobs;
    for (const std::string code : {"40P01", "40001", "55P03"}) jobs[enqueue(db, "raise", {{"code", code}})] = code;

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(2), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 3, 15s));
    running.stop();
    CHECK(events.count(Outcome::retried) == 3);
    for (const auto& [id, code] : jobs) {
      CAPTURE(code);
      const DeadLetterRow dl = dead_letter(db, id);
      CHECK(dl.error_class == "exhausted");
      CHECK(dl.attempts == 2);
      CHECK(dl.errors.size() == 2);
      CHECK(dl.errors[0]["class"] == "retryable");
      CHECK(dl.detail["sqlstate"] == code);
      CHECK(dl.last_error.starts_with("SQLSTATE " + code + ": raised " + code + " CONTEXT: PL/pgSQL function"));
    }
  }

  TEST_CASE("handlers: sql over the job timeout is a timeout") {
    PgFixture db;
    const nlohmann::json declarations = {
        {"slow", {{"type", "sql"}, {"statement", "SELECT pg_sleep($1)"}, {"params", {"/seconds"}}}}};
    const long id = enqueue(db, "slow", {{"seconds", 30}});
    EventRecorder events;
    oncely::QueueConfig queue = fast_retries(1);
    queue.job_timeout = 1s;
    auto runtime = runtime_with(db, queue, declarations, events);
    const auto start = std::chrono::steady_clock::now();
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
    CHECK(std::chrono::steady_clock::now() - start < 10s);
    running.stop();
    const DeadLetterRow dl = dead_letter(db, id);
    CHECK(dl.error_class == "timeout");
    CHECK(dl.errors[0]["class"] == "timeout");
    CHECK(dl.detail["sqlstate"] == "57014");
  }

  // --------------------------------------------------------------------------------- exec

  TEST_CASE("handlers: exec runs the command with the payload on stdin and the job in its environment") {
    PgFixture db;
    TempDir dir;
    const std::string script = dir.write("record.sh", R"(#!/bin/bash
out="$OUT_DIR/$ONCELY_JOB_ID"
cat > "$out.stdin"
printf '%s\n' "$ONCELY_JOB_ID" "$ONCELY_IDEMPOTENCY_KEY" "$ONCELY_ATTEMPT" "$ONCELY_QUEUE" "$ONCELY_KIND" "$EXTRA" "$1" > "$out.env"
ls /proc/$$/fd > "$out.fds"
echo "some output nobody reads"
)");
    const nlohmann::json declarations = {{"send_email",
                                          {{"type", "exec"},
                                           {"command", {script, "first arg; $(not expanded)"}},
                                           {"timeout", "20s"},
                                           {"env", {{"OUT_DIR", dir.path().string()}, {"EXTRA", "from-config"}}}}}};
    const nlohmann::json payload = {{"to", "zoë@example.com"}, {"n", 1}};
    const long keyed = enqueue(db, "send_email", payload, "mail-1");
    const long unkeyed = enqueue(db, "send_email", {{"to", "x"}});

    EventRecorder events;
    auto runtime = runtime_with(db, {}, declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::completed, 2, 15s));
    running.stop();

    const std::string k = std::to_string(keyed);
    CHECK(nlohmann::json::parse(dir.read(k + ".stdin")) == payload);
    CHECK(dir.read(k + ".env") == k + "\nmail-1\n1\ndefault\nsend_email\nfrom-config\nfirst arg; $(not expanded)\n");
    // Nothing but stdin, stdout, stderr (and bash's own 255, the script) is open in the child.
    CHECK(dir.read(k + ".fds") == "0\n1\n2\n255\n");
    const std::string u = std::to_string(unkeyed);
    CHECK(dir.read(u + ".env").starts_with(u + "\n" + u + "\n1\n"));  // no key: the job id is the key
  }

  TEST_CASE("handlers: exec exit 65 dead-letters with the stderr tail, while exit 3 and signals are retried") {
    PgFixture db;
    TempDir dir;
    const std::string bad_input = dir.write("bad_input.sh",
                                            "#!/bin/bash\necho 'reading payload' >&2\n"
                                            "echo 'bad input: no field \"to\"' >&2\nexit 65\n");
    const std::string down = dir.write("down.sh", "#!/bin/bash\necho 'upstream down' >&2\nexit 3\n");
    const std::string killed = dir.write("killed.sh", "#!/bin/bash\nkill -KILL $$\n");
    const nlohmann::json declarations = {{"bad_input", {{"type", "exec"}, {"command", {bad_input}}}},
                                         {"down", {{"type", "exec"}, {"command", {down}}}},
                                         {"killed", {{"type", "exec"}, {"command", {killed}}}}};
    const long id65 = enqueue(db, "bad_input");
    const long id3 = enqueue(db, "down");
    const long id_killed = enqueue(db, "killed");

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(2), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 3, 15s));
    running.stop();

    const DeadLetterRow permanent = dead_letter(db, id65);
    CHECK(permanent.error_class == "permanent");
    CHECK(permanent.attempts == 1);
    CHECK(permanent.last_error == bad_input + " exited with status 65: bad input: no field \"to\"");
    CHECK(permanent.detail["exit_status"] == 65);
    CHECK(permanent.detail["stderr_tail"] == "reading payload\nbad input: no field \"to\"\n");

    const DeadLetterRow exhausted = dead_letter(db, id3);
    CHECK(exhausted.error_class == "exhausted");
    CHECK(exhausted.attempts == 2);
    CHECK(exhausted.errors[0]["class"] == "retryable");
    CHECK(exhausted.last_error == down + " exited with status 3: upstream down");
    CHECK(exhausted.detail["exit_status"] == 3);

    const DeadLetterRow signaled = dead_letter(db, id_killed);
    CHECK(signaled.error_class == "exhausted");
    CHECK(signaled.attempts == 2);
    CHECK(signaled.detail["signal"] == SIGKILL);
    CHECK(signaled.last_error == killed + " was killed by SIGKILL");
    CHECK(events.count(Outcome::retried) == 2);
  }

  TEST_CASE("handlers: exec over its timeout is a timeout and its whole process group is killed") {
    PgFixture db;
    TempDir dir;
    const std::string script = dir.write("hang.sh",
                                         "#!/bin/bash\nsleep 60 &\necho $! > \"$PIDS/grandchild\"\n"
                                         "echo $$ > \"$PIDS/child\"\necho 'started' >&2\nsleep 60\n");
    const nlohmann::json declarations = {
        {"hang",
         {{"type", "exec"}, {"command", {script}}, {"timeout", "1s"}, {"env", {{"PIDS", dir.path().string()}}}}}};
    const long id = enqueue(db, "hang");
    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(1), declarations, events);
    const auto start = std::chrono::steady_clock::now();
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
    CHECK(std::chrono::steady_clock::now() - start < 8s);
    running.stop();

    const DeadLetterRow dl = dead_letter(db, id);
    CHECK(dl.error_class == "timeout");
    CHECK(dl.errors[0]["class"] == "timeout");
    CHECK(dl.detail["timeout_ms"] == 1000);
    CHECK(dl.detail["stderr_tail"] == "started\n");
    CHECK(dl.last_error == script + " did not finish within 1s; its process group was killed: started");
    const std::string child = dir.read("child");
    const std::string grandchild = dir.read("grandchild");
    REQUIRE_FALSE(child.empty());
    REQUIRE_FALSE(grandchild.empty());
    CHECK(wait_until([&] { return process_gone(std::stoi(child)); }, 5s));
    CHECK(wait_until([&] { return process_gone(std::stoi(grandchild)); }, 5s));
  }

  TEST_CASE("handlers: 1,000 exec jobs complete without leaving zombies or open file descriptors") {
    PgFixture db;
    TempDir dir;
    const std::string script = dir.write("true.sh", "#!/bin/sh\nexit 0\n");
    const nlohmann::json declarations = {{"noop", {{"type", "exec"}, {"command", {script}}}}};
    db.exec("INSERT INTO " + db.table("jobs") +
            " (kind, payload) SELECT 'noop', jsonb_build_object('n', n) FROM generate_series(1, 1000) n");
    const std::size_t fds_before = open_fds();
    EventRecorder events;
    {
      auto runtime = runtime_with(db, {.concurrency = 4, .batch_size = 50}, declarations, events);
      RunningRuntime running(*runtime);
      REQUIRE(events.wait_for(Outcome::completed, 1000, 60s));
      CHECK(running.stop() == 0);
    }
    CHECK(all_jobs_gone(db));
    CHECK(count(db, "dead_letters") == 0);
    CHECK(events.count(Outcome::retried) == 0);
    // Every child was reaped: nothing is left to wait for (or nothing that has exited).
    CHECK(zombie_children() == 0);
    int status = 0;
    const pid_t reaped = ::waitpid(-1, &status, WNOHANG);
    CHECK_MESSAGE(reaped <= 0, "a zombie child was left: pid " << reaped);
    if (reaped < 0) CHECK(errno == ECHILD);
    const std::size_t fds_after = open_fds();
    CHECK_MESSAGE(fds_after <= fds_before + 1, "open fds before " << fds_before << ", after " << fds_after);
  }

  // --------------------------------------------------------------------------------- http

  TEST_CASE("handlers: http POSTs the payload with the job's idempotency key and the configured headers") {
    PgFixture db;
    TestServer server;
    server.routes().Post("/hooks/crm", [&](const httplib::Request& req, httplib::Response& res) {
      server.record(req);
      res.set_content("{\"ok\": true}", "application/json");
    });
    server.start();
    ::setenv("ONCELY_TEST_CRM_TOKEN", "s3cret", 1);
    const nlohmann::json declarations = {
        {"notify_crm",
         {{"type", "http"},
          {"url", server.url("/hooks/crm")},
          {"timeout", "10s"},
          {"headers", {{"Authorization", "Bearer ${ONCELY_TEST_CRM_TOKEN}"}, {"X-Source", "oncely-test"}}}}}};
    const nlohmann::json payload = {{"order", 42}, {"name", "Zoë"}, {"lines", {1, 2}}};
    enqueue(db, "notify_crm", payload, "order-42");
    const long unkeyed = enqueue(db, "notify_crm", {{"order", 43}});

    EventRecorder events;
    auto runtime = runtime_with(db, {}, declarations, events);
    ::unsetenv("ONCELY_TEST_CRM_TOKEN");  // substituted when the handlers were built
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::completed, 2, 15s));
    running.stop();

    const auto requests = server.requests();
    REQUIRE(requests.size() == 2);
    const auto keyed =
        std::find_if(requests.begin(), requests.end(), [](auto& r) { return r.idempotency_key == "order-42"; });
    REQUIRE(keyed != requests.end());
    CHECK(keyed->content_type == "application/json");
    CHECK(keyed->authorization == "Bearer s3cret");
    CHECK(keyed->source == "oncely-test");
    CHECK(nlohmann::json::parse(keyed->body) == payload);
    const auto other =
        std::find_if(requests.begin(), requests.end(), [](auto& r) { return r.idempotency_key != "order-42"; });
    REQUIRE(other != requests.end());
    CHECK(other->idempotency_key == std::to_string(unkeyed));  // no key: the job id is the key
  }

  TEST_CASE("handlers: http 404 dead-letters with status and body excerpt, while 500 and 408 are retried") {
    PgFixture db;
    TestServer server;
    server.routes().Post("/missing", [&](const httplib::Request& req, httplib::Response& res) {
      server.record(req);
      res.status = 404;
      res.set_content("no such hook\n" + std::string(5000, 'x'), "text/plain");
    });
    for (const int status : {500, 408}) {
      server.routes().Post("/flaky" + std::to_string(status),
                           [&, status](const httplib::Request& req, httplib::Response& res) {
                             res.status = server.record(req) == 1 ? status : 200;
                           });
    }
    server.start();
    const nlohmann::json declarations = {{"missing", {{"type", "http"}, {"url", server.url("/missing")}}},
                                         {"flaky500", {{"type", "http"}, {"url", server.url("/flaky500")}}},
                                         {"flaky408", {{"type", "http"}, {"url", server.url("/flaky408")}}}};
    const long missing = enqueue(db, "missing");
    const long flaky500 = enqueue(db, "flaky500");
    const long flaky408 = enqueue(db, "flaky408");

    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(3), declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::completed, 2, 15s));
    REQUIRE(events.wait_for(Outcome::dead_lettered, 1, 15s));
    running.stop();

    const DeadLetterRow dl = dead_letter(db, missing);
    CHECK(dl.error_class == "permanent");
    CHECK(dl.attempts == 1);
    CHECK(dl.detail["http_status"] == 404);
    const std::string body = dl.detail["body"];
    CHECK(body.starts_with("no such hook\nxxx"));
    CHECK(body.size() == 2048);
    CHECK(dl.last_error.starts_with("POST " + server.url("/missing") + " returned HTTP 404: no such hook xxx"));
    CHECK(completed_attempt(events, flaky500) == 2);
    CHECK(completed_attempt(events, flaky408) == 2);
    CHECK(events.count(Outcome::retried) == 2);
  }

  TEST_CASE("handlers: http 429 with Retry-After: 2 retries two seconds later, whatever the backoff") {
    PgFixture db;
    TestServer server;
    server.routes().Post("/limited", [&](const httplib::Request& req, httplib::Response& res) {
      if (server.record(req) == 1) {
        res.status = 429;
        res.set_header("Retry-After", "2");
        res.set_content("slow down", "text/plain");
      }
    });
    server.start();
    const nlohmann::json declarations = {{"limited", {{"type", "http"}, {"url", server.url("/limited")}}}};
    const long id = enqueue(db, "limited");
    oncely::QueueConfig queue{.max_attempts = 3};
    queue.backoff.schedule = {1h};  // only Retry-After can explain a 2 s delay
    EventRecorder events;
    auto runtime = runtime_with(db, queue, declarations, events);
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::retried, 1, 15s));
    const std::string job = " FROM " + db.table("jobs") + " WHERE id = " + std::to_string(id);
    CHECK(db.scalar<std::string>("SELECT errors->0->>'class'" + job) == "retryable");
    CHECK(db.scalar<std::string>("SELECT last_error" + job) ==
          "POST " + server.url("/limited") + " returned HTTP 429: slow down");
    CHECK(
        db.scalar<bool>("SELECT run_at - (errors->0->>'at')::timestamptz BETWEEN interval '1.99 s' AND "
                        "interval '2.01 s'" +
                        job));
    REQUIRE(events.wait_for(Outcome::completed, 1, 10s));
    running.stop();
    CHECK(completed_attempt(events, id) == 2);
    CHECK(server.requests().size() == 2);
  }

  TEST_CASE("handlers: http connection refused is retried, and a server slower than the timeout is a timeout") {
    PgFixture db;
    TestServer server;
    server.routes().Post("/slow", [&](const httplib::Request& req, httplib::Response&) {
      server.record(req);
      server.wait_until_released();
    });
    server.start();
    const nlohmann::json declarations = {
        {"refused", {{"type", "http"}, {"url", "http://127.0.0.1:" + std::to_string(closed_port()) + "/hook"}}},
        {"slow", {{"type", "http"}, {"url", server.url("/slow")}, {"timeout", "300ms"}}}};
    const long refused = enqueue(db, "refused");
    const long slow = enqueue(db, "slow");
    EventRecorder events;
    auto runtime = runtime_with(db, fast_retries(2), declarations, events);
    const auto start = std::chrono::steady_clock::now();
    RunningRuntime running(*runtime);
    REQUIRE(events.wait_for(Outcome::dead_lettered, 2, 15s));
    CHECK(std::chrono::steady_clock::now() - start < 8s);
    running.stop();
    server.release_slow();

    const DeadLetterRow refused_dl = dead_letter(db, refused);
    CHECK(refused_dl.error_class == "exhausted");
    CHECK(refused_dl.attempts == 2);
    CHECK(refused_dl.errors[0]["class"] == "retryable");
    CHECK(refused_dl.detail["curl_code"] == 7);  // CURLE_COULDNT_CONNECT
    const DeadLetterRow slow_dl = dead_letter(db, slow);
    CHECK(slow_dl.error_class == "timeout");
    CHECK(slow_dl.attempts == 2);
    CHECK(slow_dl.errors[0]["class"] == "timeout");
    CHECK(slow_dl.detail["curl_code"] == 28);  // CURLE_OPERATION_TIMEDOUT
    CHECK(slow_dl.last_error.ends_with("(limit 300ms)"));
  }

}  // TEST_SUITE
