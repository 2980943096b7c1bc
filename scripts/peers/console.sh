# The browser of the console's test (sourced by scripts/test): Debian's chromium and its
# chromedriver, which tests/api/console.rs drives over the WebDriver protocol. Exports
# SWITCHBOARD_CHROMEDRIVER. Idempotent; fails loudly when the install fails.

_sb_console_install() {
  if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
    echo "console: installing chromium and chromium-driver (Debian)" >&2
    if ! apt-cache show chromium-driver >/dev/null 2>&1; then
      apt-get update -qq || { echo "console: apt-get update failed" >&2; return 1; }
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
      || { echo "console: apt-get install chromium chromium-driver failed" >&2; return 1; }
  fi
  SWITCHBOARD_CHROMEDRIVER="$(command -v chromedriver)"
  export SWITCHBOARD_CHROMEDRIVER
}

_sb_console_install || { echo "console: install failed" >&2; false; }
