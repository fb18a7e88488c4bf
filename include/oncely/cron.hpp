#pragma once
// Periodic jobs, the operator's view: each cron entry, the newest slot it enqueued and the
// next one, by the database's clock (`oncely cron list`).

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oncely/config.hpp"
#include "oncely/database_url.hpp"

namespace oncely {

/// "none", "latest", "all": the catch_up policy as the configuration spells it.
[[nodiscard]] std::string_view to_string(CronEntry::CatchUp catch_up);

struct CronEntryStatus {
  std::string name;
  std::string schedule;  ///< as configured (or as last recorded, for an entry not in the config)
  std::string time_zone;
  std::optional<std::string> catch_up;            ///< "none", "latest", "all"; unset without a config
  bool in_config = false;                         ///< listed in the configuration given
  bool seen = false;                              ///< a worker has carried it (it has a row in cron_slots)
  std::optional<std::string> last_enqueued_slot;  ///< ISO 8601 UTC
  std::optional<std::string> next_slot;           ///< after the database's now; ISO 8601 UTC
};

/// With `entries` (a config's "cron"): those entries, by name, with what the database
/// holds for them. Without: every entry any worker has carried, its schedule as last
/// recorded. Throws DatabaseError when the database cannot be read, ConfigError for a bad
/// schema name or entry.
std::vector<CronEntryStatus> list_cron(const DatabaseUrl& url, std::string_view schema,
                                       const std::map<std::string, CronEntry>* entries);

}  // namespace oncely
