// The console's HTTP layer: routes, sessions and logins, the security headers, the page
// shell, and the one mapping of errors to pages (a database that cannot be read is a 503
// page that says so, never a stack trace or a connection string).

#include "web/console.hpp"

#include <httplib.h>

#include <atomic>
#include <regex>

#include <pqxx/except>

#include "oncely/errors.hpp"
#include "support/bounded_http_server.hpp"
#include "support/db.hpp"
#include "web/assets.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"
#include "web/stats_snapshot.hpp"

namespace oncely::web {

void validate(const ConsoleOptions& options) {
  if (!is_loopback(options.host) && options.credentials.empty()) {
    throw ConfigError("addr", options.host +
                                  " is not a loopback address: set ONCELY_WEB_OPERATOR_TOKEN or "
                                  "ONCELY_WEB_VIEWER_TOKEN, or give --login-file, so that a login is required");
  }
  if (options.port < 0 || options.port > 65535) throw ConfigError("addr", "port must be between 0 and 65535");
  if (options.statement_timeout.count() <= 0) throw ConfigError("statement-timeout", "must be positive");
}

// ---- Context ----

bool Context::can_act() const { return session.role == Role::operator_ && !options.read_only; }

bool Context::may_see_payloads() const { return session.role == Role::operator_ || options.viewer_payloads; }

std::optional<std::string> Context::param(const std::string& name) const {
  const auto from = [&](const httplib::Params& p) -> std::optional<std::string> {
    const auto it = p.find(name);
    if (it == p.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  if (auto v = from(form)) return v;
  return from(request.params);
}

std::vector<std::string> Context::params(const std::string& name) const {
  std::vector<std::string> out;
  for (const httplib::Params* p : {&form, &request.params}) {
    const auto [first, last] = p->equal_range(name);
    for (auto it = first; it != last; ++it) {
      if (!it->second.empty()) out.push_back(it->second);
    }
  }
  return out;
}

std::string Context::csrf_field() const { return hidden("csrf", session.csrf); }

void Context::audit(std::string_view action, long count, std::string_view detail) const {
  // "error=" style: the detail (a filter, free text) is the rest of the line.
  log.info("console action who={} role={} action={} count={} detail={}", session.name, to_string(session.role), action,
           count, detail);
}

std::int64_t id_of(std::string_view text, std::string_view what) {
  std::int64_t v = 0;
  if (text.empty() || text.size() > 18) throw BadRequest(std::string(what) + ": not an id");
  for (const char c : text) {
    if (c < '0' || c > '9') throw BadRequest(std::string(what) + ": not an id");
    v = v * 10 + (c - '0');
  }
  if (v <= 0) throw BadRequest(std::string(what) + ": must be positive");
  return v;
}

// ---- the server ----

namespace {

constexpr std::string_view kCookie = "oncely_session";
// Pages rendered at once: as many as httplib's own pool had threads. A page holds its
// thread for its database reads, which the statement timeout bounds; the sockets are the
// I/O thread's, so a slow client holds none.
constexpr std::size_t kHandlerThreads = 8;
// The longest form read: the console's forms carry filters, a count and at most a page
// of ids, a few KiB; a client cannot make the server hold more for it.
constexpr std::size_t kMaxFormBytes = 64 * 1024;

detail::BoundedHttpOptions http_options() {
  detail::BoundedHttpOptions o;
  o.purpose = "the console";
  o.handler_threads = kHandlerThreads;
  o.max_body = kMaxFormBytes;
  return o;
}

std::string unbracketed(const std::string& host) {
  return host.starts_with('[') && host.ends_with(']') ? host.substr(1, host.size() - 2) : host;
}

std::optional<std::string> cookie_value(const httplib::Request& req, std::string_view name) {
  const std::string header = req.get_header_value("Cookie");
  std::size_t at = 0;
  while (at < header.size()) {
    std::size_t end = header.find(';', at);
    if (end == std::string::npos) end = header.size();
    std::string_view part(header.data() + at, end - at);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > name.size() && part.starts_with(name) && part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
    at = end + 1;
  }
  return std::nullopt;
}

struct Nav {
  std::string_view path, label;
};
constexpr Nav kNav[] = {
    {"/", "Overview"},     {"/dead-letters", "Dead letters"}, {"/jobs", "Jobs"}, {"/completed", "Completed"},
    {"/queues", "Queues"}, {"/workers", "Workers"},           {"/cron", "Cron"}, {"/batches", "Batches"}};

}  // namespace

struct Console::Impl {
  ConsoleOptions options;
  DatabaseUrl db;
  /// Counted at most once per live refresh (5 s when that is off), for every request.
  StatsSnapshot stats;
  // Slow and idle clients, and floods of them, cannot hold it or take the descriptors the
  // pages' database sessions need (bounded_http_server.hpp): the worker's metrics
  // endpoint's server, with a pool of handler threads for the pages.
  detail::BoundedHttpServer http;
  httplib::Server& server;
  SessionTable sessions;

  explicit Impl(ConsoleOptions o)
      : options(std::move(o)),
        db(detail::with_session_setting(options.url, "statement_timeout",
                                        std::to_string(options.statement_timeout.count()))),
        stats([this] { return collect_stats(db, options.schema, std::nullopt); },
              snapshot_fresh_for(options.refresh_seconds)),
        http(unbracketed(options.host), options.port, http_options()),
        server(http.routes()) {}

  [[nodiscard]] bool open_access() const { return options.credentials.empty(); }
  [[nodiscard]] bool secure_cookie() const { return !is_loopback(options.host); }

  /// The headers every response carries; the CSP allows only this response's script.
  static void security_headers(httplib::Response& res, const std::string& nonce) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'nonce-" + nonce +
                       "'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; "
                       "frame-ancestors 'none'; base-uri 'none'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", "no-store");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("X-Frame-Options", "DENY");
  }

  void set_session_cookie(httplib::Response& res, const Session& s) const {
    res.set_header("Set-Cookie", std::string(kCookie) + "=" + s.id + "; Path=/; HttpOnly; SameSite=Strict" +
                                     (secure_cookie() ? "; Secure" : ""));
  }

  std::string shell(const Page& page, const Session* session, const std::string& nonce) const {
    std::string out =
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">" +
        // The session's CSRF token, for forms a page has and for scripts of ours.
        (session != nullptr ? "<meta name=\"csrf\" content=\"" + session->csrf + "\">" : std::string()) + "<title>" +
        escape(page.title) +
        " · oncely</title><link rel=\"stylesheet\" href=\"/assets/app.css\">"
        "<script nonce=\"" +
        nonce + "\" src=\"/assets/app.js\" defer></script></head><body data-refresh=\"" +
        std::to_string(options.refresh_seconds) + "\"><header><span class=\"brand\">oncely</span><nav>";
    for (const Nav& n : kNav) out += "<a href=\"" + std::string(n.path) + "\">" + std::string(n.label) + "</a>";
    out += "</nav><span class=\"who\">schema " + escape(options.schema);
    if (session != nullptr) {
      out += " · " + escape(session->name) + " (" +
             std::string(options.read_only ? "viewer, read-only" : to_string(session->role)) + ")";
      if (!open_access()) {
        out += "<form method=\"post\" action=\"/logout\" class=\"inline\">" + hidden("csrf", session->csrf) +
               "<button type=\"submit\">Log out</button></form>";
      }
    }
    out +=
        "</span><span id=\"live-status\" class=\"live\"></span></header><main>" + page.body + "</main></body></html>\n";
    return out;
  }

  void send(httplib::Response& res, const Page& page, const Session* session) const {
    const std::string nonce = random_hex(16);
    security_headers(res, nonce);
    res.status = page.status;
    res.set_content(shell(page, session, nonce), "text/html; charset=utf-8");
  }

  static Page message_page(int status, std::string title, const std::string& text) {
    Page p;
    p.status = status;
    p.title = std::move(title);
    p.body = "<h1>" + escape(p.title) + "</h1><p class=\"message\">" + escape(text) + "</p>";
    return p;
  }

  /// The request's session: its cookie's, or (open access) a new one. None: log in first.
  std::optional<Session> session_of(const httplib::Request& req, httplib::Response& res) {
    if (const auto id = cookie_value(req, kCookie)) {
      if (auto s = sessions.find(*id)) return s;
    }
    if (!open_access()) return std::nullopt;
    Session s = sessions.create(options.read_only ? Role::viewer : Role::operator_, "local");
    set_session_cookie(res, s);
    return s;
  }

  using Handler = std::function<Page(const Context&)>;

  /// Runs a page or an action with everything around it: the session, the change rules,
  /// the error pages.
  void serve(const httplib::Request& req, httplib::Response& res, bool change, const Handler& handler) {
    const auto session = session_of(req, res);
    httplib::Params form;
    if (change) httplib::detail::parse_query_text(req.body, form);
    if (!session) {
      if (change) {
        send(res, message_page(403, "Not logged in", "log in first"), nullptr);
      } else {
        security_headers(res, random_hex(16));
        res.status = 303;
        res.set_header("Location", "/login");
      }
      return;
    }
    if (change) {
      const auto csrf = form.find("csrf");
      const auto why = refuse_change(
          req.has_header("Sec-Fetch-Site") ? std::optional<std::string>(req.get_header_value("Sec-Fetch-Site"))
                                           : std::nullopt,
          session->csrf, csrf == form.end() ? std::nullopt : std::optional<std::string_view>(csrf->second));
      if (why) {
        options.log->warn("console refused path={} who={} error={}", req.path, session->name, *why);
        send(res, message_page(403, "Refused", *why), &*session);
        return;
      }
      if (session->role != Role::operator_ || options.read_only) {
        options.log->warn("console refused path={} who={} error=a viewer cannot change anything", req.path,
                          session->name);
        send(res, message_page(403, "Refused", "a viewer cannot change anything"), &*session);
        return;
      }
    }
    const Context ctx{req, std::move(form), *session, options, db, options.schema, *options.log, stats};
    try {
      send(res, handler(ctx), &*session);
    } catch (const BadRequest& e) {
      send(res, message_page(400, "Bad request", e.what()), &*session);
    } catch (const ConfigError& e) {
      send(res, message_page(400, "Bad request", e.what()), &*session);
    } catch (const DatabaseError& e) {
      // The detail (redacted) goes to the log; the page says what to do.
      options.log->error("console database error path={} error={}", req.path, e.what());
      send(res,
           message_page(503, "Database unavailable",
                        "The console cannot read the database right now: it is unreachable, refused this "
                        "console's role, or did not answer within the statement timeout. The page retries on "
                        "its own; the console's log has the details."),
           &*session);
    } catch (const pqxx::failure& e) {
      options.log->error("console database error path={} error={}", req.path, options.url.scrub(e.what()));
      send(res,
           message_page(503, "Database unavailable",
                        "The database failed this request; the console's log has the details."),
           &*session);
    } catch (const std::exception& e) {
      options.log->error("console internal error path={} error={}", req.path, options.url.scrub(e.what()));
      send(res, message_page(500, "Internal error", "The console failed this request; its log has the details."),
           &*session);
    }
  }

  void login_page(const httplib::Request&, httplib::Response& res, const std::string& error) const {
    Page p;
    p.status = error.empty() ? 200 : 403;
    p.title = "Log in";
    p.body = "<h1>Log in</h1>" + (error.empty() ? std::string() : "<p class=\"error\">" + escape(error) + "</p>") +
             "<form method=\"post\" action=\"/login\" class=\"login\"><label>Token <input type=\"password\" "
             "name=\"token\" autocomplete=\"current-password\" autofocus></label><button type=\"submit\">Log "
             "in</button></form>";
    send(res, p, nullptr);
  }

  void routes() {
    for (const Asset& a : assets()) {
      server.Get(std::string(a.path), [a](const httplib::Request&, httplib::Response& res) {
        security_headers(res, random_hex(16));
        res.set_content(std::string(a.text), std::string(a.content_type));
      });
    }
    // Browsers ask for it on their own: no icon, and no 404 in their console.
    server.Get("/favicon.ico", [](const httplib::Request&, httplib::Response& res) {
      security_headers(res, random_hex(16));
      res.status = 204;
    });
    server.Get("/login", [this](const httplib::Request& req, httplib::Response& res) {
      if (open_access()) {
        security_headers(res, random_hex(16));
        res.status = 303;
        res.set_header("Location", "/");
        return;
      }
      login_page(req, res, "");
    });
    server.Post("/login", [this](const httplib::Request& req, httplib::Response& res) {
      httplib::Params form;
      httplib::detail::parse_query_text(req.body, form);
      // No session yet, so no CSRF token: the browser's same-origin word must do.
      if (req.get_header_value("Sec-Fetch-Site") != "same-origin") {
        send(res, message_page(403, "Refused", "refused: the login did not come from this console's page"), nullptr);
        return;
      }
      const auto token = form.find("token");
      const auto credential = token == form.end() ? std::nullopt : find_credential(options.credentials, token->second);
      if (!credential) {
        options.log->warn("console login refused error=unknown token");
        login_page(req, res, "unknown token");
        return;
      }
      const Session s = sessions.create(options.read_only ? Role::viewer : credential->role, credential->name);
      options.log->info("console login who={} role={}", s.name, to_string(s.role));
      set_session_cookie(res, s);
      security_headers(res, random_hex(16));
      res.status = 303;
      res.set_header("Location", "/");
    });
    server.Post("/logout", [this](const httplib::Request& req, httplib::Response& res) {
      serve(req, res, false, [&](const Context& ctx) {
        httplib::Params form;
        httplib::detail::parse_query_text(req.body, form);
        const auto csrf = form.find("csrf");
        if (req.get_header_value("Sec-Fetch-Site") == "same-origin" && csrf != form.end() &&
            constant_time_equal(csrf->second, ctx.session.csrf)) {
          sessions.remove(ctx.session.id);
          ctx.log.info("console logout who={}", ctx.session.name);
        }
        Page p;
        p.title = "Logged out";
        p.body = "<h1>Logged out</h1><p><a href=\"/login\">Log in again</a></p>";
        return p;
      });
    });

    const auto get = [this](const std::string& pattern, Handler h) {
      server.Get(pattern,
                 [this, h](const httplib::Request& req, httplib::Response& res) { serve(req, res, false, h); });
    };
    const auto post = [this](const std::string& pattern, Handler h) {
      server.Post(pattern,
                  [this, h](const httplib::Request& req, httplib::Response& res) { serve(req, res, true, h); });
    };
    const auto with_id = [](Page (*page)(const Context&, std::int64_t)) {
      return [page](const Context& ctx) { return page(ctx, id_of(ctx.request.matches[1].str(), "id")); };
    };
    get("/", overview_page);
    get("/dead-letters", dead_letters_page);
    get("/dead-letters/confirm", dead_letters_confirm_page);
    get(R"(/dead-letters/(\d+))", with_id(dead_letter_page));
    post("/dead-letters/replay", [](const Context& ctx) { return dead_letters_action(ctx, "replay"); });
    post("/dead-letters/purge", [](const Context& ctx) { return dead_letters_action(ctx, "purge"); });
    get("/jobs", jobs_page);
    get("/jobs/confirm-cancel", jobs_confirm_page);
    get(R"(/jobs/(\d+))", with_id(job_page));
    post("/jobs/cancel", jobs_cancel_action);
    get("/completed", completed_jobs_page);
    get(R"(/completed/(\d+))", with_id(completed_job_page));
    get("/queues", queues_page);
    post("/queues/pause", [](const Context& ctx) { return queue_action(ctx, "pause"); });
    post("/queues/resume", [](const Context& ctx) { return queue_action(ctx, "resume"); });
    get("/workers", workers_page);
    get("/cron", cron_page);
    get("/batches", batches_page);
    get(R"(/batches/(\d+))", with_id(batch_page));

    server.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (res.status == 404 && res.body.empty()) {
        send(res, message_page(404, "Not found", "no such page"), nullptr);
      }
    });
    server.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
      options.log->error("console internal error path={} error=unhandled exception", req.path);
      send(res, message_page(500, "Internal error", "The console failed this request."), nullptr);
    });
  }
};

Console::Console(ConsoleOptions options) {
  validate(options);
  if (!options.log) throw ConfigError("", "console needs a logger");
  impl_ = std::make_unique<Impl>(std::move(options));
  impl_->routes();
}

Console::~Console() = default;

int Console::port() const noexcept { return impl_->http.port(); }

void Console::run() { impl_->http.run(); }

void Console::stop() noexcept { impl_->http.stop(); }

}  // namespace oncely::web
