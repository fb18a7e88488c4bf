#pragma once
// The registered workers, read alone: what Stats::workers holds, without the queues'
// numbers (which count every job): the console's workers page.

#include <string_view>
#include <vector>

#include "oncely/database_url.hpp"
#include "oncely/records.hpp"

namespace oncely {

/// Every registered worker, by id. Throws DatabaseError.
std::vector<WorkerInfo> list_workers(const DatabaseUrl& url, std::string_view schema);

}  // namespace oncely
