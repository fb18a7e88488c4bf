#pragma once
// The migrations/*.sql files, compiled into the binary by cmake/EmbedSql.cmake.

#include <string_view>
#include <vector>

namespace oncely::detail {

struct EmbeddedMigration {
  int version;            // NNNN of NNNN_name.sql
  std::string_view name;  // name of NNNN_name.sql
  std::string_view sql;   // schema written as :ONCELY_SCHEMA
};

/// All embedded migrations, ascending by version.
const std::vector<EmbeddedMigration>& embedded_migrations();

}  // namespace oncely::detail
