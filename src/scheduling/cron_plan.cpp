#include "scheduling/cron_plan.hpp"

namespace oncely::detail::cron {

CompiledEntry compile(const std::string& name, const CronEntry& entry) {
  CompiledEntry compiled;
  compiled.name = name;
  compiled.config = entry;
  compiled.schedule = parse(entry.schedule);
  compiled.zone = locate_zone(entry.time_zone);
  compiled.fingerprint = compiled.schedule.text + " " + entry.time_zone;
  return compiled;
}

Plan plan(const CompiledEntry& entry, const SlotRow& row, Instant now) {
  Plan p;
  p.next_slot = next_after(entry.schedule, entry.zone, now);
  p.covered_until = now;
  if (!row.covered_until) {
    p.write = true;
    return p;
  }
  const Instant covered = *row.covered_until;
  if (covered >= now) return p;
  auto catch_up = entry.config.catch_up;
  if (row.fingerprint != entry.fingerprint) catch_up = CronEntry::CatchUp::none;
  if (catch_up == CronEntry::CatchUp::all) {
    const Instant window_start =
        std::max(covered, now - std::chrono::duration_cast<std::chrono::milliseconds>(CronEntry::kCatchUpWindow));
    p.enqueue = slots_between(entry.schedule, entry.zone, window_start, now,
                              static_cast<std::size_t>(CronEntry::kCatchUpMaxSlots));
    p.write = !p.enqueue.empty();
    return p;
  }
  const auto newest = latest_in(entry.schedule, entry.zone, covered, now);
  if (!newest) return p;
  p.write = true;
  if (catch_up == CronEntry::CatchUp::latest || now - *newest <= kOnTime) {
    p.enqueue.push_back(*newest);
  }
  // Older due slots are skipped (not counted: that could walk a long history).
  p.skipped = p.enqueue.empty() || next_after(entry.schedule, entry.zone, covered) != newest;
  return p;
}

std::string job_key(const std::string& name, Instant slot) { return "cron:" + name + ":" + format_utc(slot); }

}  // namespace oncely::detail::cron
