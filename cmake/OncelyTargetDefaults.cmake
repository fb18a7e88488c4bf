# oncely_target_defaults(<target>): the flags every target of ours is built with.
# Per-target (not global) so that consumers adding us with add_subdirectory keep theirs.
function(oncely_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
  # Implicit conversions that can change a value (a 64-bit count into an int, a double into
  # an integer): spelled out with static_cast where meant. GCC's -Wconversion; clang's also
  # takes in every signed/unsigned mix (-Wsign-conversion), which the fuzz build (clang) is
  # spared.
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wconversion>)
  # Line tables and function names in optimised builds too: a handler's stack trace then
  # names file:line (RelWithDebInfo and Debug have full -g already).
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release,MinSizeRel>:-g1>)
  if(ONCELY_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(ONCELY_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    # GCC's own documentation: the sanitizers' instrumentation makes -Wmaybe-uninitialized
    # report false positives (GCC 12 does, in libstdc++'s <regex> that cpp-httplib includes).
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
