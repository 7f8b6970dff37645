#!/bin/sh
# Prints the rockspec's module lines for every file under lua/ and csrc/, to
# paste into redlock-scm-1.rockspec (spec/09 checks that it is complete).
cd "$(dirname "$0")/.."
find lua -name '*.lua' | sort | while read -r f; do
    name=$(echo "$f" | sed 's|^lua/||; s|\.lua$||; s|/|.|g')
    case "$name" in
        *.*) echo "      [\"$name\"] = \"$f\"," ;;
        *) echo "      $name = \"$f\"," ;;
    esac
done
echo '      ["redlock.core"] = {'
echo '         sources = {'
for f in csrc/*.c; do echo "            \"$f\","; done
