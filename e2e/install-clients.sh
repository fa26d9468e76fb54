# Package clients that only the client-reaction scenario (TestClientReactions)
# drives, beside the ones run.sh installs for every scenario: pnpm 10, yarn 1
# and yarn 4, each from the npm registry into its own folder under
# $WORK/clients (yarn 1 and yarn 4 both name their binary "yarn"). Sourced by
# run.sh after scripts/lib.sh; every download is bounded and retried once.

# install_node_client NAME SPEC: npm install SPEC (exact) into $WORK/clients/NAME.
install_node_client() {
  local name=$1 spec=$2 dir=$WORK/clients/$1
  [ "$(cat "$dir/.installed" 2>/dev/null)" = "$spec" ] && return 0
  mkdir -p "$dir"
  echo '{"name":"e2e-client-'"$name"'","private":true}' >"$dir/package.json"
  (cd "$dir" && retry 600 npm install --no-audit --no-fund --loglevel=error -E "$spec")
  echo "$spec" >"$dir/.installed"
}

install_clients() {
  install_node_client pnpm pnpm@10.34.9
  install_node_client yarn1 yarn@1.22.22
  install_node_client yarn4 @yarnpkg/cli-dist@4.18.1
}
