// Completed jobs: their records (list_completed_jobs, schema 27), newest first by keyset
// pages, searched by key, kind and queue; one record whole, its output only for a login and
// a database role that may read it (a viewer sees no outputs, as it sees no payloads).

#include <cmath>

#include "oncely/dead_letters.hpp"
#include "oncely/jobs.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"

namespace oncely::web {
namespace {

CompletedJobFilter completed_filter_of(const Context& ctx) {
  CompletedJobFilter f;
  f.queue = ctx.param("queue");
  f.kind = ctx.param("kind");
  f.idempotency_key = ctx.param("key");
  return f;
}

std::vector<std::pair<std::string, std::optional<std::string>>> completed_filter_pairs(const CompletedJobFilter& f) {
  return {{"queue", f.queue}, {"kind", f.kind}, {"key", f.idempotency_key}};
}

std::string run_time_text(const CompletedJob& c) {
  if (!c.run_time_ms) return "–";
  return std::to_string(std::llround(*c.run_time_ms)) + " ms";
}

}  // namespace

Page completed_jobs_page(const Context& ctx) {
  const CompletedJobFilter f = completed_filter_of(ctx);
  std::optional<std::int64_t> before;
  if (const auto b = ctx.param("before")) before = id_of(*b, "before");
  const CompletedJobPage list = list_completed_jobs(ctx.db, ctx.schema, f, 50, before);
  Page page;
  page.title = "Completed jobs";
  std::string& b = page.body;
  const auto value = [](const std::optional<std::string>& v) { return escape(v.value_or("")); };
  b = "<h1>Completed jobs</h1><p class=\"muted\">Kept for the dedup window.</p>"
      "<form method=\"get\" action=\"/completed\" class=\"filters\">"
      "<label>key <input name=\"key\" value=\"" +
      value(f.idempotency_key) + "\"></label><label>kind <input name=\"kind\" value=\"" + value(f.kind) +
      "\"></label><label>queue <input name=\"queue\" value=\"" + value(f.queue) +
      "\"></label><button type=\"submit\">Search</button> <a href=\"/completed\">clear</a></form>";
  b += "<section data-live=\"completed\"><table class=\"grid\"><thead><tr><th>id</th><th>queue</th><th>kind</th>"
       "<th>key</th><th>completed</th><th>attempt</th><th>run time</th><th>worker</th></tr></thead><tbody>";
  if (list.jobs.empty()) b += "<tr><td colspan=\"8\" class=\"muted\">no completed jobs</td></tr>";
  for (const CompletedJob& c : list.jobs) {
    const std::string id = std::to_string(c.id);
    b += "<tr><td><a href=\"/completed/" + id + "\">" + id + "</a></td><td>" + escape(c.queue) + "</td><td>" +
         escape(c.kind) + "</td><td>" + escape(c.idempotency_key.value_or("")) + "</td><td>" +
         short_time(c.completed_at) + "</td><td class=\"n\">" + (c.attempt ? std::to_string(*c.attempt) : "–") +
         "</td><td class=\"n\">" + run_time_text(c) + "</td><td>" + escape(c.worker.value_or("")) + "</td></tr>";
  }
  b += "</tbody></table>";
  if (list.next_before) {
    auto pairs = completed_filter_pairs(f);
    pairs.emplace_back("before", std::to_string(*list.next_before));
    b += "<p><a href=\"/completed" + query_string(pairs) + "\" rel=\"next\">Older →</a></p>";
  }
  b += "</section>";
  return page;
}

Page completed_job_page(const Context& ctx, std::int64_t id) {
  const bool wanted = ctx.may_see_payloads();
  const bool allowed = wanted && payload_access(ctx.db, ctx.schema).outputs;
  CompletedJobFilter f;
  f.id = id;
  const CompletedJobPage found = list_completed_jobs(ctx.db, ctx.schema, f, 1, std::nullopt, allowed);
  Page page;
  if (found.jobs.empty()) {
    page.status = 404;
    page.title = "No such completed job";
    page.body = "<h1>No completed job " + std::to_string(id) +
                "</h1><p class=\"muted\">It may still be queued, have been dead-lettered, or have completed before "
                "the dedup window.</p><p><a href=\"/jobs/" +
                std::to_string(id) + "\">Job " + std::to_string(id) +
                "</a> · <a href=\"/dead-letters?replayed=1\">"
                "Dead letters</a></p>";
    return page;
  }
  const CompletedJob& c = found.jobs.front();
  page.title = "Completed job " + std::to_string(id);
  std::string& b = page.body;
  const auto row = [](std::string_view k, const std::string& v_html) {
    return "<tr><th>" + std::string(k) + "</th><td>" + v_html + "</td></tr>";
  };
  b = "<h1>Job " + std::to_string(id) +
      " <span class=\"badge completed\">completed</span></h1>"
      "<table class=\"fields\">";
  b += row("queue", escape(c.queue));
  b += row("kind", escape(c.kind));
  b += row("idempotency key", c.idempotency_key ? escape(*c.idempotency_key) : std::string("–"));
  b += row("completed", short_time(c.completed_at));
  b += row("attempt", c.attempt ? std::to_string(*c.attempt) : std::string("–"));
  b += row("run time", run_time_text(c));
  b += row("worker", escape(c.worker.value_or("–")));
  b += row("trace id", escape(c.trace_id.value_or("–")));
  b += "</table><h2>Output</h2>";
  if (!allowed) {
    b +=
        "<p class=\"muted\" id=\"output\">output hidden" +
        std::string(wanted ? " (this console's database role may not read outputs)" : " (viewers do not see outputs)") +
        "</p>";
  } else if (c.output_text) {
    b += "<pre class=\"payload\" id=\"output\">" + escape(*c.output_text) + "</pre>";
  } else {
    b += "<p class=\"muted\" id=\"output\">none</p>";
  }
  b += "<p><a href=\"/completed\">Back to completed jobs</a></p>";
  return page;
}

}  // namespace oncely::web
