// The console's HTTP layer against a real database, without a browser: headers, the change
// rules (Sec-Fetch-Site, CSRF, roles), logins, escaping, the unreachable-database page,
// the statement timeout, that a viewer's pages never name the payload column, and every
// page and change as the database roles `oncely migrate --roles` makes.

#include <doctest/doctest.h>

#include <httplib.h>

#include <regex>
#include <thread>

#include "oncely/dead_letters.hpp"
#include "support/captured_log.hpp"
#include "support/pg_fixture.hpp"
#include "support/roles.hpp"
#include "web/console.hpp"

using namespace oncely;
using namespace oncely::test;

namespace {

constexpr const char* kOperatorToken = "operator-token-0123456789";
constexpr const char* kViewerToken = "viewer-token-0123456789ab";
constexpr const char* kXss = "<img src=x onerror=alert(1)>";

/// A console on a free loopback port, serving on a thread of its own.
struct RunningConsole {
  CapturedLog log{spdlog::level::info};
  std::unique_ptr<web::Console> console;
  std::thread thread;
  std::unique_ptr<httplib::Client> client;

  explicit RunningConsole(web::ConsoleOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.log = log.logger;
    console = std::make_unique<web::Console>(std::move(o));
    thread = std::thread([this] { console->run(); });
    client = std::make_unique<httplib::Client>("127.0.0.1", console->port());
    REQUIRE(wait_until([&] { return static_cast<bool>(client->Get("/assets/app.css")); }, std::chrono::seconds(5)));
  }
  ~RunningConsole() {
    console->stop();
    thread.join();
  }
};

web::ConsoleOptions options_for(const PgFixture& f, bool logins) {
  web::ConsoleOptions o;
  o.url = DatabaseUrl(f.url);
  o.schema = f.schema;
  if (logins) {
    o.credentials = {{web::Role::operator_, "alice", kOperatorToken}, {web::Role::viewer, "victor", kViewerToken}};
  }
  return o;
}

/// Logs in with `token`; returns the Cookie header value.
std::string login(httplib::Client& c, const std::string& token) {
  const auto r =
      c.Post("/login", {{"Sec-Fetch-Site", "same-origin"}}, "token=" + token, "application/x-www-form-urlencoded");
  REQUIRE(r);
  REQUIRE(r->status == 303);
  const std::string set = r->get_header_value("Set-Cookie");
  CHECK(set.find("HttpOnly") != std::string::npos);
  CHECK(set.find("SameSite=Strict") != std::string::npos);
  return set.substr(0, set.find(';'));
}

std::string csrf_of(const std::string& html) {
  std::smatch m;
  REQUIRE(std::regex_search(html, m, std::regex("name=\"csrf\" (?:value|content)=\"([0-9a-f]+)\"")));
  return m[1];
}

void insert_dead_letter(PgFixture& f, const std::string& error, const std::string& payload_note) {
  f.exec("INSERT INTO " + f.table("dead_letters") +
         " (job_id, queue, kind, payload, priority, attempts, last_error, error_class, created_at) VALUES (1, "
         "'default', 'noop', jsonb_build_object('note', " +
         f.conn->quote(payload_note) + "), 0, 3, " + f.conn->quote(error) + ", 'exhausted', now())");
}

}  // namespace

TEST_SUITE("console") {
  TEST_CASE_FIXTURE(PgFixture, "console: every page carries the security headers, values escaped") {
    insert_dead_letter(*this, kXss, kXss);
    const std::string batch = std::to_string(scalar<long>(
        "SELECT " + table("open_batch") + "(on_finish => jsonb_build_object('kind', 'report', 'payload', " +
        "jsonb_build_object('note', " + conn->quote(kXss) + ")))"));
    RunningConsole rc(options_for(*this, false));
    const std::string id = std::to_string(scalar<long>("SELECT id FROM " + table("dead_letters")));
    for (const std::string& path :
         std::vector<std::string>{"/", "/dead-letters", "/dead-letters/" + id, "/jobs", "/jobs?batch=" + batch,
                                  "/queues", "/workers", "/cron", "/batches", "/batches/" + batch}) {
      CAPTURE(path);
      const auto r = rc.client->Get(path.c_str());
      REQUIRE(r);
      CHECK(r->status == 200);
      const std::string csp = r->get_header_value("Content-Security-Policy");
      CHECK(csp.find("script-src 'nonce-") != std::string::npos);
      CHECK(csp.find("unsafe-inline") == std::string::npos);
      CHECK(csp.find("frame-ancestors 'none'") != std::string::npos);
      CHECK(r->get_header_value("Cache-Control") == "no-store");
      CHECK(r->get_header_value("X-Content-Type-Options") == "nosniff");
      CHECK(r->body.find(kXss) == std::string::npos);  // never raw
    }
    const auto one = rc.client->Get(("/dead-letters/" + id).c_str());
    CHECK(one->body.find("&lt;img src=x onerror=alert(1)&gt;") != std::string::npos);
    const auto batch_page = rc.client->Get(("/batches/" + batch).c_str());
    CHECK(batch_page->body.find("&lt;img src=x onerror=alert(1)&gt;") != std::string::npos);  // its callback
    CHECK(rc.client->Get("/batches/999999")->status == 404);
  }

  TEST_CASE_FIXTURE(PgFixture, "console: a change needs same-origin, the CSRF token and the operator role") {
    RunningConsole rc(options_for(*this, true));
    // Not logged in: pages send to the login, changes are refused.
    CHECK(rc.client->Get("/")->status == 303);
    CHECK(rc.client->Get("/")->get_header_value("Location") == "/login");
    const auto bad_login = rc.client->Post("/login", {{"Sec-Fetch-Site", "same-origin"}},
                                           "token=wrong-token-0123456789", "application/x-www-form-urlencoded");
    CHECK(bad_login->status == 403);
    CHECK(rc.client
              ->Post("/login", {{"Sec-Fetch-Site", "same-site"}}, std::string("token=") + kOperatorToken,
                     "application/x-www-form-urlencoded")
              ->status == 403);

    const std::string op = login(*rc.client, kOperatorToken);
    const auto page = rc.client->Get("/queues", {{"Cookie", op}});
    REQUIRE(page->status == 200);
    const std::string csrf = csrf_of(page->body);
    const auto pause = [&](const httplib::Headers& h, const std::string& body) {
      return rc.client->Post("/queues/pause", h, body, "application/x-www-form-urlencoded")->status;
    };
    CHECK(pause({{"Cookie", op}, {"Sec-Fetch-Site", "same-site"}}, "csrf=" + csrf + "&queue=q") == 403);
    CHECK(pause({{"Cookie", op}, {"Sec-Fetch-Site", "cross-site"}}, "csrf=" + csrf + "&queue=q") == 403);
    CHECK(pause({{"Cookie", op}}, "csrf=" + csrf + "&queue=q") == 403);
    CHECK(pause({{"Cookie", op}, {"Sec-Fetch-Site", "same-origin"}}, "csrf=0000&queue=q") == 403);
    CHECK(pause({{"Cookie", op}, {"Sec-Fetch-Site", "same-origin"}}, "queue=q") == 403);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("queue_pauses")) == 0);
    CHECK(pause({{"Cookie", op}, {"Sec-Fetch-Site", "same-origin"}}, "csrf=" + csrf + "&queue=q") == 200);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("queue_pauses")) == 1);
    CHECK(rc.log.count("console action who=alice role=operator action=pause count=1") == 1);

    // A viewer, with its own valid token: refused, and shown no button.
    const std::string viewer = login(*rc.client, kViewerToken);
    const auto vpage = rc.client->Get("/queues", {{"Cookie", viewer}});
    CHECK(vpage->body.find("<button type=\"submit\">Resume") == std::string::npos);
    CHECK(pause({{"Cookie", viewer}, {"Sec-Fetch-Site", "same-origin"}}, "csrf=" + csrf_of(vpage->body) + "&queue=r") ==
          403);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("queue_pauses")) == 1);
  }

  TEST_CASE_FIXTURE(PgFixture, "console: --read-only makes the operator a viewer") {
    auto o = options_for(*this, false);
    o.read_only = true;
    RunningConsole rc(o);
    const auto page = rc.client->Get("/queues");
    REQUIRE(page->status == 200);
    const std::string cookie =
        page->get_header_value("Set-Cookie").substr(0, page->get_header_value("Set-Cookie").find(';'));
    CHECK(rc.client
              ->Post("/queues/pause", {{"Cookie", cookie}, {"Sec-Fetch-Site", "same-origin"}},
                     "csrf=" + csrf_of(rc.client->Get("/queues", {{"Cookie", cookie}})->body) + "&queue=q",
                     "application/x-www-form-urlencoded")
              ->status == 403);
  }

  TEST_CASE_FIXTURE(PgFixture, "console: a role without the payload column reads the pages, payload hidden") {
    insert_dead_letter(*this, "boom", "secret-note");
    const std::string role = schema + "_v";
    exec("CREATE ROLE " + role + " NOLOGIN");
    exec("GRANT USAGE ON SCHEMA " + schema + " TO " + role);
    // Every column but the payloads, as the viewer role has them.
    for (const std::string& t : std::vector<std::string>{"jobs", "dead_letters"}) {
      const std::string cols =
          scalar<std::string>("SELECT string_agg(quote_ident(attname), ', ') FROM pg_attribute WHERE attrelid = '" +
                              table(t) + "'::regclass AND attnum > 0 AND NOT attisdropped AND attname <> 'payload'");
      exec("GRANT SELECT (" + cols + ") ON " + table(t) + " TO " + role);
    }
    for (const std::string& t :
         std::vector<std::string>{"processed_jobs", "job_stats", "workers", "attempts_in_flight", "queue_pauses",
                                  "cron_slots", "queue_policies", "queue_limits", "queue_rate_windows",
                                  "key_rate_windows", "job_parents", "batch_members"}) {
      exec("GRANT SELECT ON " + table(t) + " TO " + role);
    }
    const std::string id = std::to_string(scalar<long>("SELECT id FROM " + table("dead_letters")));
    // The library read the console uses, as that role: no payload, no error.
    {
      pqxx::work tx(*conn);
      tx.exec("SET LOCAL ROLE " + role);
      DeadLetterFilter f;
      const auto page = page_dead_letters(tx, schema, f, DeadLetterPageOptions{});
      REQUIRE(page.dead_letters.size() == 1);
      CHECK(page.dead_letters[0].payload_text.empty());
    }
    auto o = options_for(*this, false);
    o.url = DatabaseUrl(url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-c%20role%3D" + role);
    RunningConsole rc(o);
    for (const std::string& path :
         std::vector<std::string>{"/", "/dead-letters", "/dead-letters/" + id, "/jobs", "/queues", "/workers"}) {
      CAPTURE(path);
      CHECK(rc.client->Get(path.c_str())->status == 200);
    }
    const auto one = rc.client->Get(("/dead-letters/" + id).c_str());
    CHECK(one->body.find("payload hidden") != std::string::npos);
    CHECK(one->body.find("secret-note") == std::string::npos);
    CHECK(one->body.find("boom") != std::string::npos);
    exec("DROP OWNED BY " + role);
    exec("DROP ROLE " + role);
  }

  // The console connected as the roles `oncely migrate --roles` makes, through login roles
  // granted exactly those (as docs/console.md says to run it): every page reads as either;
  // the operator's changes go through; the viewer's are refused, by the console with
  // --read-only and by the database without it.
  TEST_CASE_FIXTURE(
      PgFixture, "console: as the migrate --roles operator and viewer: every page loads, only the operator changes") {
    Roles roles(*this);
    REQUIRE_MESSAGE(roles.migrated.exit_code == 0, roles.migrated.err);
    insert_dead_letter(*this, "boom", "secret-note");
    const std::string dl = std::to_string(scalar<long>("SELECT id FROM " + table("dead_letters")));
    const std::string job =
        std::to_string(scalar<long>("INSERT INTO " + table("jobs") +
                                    " (queue, kind, run_at) VALUES ('payments', 'charge', now() + interval '1 day') "
                                    "RETURNING id"));
    const std::string batch =
        std::to_string(scalar<long>("SELECT " + table("open_batch") +
                                    R"((on_finish => '{"kind": "report", "payload": {"note": "batch-secret"}}'))"));
    exec("INSERT INTO " + table("jobs") + " (kind, batch_id, run_at) VALUES ('export', " + batch +
         ", now() + interval '1 day')");
    const std::vector<std::string> pages{"/batches",
                                         "/batches/" + batch,
                                         "/jobs?batch=" + batch,
                                         "/",
                                         "/dead-letters",
                                         "/dead-letters/" + dl,
                                         "/dead-letters?pattern=boom",
                                         "/dead-letters/confirm?action=replay&id=" + dl,
                                         "/dead-letters/confirm?action=purge&queue=default",
                                         "/jobs",
                                         "/jobs/" + job,
                                         "/jobs?state=scheduled",
                                         "/jobs/confirm-cancel?id=" + job,
                                         "/queues",
                                         "/workers",
                                         "/cron"};
    // A console as the login role granted `what`, with every page loaded: each a 200 with
    // neither error page. Its session, and the dead letter's page as it showed.
    struct Visited {
      std::unique_ptr<RunningConsole> rc;
      std::string cookie, csrf, dead_letter, batch;
    };
    const auto visit_as = [&](const std::string& what, bool read_only) {
      auto o = options_for(*this, false);
      o.url = DatabaseUrl(roles.url.at(what));
      o.read_only = read_only;
      Visited v{std::make_unique<RunningConsole>(o), {}, {}, {}, {}};
      const auto first = v.rc->client->Get("/");
      REQUIRE(first);
      v.cookie = first->get_header_value("Set-Cookie").substr(0, first->get_header_value("Set-Cookie").find(';'));
      for (const std::string& path : pages) {
        CAPTURE(what);
        CAPTURE(path);
        const auto r = v.rc->client->Get(path.c_str(), {{"Cookie", v.cookie}});
        REQUIRE(r);
        CHECK(r->status == 200);
        CHECK(r->body.find("Database unavailable") == std::string::npos);
        CHECK(r->body.find("Internal error") == std::string::npos);
        if (path == "/dead-letters/" + dl) v.dead_letter = r->body;
        if (path == "/batches/" + batch) v.batch = r->body;
        if (path == "/queues") v.csrf = csrf_of(r->body);
      }
      CHECK(v.rc->log.count("console database error") == 0);
      return v;
    };
    const auto post = [](Visited& v, const std::string& path, const std::string& form) {
      const auto r = v.rc->client->Post(path.c_str(), {{"Cookie", v.cookie}, {"Sec-Fetch-Site", "same-origin"}},
                                        "csrf=" + v.csrf + "&" + form, "application/x-www-form-urlencoded");
      REQUIRE(r);
      return r->status;
    };
    const auto pauses = [&] { return scalar<long>("SELECT count(*) FROM " + table("queue_pauses")); };

    Visited viewer = visit_as("viewer", true);
    CHECK(viewer.dead_letter.find("payload hidden") != std::string::npos);
    CHECK(viewer.batch.find("batch-secret") == std::string::npos);  // a callback's payload
    CHECK(viewer.batch.find("hidden (a payload)") != std::string::npos);
    CHECK(post(viewer, "/queues/pause", "queue=payments") == 403);
    CHECK(pauses() == 0);
    // A viewer's database role under a console that would let it act: the database refuses.
    Visited unguarded = visit_as("viewer", false);
    CHECK(post(unguarded, "/queues/pause", "queue=payments") == 503);
    CHECK(pauses() == 0);

    Visited op = visit_as("operator", false);
    CHECK(op.dead_letter.find("secret-note") != std::string::npos);
    CHECK(op.batch.find("batch-secret") != std::string::npos);
    CHECK(post(op, "/queues/pause", "queue=payments") == 200);
    CHECK(pauses() == 1);
    CHECK(post(op, "/queues/resume", "queue=payments") == 200);
    CHECK(pauses() == 0);
    CHECK(post(op, "/dead-letters/replay", "id=" + dl + "&expected=1") == 200);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("jobs") + " WHERE kind = 'noop'") == 1);
    CHECK(post(op, "/jobs/cancel", "id=" + job + "&expected=1") == 200);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("dead_letters") +
                       " WHERE error_class = 'cancelled' AND job_id = " + job) == 1);
    CHECK(op.rc->log.count("console database error") == 0);
  }

  TEST_CASE("console: an unreachable database is a 503 page without secrets") {
    web::ConsoleOptions o;
    o.url = DatabaseUrl("postgresql://postgres:hunter2-secret@127.0.0.1:1/postgres?connect_timeout=2");
    RunningConsole rc(o);
    const auto r = rc.client->Get("/");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(r->body.find("Database unavailable") != std::string::npos);
    CHECK(r->body.find("hunter2") == std::string::npos);
    CHECK(r->body.find("127.0.0.1:1") == std::string::npos);
    CHECK(rc.log.text().find("hunter2") == std::string::npos);
  }

  // --statement-timeout bounds every query of a request: a page that waits on a lock (held
  // here by the test's own connection) is the database-unavailable page when the timeout
  // ends it, not a page that hangs until the lock goes.
  TEST_CASE_FIXTURE(PgFixture, "console: a page whose query outlasts the statement timeout is the 503 page, in time") {
    insert_dead_letter(*this, "boom", "a");
    auto o = options_for(*this, false);
    o.statement_timeout = std::chrono::milliseconds(300);
    RunningConsole rc(o);
    rc.client->set_read_timeout(10, 0);
    pqxx::connection holder(url);
    pqxx::work lock(holder);
    lock.exec("LOCK TABLE " + table("dead_letters") + " IN ACCESS EXCLUSIVE MODE");
    const auto start = std::chrono::steady_clock::now();
    const auto r = rc.client->Get("/dead-letters");
    const auto took = std::chrono::steady_clock::now() - start;
    lock.abort();
    REQUIRE(r);
    CHECK(took < std::chrono::seconds(5));
    CHECK(r->status == 503);
    CHECK(r->body.find("Database unavailable") != std::string::npos);
    CHECK(r->body.find("within the statement timeout") != std::string::npos);
    CHECK(r->body.find("canceling statement") == std::string::npos);  // the server's message stays in the log
    CHECK(rc.log.count("console database error path=/dead-letters") == 1);
    CHECK(rc.log.count("canceling statement due to statement timeout") == 1);
    CHECK(rc.client->Get("/dead-letters")->status == 200);  // the lock gone, the page is back
  }

  TEST_CASE_FIXTURE(PgFixture, "console: a replay confirmed with a stale count does nothing") {
    insert_dead_letter(*this, "e 1", "a");
    insert_dead_letter(*this, "e 2", "b");
    RunningConsole rc(options_for(*this, false));
    const auto page = rc.client->Get("/dead-letters/confirm?action=replay&pattern=e%20%23");
    REQUIRE(page->status == 200);
    CHECK(page->body.find("data-count=\"2\"") != std::string::npos);
    const std::string cookie =
        page->get_header_value("Set-Cookie").substr(0, page->get_header_value("Set-Cookie").find(';'));
    const std::string csrf = csrf_of(rc.client->Get("/dead-letters", {{"Cookie", cookie}})->body);
    insert_dead_letter(*this, "e 3", "c");  // the selection grows after the operator looked
    const auto stale =
        rc.client->Post("/dead-letters/replay", {{"Cookie", cookie}, {"Sec-Fetch-Site", "same-origin"}},
                        "csrf=" + csrf + "&pattern=e%20%23&expected=2", "application/x-www-form-urlencoded");
    CHECK(stale->status == 409);
    CHECK(stale->body.find("You were shown 2, the selection now holds 3") != std::string::npos);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("jobs")) == 0);
    const auto ok =
        rc.client->Post("/dead-letters/replay", {{"Cookie", cookie}, {"Sec-Fetch-Site", "same-origin"}},
                        "csrf=" + csrf + "&pattern=e%20%23&expected=3", "application/x-www-form-urlencoded");
    CHECK(ok->status == 200);
    CHECK(scalar<long>("SELECT count(*) FROM " + table("jobs")) == 3);
    CHECK(rc.log.count("action=replay count=3 detail=pattern=e #") == 1);
  }

}  // TEST_SUITE
