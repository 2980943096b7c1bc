# The container image leg (sourced by scripts/test), which tests/api/deploy/image.rs runs: buildah
# builds deploy/Dockerfile, runs the image and checks it.
# - buildah, mmdebstrap, iproute2 (the container's own network namespace) and curl (requests
#   into it), from Debian.
# - buildah keeps its images under target/peers/image/ (vfs storage, chroot isolation: no
#   daemon, no overlay mounts, nothing outside the checkout). The wrapper
#   target/peers/image/buildah runs buildah with those settings; exported as
#   SWITCHBOARD_BUILDAH.
# - The base images deploy/Dockerfile names are taken from that storage. Where one is missing
#   (a registry that cannot be reached; `target/peers/image/buildah pull NAME` first where one
#   can), a stand-in is made from Debian's packages with mmdebstrap and tagged with that name:
#     debian:bookworm-slim  Debian's minbase, documentation left out as in the official image;
#     rust:1.95-bookworm    Debian with a C toolchain, plus this machine's own Rust toolchain
#                           (`rustc --print sysroot`, which must be that release) where the
#                           official image has rustup's, laid out the same way.
#   A stand-in is labelled io.switchboard.stand-in with what it was made from and is made anew
#   when that changes (another Rust toolchain, say).
# - SWITCHBOARD_IMAGE_BINARY says where the image's binary comes from: `prebuilt` (the test
#   packages the binary its own build made, through the Dockerfile's BINARY=prebuilt, instead of
#   compiling the tree a third time) on a machine of the image's Debian release, `source` (the
#   Dockerfile's own release build, as operators run it) elsewhere or with
#   SWITCHBOARD_IMAGE_FROM_SOURCE=1. The Rust stand-in is made only for `source`.
# - Where buildah cannot run here, SWITCHBOARD_IMAGE_SKIP says why, and the image test prints
#   that line instead of running.
# Idempotent; fails loudly when an install fails.

_sb_image_apt() {
  local missing=() pkg cmd
  for pkg in buildah:buildah mmdebstrap:mmdebstrap iproute2:ip curl:curl; do
    cmd=${pkg#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("${pkg%%:*}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "image leg: installing ${missing[*]} (Debian)" >&2
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq || { echo "image leg: apt-get update failed" >&2; return 1; }
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "image leg: apt-get install ${missing[*]} failed" >&2; return 1; }
}

# The base images of deploy/Dockerfile's FROM lines, as repository references: not `scratch`,
# a build argument or an earlier stage.
_sb_image_bases() {
  local stages
  stages=$(sed -n 's/^FROM[[:space:]].*[[:space:]]AS[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/Ip' deploy/Dockerfile)
  sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/Ip' deploy/Dockerfile \
    | grep -v -e '^scratch$' -e '^\$' | grep -vxF -e "${stages:-scratch}" | sort -u
}

# Where the image's binary comes from (SWITCHBOARD_IMAGE_BINARY above): `prebuilt` where this
# machine runs the Debian release of the image's last base (debian:SUITE-slim), so a binary
# built here runs there.
_sb_image_binary() {
  local runtime suite
  runtime=$(sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/Ip' deploy/Dockerfile | tail -n 1)
  suite=${runtime#debian:}
  suite=${suite%-slim}
  if [ "${SWITCHBOARD_IMAGE_FROM_SOURCE:-0}" != 1 ] && [ -r /etc/os-release ] \
     && [ "$(. /etc/os-release && echo "${ID:-}:${VERSION_CODENAME:-}")" = "debian:$suite" ]; then
    echo prebuilt
  else
    echo source
  fi
}

# The stand-in's label of an image in the storage ("" for an image that is no stand-in, "-"
# when the image is missing).
_sb_image_label() {
  "$SWITCHBOARD_BUILDAH" inspect --type image \
    --format '{{index .OCIv1.Config.Labels "io.switchboard.stand-in"}}' "$1" 2>/dev/null || echo -
}

# Makes the stand-in NAME (debian:SUITE-slim or rust:RELEASE-SUITE) from Debian's packages.
_sb_image_stand_in() {
  local name=$1 dir=$2 repo tag suite key release host sysroot tc env=() opts=() tar ctr
  repo=${name%%:*}
  tag=${name#*:}
  # The apt options this machine reaches Debian's archive with (a mirror's stale Release file,
  # say) hold inside the stand-in too, whose apt the Dockerfile runs.
  while IFS= read -r opt; do
    opts+=(--aptopt="$opt")
  done < <(apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|http::Proxy|https::Proxy) ')
  local mmdebstrap=(mmdebstrap --quiet --variant=minbase "${opts[@]}"
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*')
  case "$repo:$tag" in
    debian:*-slim)
      suite=${tag%-slim}
      key="mmdebstrap minbase $suite, slim"
      env=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
      ;;
    rust:*-*)
      release=${tag%%-*}
      suite=${tag#*-}
      sysroot=$(rustc --print sysroot) || return 1
      host=$(rustc -vV | sed -n 's/^host: //p')
      tc="$(rustc -vV | sed -n 's/^release: //p')-$host"
      # What of buildpack-deps, the official image's base, a Rust build uses.
      local packages="ca-certificates curl git gcc g++ libc6-dev make pkg-config libssl-dev xz-utils"
      key="mmdebstrap minbase $suite + $packages, $(rustc -V)"
      mmdebstrap+=(--include="${packages// /,}"
        --customize-hook="mkdir -p \"\$1/usr/local/rustup/toolchains/$tc\" \"\$1/usr/local/cargo/bin\""
        --customize-hook="tar -C '$sysroot' --exclude=./share/doc -cf - . | tar -C \"\$1/usr/local/rustup/toolchains/$tc\" -xf -"
        --customize-hook="for b in \"\$1/usr/local/rustup/toolchains/$tc/bin/\"*; do ln -s \"../../rustup/toolchains/$tc/bin/\${b##*/}\" \"\$1/usr/local/cargo/bin/\${b##*/}\"; done")
      env=(--env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo
        --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        --env "RUST_VERSION=$(rustc -vV | sed -n 's/^release: //p')")
      ;;
    *)
      echo "image leg: no stand-in recipe for $name: pull it into the storage ($SWITCHBOARD_BUILDAH pull $name)" >&2
      return 1
      ;;
  esac
  case "$(_sb_image_label "$name")" in
    "$key") return 0 ;;
    -) ;;
    "") return 0 ;; # a real image, pulled into the storage
  esac
  # (Read whole: `grep -q` would stop reading early, and rustc, its next line refused, fail
  # the pipeline under pipefail.)
  if [ "$repo" = rust ] && ! [[ "$(rustc -vV | sed -n 's/^release: //p')" =~ ^$release(\.|$) ]]; then
    echo "image leg: the stand-in for $name needs this machine's Rust to be $release, not $(rustc -V)" >&2
    return 1
  fi
  echo "image leg: making a stand-in for $name ($key)" >&2
  tar="$dir/stand-in.tar"
  "${mmdebstrap[@]}" "$suite" "$tar" \
    "deb http://deb.debian.org/debian $suite main" \
    "deb http://deb.debian.org/debian $suite-updates main" \
    "deb http://deb.debian.org/debian-security $suite-security main" \
    || { echo "image leg: mmdebstrap $suite failed" >&2; rm -f "$tar"; return 1; }
  ctr=$("$SWITCHBOARD_BUILDAH" from scratch) \
    && "$SWITCHBOARD_BUILDAH" add "$ctr" "$tar" / >/dev/null \
    && "$SWITCHBOARD_BUILDAH" config "${env[@]}" --cmd bash \
      --label "io.switchboard.stand-in=$key" \
      --label "org.opencontainers.image.description=A local stand-in for $name: $key" "$ctr" \
    && "$SWITCHBOARD_BUILDAH" commit --quiet --rm "$ctr" "docker.io/library/$name" >/dev/null
  local status=$?
  rm -f "$tar"
  [ $status -eq 0 ] || { echo "image leg: importing the stand-in for $name failed" >&2; return 1; }
  # The stand-in this one replaces, if any.
  "$SWITCHBOARD_BUILDAH" rmi --prune >/dev/null 2>&1 || true
}

_sb_image_install() {
  local root dir base out ctr
  root="$(pwd)"
  dir="$root/target/peers/image"
  unset SWITCHBOARD_IMAGE_SKIP
  _sb_image_apt || return 1
  mkdir -p "$dir/tmp"
  cat >"$dir/buildah" <<EOF
#!/bin/sh
# buildah on the image leg's own storage (scripts/peers/image.sh).
export TMPDIR='$dir/tmp' BUILDAH_ISOLATION=chroot
exec buildah --root '$dir/storage' --runroot '$dir/run' --storage-driver vfs "\$@"
EOF
  chmod +x "$dir/buildah"
  export SWITCHBOARD_BUILDAH="$dir/buildah"
  if ! out=$("$SWITCHBOARD_BUILDAH" info 2>&1 >/dev/null); then
    export SWITCHBOARD_IMAGE_SKIP="buildah cannot run here: ${out%%$'\n'*}"
    return 0
  fi
  export SWITCHBOARD_IMAGE_BINARY
  SWITCHBOARD_IMAGE_BINARY=$(_sb_image_binary)
  for base in $(_sb_image_bases); do
    # The Rust image serves only the source stage.
    [ "$SWITCHBOARD_IMAGE_BINARY" = prebuilt ] && [ "${base%%:*}" = rust ] && continue
    _sb_image_stand_in "$base" "$dir" || return 1
  done
  # A container of the runtime base runs a command: chroot isolation works here.
  base=$(_sb_image_bases | grep -v '^rust:' | head -n 1)
  ctr=$("$SWITCHBOARD_BUILDAH" from --pull=never "$base") \
    || { echo "image leg: no container of $base" >&2; return 1; }
  if ! out=$("$SWITCHBOARD_BUILDAH" run "$ctr" -- true 2>&1); then
    export SWITCHBOARD_IMAGE_SKIP="buildah cannot run a container here: ${out##*$'\n'}"
  fi
  "$SWITCHBOARD_BUILDAH" rm "$ctr" >/dev/null 2>&1
  return 0
}

_sb_image_install || { echo "image leg: install failed" >&2; false; }
