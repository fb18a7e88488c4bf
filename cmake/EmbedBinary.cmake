cmake_minimum_required(VERSION 3.25)
# Build-time script (cmake -P): embeds a binary file (the exec handler's shepherd program,
# src/handlers/shepherd.cpp says why) into a C++ source as an array of bytes.
#   -DINPUT=<file> -DOUTPUT=<file.cpp> -DHEADER=<include path> -DFUNCTION=<qualified name>
# FUNCTION, declared in HEADER, returns the bytes as a std::string_view.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
if(hex_length EQUAL 0)
  message(FATAL_ERROR "'${INPUT}' is empty")
endif()
# 16 bytes a line.
set(bytes "")
set(at 0)
while(at LESS hex_length)
  string(SUBSTRING "${hex}" ${at} 32 line)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," line "${line}")
  string(APPEND bytes "  ${line}\n")
  math(EXPR at "${at} + 32")
endwhile()
get_filename_component(input_name "${INPUT}" NAME)
set(content "// Generated from ${input_name} by cmake/EmbedBinary.cmake. DO NOT EDIT.
#include \"${HEADER}\"

namespace {
const unsigned char kBytes[] = {
${bytes}};
}  // namespace

std::string_view ${FUNCTION}() {
  return {reinterpret_cast<const char*>(kBytes), sizeof kBytes};
}
")
include("${CMAKE_CURRENT_LIST_DIR}/WriteIfChanged.cmake")
write_if_changed("${OUTPUT}" "${content}")
