# layer_edges.cmake: CTest's layer_edges test (CMakeLists.txt). Holds the
# build to the layers it declares:
#   - every probe pg_probe_L_uses_F (a file that includes one header of a
#     folder F that layer L may not use, compiled on L's include path) fails
#     to build, and the compiler names that header as not found;
#   - every probe pg_probe_L_allowed (one header of each folder L may use)
#     builds: the failures above are the include path's, not the probe's;
#   - the include lint (cmake/include_lint.cmake) refuses a "../" include, an
#     include of a forbidden folder and <sqlite3.h> outside db/, naming each.
# Inputs: -DPG_BUILD_DIR, -DPG_SOURCE_DIR, -DPG_PROBES="target=header|...",
# -DPG_LAYER_RULES (as the lint takes them).
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" probes "${PG_PROBES}")
set(failures "")
set(n_forbidden 0)
set(n_allowed 0)
foreach(probe ${probes})
  string(REGEX MATCH "^([^=]+)=(.*)$" _ "${probe}")
  set(target "${CMAKE_MATCH_1}")
  set(header "${CMAKE_MATCH_2}")
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${PG_BUILD_DIR} --target ${target}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(header STREQUAL "")
    math(EXPR n_allowed "${n_allowed} + 1")
    if(NOT rc EQUAL 0)
      string(APPEND failures "${target}: the allowed includes do not build:\n${out}\n")
    endif()
  else()
    math(EXPR n_forbidden "${n_forbidden} + 1")
    string(REPLACE "." "\\." header_re "${header}")
    if(rc EQUAL 0)
      string(APPEND failures "${target}: a forbidden #include \"${header}\" built\n")
    elseif(NOT out MATCHES "${header_re}: No such file or directory")
      string(APPEND failures "${target}: failed, but not for want of ${header}:\n${out}\n")
    endif()
  endif()
endforeach()
if(n_forbidden EQUAL 0 OR n_allowed EQUAL 0)
  string(APPEND failures "no probes ran (${n_forbidden} forbidden, ${n_allowed} allowed)\n")
endif()

# The lint, on a tree of its own holding one file per rule.
set(tree ${PG_BUILD_DIR}/layer-probes/lint-tree)
file(REMOVE_RECURSE ${tree})
file(WRITE ${tree}/kernels/up.c "#include \"../harness/sweep.h\"\n")
file(WRITE ${tree}/kernels/cross.c "#include <stdio.h>\n#include \"harness/sweep.h\"\n")
file(WRITE ${tree}/reports/sql.c "#include <sqlite3.h>\n")
file(WRITE ${tree}/harness/conn.c "#include \"db/store.h\"\n#include \"db/store_conn.h\"\n")
file(WRITE ${tree}/harness/up_to_cli.c "#include \"harness/sweep.h\"\n#include \"harness/cli/cli.h\"\n")
file(WRITE ${tree}/harness/cli/fine.c "#include \"harness/cli/cli.h\"\n#include \"harness/sweep.h\"\n#include \"db/store.h\"\n")
file(WRITE ${tree}/harness/capture/up_to_sweep.c "#include \"harness/capture/capture.h\"\n#include \"harness/sweep.h\"\n")
file(WRITE ${tree}/harness/capture/fine.c "#include \"harness/capture/safetensors.h\"\n#include \"kernels/numerics.h\"\n")
file(WRITE ${tree}/db/fine.c "#include <sqlite3.h>\n#include \"base/status.h\"\n#include \"sql_util.h\"\n#include \"store_conn.h\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DPG_SOURCE_DIR=${tree} "-DPG_LAYER_RULES=${PG_LAYER_RULES}"
                "-DPG_FILES=${tree}/kernels/up.c|${tree}/kernels/cross.c|${tree}/reports/sql.c|${tree}/harness/conn.c|${tree}/harness/up_to_cli.c|${tree}/harness/cli/fine.c|${tree}/harness/capture/up_to_sweep.c|${tree}/harness/capture/fine.c|${tree}/db/fine.c"
                -P ${PG_SOURCE_DIR}/cmake/include_lint.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(REGEX REPLACE "[ \n]+" " " flat "${out}")
foreach(expect
    "kernels/up.c:1: #include \"../harness/sweep.h\": name the folder"
    "kernels/cross.c:2: #include \"harness/sweep.h\": kernels/ may use base, not harness/"
    "reports/sql.c:1: #include sqlite3.h: only db/ (and tests/) may use SQLite"
    "harness/conn.c:2: #include db/store_conn.h: only db/ (and tests/) may use SQLite"
    "harness/up_to_cli.c:2: #include \"harness/cli/cli.h\": harness/ may use capture, kernels, db, evals, reports, base, not harness/cli/"
    "harness/capture/up_to_sweep.c:2: #include \"harness/sweep.h\": harness/capture/ may use kernels, base, not harness/")
  string(FIND "${flat}" "${expect}" at)
  if(at EQUAL -1)
    string(APPEND failures "the include lint did not say: ${expect}\n(it said: ${out})\n")
  endif()
endforeach()
if(rc EQUAL 0)
  string(APPEND failures "the include lint passed a tree that breaks six rules\n")
endif()
if(flat MATCHES "db/fine\\.c" OR flat MATCHES "cli/fine\\.c" OR flat MATCHES "capture/fine\\.c")
  string(APPEND failures "the include lint refused db/fine.c, harness/cli/fine.c or harness/capture/fine.c, which keep the rules:\n${out}\n")
endif()

if(failures)
  message(FATAL_ERROR "layer_edges:\n${failures}")
endif()
message(STATUS "layer_edges: ${n_forbidden} forbidden includes fail to build, ${n_allowed} layers build their allowed ones, the lint names 6 of 6 broken rules")
