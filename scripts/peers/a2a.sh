# Installs the A2A interop peers into target/peers/a2a/ (idempotent) and exports where the
# tests find them:
#   SWITCHBOARD_A2A_PYTHON  python of a venv with a2a-sdk[http-server]==1.3.0, uvicorn with
#                           uvloop and httptools (its fast configuration, for the benchmark),
#                           and jwcrypto with rfc8785 (an independent check of signed cards)
#   SWITCHBOARD_A2A_NODE_MODULES  node_modules holding @a2a-js/sdk@1.3.0 (and express for its server)
# Sourced by scripts/test; fails loudly when an install fails.
a2a_peer_install() {
  local root dir venv nm
  root="$(pwd)"
  dir="$root/target/peers/a2a"
  venv="$dir/venv"
  mkdir -p "$dir"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import a2a, uvicorn, starlette, uvloop, httptools, jwcrypto, rfc8785' 2>/dev/null; then
    echo "installing a2a-sdk 1.3.0 into $venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      'a2a-sdk[http-server]==1.3.0' 'uvicorn==0.54.0' 'httpx==0.28.1' \
      'uvloop==0.23.0' 'httptools==0.9.0' 'jwcrypto==1.5.6' 'rfc8785==0.1.4' || return 1
  fi
  nm="$dir/node/node_modules"
  if [ ! -d "$nm/@a2a-js/sdk" ] || [ ! -d "$nm/express" ]; then
    echo "installing @a2a-js/sdk 1.3.0 into $dir/node"
    mkdir -p "$dir/node"
    cp "$root/tests/peers/a2a/package.json" "$dir/node/"
    if [ -f "$root/tests/peers/a2a/package-lock.json" ]; then
      cp "$root/tests/peers/a2a/package-lock.json" "$dir/node/"
      (cd "$dir/node" && npm ci --silent --no-audit --no-fund) || return 1
    else
      (cd "$dir/node" && npm install --silent --no-audit --no-fund) || return 1
    fi
  fi
  export SWITCHBOARD_A2A_PYTHON="$venv/bin/python"
  export SWITCHBOARD_A2A_NODE_MODULES="$nm"
}
a2a_peer_install || { echo "scripts/peers/a2a.sh: installing the A2A peers failed" >&2; return 1 2>/dev/null || exit 1; }
