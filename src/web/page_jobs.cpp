// Jobs: the list by keyset pages (list_jobs, by id), one job whole (show_job), and cancel
// (cancel_jobs): of one job from its page, or of what a filter selects after a dry run
// whose count the confirmation carries (re-counted before cancelling: if it changed,
// nothing is cancelled and the page says so).

#include "oncely/errors.hpp"
#include "oncely/jobs.hpp"
#include "support/duration.hpp"
#include "web/console.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"

namespace oncely::web {
namespace {

std::string describe(const JobFilter& f) {
  std::string out;
  for (const auto& [k, v] : job_filter_pairs(f)) {
    if (v) out += (out.empty() ? "" : " ") + k + "=" + *v;
  }
  return out.empty() ? "all" : out;
}

std::string cancel_form(const Context& ctx, const JobFilter& f, long count) {
  std::string out = "<form method=\"post\" action=\"/jobs/cancel\" class=\"confirm\">" + ctx.csrf_field();
  for (const auto& [k, v] : job_filter_pairs(f)) {
    if (v) out += hidden(k, *v);
  }
  return out + hidden("expected", std::to_string(count)) +
         "<button type=\"submit\" class=\"danger\" data-action=\"confirm\">Cancel " + std::to_string(count) + " job" +
         (count == 1 ? "" : "s") + "</button></form>";
}

}  // namespace

JobFilter job_filter_of(const Context& ctx) {
  JobFilter f;
  for (const auto& id : ctx.params("id")) f.ids.push_back(id_of(id, "id"));
  f.queue = ctx.param("queue");
  f.kind = ctx.param("kind");
  try {
    if (const auto s = ctx.param("state")) f.state = parse_job_state(*s);
    if (const auto o = ctx.param("older_than")) f.older_than = detail::parse_duration(*o);
  } catch (const ConfigError& e) {
    throw BadRequest(e.what());
  }
  f.error_text = ctx.param("error");
  if (const auto batch = ctx.param("batch")) f.batch_id = id_of(*batch, "batch");
  f.all = ctx.param("all") == "1";
  return f;
}

std::vector<std::pair<std::string, std::optional<std::string>>> job_filter_pairs(const JobFilter& f) {
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  for (const auto id : f.ids) out.emplace_back("id", std::to_string(id));
  out.emplace_back("queue", f.queue);
  out.emplace_back("kind", f.kind);
  if (f.state) out.emplace_back("state", std::string(to_string(*f.state)));
  out.emplace_back("error", f.error_text);
  if (f.batch_id) out.emplace_back("batch", std::to_string(*f.batch_id));
  if (f.older_than) out.emplace_back("older_than", detail::format_duration(*f.older_than));
  if (f.all && f.empty()) out.emplace_back("all", "1");
  return out;
}

Page jobs_page(const Context& ctx) {
  const JobFilter f = job_filter_of(ctx);
  std::optional<std::int64_t> after;
  if (const auto a = ctx.param("after")) after = id_of(*a, "after");
  const JobPage list = list_jobs(ctx.db, ctx.schema, f, 50, after);
  Page page;
  page.title = "Jobs";
  std::string& b = page.body;
  const auto value = [](const std::optional<std::string>& v) { return escape(v.value_or("")); };
  const std::string state = f.state ? std::string(to_string(*f.state)) : "";
  b = "<h1>Jobs</h1><form method=\"get\" action=\"/jobs\" class=\"filters\">"
      "<label>queue <input name=\"queue\" value=\"" +
      value(f.queue) +
      "\"></label>"
      "<label>kind <input name=\"kind\" value=\"" +
      value(f.kind) + "\"></label><label>state <select name=\"state\">";
  for (const char* s : {"", "ready", "scheduled", "retrying", "running", "waiting"}) {
    b += "<option value=\"" + std::string(s) + "\"" + (state == s ? " selected" : "") + ">" +
         (*s ? std::string(s) : "any") + "</option>";
  }
  b += "</select></label><label>error contains <input name=\"error\" value=\"" + value(f.error_text) +
       "\"></label><label>older than <input name=\"older_than\" size=\"5\" value=\"" +
       (f.older_than ? escape(detail::format_duration(*f.older_than)) : std::string()) + "\"></label>" +
       (f.batch_id ? hidden("batch", std::to_string(*f.batch_id)) + "<span>members of batch <a href=\"/batches/" +
                         std::to_string(*f.batch_id) + "\">" + std::to_string(*f.batch_id) + "</a></span>"
                   : std::string()) +
       "<button type=\"submit\">Filter</button> <a href=\"/jobs\">clear</a></form>";
  if (ctx.can_act() && !f.empty()) {
    b += "<p><a class=\"button danger\" href=\"/jobs/confirm-cancel" + query_string(job_filter_pairs(f)) +
         "\">Cancel every job this filter selects…</a></p>";
  }
  b += "<section data-live=\"jobs\"><table class=\"grid\"><thead><tr><th>id</th><th>queue</th><th>kind</th>"
       "<th>state</th><th>priority</th><th>attempts</th><th>run at</th><th>created</th><th>last error</th></tr>"
       "</thead><tbody>";
  if (list.jobs.empty()) b += "<tr><td colspan=\"9\" class=\"muted\">no jobs</td></tr>";
  for (const JobSummary& j : list.jobs) {
    const std::string id = std::to_string(j.id);
    b += "<tr><td><a href=\"/jobs/" + id + "\">" + id + "</a></td><td>" + escape(j.queue) + "</td><td>" +
         escape(j.kind) + "</td><td><span class=\"badge " + std::string(to_string(j.state)) + "\">" +
         std::string(to_string(j.state)) + "</span></td><td class=\"n\">" + std::to_string(j.priority) +
         "</td><td class=\"n\">" + std::to_string(j.attempts) + "</td><td>" + short_time(j.run_at) + "</td><td>" +
         short_time(j.created_at) + "</td><td class=\"error-text\">" +
         (j.state == JobState::waiting ? "waits for " + job_links(j.waiting_for) : escape(j.last_error.value_or(""))) +
         "</td></tr>";
  }
  b += "</tbody></table>";
  if (list.next_after) {
    auto pairs = job_filter_pairs(f);
    pairs.emplace_back("after", std::to_string(*list.next_after));
    b += "<p><a href=\"/jobs" + query_string(pairs) + "\" rel=\"next\">Next page →</a></p>";
  }
  b += "</section>";
  return page;
}

Page job_page(const Context& ctx, std::int64_t id) {
  const bool wanted = ctx.may_see_payloads();
  const bool allowed = wanted && payload_access(ctx.db, ctx.schema).jobs;
  const auto j = show_job(ctx.db, ctx.schema, id, allowed);
  Page page;
  if (!j) {
    page.status = 404;
    page.title = "No such job";
    page.body = "<h1>No job " + std::to_string(id) +
                "</h1><p class=\"muted\">It may have completed (a completed job leaves the table) or been "
                "dead-lettered.</p><p><a href=\"/dead-letters?replayed=1\">Dead letters</a></p>";
    return page;
  }
  const JobSummary& s = j->summary;
  page.title = "Job " + std::to_string(id);
  std::string& b = page.body;
  const auto row = [](std::string_view k, const std::string& v_html) {
    return "<tr><th>" + std::string(k) + "</th><td>" + v_html + "</td></tr>";
  };
  b = "<h1>Job " + std::to_string(id) + "</h1><section data-live=\"job\"><table class=\"fields\">";
  b += row("queue", escape(s.queue));
  b += row("kind", escape(s.kind));
  b += row("state", "<span class=\"badge " + std::string(to_string(s.state)) + "\" id=\"job-state\">" +
                        std::string(to_string(s.state)) + "</span>");
  b += row("priority", std::to_string(s.priority));
  b += row("attempts",
           std::to_string(s.attempts) + (s.max_attempts ? " of " + std::to_string(*s.max_attempts) : std::string()));
  b += row("run at", short_time(s.run_at));
  b += row("created", short_time(s.created_at));
  b += row("idempotency key", s.idempotency_key ? escape(*s.idempotency_key) : std::string("–"));
  b += row("unique key", s.unique_key ? escape(*s.unique_key) : std::string("–"));
  if (j->origin_job_id) b += row("origin job", std::to_string(*j->origin_job_id));
  if (!s.waiting_for.empty()) b += row("waits for", job_links(s.waiting_for));
  if (s.batch_id) {
    const std::string batch = std::to_string(*s.batch_id);
    b += row("batch", "<a href=\"/batches/" + batch + "\">" + batch + "</a>");
  }
  if (j->held_by_worker) b += row("held by worker", std::to_string(*j->held_by_worker));
  if (j->leased_by)
    b += row("leased by worker", std::to_string(*j->leased_by) + (j->lease_live ? " (live)" : " (expired)"));
  b += "</table><h2>Last error</h2><pre class=\"error-text\">" + escape(s.last_error.value_or("(none)")) + "</pre>";
  b += "<h2>Payload</h2>";
  if (allowed) {
    b += "<pre class=\"payload\" id=\"payload\">" + escape(j->payload_text) + "</pre>";
  } else {
    b += "<p class=\"muted\" id=\"payload\">payload hidden" +
         std::string(wanted ? " (this console's database role may not read payloads)"
                            : " (viewers do not see payloads)") +
         "</p>";
  }
  b += "<h2>Attempts</h2><pre class=\"error-text\">" + escape(j->errors_text) + "</pre></section>";
  if (ctx.can_act()) {
    JobFilter one;
    one.ids = {id};
    b += "<h2>Cancel</h2><p>Moves the job to the dead letters (class cancelled); a job running in a "
         "transaction-mode batch is left to finish.</p>" +
         cancel_form(ctx, one, 1);
  }
  b += "<p><a href=\"/jobs\">Back to jobs</a></p>";
  return page;
}

Page jobs_confirm_page(const Context& ctx) {
  const JobFilter f = job_filter_of(ctx);
  if (f.empty() && !f.all) throw BadRequest("choose jobs or a filter first");
  const CancelResult dry = cancel_jobs(ctx.db, ctx.schema, f, /*dry_run=*/true);
  const long n = static_cast<long>(dry.cancelled.size());
  Page page;
  page.title = "Cancel jobs";
  page.body = "<h1>Cancel jobs</h1><p>Selection: <code>" + escape(describe(f)) +
              "</code></p><p class=\"dry-run\">Dry run: <strong data-count=\"" + std::to_string(n) + "\">" +
              std::to_string(n) + "</strong> would be cancelled, " + std::to_string(dry.running.size()) +
              " running (left to finish).</p>";
  if (n > 0 && ctx.can_act()) page.body += cancel_form(ctx, f, n);
  page.body += "<p><a href=\"/jobs\">Back to jobs</a></p>";
  return page;
}

Page jobs_cancel_action(const Context& ctx) {
  const JobFilter f = job_filter_of(ctx);
  if (f.empty() && !f.all) throw BadRequest("choose jobs or a filter first");
  const auto e = ctx.param("expected");
  const long expected = e && *e != "0" ? static_cast<long>(id_of(*e, "expected")) : 0;
  Page page;
  page.title = "Cancel";
  // A selection by filter is counted again: what the operator saw must be what goes.
  if (f.ids.size() != 1) {
    const long now = static_cast<long>(cancel_jobs(ctx.db, ctx.schema, f, true).cancelled.size());
    if (now != expected) {
      page.status = 409;
      page.body = "<h1>The selection changed</h1><p class=\"message changed\">You were shown " +
                  std::to_string(expected) + ", the selection now holds " + std::to_string(now) +
                  ". Nothing was cancelled.</p>" + (now > 0 ? cancel_form(ctx, f, now) : std::string()) +
                  "<p><a href=\"/jobs\">Back to jobs</a></p>";
      return page;
    }
  }
  const CancelResult r = cancel_jobs(ctx.db, ctx.schema, f, false);
  ctx.audit("cancel", static_cast<long>(r.cancelled.size()), describe(f));
  page.body = "<h1>Cancelled</h1><p class=\"result\" data-cancelled=\"" + std::to_string(r.cancelled.size()) +
              "\">Cancelled " + std::to_string(r.cancelled.size()) + " job(s); " + std::to_string(r.running.size()) +
              " running (left to finish); " + std::to_string(r.gone) +
              " gone meanwhile.</p><p><a href=\"/dead-letters?class=cancelled\">Cancelled dead letters</a> · "
              "<a href=\"/jobs\">Jobs</a></p>";
  return page;
}

}  // namespace oncely::web
