# For the build-time embedding scripts (cmake -P): writes CONTENT to OUTPUT only when it
# differs from what is there, so that an unchanged input rebuilds nothing.
function(write_if_changed output content)
  if(EXISTS "${output}")
    file(READ "${output}" previous)
    if(previous STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${output}" "${content}")
endfunction()
