#include "store/store.hpp"

#include "oncely/admin.hpp"
#include "support/pooler.hpp"

namespace oncely::detail {

// ONCELY_PREPARED_STATEMENTS=0 turns them off here for every Store of the process: one
// switch for the Runtime, the Client and every command, whatever their own setting.
Store::Store(std::string_view schema, bool prepared)
    : statements_((validate_schema_name(schema), schema), prepared_statements_allowed(prepared)) {}

}  // namespace oncely::detail
