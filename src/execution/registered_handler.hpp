#pragma once
// A handler as the runtime keeps it: the function and what it declared about its effects.

#include <map>
#include <string>

#include "oncely/values.hpp"

namespace oncely::detail {

struct RegisteredHandler {
  Handler run;
  HandlerOptions options;
};

using HandlerRegistry = std::map<std::string, RegisteredHandler>;

}  // namespace oncely::detail
