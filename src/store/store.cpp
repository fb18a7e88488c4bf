#include "store/store.hpp"

#include "oncely/admin.hpp"

namespace oncely::detail {

Store::Store(std::string_view schema, bool prepared) : statements_((validate_schema_name(schema), schema), prepared) {}

}  // namespace oncely::detail
