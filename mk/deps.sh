#!/bin/sh
# deps.sh -- installs the Debian packages a make target needs, or says how.
# Usage: mk/deps.sh [--list] build|test|demo|bench|fuzz
# (--list: print the packages, one a line, and install nothing; what
# tests/integration/examples_docker_deps.sh holds the Dockerfile to)
# Run by make test, make demo, make bench and make deps; never by a plain make
# (a build only checks with pkg-config, and says what is missing).
set -e
build="gcc make pkg-config libhiredis-dev libconfig-dev libssl-dev"
# prometheus: its promtool checks examples/monitoring/ (ops_monitoring_kit)
test="$build libcmocka-dev openssl redis-server redis-tools redis-sentinel curl netcat-openbsd python3 python3-yaml libnss-wrapper procps iproute2 clang libclang-rt-14-dev nodejs python3-requests openjdk-17-jdk-headless nginx-light apache2 apache2-utils postgresql time valgrind clang-format-14 prometheus php-cli php-curl php-fpm"
list=""
[ "${1:-}" = --list ] && { list=1; shift; }
case "${1:-build}" in
  build) want=$build ;;
  test)  want=$test ;;
  demo)  want="$build redis-server redis-tools curl python3 procps" ;;
  bench) want="$test valgrind" ;;   # npm (nodejs) is optional: its row says when it is missing
  fuzz)  want="$build clang libclang-rt-14-dev" ;;
  *) echo "usage: $0 [--list] build|test|demo|bench|fuzz" >&2; exit 2 ;;
esac
if [ -n "$list" ]; then
  for p in $want; do echo "$p"; done
  exit 0
fi
missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# python3 may come from elsewhere (pyenv): accept any python3 on PATH.
case " $missing " in *" python3 "*) command -v python3 >/dev/null && missing=$(echo "$missing" | sed 's/ python3//') ;; esac
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "deps: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q $missing >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q $missing >/dev/null; }
else
  echo "deps: missing Debian packages. Run as root:" >&2
  echo "  apt-get install -y$missing" >&2
  exit 1
fi
