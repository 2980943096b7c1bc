# Installs the OTLP receiver's decoder into target/peers/otlp/ (idempotent) and exports where
# the tests find it:
#   SWITCHBOARD_OTLP_PYTHON  python of a venv with opentelemetry-proto==1.45.2, which decodes
#                            the spans switchboard exports (tests/peers/otlp/receiver.py)
# Sourced by scripts/test; fails loudly when an install fails.
otlp_peer_install() {
  local root dir venv
  root="$(pwd)"
  dir="$root/target/peers/otlp"
  venv="$dir/venv"
  mkdir -p "$dir"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c \
      'import importlib.metadata as m; assert m.version("opentelemetry-proto") == "1.45.2"' 2>/dev/null; then
    echo "installing opentelemetry-proto 1.45.2 into $venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'opentelemetry-proto==1.45.2' || return 1
  fi
  export SWITCHBOARD_OTLP_PYTHON="$venv/bin/python"
}
otlp_peer_install || { echo "scripts/peers/otlp.sh: installing opentelemetry-proto failed" >&2; return 1 2>/dev/null || exit 1; }
