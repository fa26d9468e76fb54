#!/usr/bin/env bash
# Installs squid (the Debian package) for the parent-proxy tests, which start
# their own instances on 127.0.0.1 (internal/squidtest: own config, pid and
# log files, basic authentication through the package's basic_ncsa_auth) and
# stop them by PID. The package's service must not start: policy-rc.d
# answers 101 during the install. Idempotent: does nothing when squid is
# already installed.
set -euo pipefail
squid=$(command -v squid 2>/dev/null || echo /usr/sbin/squid)
if [ -x "$squid" ]; then
  echo "squid present: $("$squid" -v | sed -n 1p)"
  exit 0
fi
. "$(dirname "$0")/lib.sh"
apt_install squid
/usr/sbin/squid -v | sed -n 1p
