# embed.cmake: writes a C file that holds a text file as a char array.
#   cmake -DINPUT=file.lua -DOUTPUT=file.c -DNAME=symbol -P embed.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" len)
math(EXPR size "${len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUTPUT}" "/* Generated from ${INPUT} by cmake/embed.cmake; do not edit. */\n#include <stddef.h>\nextern const char ${NAME}[];\nextern const size_t ${NAME}_size;\nconst char ${NAME}[] = {\n  ${bytes}0x00};\nconst size_t ${NAME}_size = ${size};\n")
