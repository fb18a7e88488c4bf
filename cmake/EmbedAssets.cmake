cmake_minimum_required(VERSION 3.25)
# Build-time script (cmake -P): embeds the console's assets (src/web/assets/*) into a C++
# source, so `oncely web` serves them from the binary alone.
#   -DASSETS_DIR=<dir> -DOUTPUT=<file.cpp>
# Each file becomes an entry {"/assets/<name>", content type, text}. The build fails on a
# file that contains the raw-string delimiter or has an extension without a content type.
file(GLOB asset_files LIST_DIRECTORIES false "${ASSETS_DIR}/*")
list(SORT asset_files)
set(entries "")
foreach(path IN LISTS asset_files)
  get_filename_component(file_name "${path}" NAME)
  if(file_name MATCHES "\\.js$")
    set(type "text/javascript; charset=utf-8")
  elseif(file_name MATCHES "\\.css$")
    set(type "text/css; charset=utf-8")
  else()
    message(FATAL_ERROR "console asset '${file_name}': no content type for its extension")
  endif()
  file(READ "${path}" text)
  string(FIND "${text}" ")oncely_asset\"" delimiter_at)
  if(NOT delimiter_at EQUAL -1)
    message(FATAL_ERROR "console asset '${file_name}' contains the raw-string delimiter )oncely_asset\"")
  endif()
  string(APPEND entries "  {\"/assets/${file_name}\", \"${type}\", R\"oncely_asset(${text})oncely_asset\"},\n")
endforeach()
set(content "// Generated from src/web/assets/* by cmake/EmbedAssets.cmake. DO NOT EDIT.
#include \"web/assets.hpp\"

namespace oncely::web {
const std::vector<Asset>& assets() {
  static const std::vector<Asset> all{
${entries}  };
  return all;
}
}  // namespace oncely::web
")
include("${CMAKE_CURRENT_LIST_DIR}/WriteIfChanged.cmake")
write_if_changed("${OUTPUT}" "${content}")
