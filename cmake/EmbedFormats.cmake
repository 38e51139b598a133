# Turns formats/*.fmt into a C array of (file name, text) pairs, so that the
# spec files stay the one source of truth for the named formats.
# Usage: cmake -DOUT=file.c -DFILES="a.fmt;b.fmt" -P EmbedFormats.cmake
set(body "/* Generated from the spec files of formats/ by cmake/EmbedFormats.cmake. */\n")
string(APPEND body "#include <stddef.h>\n#include \"embedded.h\"\n\n")
string(APPEND body "const emu_embedded_spec emu_embedded_specs[] = {\n")
set(count 0)
foreach(f IN LISTS FILES)
  get_filename_component(base "${f}" NAME)
  file(READ "${f}" text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
  string(APPEND body "  { \"formats/${base}\",\n    \"${text}\" },\n")
  math(EXPR count "${count} + 1")
endforeach()
string(APPEND body "};\nconst size_t emu_embedded_spec_count = ${count};\n")
file(WRITE "${OUT}.tmp" "${body}")
file(RENAME "${OUT}.tmp" "${OUT}")
