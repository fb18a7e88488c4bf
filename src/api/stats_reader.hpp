#pragma once
// Reading the operator's view of the queues on a connection the caller owns (the
// heartbeat's, for the metrics; collect_stats() opens one of its own).

#include <optional>
#include <string>

#include <pqxx/connection>

#include "oncely/stats.hpp"
#include "store/store.hpp"

namespace oncely::detail {

/// Every number of Stats in one read-only snapshot. Throws pqxx exceptions.
Stats read_stats(pqxx::connection& conn, const Store& store, const std::optional<std::string>& queue = std::nullopt);

}  // namespace oncely::detail
