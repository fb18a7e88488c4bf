cmake_minimum_required(VERSION 3.25)
# Build-time script (cmake -P): embeds every migrations/NNNN_name.sql into a C++ source.
#   -DMIGRATIONS_DIR=<dir> -DOUTPUT=<file.cpp>
# The directory is globbed here (lists do not survive -D well). The build fails on a badly
# named file, a duplicate version, or a file that contains the raw-string delimiter.
file(GLOB sql_files LIST_DIRECTORIES false "${MIGRATIONS_DIR}/*.sql")
list(SORT sql_files)
set(entries "")
set(seen_versions "")
foreach(path IN LISTS sql_files)
  get_filename_component(file_name "${path}" NAME)
  if(NOT file_name MATCHES "^([0-9][0-9][0-9][0-9])_([a-z0-9_]+)\\.sql$")
    message(FATAL_ERROR "migration file '${file_name}' is not named NNNN_lower_snake.sql")
  endif()
  math(EXPR version "${CMAKE_MATCH_1}")  # drops leading zeros
  set(name "${CMAKE_MATCH_2}")
  if(version IN_LIST seen_versions)
    message(FATAL_ERROR "migration version ${version} appears twice")
  endif()
  list(APPEND seen_versions ${version})
  file(READ "${path}" sql)
  string(FIND "${sql}" ")oncely_sql\"" delimiter_at)
  if(NOT delimiter_at EQUAL -1)
    message(FATAL_ERROR "migration '${file_name}' contains the raw-string delimiter )oncely_sql\"")
  endif()
  string(APPEND entries "  {${version}, \"${name}\", R\"oncely_sql(${sql})oncely_sql\"},\n")
endforeach()
set(content "// Generated from migrations/*.sql by cmake/EmbedSql.cmake. DO NOT EDIT.
#include \"api/embedded_migrations.hpp\"

namespace oncely::detail {
const std::vector<EmbeddedMigration>& embedded_migrations() {
  static const std::vector<EmbeddedMigration> migrations{
${entries}  };
  return migrations;
}
}  // namespace oncely::detail
")
include("${CMAKE_CURRENT_LIST_DIR}/WriteIfChanged.cmake")
write_if_changed("${OUTPUT}" "${content}")
