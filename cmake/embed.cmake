# embed.cmake: writes a C file that holds the module's Lua chunks as char
# arrays, with the table src/lua/internal.c runs them from (luna__chunks,
# declared in src/lua/chunks.h), in the order given.
#   cmake -DDIR=lua/lunaloop -DCHUNKS=a,b -DOUTPUT=file.c -P embed.cmake
# Chunk `a` is DIR/a.lua, named "=lunaloop/a.lua" in tracebacks (the prefix
# is LUNA__CHUNK_PREFIX in src/lua/binding.h).
string(REPLACE "," ";" chunks "${CHUNKS}")
set(arrays "")
set(table "")
foreach(chunk IN LISTS chunks)
  file(READ "${DIR}/${chunk}.lua" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n  " bytes "${bytes}")
  string(APPEND arrays "static const char chunk_${chunk}[] = {\n  ${bytes}0x00};\n")
  string(APPEND table "    {\"=lunaloop/${chunk}.lua\", chunk_${chunk}, sizeof chunk_${chunk} - 1},\n")
endforeach()
file(WRITE "${OUTPUT}" "/* Generated from ${DIR}/{${CHUNKS}}.lua by cmake/embed.cmake; do not edit. */\n#include \"chunks.h\"\n\n${arrays}\nconst luna__chunk luna__chunks[] = {\n${table}    {NULL, NULL, 0}};\n")
