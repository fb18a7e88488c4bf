#pragma once
// Umbrella header: everything a user of oncely needs.
#include "oncely/admin.hpp"
#include "oncely/client.hpp"
#include "oncely/database_url.hpp"
#include "oncely/errors.hpp"
