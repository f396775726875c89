# Writes a C++ header that holds a text file as one raw string literal:
#   cmake -DIN=FILE -DOUT=HEADER -DNAME=IDENTIFIER -P embed_text.cmake
# The raw string's end, ')DELIM"', must not occur in the text; the script fails naming the file
# when it does.
if(NOT DEFINED IN OR NOT DEFINED OUT OR NOT DEFINED NAME)
  message(FATAL_ERROR "embed_text.cmake: pass -DIN=, -DOUT= and -DNAME=")
endif()
file(READ "${IN}" text)
set(delim "sjkv_embed")
string(FIND "${text}" ")${delim}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} holds ')${delim}\"', the raw string's end: choose another delimiter in ${CMAKE_CURRENT_LIST_FILE}")
endif()
get_filename_component(base "${IN}" NAME)
set(header "// Generated from ${base} by replay/cmake/embed_text.cmake at build time; do not edit.\n#pragma once\n\ninline constexpr const char ${NAME}[] = R\"${delim}(${text})${delim}\";\n")
file(WRITE "${OUT}" "${header}")
