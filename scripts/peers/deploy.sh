# The checkers of deploy/ (sourced by scripts/test), which tests/api/deploy/ runs:
# - systemd-analyze and systemd-sysusers, from Debian's systemd package, on the unit and its
#   sysusers.d entry;
# - kubernetes-validate (PyPI, pinned below) on the manifests of deploy/kubernetes/, against
#   the Kubernetes version the test pins. Installed into target/peers/deploy/; exports
#   SWITCHBOARD_KUBERNETES_VALIDATE, the command.
# Idempotent; fails loudly when an install fails.

_sb_deploy_install() {
  if command -v systemd-analyze >/dev/null 2>&1 && command -v systemd-sysusers >/dev/null 2>&1; then
    return 0
  fi
  echo "deploy checks: installing systemd (Debian) for systemd-analyze and systemd-sysusers" >&2
  if ! apt-cache show systemd >/dev/null 2>&1; then
    apt-get update -qq || { echo "deploy checks: apt-get update failed" >&2; return 1; }
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null \
    || { echo "deploy checks: apt-get install systemd failed" >&2; return 1; }
}

_sb_kubernetes_validate_install() {
  local version=1.37.0 venv
  venv="$(pwd)/target/peers/deploy/venv"
  if [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" != "$version" ]; then
    echo "deploy checks: installing kubernetes-validate $version into $venv" >&2
    python3 -m venv "$venv" \
      || { echo "deploy checks: python3 -m venv $venv failed" >&2; return 1; }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$version" \
      || { echo "deploy checks: pip install kubernetes-validate==$version failed" >&2; return 1; }
    [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" = "$version" ] \
      || { echo "deploy checks: kubernetes-validate $version does not run" >&2; return 1; }
  fi
  SWITCHBOARD_KUBERNETES_VALIDATE="$venv/bin/kubernetes-validate"
  export SWITCHBOARD_KUBERNETES_VALIDATE
}

{ _sb_deploy_install && _sb_kubernetes_validate_install; } \
  || { echo "deploy checks: install failed" >&2; false; }
