# Email interop peers (sourced by scripts/test): swaks (Debian) sends mail to switchboard,
# Postfix (Debian) relays to it, and a Python venv with aiosmtpd (reply
# catcher), dkimpy (signing and verifying) and pyspf (the benchmark peer's SPF check) under
# target/peers/email/. Idempotent: skips what is already there. Fails loudly on error.
# Exports what tests/api/email/ reads:
#   SWITCHBOARD_EMAIL_SWAKS   the swaks binary
#   SWITCHBOARD_EMAIL_PYTHON  the venv's python (aiosmtpd + dkimpy importable)
#   SWITCHBOARD_EMAIL_PEERS   tests/peers/email (the helper scripts)
#   SWITCHBOARD_EMAIL_POSTFIX the postfix command

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
  # Postfix, run by the tests as a private instance (own configuration and queue in a temporary
  # directory) in front of switchboard. "No configuration": the package sets nothing up.
  if ! [ -x /usr/sbin/postfix ]; then
    echo "email peers: installing postfix (Debian)" >&2
    echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections 2>/dev/null || true
    if ! apt-cache show postfix >/dev/null 2>&1; then
      apt-get update -qq || { echo "email peers: apt-get update failed" >&2; return 1; }
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postfix >/dev/null \
      || { echo "email peers: apt-get install postfix failed" >&2; return 1; }
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
  export SWITCHBOARD_EMAIL_POSTFIX=/usr/sbin/postfix
}
_sb_email_install || { echo "email peers: install failed" >&2; false; }
