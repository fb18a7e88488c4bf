cmake_minimum_required(VERSION 3.25)
# Build-time script (cmake -P): embeds one SQL file into a C++ source as a string_view.
#   -DINPUT=<file.sql> -DOUTPUT=<file.cpp> -DHEADER=<include path> -DSYMBOL=<qualified name>
# The build fails on a file that contains the raw-string delimiter.
file(READ "${INPUT}" sql)
string(FIND "${sql}" ")oncely_sql\"" delimiter_at)
if(NOT delimiter_at EQUAL -1)
  message(FATAL_ERROR "'${INPUT}' contains the raw-string delimiter )oncely_sql\"")
endif()
set(content "// Generated from ${INPUT} by cmake/EmbedSqlFile.cmake. DO NOT EDIT.
#include \"${HEADER}\"

std::string_view ${SYMBOL}() {
  return R\"oncely_sql(${sql})oncely_sql\";
}
")
include("${CMAKE_CURRENT_LIST_DIR}/WriteIfChanged.cmake")
write_if_changed("${OUTPUT}" "${content}")
