# Installs the OpenAI-compatible interop peer into target/peers/llm/ (idempotent) and exports
# where the tests find it:
#   SWITCHBOARD_LLM_LITELLM  the `litellm` command of a venv with litellm[proxy]==1.108.7, the
#                            LiteLLM proxy: a real chat-completions server whose models can
#                            answer with a fixed `mock_response`, so no model or network is needed
# Sourced by scripts/test; fails loudly when an install fails.
llm_peer_install() {
  local root dir venv
  root="$(pwd)"
  dir="$root/target/peers/llm"
  venv="$dir/venv"
  mkdir -p "$dir"
  if [ ! -x "$venv/bin/litellm" ] || ! "$venv/bin/python" -c \
      'import importlib.metadata as m; assert m.version("litellm") == "1.108.7"' 2>/dev/null; then
    echo "installing litellm[proxy] 1.108.7 into $venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'litellm[proxy]==1.108.7' || return 1
  fi
  export SWITCHBOARD_LLM_LITELLM="$venv/bin/litellm"
}
llm_peer_install || { echo "scripts/peers/llm.sh: installing the LiteLLM proxy failed" >&2; return 1 2>/dev/null || exit 1; }
