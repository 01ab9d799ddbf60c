# include_lint.cmake: the include rules that a layer's include path cannot
# enforce, run by the build (target pg_include_lint, CMakeLists.txt) before
# any layer compiles. Fails the build naming file:line and the rule for
#   - an include with ".." in it: from the file's own folder it would reach
#     a folder past the layer's include path;
#   - an include of a folder the file's layer may not use (PG_LAYER_RULES,
#     the edges CMakeLists.txt writes once): the include path stops these
#     too, this names the rule instead of "No such file";
#   - <sqlite3.h> or the store's own headers "db/sql_util.h" and
#     "db/store_conn.h" outside db/ and
#     tests/: only the store runs SQL.
# Inputs: -DPG_SOURCE_DIR=the repository,
# -DPG_LAYER_RULES="layer:folder=used used|..." (folder: harness/cli for cli),
# -DPG_FILES="file|file|..." (absolute paths).
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" rules "${PG_LAYER_RULES}")
string(REPLACE "|" ";" files "${PG_FILES}")
set(layers "")
foreach(rule ${rules})
  string(REGEX MATCH "^([a-z]+):([a-z/]+)=(.*)$" _ "${rule}")
  list(APPEND layers ${CMAKE_MATCH_1})
  set(dir_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  string(REPLACE " " ";" uses_${CMAKE_MATCH_1} "${CMAKE_MATCH_3}")
endforeach()
# pg_layer_of(PATH OUT): the layer whose folder is the longest one holding PATH
# (harness/cli/x.c is cli's, harness/x.c harness's), or "" for none.
function(pg_layer_of path out)
  set(best "")
  set(best_len 0)
  foreach(l ${layers})
    string(LENGTH "${dir_${l}}" len)
    string(FIND "${path}" "${dir_${l}}/" at)
    if(at EQUAL 0 AND len GREATER best_len)
      set(best ${l})
      set(best_len ${len})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()
set(problems "")
foreach(file ${files})
  file(RELATIVE_PATH rel ${PG_SOURCE_DIR} ${file})
  string(REGEX MATCH "^[^/]+" folder "${rel}")
  pg_layer_of("${rel}" layer)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include")
  file(STRINGS ${file} all_lines)
  foreach(line ${lines})
    # the line number: the first line of the file equal to this one
    list(FIND all_lines "${line}" index)
    math(EXPR lineno "${index} + 1")
    string(REGEX MATCH "#[ \t]*include[ \t]*[\"<]([^\">]+)[\">]" _ "${line}")
    set(name "${CMAKE_MATCH_1}")
    if(name MATCHES "(^|/)\\.\\.(/|$)")
      string(APPEND problems "${rel}:${lineno}: #include \"${name}\": name the folder (\"db/x.h\"), never a path with ..\n")
    endif()
    if((name STREQUAL "sqlite3.h" OR name STREQUAL "db/sql_util.h"
        OR name STREQUAL "db/store_conn.h")
       AND NOT folder STREQUAL "db" AND NOT folder STREQUAL "tests")
      string(APPEND problems "${rel}:${lineno}: #include ${name}: only db/ (and tests/) may use SQLite\n")
    endif()
    if(layer)
      pg_layer_of("${name}" target)
      if(target AND NOT target STREQUAL layer AND NOT target IN_LIST uses_${layer})
        string(REPLACE ";" ", " allowed "${uses_${layer}}")
        if(allowed STREQUAL "")
          set(allowed "nothing")
        endif()
        string(APPEND problems "${rel}:${lineno}: #include \"${name}\": ${dir_${layer}}/ may use ${allowed}, not ${dir_${target}}/\n")
      endif()
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "precgate: includes that break the layers (CMakeLists.txt, PG_LAYER_USES_*):\n${problems}")
endif()
