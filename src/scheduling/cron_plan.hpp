#pragma once
// What the cron scheduler does for one entry at one moment, decided without I/O: given the
// entry, its shared row in cron_slots (as last read) and the database's clock, which slots
// to enqueue, how far the row moves, and when the next slot falls due.

#include <optional>
#include <string>
#include <vector>

#include "oncely/config.hpp"
#include "support/cron_expression.hpp"

namespace oncely::detail::cron {

/// An entry of the "cron" config with its schedule parsed and zone found.
struct CompiledEntry {
  std::string name;
  CronEntry config;
  Schedule schedule;
  const date::time_zone* zone = nullptr;
  /// Schedule and zone as one string: stored with the row, a different one means the
  /// entry's schedule changed.
  std::string fingerprint;
};

/// Throws ConfigError (empty path) like parse() and locate_zone().
CompiledEntry compile(const std::string& name, const CronEntry& entry);

/// The entry's row in cron_slots; covered_until unset when there is none yet.
struct SlotRow {
  std::optional<Instant> covered_until;
  std::string fingerprint;
};

struct Plan {
  bool write = false;                ///< run the advancing statement
  Instant covered_until{};           ///< where it moves the row (the database's now)
  std::vector<Instant> enqueue;      ///< one job each, oldest first
  bool skipped = false;              ///< due slots were left out by catch_up
  std::optional<Instant> next_slot;  ///< the first slot after now
};

/// A slot at most this late is on time: catch_up "none" (and a changed schedule) still runs it.
inline constexpr std::chrono::milliseconds kOnTime{std::chrono::seconds(60)};

/// The decision for `entry` at the database time `now`:
/// - no row yet: a new entry; the row starts at now (nothing is caught up from before).
/// - a different fingerprint: the schedule changed; as catch_up "none" this once.
/// - otherwise the slots in (covered_until, now] by catch_up: none enqueues the newest if it
///   is on time; latest the newest; all each of them within kCatchUpWindow, the newest
///   kCatchUpMaxSlots.
/// Nothing is written while no slot is due.
Plan plan(const CompiledEntry& entry, const SlotRow& row, Instant now);

/// The job key of a slot: "cron:<name>:<slot as UTC ISO-8601>".
std::string job_key(const std::string& name, Instant slot);

}  // namespace oncely::detail::cron
