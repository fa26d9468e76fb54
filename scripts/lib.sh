# Shell helpers shared by the install and test scripts. Source it:
#   . "$(dirname "$0")/../scripts/lib.sh"

# retry SECONDS CMD...: run CMD bounded by SECONDS, once more if it fails.
# Downloads from package registries have been seen to stall for minutes; a
# bounded second try is cheaper than a hung CI run.
retry() {
  local limit=$1 attempt
  shift
  for attempt in 1 2; do
    if timeout "$limit" "$@"; then return 0; fi
    echo "$(basename "$0"): '$*' failed (attempt $attempt)" >&2
  done
  return 1
}

# apt_install PKG...: install Debian packages without starting their
# services (policy-rc.d answers 101 while apt runs; a policy that was there
# before is put back). Waits for an apt lock another run holds.
apt_install() {
  local sudo="" policy=/usr/sbin/policy-rc.d saved=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  if [ -e "$policy" ]; then saved=$(mktemp); $sudo cp -p "$policy" "$saved"; fi
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  local rc=0
  # One test run installs from several scripts; the package lists are
  # fetched again only when no update in the last hour refreshed them.
  if [ -z "$(find /var/lib/apt/lists /var/lib/apt/lists/partial -maxdepth 0 -mmin -60 2>/dev/null)" ]; then
    retry 900 $sudo apt-get -o DPkg::Lock::Timeout=600 update -q || rc=$?
  fi
  [ $rc = 0 ] && { DEBIAN_FRONTEND=noninteractive retry 900 $sudo apt-get -o DPkg::Lock::Timeout=600 \
      install -y -q --no-install-recommends "$@" || rc=$?; }
  if [ -n "$saved" ]; then $sudo mv "$saved" "$policy"; else $sudo rm -f "$policy"; fi
  return $rc
}

# install_toxiproxy DIR: toxiproxy v2.12.0's server as DIR/toxiproxy-server
# (its module names the binary "server"; @latest would find only v2.5.0).
install_toxiproxy() {
  local dir=$1
  [ -x "$dir/toxiproxy-server" ] && return 0
  GOBIN=$dir GOFLAGS=-mod=mod retry 600 go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
  mv "$dir/server" "$dir/toxiproxy-server"
}

# install_helm DIR: helm v3.22.0 as DIR/helm (a few minutes the first time).
install_helm() {
  local dir=$1
  [ -x "$dir/helm" ] && return 0
  echo "== install helm v3.22.0 (a few minutes the first time)"
  GOBIN=$dir GOFLAGS=-mod=mod retry 900 go install helm.sh/helm/v3/cmd/helm@v3.22.0
}
