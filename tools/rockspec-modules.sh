#!/bin/sh
# Prints the rockspec's install.lua lines for every file under lua/, to
# paste into redlock-scm-1.rockspec (spec/09 checks that it is complete).
# The core needs no line: the Makefile builds every csrc/*.c.
cd "$(dirname "$0")/.."
find lua -name '*.lua' | sort | while read -r f; do
    name=$(echo "$f" | sed 's|^lua/||; s|\.lua$||; s|/|.|g')
    case "$name" in
        *.*) echo "         [\"$name\"] = \"$f\"," ;;
        *) echo "         $name = \"$f\"," ;;
    esac
done
