// The dead-letter review: groups by error pattern (folded as `dlq list --group-by error`
// folds them), the list by keyset pages, one dead letter whole, and replay/purge of a
// selection or a group: a confirmation page shows the dry run's count, the confirmation
// posts the filter and that count, and nothing happens if the filter selects another
// number by then (replay_dead_letters_confirmed / purge_dead_letters_confirmed).

#include <nlohmann/json.hpp>

#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "support/duration.hpp"
#include "web/console.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"

namespace oncely::web {
namespace {

std::optional<std::chrono::milliseconds> duration_param(const Context& ctx, const char* name) {
  const auto v = ctx.param(name);
  if (!v) return std::nullopt;
  try {
    return detail::parse_duration(*v);
  } catch (const ConfigError& e) {
    throw BadRequest(std::string(name) + ": " + e.reason());
  }
}

std::string duration_text(const std::optional<std::chrono::milliseconds>& d) {
  return d ? detail::format_duration(*d) : std::string();
}

/// "queue=a kind=b ..." for the confirmation and the audit log.
std::string describe(const DeadLetterFilter& f) {
  std::string out;
  for (const auto& [k, v] : dead_letter_filter_pairs(f)) {
    if (v && k != "replayed") out += (out.empty() ? "" : " ") + k + "=" + *v;
  }
  return out.empty() ? "all" : out;
}

std::string filter_hidden_fields(const DeadLetterFilter& f) {
  std::string out;
  for (const auto& [k, v] : dead_letter_filter_pairs(f)) {
    if (v) out += hidden(k, *v);
  }
  return out;
}

std::string pretty_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? text : j.dump(2);
}

std::string confirm_form(const Context& ctx, std::string_view action, const DeadLetterFilter& f, long count) {
  return "<form method=\"post\" action=\"/dead-letters/" + std::string(action) + "\" class=\"confirm\">" +
         ctx.csrf_field() + filter_hidden_fields(f) + hidden("expected", std::to_string(count)) +
         "<button type=\"submit\" class=\"danger\" data-action=\"confirm\">" +
         (action == "replay" ? "Replay " : "Purge ") + std::to_string(count) + " dead letter" +
         (count == 1 ? "" : "s") + "</button> <a href=\"/dead-letters\">Cancel</a></form>";
}

long expected_of(const Context& ctx) {
  const auto v = ctx.param("expected");
  if (!v) throw BadRequest("expected: missing (confirm from the confirmation page)");
  if (*v == "0") return 0;
  return static_cast<long>(id_of(*v, "expected"));
}

}  // namespace

DeadLetterFilter dead_letter_filter_of(const Context& ctx) {
  DeadLetterFilter f;
  for (const auto& id : ctx.params("id")) f.ids.push_back(id_of(id, "id"));
  f.queue = ctx.param("queue");
  f.kind = ctx.param("kind");
  f.error_class = ctx.param("class");
  f.error_text = ctx.param("error");
  f.error_pattern = ctx.param("pattern");
  f.older_than = duration_param(ctx, "older_than");
  f.newer_than = duration_param(ctx, "newer_than");
  f.include_replayed = ctx.param("replayed") == "1" || !f.ids.empty();
  f.all = ctx.param("all") == "1";
  return f;
}

std::vector<std::pair<std::string, std::optional<std::string>>> dead_letter_filter_pairs(const DeadLetterFilter& f) {
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  for (const auto id : f.ids) out.emplace_back("id", std::to_string(id));
  out.emplace_back("queue", f.queue);
  out.emplace_back("kind", f.kind);
  out.emplace_back("class", f.error_class);
  out.emplace_back("error", f.error_text);
  out.emplace_back("pattern", f.error_pattern);
  if (f.older_than) out.emplace_back("older_than", duration_text(f.older_than));
  if (f.newer_than) out.emplace_back("newer_than", duration_text(f.newer_than));
  if (f.include_replayed && f.ids.empty()) out.emplace_back("replayed", "1");
  if (f.all && f.empty()) out.emplace_back("all", "1");
  return out;
}

Page dead_letters_page(const Context& ctx) {
  DeadLetterFilter f = dead_letter_filter_of(ctx);
  DeadLetterPageOptions options;
  if (const auto at = ctx.param("after_at")) {
    options.after = DeadLetterCursor{*at, id_of(ctx.param("after_id").value_or(""), "after_id")};
  }
  const DeadLetterGroups groups = group_dead_letters(ctx.db, ctx.schema, f, DeadLetterGrouping::error, 50);
  const DeadLetterPage list = page_dead_letters(ctx.db, ctx.schema, f, options);
  const auto pairs = dead_letter_filter_pairs(f);
  const auto with = [&](std::vector<std::pair<std::string, std::optional<std::string>>> extra) {
    auto all = pairs;
    for (auto& e : extra) {
      std::erase_if(all, [&](const auto& p) { return p.first == e.first; });
      all.push_back(std::move(e));
    }
    return query_string(all);
  };

  Page page;
  page.title = "Dead letters";
  std::string& b = page.body;
  b = "<h1>Dead letters</h1>";
  const auto value = [](const std::optional<std::string>& v) { return escape(v.value_or("")); };
  b += "<form method=\"get\" action=\"/dead-letters\" class=\"filters\">"
       "<label>queue <input name=\"queue\" value=\"" +
       value(f.queue) +
       "\"></label>"
       "<label>kind <input name=\"kind\" value=\"" +
       value(f.kind) +
       "\"></label>"
       "<label>class <input name=\"class\" value=\"" +
       value(f.error_class) +
       "\"></label>"
       "<label>error contains <input name=\"error\" value=\"" +
       value(f.error_text) +
       "\"></label>"
       "<label>older than <input name=\"older_than\" size=\"5\" placeholder=\"1h\" value=\"" +
       escape(duration_text(f.older_than)) +
       "\"></label>"
       "<label>newer than <input name=\"newer_than\" size=\"5\" placeholder=\"7d\" value=\"" +
       escape(duration_text(f.newer_than)) + "\"></label>" +
       (f.error_pattern ? hidden("pattern", *f.error_pattern) : std::string()) +
       "<label><input type=\"checkbox\" name=\"replayed\" value=\"1\"" + (f.include_replayed ? " checked" : "") +
       "> include replayed</label><button type=\"submit\">Filter</button> <a href=\"/dead-letters\">clear</a></form>";
  if (f.error_pattern) {
    b += "<p>Pattern: <code class=\"error-text\">" + escape(*f.error_pattern) + "</code> <a href=\"/dead-letters" +
         with({{"pattern", std::nullopt}}) + "\">all patterns</a></p>";
  }

  b += "<section data-live=\"groups\"><h2>By error pattern</h2><table class=\"grid\"><thead><tr><th>pattern</th>"
       "<th>count</th><th>first</th><th>last</th><th>example</th>" +
       std::string(ctx.can_act() ? "<th>actions</th>" : "") + "</tr></thead><tbody>";
  if (groups.groups.empty()) b += "<tr><td colspan=\"6\" class=\"muted\">no dead letters</td></tr>";
  for (const DeadLetterGroup& g : groups.groups) {
    b += "<tr><td><a class=\"error-text\" href=\"/dead-letters" + with({{"pattern", g.key}}) + "\">" + escape(g.key) +
         "</a></td><td class=\"n\">" + std::to_string(g.count) + "</td><td>" + short_time(g.first_failed_at) +
         "</td><td>" + short_time(g.last_failed_at) + "</td><td><a href=\"/dead-letters/" +
         std::to_string(g.example_id) + "\">#" + std::to_string(g.example_id) + "</a></td>";
    if (ctx.can_act()) {
      b += "<td><a class=\"button\" href=\"/dead-letters/confirm" + with({{"pattern", g.key}, {"action", "replay"}}) +
           "\">Replay…</a> <a class=\"button danger\" href=\"/dead-letters/confirm" +
           with({{"pattern", g.key}, {"action", "purge"}}) + "\">Purge…</a></td>";
    }
    b += "</tr>";
  }
  b += "</tbody></table>";
  if (groups.total_groups > static_cast<long>(groups.groups.size())) {
    b += "<p class=\"muted\">" + std::to_string(groups.groups.size()) + " of " + std::to_string(groups.total_groups) +
         " patterns shown (the most frequent).</p>";
  }
  b += "</section>";
  if (ctx.can_act() && !list.dead_letters.empty()) {
    const auto everything = f.empty() ? with({{"all", "1"}}) : with({});
    const std::string sep = everything.empty() ? "?" : "&";
    b += "<p><a class=\"button\" href=\"/dead-letters/confirm" + everything + sep +
         "action=replay\">Replay everything this filter selects…</a> <a class=\"button danger\" "
         "href=\"/dead-letters/confirm" +
         everything + sep + "action=purge\">Purge everything this filter selects…</a></p>";
  }

  b += "<section data-live=\"list\"><h2>Newest first</h2>";
  if (ctx.can_act()) b += "<form method=\"get\" action=\"/dead-letters/confirm\" id=\"selection\">";
  b += "<table class=\"grid\"><thead><tr>" + std::string(ctx.can_act() ? "<th></th>" : "") +
       "<th>id</th><th>queue</th><th>kind</th><th>class</th><th>attempts</th><th>failed</th><th>last error</th>"
       "<th>replayed</th></tr></thead><tbody>";
  if (list.dead_letters.empty()) b += "<tr><td colspan=\"9\" class=\"muted\">none</td></tr>";
  for (const DeadLetter& d : list.dead_letters) {
    const std::string id = std::to_string(d.id);
    b += "<tr>";
    if (ctx.can_act()) {
      b += "<td><input type=\"checkbox\" name=\"id\" value=\"" + id + "\" aria-label=\"select " + id + "\"></td>";
    }
    b += "<td><a href=\"/dead-letters/" + id + "\">" + id + "</a></td><td>" + escape(d.queue) + "</td><td>" +
         escape(d.kind) + "</td><td>" + escape(d.error_class) + "</td><td class=\"n\">" + std::to_string(d.attempts) +
         "</td><td>" + short_time(d.failed_at) + "</td><td class=\"error-text\">" + escape(d.last_error.value_or("")) +
         "</td><td>" +
         (d.replayed_job_id ? "<a href=\"/jobs/" + std::to_string(*d.replayed_job_id) + "\">job " +
                                  std::to_string(*d.replayed_job_id) + "</a>"
                            : std::string("–")) +
         "</td></tr>";
  }
  b += "</tbody></table>";
  if (ctx.can_act()) {
    b += "<p><button type=\"submit\" name=\"action\" value=\"replay\">Replay selected…</button> "
         "<button type=\"submit\" name=\"action\" value=\"purge\" class=\"danger\">Purge selected…</button></p></form>";
  }
  if (list.next) {
    b += "<p><a href=\"/dead-letters" +
         with({{"after_at", list.next->failed_at}, {"after_id", std::to_string(list.next->id)}}) +
         "\" rel=\"next\">Next page →</a></p>";
  }
  b += "</section>";
  return page;
}

Page dead_letters_confirm_page(const Context& ctx) {
  const auto action = ctx.param("action").value_or("");
  if (action != "replay" && action != "purge") throw BadRequest("action: must be replay or purge");
  DeadLetterFilter f = dead_letter_filter_of(ctx);
  if (f.empty() && !f.all) throw BadRequest("choose dead letters or a filter first");
  DeadLetterFilter counted = f;
  counted.include_replayed = action == "purge";  // a purge deletes replayed ones too; a replay skips them
  const long n = count_dead_letters(ctx.db, ctx.schema, counted);
  Page page;
  page.title = action == "replay" ? "Replay dead letters" : "Purge dead letters";
  std::string& b = page.body;
  b = "<h1>" + escape(page.title) + "</h1><p>Selection: <code class=\"error-text\">" + escape(describe(f)) +
      "</code></p><p class=\"dry-run\">Dry run: this selects <strong data-count=\"" + std::to_string(n) + "\">" +
      std::to_string(n) + "</strong> dead letter" + (n == 1 ? "" : "s") +
      (action == "replay" ? " not replayed yet" : " (replayed or not)") + ".</p>";
  if (n == 0) {
    b += "<p class=\"message\">Nothing to " + action + ".</p><p><a href=\"/dead-letters\">Back</a></p>";
  } else if (!ctx.can_act()) {
    b += "<p class=\"message\">A viewer cannot " + action + ".</p>";
  } else {
    if (action == "replay") {
      b += "<p>Each becomes a new job (attempts 0, run now) in its own queue.</p>";
    } else {
      b += "<p class=\"warning\">Purged dead letters are deleted for good.</p>";
    }
    b += confirm_form(ctx, action, f, n);
  }
  return page;
}

Page dead_letters_action(const Context& ctx, std::string_view action) {
  const DeadLetterFilter f = dead_letter_filter_of(ctx);
  if (f.empty() && !f.all) throw BadRequest("choose dead letters or a filter first");
  const long expected = expected_of(ctx);
  Page page;
  page.title = action == "replay" ? "Replay" : "Purge";
  std::string& b = page.body;
  long selected = 0;
  bool done = false;
  if (action == "replay") {
    const ConfirmedReplay r = replay_dead_letters_confirmed(ctx.db, ctx.schema, f, expected);
    selected = r.selected;
    done = r.done;
    if (done) {
      ctx.audit("replay", static_cast<long>(r.result.replayed.size()), describe(f));
      b = "<h1>Replayed</h1><p class=\"result\" data-replayed=\"" + std::to_string(r.result.replayed.size()) +
          "\">Replayed " + std::to_string(r.result.replayed.size()) + " dead letter" +
          (r.result.replayed.size() == 1 ? "" : "s") + " as new jobs.</p>";
      long keyed_done = 0;
      for (const auto& x : r.result.replayed) keyed_done += x.key_processed ? 1 : 0;
      if (keyed_done > 0) {
        b += "<p class=\"warning\">" + std::to_string(keyed_done) +
             " of them have an idempotency key that was processed since: they will be skipped as duplicates.</p>";
      }
      if (!r.result.replayed.empty() && r.result.replayed.size() <= 20) {
        b += "<ul>";
        for (const auto& x : r.result.replayed) {
          b += "<li>dead letter " + std::to_string(x.dead_letter_id) + " → <a href=\"/jobs/" +
               std::to_string(x.job_id) + "\">job " + std::to_string(x.job_id) + "</a> in " + escape(x.queue) + "</li>";
        }
        b += "</ul>";
      }
    }
  } else {
    const ConfirmedPurge r = purge_dead_letters_confirmed(ctx.db, ctx.schema, f, expected);
    selected = r.selected;
    done = r.done;
    if (done) {
      ctx.audit("purge", r.purged, describe(f));
      b = "<h1>Purged</h1><p class=\"result\" data-purged=\"" + std::to_string(r.purged) + "\">Purged " +
          std::to_string(r.purged) + " dead letter" + (r.purged == 1 ? "" : "s") + ".</p>";
    }
  }
  if (!done) {
    page.status = 409;
    b = "<h1>The selection changed</h1><p class=\"message changed\">You were shown " + std::to_string(expected) +
        ", the selection now holds " + std::to_string(selected) + ". Nothing was " +
        (action == "replay" ? "replayed" : "purged") + ".</p>";
    if (selected > 0) b += "<p>Review and confirm again:</p>" + confirm_form(ctx, action, f, selected);
  }
  b += "<p><a href=\"/dead-letters\">Back to dead letters</a></p>";
  return page;
}

Page dead_letter_page(const Context& ctx, std::int64_t id) {
  const bool wanted = ctx.may_see_payloads();
  const bool allowed = wanted && payload_access(ctx.db, ctx.schema).dead_letters;
  const auto d = show_dead_letter(ctx.db, ctx.schema, id, allowed);
  Page page;
  if (!d) {
    page.status = 404;
    page.title = "No such dead letter";
    page.body = "<h1>No dead letter " + std::to_string(id) + "</h1><p><a href=\"/dead-letters\">Back</a></p>";
    return page;
  }
  page.title = "Dead letter " + std::to_string(id);
  std::string& b = page.body;
  const auto row = [](std::string_view k, const std::string& v_html) {
    return "<tr><th>" + std::string(k) + "</th><td>" + v_html + "</td></tr>";
  };
  b = "<h1>Dead letter " + std::to_string(id) + "</h1><section data-live=\"dead-letter\"><table class=\"fields\">";
  b += row("job", std::to_string(d->job_id));
  b += row("queue", escape(d->queue));
  b += row("kind", escape(d->kind));
  b += row("class", escape(d->error_class));
  b += row("attempts",
           std::to_string(d->attempts) + (d->max_attempts ? " of " + std::to_string(*d->max_attempts) : std::string()));
  b += row("priority", std::to_string(d->priority));
  b += row("idempotency key", d->idempotency_key ? escape(*d->idempotency_key) : std::string("–"));
  b += row("enqueued", short_time(d->created_at));
  b += row("failed", short_time(d->failed_at));
  b += row("replayed", d->replayed_at ? short_time(*d->replayed_at) + " as <a href=\"/jobs/" +
                                            std::to_string(d->replayed_job_id.value_or(0)) + "\">job " +
                                            std::to_string(d->replayed_job_id.value_or(0)) + "</a>"
                                      : std::string("not yet"));
  if (d->key_processed) {
    b += row("key",
             "<span class=\"warning\">processed since it failed: a replay would be skipped as a duplicate</span>");
  }
  b += "</table>";
  b += "<h2>Last error</h2><pre class=\"error-text\" id=\"last-error\">" + escape(d->last_error.value_or("(none)")) +
       "</pre>";
  b += "<h2>Payload</h2>";
  if (allowed) {
    b += "<pre class=\"payload\" id=\"payload\">" + escape(pretty_json(d->payload_text)) + "</pre>";
  } else {
    b += "<p class=\"muted\" id=\"payload\">payload hidden" +
         std::string(wanted ? " (this console's database role may not read payloads)"
                            : " (viewers do not see payloads)") +
         "</p>";
  }
  b += "<h2>Attempts</h2><table class=\"grid\"><thead><tr><th>attempt</th><th>at</th><th>class</th><th>error</th>"
       "</tr></thead><tbody>";
  if (d->errors.is_array()) {
    for (const auto& e : d->errors) {
      const auto text = [&](const char* k) {
        return e.contains(k) ? (e[k].is_string() ? e[k].get<std::string>() : e[k].dump()) : std::string();
      };
      b += "<tr><td class=\"n\">" + escape(text("attempt")) + "</td><td>" + short_time(text("at")) + "</td><td>" +
           escape(text("class")) + "</td><td><pre class=\"error-text\">" + escape(text("error")) + "</pre>" +
           (e.contains("stack")
                ? "<details><summary>stack</summary><pre>" + escape(e["stack"].dump(2)) + "</pre></details>"
                : std::string()) +
           "</td></tr>";
    }
  }
  b += "</tbody></table>";
  if (!d->error_detail.is_null()) {
    b += "<h2>Detail</h2><p class=\"muted\">exception type, stderr tail, HTTP excerpt, stack trace, as the "
         "handler reported them</p><pre class=\"detail\">" +
         escape(d->error_detail.dump(2)) + "</pre>";
  }
  b += "</section>";
  if (ctx.can_act()) {
    b += "<p><a class=\"button\" href=\"/dead-letters/confirm?id=" + std::to_string(id) +
         "&action=replay\">Replay…</a> <a class=\"button danger\" href=\"/dead-letters/confirm?id=" +
         std::to_string(id) + "&action=purge\">Purge…</a></p>";
  }
  b += "<p><a href=\"/dead-letters\">Back to dead letters</a></p>";
  return page;
}

}  // namespace oncely::web
