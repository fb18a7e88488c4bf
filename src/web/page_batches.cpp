// The batches pages: every batch with its progress, and one batch with its callbacks.
#include <string>

#include "oncely/batches.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"

namespace oncely::web {

namespace {

std::string progress(const BatchStatus& b) {
  const std::string settled = std::to_string(b.completed + b.dead);
  const std::string total = std::to_string(b.total);
  return "<progress max=\"" + total + "\" value=\"" + settled + "\">" + settled + "/" + total + "</progress> " +
         settled + "/" + total;
}

std::string state_badge(const BatchStatus& b) {
  const std::string state(b.state());
  return "<span class=\"badge " + state + "\">" + state + "</span>";
}

std::string callback_links(const std::vector<std::int64_t>& ids) { return ids.empty() ? "–" : job_links(ids); }

}  // namespace

Page batches_page(const Context& ctx) {
  ListBatchesOptions options;
  options.unfinished = ctx.param("unfinished") == "1";
  if (const auto before = ctx.param("before")) options.before_id = id_of(*before, "before");
  const auto batches = list_batches(ctx.db, ctx.schema, options);
  Page page;
  page.title = "Batches";
  std::string& b = page.body;
  b = std::string("<h1>Batches</h1><p>") +
      (options.unfinished ? "<a href=\"/batches\">all</a> · unfinished"
                          : "all · <a href=\"/batches?unfinished=1\">unfinished</a>") +
      "</p><section data-live=\"batches\"><table class=\"grid\"><thead><tr><th>id</th><th>state</th>"
      "<th>settled</th><th>completed</th><th>dead</th><th>waiting</th><th>opened</th><th>callback jobs</th></tr>"
      "</thead><tbody>";
  if (batches.empty()) b += "<tr><td colspan=\"8\" class=\"muted\">no batches</td></tr>";
  for (const BatchStatus& s : batches) {
    const std::string id = std::to_string(s.id);
    b += "<tr><td><a href=\"/batches/" + id + "\">" + id + "</a></td><td>" + state_badge(s) + "</td><td>" +
         progress(s) + "</td><td class=\"n\">" + std::to_string(s.completed) + "</td><td class=\"n\">" +
         std::to_string(s.dead) + "</td><td class=\"n\">" + std::to_string(s.waiting) + "</td><td>" +
         short_time(s.created_at) + "</td><td>" + callback_links(s.callback_job_ids) + "</td></tr>";
  }
  b += "</tbody></table>";
  if (batches.size() == static_cast<std::size_t>(options.limit)) {
    b += "<p><a rel=\"next\" href=\"/batches" +
         query_string({{"unfinished", options.unfinished ? std::optional<std::string>("1") : std::nullopt},
                       {"before", std::to_string(batches.back().id)}}) +
         "\">Next page →</a></p>";
  }
  b += "</section>";
  return page;
}

Page batch_page(const Context& ctx, std::int64_t id) {
  const auto s = find_batch(ctx.db, ctx.schema, id, ctx.may_see_payloads());
  Page page;
  if (!s) {
    page.status = 404;
    page.title = "No such batch";
    page.body = "<h1>No batch " + std::to_string(id) + "</h1><p><a href=\"/batches\">Batches</a></p>";
    return page;
  }
  const std::string sid = std::to_string(s->id);
  page.title = "Batch " + sid;
  std::string& b = page.body;
  const auto row = [](std::string_view name, const std::string& html) {
    return "<tr><th>" + std::string(name) + "</th><td>" + html + "</td></tr>";
  };
  b = "<h1>Batch " + sid + " " + state_badge(*s) + "</h1><section data-live=\"batch\"><table class=\"fields\">";
  b += row("progress", progress(*s) + " settled");
  b += row("members", std::to_string(s->total) + " (<a href=\"/jobs?batch=" + sid + "\">" +
                          std::to_string(s->pending()) + " pending</a>, of which " + std::to_string(s->waiting) +
                          " waiting for parents)");
  b += row("completed", std::to_string(s->completed));
  b += row("dead", std::to_string(s->dead) + " (failed, cancelled or dependency_failed)");
  b += row("opened", short_time(s->created_at) + " by " + escape(s->created_by));
  b += row("closed", s->closed_at ? short_time(*s->closed_at) : "not yet: members may still join");
  b += row("finished", s->finished_at ? short_time(*s->finished_at) : "–");
  b += row("callback jobs", callback_links(s->callback_job_ids));
  // A callback's description holds a payload: shown to those who may see payloads.
  for (const auto& [name, description] :
       {std::pair{"on_success", s->on_success}, std::pair{"on_failure", s->on_failure},
        std::pair{"on_finish", s->on_finish}}) {
    b += row(name, !s->callbacks_read ? "<span class=\"muted\">hidden (a payload)</span>"
                   : description      ? "<code>" + escape(*description) + "</code>"
                                      : "–");
  }
  b += "</table></section>";
  return page;
}

}  // namespace oncely::web
