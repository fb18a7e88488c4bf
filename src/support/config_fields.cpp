#include "support/config_fields.hpp"

#include <cstdint>

#include "oncely/errors.hpp"

namespace oncely::detail {

int integer_in(const nlohmann::json& value, const std::string& path, int min, int max) {
  // is_number_integer() is false for booleans and for 2.5 (and for 2.0: the file must say 2).
  if (!value.is_number_integer()) throw ConfigError(path, "must be an integer");
  // A huge unsigned value would wrap when read as int64, so it is caught first.
  const bool too_large = value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max);
  if (too_large || value.get<std::int64_t>() < min || value.get<std::int64_t>() > max) {
    throw ConfigError(
        path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " + value.dump() + ")");
  }
  return value.get<int>();
}

}  // namespace oncely::detail
