#!/usr/bin/env bash
# libferry exports its prefix only: every global symbol libferry.a defines
# (functions, data, bss, rodata, weak or not) is named ferry_*, so that no
# helper of ours (a kernel called fill or encoder_forward) can collide with a
# user's own symbol when they link the library.  Static helpers stay static.
# The same for libferry_flags.a, the CLI's flag tables and parsers the
# benchmarks link too: ferry_cli_*.
#
# The libraries are the ones next to the ferry binary ($1) in the build
# directory.
LIB=$(cd "$(dirname "$1")" && pwd)/libferry.a
FLAGS_LIB=$(cd "$(dirname "$1")" && pwd)/libferry_flags.a
. "$(dirname "$0")/lib.bash"

command -v nm >/dev/null || { echo "skipped: nm (binutils) is not installed"; exit 77; }
[ -f "$LIB" ] || { echo "FAIL: no $LIB next to $FERRY" >&2; exit 1; }
nm -g --defined-only "$LIB" >nm.txt 2>nm_err.txt || { cat nm_err.txt >&2; echo "FAIL: nm $LIB" >&2; exit 1; }

# One line per global definition: member type name.  nm lists an archive as
# "member.o:" lines, each followed by "address type name" lines.
awk '/:$/ { member = substr($0, 1, length($0) - 1); next }
     NF >= 3 { print member, $(NF - 1), $NF }' nm.txt >defined.txt

# Two exceptions, both made by a tool, never by our code:
#
# AddressSanitizer builds (the asan preset): __odr_asan.ferry_X, type B, the
# one-definition-rule indicator ASan adds for each global variable ferry_X it
# instruments.  Allowed only for a ferry_ variable, so it names ours.
#
# Objects nvcc compiled (*.cu.o, present when the CUDA backend is built):
# DW.ref.__gxx_personality_v0, type V, and only that.  nvcc hands the host
# code to g++, which emits this pointer to the C++ personality routine for
# the exception-handling tables of every C++ object file.  It is weak, hidden
# (readelf -s: WEAK HIDDEN) and in a COMDAT group, so it is never exported
# from a shared library, and a user's C++ objects, which carry the same one,
# merge with it instead of colliding; its name is not ours to choose.
# Anything else nvcc might define globally (a __global__ kernel's host stub
# that is not static, a template instance) is refused like any other name.
awk '$3 ~ /^ferry_/ { next }
     $2 == "B" && $3 ~ /^__odr_asan\.ferry_/ { next }
     $1 ~ /\.cu\.o$/ && $2 == "V" && $3 == "DW.ref.__gxx_personality_v0" { next }
     { print }' defined.txt >leaks.txt

checks=$((checks + 1))
total=$(grep -c . defined.txt)
if [ -s leaks.txt ]; then
	fail "$(grep -c . leaks.txt) of $total global symbols defined by $LIB lack the ferry_ prefix (member type name):"
	cat leaks.txt >&2
else
	echo "ok: all $total global symbols defined by $LIB start with ferry_ (or are the allowed tool-made ones)"
fi

# The check above passes on an empty list: make sure nm and the parsing saw
# the library, with a kernel under its prefixed name.
checks=$((checks + 1))
if grep -q ' T ferry_cpu_encoder_forward$' defined.txt && [ "$total" -gt 100 ]; then
	echo "ok: the symbol list is the library's ($total symbols, ferry_cpu_encoder_forward among them)"
else
	fail "the symbol list does not look like libferry's ($total symbols, no ferry_cpu_encoder_forward)"
fi

# libferry_flags.a: ferry_cli_ only (no tool-made exceptions: plain C), and
# the list is the library's (its parser among it).
[ -f "$FLAGS_LIB" ] || { echo "FAIL: no $FLAGS_LIB next to $FERRY" >&2; exit 1; }
nm -g --defined-only "$FLAGS_LIB" >nm_flags.txt 2>nm_err.txt || { cat nm_err.txt >&2; echo "FAIL: nm $FLAGS_LIB" >&2; exit 1; }
awk '/:$/ { next } NF >= 3 { print $(NF - 1), $NF }' nm_flags.txt >flags_defined.txt
awk '$2 ~ /^ferry_cli_/ { next } $1 == "B" && $2 ~ /^__odr_asan\.ferry_cli_/ { next } { print }' flags_defined.txt \
	>flags_leaks.txt
checks=$((checks + 1))
total=$(grep -c . flags_defined.txt)
if [ -s flags_leaks.txt ]; then
	fail "$(grep -c . flags_leaks.txt) of $total global symbols defined by $FLAGS_LIB lack the ferry_cli_ prefix:"
	cat flags_leaks.txt >&2
elif grep -q '^T ferry_cli_parse$' flags_defined.txt && [ "$total" -gt 20 ]; then
	echo "ok: all $total global symbols defined by $FLAGS_LIB start with ferry_cli_ (ferry_cli_parse among them)"
else
	fail "the symbol list does not look like libferry_flags' ($total symbols, no ferry_cli_parse)"
fi
finish
