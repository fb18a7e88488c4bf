// Queues (pause, resume), workers and cron entries: list_queues, pause_queue, resume_queue,
// list_workers and list_cron, as `oncely queue`, `stats` and `cron list` read them.

#include "oncely/cron.hpp"
#include "oncely/queues.hpp"
#include "oncely/stats.hpp"
#include "oncely/workers.hpp"
#include "web/console.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"

namespace oncely::web {

Page queues_page(const Context& ctx) {
  const auto queues = list_queues(ctx.db, ctx.schema);
  Page page;
  page.title = "Queues";
  std::string& b = page.body;
  b = "<h1>Queues</h1><section data-live=\"queues\"><table class=\"grid\"><thead><tr><th>queue</th><th>jobs</th>"
      "<th>served</th><th>state</th><th>paused by</th>" +
      std::string(ctx.can_act() ? "<th>actions</th>" : "") + "</tr></thead><tbody>";
  if (queues.empty()) b += "<tr><td colspan=\"6\" class=\"muted\">no queues yet</td></tr>";
  for (const QueueInfo& q : queues) {
    b += "<tr><td><a href=\"/" + query_string({{"queue", q.queue}}) + "\">" + escape(q.queue) + "</a></td><td>" +
         (q.has_jobs ? "yes" : "no") + "</td><td>" + (q.served ? "yes" : "no") + "</td><td>";
    if (q.pause) {
      b += "<span class=\"badge paused\">paused</span> for " + age(q.pause->paused_for_s) +
           (q.pause->reason ? ": " + escape(*q.pause->reason) : std::string()) + "</td><td>" +
           escape(q.pause->paused_by);
    } else {
      b += "<span class=\"badge\">active</span></td><td>–";
    }
    b += "</td>";
    if (ctx.can_act()) {
      b += "<td><form method=\"post\" action=\"/queues/" + std::string(q.pause ? "resume" : "pause") +
           "\" class=\"inline\">" + ctx.csrf_field() + hidden("queue", q.queue);
      if (!q.pause) b += "<input name=\"reason\" placeholder=\"reason\" aria-label=\"reason\">";
      b += "<button type=\"submit\">" + std::string(q.pause ? "Resume" : "Pause") + "</button></form></td>";
    }
    b += "</tr>";
  }
  b += "</tbody></table></section>";
  if (ctx.can_act()) {
    b += "<h2>Pause a queue by name</h2><form method=\"post\" action=\"/queues/pause\" class=\"inline\" "
         "id=\"pause-by-name\">" +
         ctx.csrf_field() +
         "<input name=\"queue\" placeholder=\"queue\" aria-label=\"queue\" required><input name=\"reason\" "
         "placeholder=\"reason\" aria-label=\"reason\"><button type=\"submit\">Pause</button></form>";
  }
  return page;
}

Page queue_action(const Context& ctx, std::string_view action) {
  const auto queue = ctx.param("queue");
  if (!queue) throw BadRequest("queue: missing");
  Page page;
  if (action == "pause") {
    const PauseResult r = pause_queue(ctx.db, ctx.schema, *queue, ctx.param("reason"));
    ctx.audit("pause", r.newly ? 1 : 0,
              "queue=" + *queue + (ctx.param("reason") ? " reason=" + *ctx.param("reason") : ""));
    page.title = "Paused";
    page.body = "<h1>Queue " + escape(*queue) + " paused</h1><p class=\"result\">" +
                (r.newly ? std::string("Workers stop claiming from it within a second; running jobs finish.")
                         : "It was paused already (since " + short_time(r.pause.paused_at) + ").") +
                "</p>";
  } else {
    const auto ended = resume_queue(ctx.db, ctx.schema, *queue);
    ctx.audit("resume", ended ? 1 : 0, "queue=" + *queue);
    page.title = "Resumed";
    page.body = "<h1>Queue " + escape(*queue) + (ended ? " resumed" : " was not paused") + "</h1>";
  }
  page.body += "<p><a href=\"/queues\">Back to queues</a></p>";
  return page;
}

Page workers_page(const Context& ctx) {
  const auto workers = list_workers(ctx.db, ctx.schema);
  Page page;
  page.title = "Workers";
  std::string& b = page.body;
  b = "<h1>Workers</h1><section data-live=\"workers\"><table class=\"grid\"><thead><tr><th>id</th><th>host</th>"
      "<th>pid</th><th>queues</th><th>started</th><th>heartbeat</th><th>in flight</th></tr></thead><tbody>";
  if (workers.empty()) b += "<tr><td colspan=\"7\" class=\"muted\">no worker registered</td></tr>";
  for (const WorkerInfo& w : workers) {
    std::string queues;
    for (const auto& q : w.queues) queues += (queues.empty() ? "" : ", ") + escape(q);
    b += "<tr><td>" + std::to_string(w.id) + "</td><td>" + escape(w.host) + "</td><td class=\"n\">" +
         std::to_string(w.pid) + "</td><td>" + queues + "</td><td>" + short_time(w.started_at) + "</td><td>" +
         age(w.heartbeat_age_s) + " ago</td><td class=\"n\">" + std::to_string(w.jobs_in_flight) + "</td></tr>";
  }
  b += "</tbody></table></section>";
  return page;
}

Page cron_page(const Context& ctx) {
  const auto entries = list_cron(ctx.db, ctx.schema, nullptr);
  Page page;
  page.title = "Cron";
  std::string& b = page.body;
  b = "<h1>Cron</h1><p class=\"muted\">Every entry a worker has carried, its schedule as last recorded.</p>"
      "<section data-live=\"cron\"><table class=\"grid\"><thead><tr><th>name</th><th>schedule</th><th>time zone</th>"
      "<th>last slot</th><th>next slot</th></tr></thead><tbody>";
  if (entries.empty()) b += "<tr><td colspan=\"5\" class=\"muted\">no cron entries</td></tr>";
  for (const CronEntryStatus& e : entries) {
    b += "<tr><td>" + escape(e.name) + "</td><td><code>" + escape(e.schedule) + "</code></td><td>" +
         escape(e.time_zone) + "</td><td>" + (e.last_enqueued_slot ? short_time(*e.last_enqueued_slot) : "–") +
         "</td><td>" + (e.next_slot ? short_time(*e.next_slot) : "–") + "</td></tr>";
  }
  b += "</tbody></table></section>";
  return page;
}

}  // namespace oncely::web
