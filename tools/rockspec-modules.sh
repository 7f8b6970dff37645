#!/bin/sh
# Prints the rockspecs' install.lua lines for every file under lua/, to
# paste into redlock-scm-1.rockspec and redlock-VERSION-1.rockspec (spec/09
# checks that they are complete and agree).
# The core needs no line: the Makefile builds every C file of csrc/.
cd "$(dirname "$0")/.."
find lua -name '*.lua' | sort | while read -r f; do
    name=$(echo "$f" | sed 's|^lua/||; s|\.lua$||; s|/|.|g')
    case "$name" in
        *.*) echo "         [\"$name\"] = \"$f\"," ;;
        *) echo "         $name = \"$f\"," ;;
    esac
done
