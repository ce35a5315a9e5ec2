# Fails when a binary's link line names a library it must not link.
#   cmake -DNINJA=<ninja> -DBUILD_DIR=<build> -DTARGET=<binary> -DFORBIDDEN=<lib>,<lib>,... -P router_link.cmake
# Reads the link command from the build graph (`ninja -t commands TARGET`, the
# line with "-o TARGET"), so it checks what the linker is actually given,
# transitive dependencies included; the binary need not be built.
foreach(var NINJA BUILD_DIR TARGET FORBIDDEN)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "router_link.cmake: -D${var}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${NINJA} -C ${BUILD_DIR} -t commands ${TARGET}
                OUTPUT_VARIABLE commands ERROR_VARIABLE error RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ninja -t commands ${TARGET} failed (${rc}): ${error}")
endif()
string(REGEX MATCH "[^\n]* -o ${TARGET}( [^\n]*)?(\n|$)" link_line "${commands}")
if(link_line STREQUAL "")
  message(FATAL_ERROR "no link command for ${TARGET} in the build graph")
endif()
string(REGEX MATCHALL "lib[A-Za-z0-9_]+\\.a" archives "${link_line}")
list(REMOVE_DUPLICATES archives)
string(REPLACE "," ";" forbidden "${FORBIDDEN}")
set(found)
foreach(lib ${forbidden})
  if(link_line MATCHES "(^|[ /])lib${lib}\\.a( |$)")
    list(APPEND found ${lib})
  endif()
endforeach()
if(found)
  message(FATAL_ERROR "${TARGET} links ${found}, which it must not; its archives: ${archives}")
endif()
message(STATUS "${TARGET} links none of ${forbidden}; its archives: ${archives}")
