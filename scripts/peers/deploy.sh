# The checkers of deploy/ (sourced by scripts/test): systemd-analyze and systemd-sysusers, from
# Debian's systemd package, which tests/api/deploy.rs runs on the unit and its sysusers.d entry.
# Idempotent; fails loudly when the install fails.

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

_sb_deploy_install || { echo "deploy checks: install failed" >&2; false; }
