#!/bin/sh
# Prints, one per line, the Debian packages that own the shared libraries BINARY loads (from
# ldd), so an image's runtime stage installs exactly those. A library no package owns is named
# on stderr and the exit status is 1 (a runtime image would lack it).
# Usage: runtime-packages.sh BINARY
set -eu
bin=$1
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
# Debian 12 is mid-usrmerge: dpkg may record /lib/... or /usr/lib/... for the same file.
candidates() { printf '%s\n' "$1" "/usr$1" "${1#/usr}" "$(readlink -f "$1")"; }
all=$(for lib in $libs; do candidates "$lib"; done | sort -u)
# One dpkg-query for every path: lines "pkg[:arch][, pkg2]: /path".
owners=$(dpkg-query -S $all 2>/dev/null || true)
status=0
pkgs=""
for lib in $libs; do
  pkg=""
  for cand in $(candidates "$lib"); do
    pkg=$(printf '%s\n' "$owners" | awk -v p="$cand" '{i = index($0, ": ")} i && substr($0, i + 2) == p {print substr($0, 1, i - 1); exit}')
    [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "runtime-packages.sh: no package owns $lib" >&2
    status=1
  else
    pkgs="$pkgs $(printf '%s' "$pkg" | sed 's/:[a-z0-9]*//g; s/,/ /g')"
  fi
done
printf '%s\n' $pkgs | sort -u
exit $status
