# Runs one example program for CTest:
#   cmake -DPROGRAM=path -P run_example.cmake -- REGEX...
# Fails unless the program exits 0 and its standard output matches every
# REGEX.  (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit
# status, and the exit status is each example's own checks.)
execute_process(COMMAND ${PROGRAM}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}")
endif()
set(i 0)
set(regexes OFF)
while(i LESS CMAKE_ARGC)
  set(arg "${CMAKE_ARGV${i}}")
  if(regexes)
    if(NOT out MATCHES "${arg}")
      message(FATAL_ERROR "${PROGRAM}: no line matches '${arg}'")
    endif()
  elseif(arg STREQUAL "--")
    set(regexes ON)
  endif()
  math(EXPR i "${i} + 1")
endwhile()
