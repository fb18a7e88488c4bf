#pragma once
// Umbrella header: everything a user of oncely needs.
#include "oncely/admin.hpp"
#include "oncely/builtin_handlers.hpp"
#include "oncely/client.hpp"
#include "oncely/config.hpp"
#include "oncely/cron.hpp"
#include "oncely/database_url.hpp"
#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "oncely/job_context.hpp"
#include "oncely/runtime.hpp"
#include "oncely/stats.hpp"
#include "oncely/values.hpp"
