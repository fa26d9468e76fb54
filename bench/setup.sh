#!/usr/bin/env bash
# Installs the peer proxies the benchmark harness compares against (tinyproxy
# and squid, from Debian) without letting their packages start system
# services: the harness starts its own instances on 127.0.0.1 with private
# config, pid and log paths, and stops them by PID.
set -euo pipefail

if command -v tinyproxy >/dev/null 2>&1 && command -v squid >/dev/null 2>&1; then
  echo "tinyproxy and squid already installed"
  exit 0
fi

. "$(dirname "$0")/../scripts/lib.sh"
# The packages' daemons are installed but never started: the harness starts
# its own instances with their own config, pid and log files.
apt_install tinyproxy squid
command -v tinyproxy
command -v squid
