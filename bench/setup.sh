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

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# policy-rc.d answering 101 tells invoke-rc.d "not allowed", so the packages'
# postinst scripts install the daemons but never start them.
policy=/usr/sbin/policy-rc.d
had_policy=0
if [ -e "$policy" ]; then had_policy=1; $SUDO cp "$policy" "$policy.bench-saved"; fi
printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
$SUDO chmod 0755 "$policy"
restore() {
  if [ "$had_policy" -eq 1 ]; then $SUDO mv "$policy.bench-saved" "$policy"; else $SUDO rm -f "$policy"; fi
}
trap restore EXIT

export DEBIAN_FRONTEND=noninteractive
# Another apt run (a CI job, a developer) may hold the lock: wait for it.
$SUDO apt-get -o DPkg::Lock::Timeout=900 update
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends tinyproxy squid
command -v tinyproxy
command -v squid
