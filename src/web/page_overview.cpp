// The overview: every queue's numbers (collect_stats, what `oncely stats` prints) and the
// outcome charts of the last hour and day (outcome_history over job_stats), drawn here as
// inline SVG: no script, no style attribute (the CSP allows neither inline).

#include <algorithm>
#include <cstdio>

#include "oncely/stats.hpp"
#include "web/console.hpp"
#include "web/html.hpp"
#include "web/pages.hpp"
#include "web/stats_snapshot.hpp"

namespace oncely::web {
namespace {

struct Series {
  std::string_view name;
  std::string_view css_class;
  long OutcomeBucket::*field;
};
constexpr Series kSeries[] = {
    {"completed", "s-completed", &OutcomeBucket::completed},
    {"retried", "s-retried", &OutcomeBucket::retried},
    {"dead-lettered", "s-dead", &OutcomeBucket::dead_lettered},
    {"deduplicated", "s-dedup", &OutcomeBucket::deduplicated},
    {"crashed", "s-crashed", &OutcomeBucket::crashed},
};

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", v);
  return buffer;
}

/// A line per outcome over the buckets; the y axis from 0 to the largest count.
std::string chart(const std::vector<OutcomeBucket>& buckets, std::string_view title, std::string_view per) {
  constexpr double kWidth = 600, kHeight = 160, kLeft = 40, kBottom = 20, kTop = 8;
  long peak = 0;
  long totals[std::size(kSeries)] = {};
  for (const auto& b : buckets) {
    for (std::size_t s = 0; s < std::size(kSeries); ++s) {
      peak = std::max(peak, b.*kSeries[s].field);
      totals[s] += b.*kSeries[s].field;
    }
  }
  const double top = static_cast<double>(std::max(peak, 1L));
  const double step = buckets.size() > 1 ? (kWidth - kLeft) / static_cast<double>(buckets.size() - 1) : 0;
  const auto y = [&](long v) { return kTop + (kHeight - kTop - kBottom) * (1 - static_cast<double>(v) / top); };
  std::string out = "<figure class=\"chart\"><figcaption>" + escape(title) + " <span class=\"muted\">(" + escape(per) +
                    ", peak " + std::to_string(peak) + ")</span></figcaption>";
  out += "<svg viewBox=\"0 0 " + number(kWidth) + " " + number(kHeight) + "\" role=\"img\" aria-label=\"" +
         escape(title) + "\">";
  out += "<line class=\"axis\" x1=\"" + number(kLeft) + "\" y1=\"" + number(y(0)) + "\" x2=\"" + number(kWidth) +
         "\" y2=\"" + number(y(0)) + "\"/>";
  out += "<text class=\"tick\" x=\"2\" y=\"" + number(y(peak) + 4) + "\">" + std::to_string(peak) + "</text>";
  out += "<text class=\"tick\" x=\"2\" y=\"" + number(y(0)) + "\">0</text>";
  if (!buckets.empty()) {
    out += "<text class=\"tick\" x=\"" + number(kLeft) + "\" y=\"" + number(kHeight - 4) + "\">" +
           short_time(buckets.front().start).substr(11, 5) + "</text>";
    out += "<text class=\"tick end\" x=\"" + number(kWidth) + "\" y=\"" + number(kHeight - 4) + "\">" +
           short_time(buckets.back().start).substr(11, 5) + "</text>";
  }
  for (const Series& s : kSeries) {
    std::string points;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      points += number(kLeft + step * static_cast<double>(i)) + "," + number(y(buckets[i].*s.field)) + " ";
    }
    out += "<polyline class=\"" + std::string(s.css_class) + "\" points=\"" + points + "\"/>";
  }
  out += "</svg><ul class=\"legend\">";
  for (std::size_t s = 0; s < std::size(kSeries); ++s) {
    out += "<li class=\"" + std::string(kSeries[s].css_class) + "\">" + std::string(kSeries[s].name) + " " +
           std::to_string(totals[s]) + "</li>";
  }
  return out + "</ul></figure>";
}

// A queue with limits across workers: what they hold back now.
std::string limits_state(const QueueStats& q) {
  if (!q.held_by_limit) return "";
  return " <span class=\"badge limited\">limits</span> " + held_by_limits_line(q);
}

std::string queue_link(const std::string& queue) {
  return "<a href=\"/jobs" + query_string({{"queue", queue}}) + "\">" + escape(queue) + "</a>";
}

}  // namespace

Page overview_page(const Context& ctx) {
  const auto queue = ctx.param("queue");
  // The shared snapshot (web/stats_snapshot.hpp): one count of the jobs per refresh
  // interval, whoever asks; one queue's view is cut from it.
  const StatsSnapshot::View snapshot = ctx.stats.get();
  const Stats stats = queue ? stats_for_queue(*snapshot.stats, *queue) : *snapshot.stats;
  const auto hour = outcome_history(ctx.db, ctx.schema, queue, 60, 1);
  const auto day = outcome_history(ctx.db, ctx.schema, queue, 96, 15);
  Page page;
  page.title = "Overview";
  std::string& b = page.body;
  b = "<h1>Overview" + (queue ? " of queue " + escape(*queue) : std::string()) + "</h1>";
  b += "<section data-live=\"queues\"><table class=\"grid\"><thead><tr><th>queue</th><th>depth</th><th>ready</th>"
       "<th>scheduled</th><th>waiting</th><th>retrying</th><th>running</th><th>oldest ready</th><th>completed/min</th>"
       "<th>retried/min</th><th>dead-lettered/min</th><th>deduplicated/min</th><th>crashed/min</th>"
       "<th>failure rate 5m</th><th>dead letters</th><th>growth/min 15m</th><th>state</th></tr></thead><tbody>";
  if (stats.queues.empty()) b += "<tr><td colspan=\"17\" class=\"muted\">no queues yet</td></tr>";
  for (const QueueStats& q : stats.queues) {
    const OutcomeRates& r = q.per_minute_5m;
    b += "<tr><td>" + queue_link(q.queue) + "</td><td class=\"n\">" + std::to_string(q.depth) +
         "</td><td class=\"n\">" + std::to_string(q.ready) + "</td><td class=\"n\">" + std::to_string(q.scheduled) +
         "</td><td class=\"n\">" + std::to_string(q.waiting) + "</td><td class=\"n\">" + std::to_string(q.retrying) +
         "</td><td class=\"n\">" + std::to_string(q.in_flight) + "</td><td class=\"n\">" +
         (q.oldest_ready_age_s ? age(*q.oldest_ready_age_s) : std::string("–")) + "</td><td class=\"n\">" +
         rate(r.completed) + "</td><td class=\"n\">" + rate(r.retried) + "</td><td class=\"n\">" +
         rate(r.dead_lettered) + "</td><td class=\"n\">" + rate(r.deduplicated) + "</td><td class=\"n\">" +
         rate(r.crashed) + "</td><td class=\"n\">" +
         (q.failure_rate_5m ? percent(*q.failure_rate_5m) : std::string("–")) +
         "</td><td class=\"n\"><a href=\"/dead-letters" + query_string({{"queue", q.queue}}) + "\">" +
         std::to_string(q.dead_letters) + "</a></td><td class=\"n\">" + rate(q.dead_letters_per_minute_15m) +
         "</td><td>" +
         (q.paused ? "<span class=\"badge paused\">paused</span>" +
                         (q.pause_reason ? " " + escape(*q.pause_reason) : std::string())
                   : std::string("<span class=\"badge\">active</span>")) +
         limits_state(q) + "</td></tr>";
  }
  b += "</tbody></table><p class=\"muted\">Rates are per minute over the last 5 minutes; " +
       std::to_string(stats.workers.size()) + " worker(s) registered.</p></section>";
  // Its own live section, so that the queues' section changes only when a number does.
  b += "<section data-live=\"counted\"><p class=\"muted\" data-age-ms=\"" + std::to_string(snapshot.age.count()) +
       "\">Counted " + std::to_string(snapshot.age.count() / 1000) +
       " s ago: one count for every viewer, at most every " +
       std::to_string(snapshot_fresh_for(ctx.options.refresh_seconds).count()) + " s.</p></section>";
  b += "<section data-live=\"charts\" class=\"charts\">" + chart(hour, "Last hour", "per minute") +
       chart(day, "Last day", "per 15 minutes") + "</section>";
  return page;
}

}  // namespace oncely::web
