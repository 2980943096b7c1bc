# Email interop peers (sourced by scripts/test): swaks (Debian) sends mail to switchboard, a
# Python venv with aiosmtpd (reply catcher), dkimpy (signing and verifying) and pyspf (the
# benchmark peer's SPF check) under
# target/peers/email/. Idempotent: skips what is already there. Fails loudly on error.
# Exports what tests/api/email.rs reads:
#   SWITCHBOARD_EMAIL_SWAKS   the swaks binary
#   SWITCHBOARD_EMAIL_PYTHON  the venv's python (aiosmtpd + dkimpy importable)
#   SWITCHBOARD_EMAIL_PEERS   tests/peers/email (the helper scripts)

_sb_email_install() {
  local root dir py
  root="$(pwd)"
  dir="$root/target/peers/email"
  mkdir -p "$dir"
  if ! command -v swaks >/dev/null 2>&1; then
    echo "email peers: installing swaks (Debian)" >&2
    if ! apt-cache show swaks >/dev/null 2>&1; then
      apt-get update -qq || { echo "email peers: apt-get update failed" >&2; return 1; }
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq swaks >/dev/null \
      || { echo "email peers: apt-get install swaks failed" >&2; return 1; }
  fi
  py="$dir/venv/bin/python"
  if ! [ -x "$py" ] || ! "$py" -c 'import aiosmtpd, dkim, spf' >/dev/null 2>&1; then
    echo "email peers: creating $dir/venv (aiosmtpd, dkimpy from PyPI)" >&2
    python3 -m venv "$dir/venv" || { echo "email peers: python3 -m venv failed" >&2; return 1; }
    "$py" -m pip install -q --disable-pip-version-check -r "$root/tests/peers/email/requirements.txt" \
      || { echo "email peers: pip install failed" >&2; return 1; }
  fi
  "$py" -c 'import aiosmtpd, dkim, spf' || { echo "email peers: venv is broken" >&2; return 1; }
  export SWITCHBOARD_EMAIL_SWAKS
  SWITCHBOARD_EMAIL_SWAKS="$(command -v swaks)"
  export SWITCHBOARD_EMAIL_PYTHON="$py"
  export SWITCHBOARD_EMAIL_PEERS="$root/tests/peers/email"
}
_sb_email_install || { echo "email peers: install failed" >&2; false; }
