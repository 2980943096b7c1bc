# What tests/api/quickstart.rs runs the quickstart's snippets with: nginx (the reverse proxy,
# run in front of switchboard), Caddy (its Caddyfile validated) and openssl (a certificate for
# both), from Debian. Sourced by scripts/test; idempotent; fails loudly when an install fails.

_sb_quickstart_install() {
  local missing=()
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
  command -v caddy >/dev/null 2>&1 || missing+=(caddy)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "quickstart checks: installing ${missing[*]} (Debian)" >&2
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq || { echo "quickstart checks: apt-get update failed" >&2; return 1; }
  fi
  # Installed only to run in the foreground from the tests: keep the packages' services off.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  local status=$?
  rm -f /usr/sbin/policy-rc.d
  [ $status -eq 0 ] || { echo "quickstart checks: apt-get install failed" >&2; return 1; }
}

_sb_quickstart_install || { echo "quickstart checks: install failed" >&2; false; }
export SWITCHBOARD_NGINX="${SWITCHBOARD_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
