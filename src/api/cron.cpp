// list_cron(): the cron entries and their slots, for `oncely cron list`.

#include "oncely/cron.hpp"

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "scheduling/cron_plan.hpp"
#include "store/store.hpp"
#include "support/cron_config.hpp"
#include "support/db.hpp"

namespace oncely {
namespace {

std::optional<std::string> formatted(const std::optional<detail::cron::Instant>& t) {
  return t ? std::optional(detail::cron::format_utc(*t)) : std::nullopt;
}

// A fingerprint is "<schedule> <time zone>" (cron_plan.cpp): the zone is its last word.
std::pair<std::string, std::string> split_fingerprint(const std::string& fingerprint) {
  const auto space = fingerprint.rfind(' ');
  if (space == std::string::npos) return {fingerprint, ""};
  return {fingerprint.substr(0, space), fingerprint.substr(space + 1)};
}

// The next slot of a recorded schedule; none if it no longer parses (an older binary's).
std::optional<std::string> next_of(const std::string& schedule, const std::string& zone, detail::cron::Instant now) {
  try {
    const auto s = detail::cron::parse(schedule);
    return formatted(detail::cron::next_after(s, detail::cron::locate_zone(zone), now));
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

}  // namespace

std::string_view to_string(CronEntry::CatchUp catch_up) {
  switch (catch_up) {
    case CronEntry::CatchUp::none: return "none";
    case CronEntry::CatchUp::latest: return "latest";
    case CronEntry::CatchUp::all: return "all";
  }
  return "latest";  // the default, should an enum value ever come from outside the three
}

std::vector<CronEntryStatus> list_cron(const DatabaseUrl& url, std::string_view schema,
                                       const std::map<std::string, CronEntry>* entries) {
  const detail::Store store(schema);
  if (entries) detail::validate_cron_section(*entries, "/cron");
  std::vector<CronEntryStatus> out;
  try {
    auto conn = detail::connect(url);
    pqxx::read_transaction tx(*conn);
    if (entries) {
      std::vector<std::string> names;
      for (const auto& [name, entry] : *entries) names.push_back(name);
      if (names.empty()) return out;
      const detail::CronSlotsRead read = store.cron_slots.read(tx, names);
      std::size_t i = 0;
      for (const auto& [name, entry] : *entries) {
        const auto& row = read.rows.at(i++);
        CronEntryStatus s;
        s.name = name;
        s.schedule = entry.schedule;
        s.time_zone = entry.time_zone;
        s.catch_up = std::string(to_string(entry.catch_up));
        s.in_config = true;
        s.seen = row.covered_until.has_value();
        s.last_enqueued_slot = formatted(row.last_enqueued_slot);
        s.next_slot = next_of(entry.schedule, entry.time_zone, read.now);
        out.push_back(std::move(s));
      }
    } else {
      const detail::CronSlotsRead read = store.cron_slots.read_all(tx);
      for (const auto& row : read.rows) {
        CronEntryStatus s;
        s.name = row.name;
        std::tie(s.schedule, s.time_zone) = split_fingerprint(row.fingerprint);
        s.seen = true;
        s.last_enqueued_slot = formatted(row.last_enqueued_slot);
        s.next_slot = next_of(s.schedule, s.time_zone, read.now);
        out.push_back(std::move(s));
      }
    }
    tx.commit();
  } catch (const pqxx::failure& e) {
    throw DatabaseError("cron list failed: " + detail::one_line(url, e.what()));
  }
  return out;
}

}  // namespace oncely
