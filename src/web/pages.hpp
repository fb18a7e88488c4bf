#pragma once
// What a page handler gets and returns. Handlers (one file per group of pages) read
// through the library, build HTML with web/html.hpp only, and never see sockets, cookies
// or headers: console.cpp owns those.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>
#include <spdlog/logger.h>

#include "oncely/database_url.hpp"
#include "oncely/dead_letters.hpp"
#include "oncely/jobs.hpp"
#include "web/auth.hpp"

namespace oncely::web {

struct ConsoleOptions;
class StatsSnapshot;

struct Context {
  const httplib::Request& request;
  httplib::Params form;  ///< a POST's fields (urlencoded body)
  const Session& session;
  const ConsoleOptions& options;
  const DatabaseUrl& db;  ///< the database, with this console's statement_timeout
  std::string_view schema;
  spdlog::logger& log;
  StatsSnapshot& stats;  ///< the overview's numbers, shared by every request

  /// An operator, and not --read-only: buttons are shown and changes accepted.
  [[nodiscard]] bool can_act() const;
  /// The login's role lets it see payloads (whether the database role may is asked apart).
  [[nodiscard]] bool may_see_payloads() const;
  /// A query (GET) or form (POST) parameter; an empty value counts as absent.
  [[nodiscard]] std::optional<std::string> param(const std::string& name) const;
  [[nodiscard]] std::vector<std::string> params(const std::string& name) const;
  /// The hidden CSRF field every form that changes something carries.
  [[nodiscard]] std::string csrf_field() const;
  /// One audit line: who did what to how many.
  void audit(std::string_view action, long count, std::string_view detail) const;
};

struct Page {
  int status = 200;
  std::string title;
  std::string body;
};

/// A request the page cannot be meant as (a bad id, filter, duration): 400.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- pages (GET) and actions (POST), by file ----
Page overview_page(const Context& ctx);      // page_overview.cpp
Page dead_letters_page(const Context& ctx);  // page_dead_letters.cpp
Page dead_letter_page(const Context& ctx, std::int64_t id);
Page dead_letters_confirm_page(const Context& ctx);
Page dead_letters_action(const Context& ctx, std::string_view action);  // "replay" | "purge"
Page jobs_page(const Context& ctx);                                     // page_jobs.cpp
Page job_page(const Context& ctx, std::int64_t id);
Page jobs_confirm_page(const Context& ctx);
Page jobs_cancel_action(const Context& ctx);
Page completed_jobs_page(const Context& ctx);  // page_completed.cpp
Page completed_job_page(const Context& ctx, std::int64_t id);
Page queues_page(const Context& ctx);                            // page_system.cpp
Page queue_action(const Context& ctx, std::string_view action);  // "pause" | "resume"
Page workers_page(const Context& ctx);
Page cron_page(const Context& ctx);
Page batches_page(const Context& ctx);  // page_batches.cpp
Page batch_page(const Context& ctx, std::int64_t id);

/// The dead-letter filter a request gives (id, queue, kind, class, error, pattern,
/// older_than, newer_than, replayed, all); throws BadRequest for a value that is not one.
DeadLetterFilter dead_letter_filter_of(const Context& ctx);
/// The same filter as query pairs / hidden fields (to carry it to the next request).
std::vector<std::pair<std::string, std::optional<std::string>>> dead_letter_filter_pairs(const DeadLetterFilter& f);
JobFilter job_filter_of(const Context& ctx);
std::vector<std::pair<std::string, std::optional<std::string>>> job_filter_pairs(const JobFilter& f);

/// A positive integer parameter, or BadRequest.
std::int64_t id_of(std::string_view text, std::string_view what);

}  // namespace oncely::web
