# Machine set-up shared by the scripts: sourced, not run. Installs only what is missing.
# Needs root for apt and hugepages; without root it says what it skipped.

zcx_log() { printf '[zcx-setup] %s\n' "$*" >&2; }

zcx_is_root() { [ "$(id -u)" = 0 ]; }

# zcx_apt_install PKG...: installs the Debian packages that are not installed yet.
zcx_apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! zcx_is_root; then
        zcx_log "not root: cannot install ${missing[*]}; tests that need them will say they skipped"
        return 0
    fi
    zcx_log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# zcx_reserve_hugepages N2M [N1G]: makes at least N2M 2 MiB pages (and N1G 1 GiB pages, best effort)
# available. Never lowers an existing reservation.
zcx_reserve_hugepages() {
    local want2m=$1 want1g=${2:-0} dir have
    if ! zcx_is_root; then
        zcx_log "not root: hugepages not reserved; hugepage tests will say they skipped"
        return 0
    fi
    dir=/sys/kernel/mm/hugepages/hugepages-2048kB
    if [ -w "$dir/nr_hugepages" ]; then
        have=$(cat "$dir/nr_hugepages")
        if [ "$have" -lt "$want2m" ]; then
            echo "$want2m" > "$dir/nr_hugepages" || true
        fi
        zcx_log "2 MiB hugepages: $(cat "$dir/nr_hugepages") reserved, $(cat "$dir/free_hugepages") free"
    fi
    dir=/sys/kernel/mm/hugepages/hugepages-1048576kB
    if [ "$want1g" -gt 0 ] && [ -w "$dir/nr_hugepages" ]; then
        have=$(cat "$dir/nr_hugepages")
        if [ "$have" -lt "$want1g" ]; then
            echo "$want1g" > "$dir/nr_hugepages" 2>/dev/null || true
        fi
        zcx_log "1 GiB hugepages: $(cat "$dir/nr_hugepages") reserved, $(cat "$dir/free_hugepages") free"
    fi
}

# zcx_require_cargo: the Rust toolchain comes with the machine; it cannot be downloaded here.
zcx_require_cargo() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || { zcx_log "cargo not found: install a stable Rust toolchain"; exit 1; }
}
