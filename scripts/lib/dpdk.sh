# DPDK set-up shared by the scripts: sourced, not run. Installs only what is missing.

# zcx_dpdk_install: installs Debian's DPDK 22.11 (libdpdk-dev pulls in every librte-*23 runtime
# package, the drivers included; dpdk adds the tools) and pkg-config, which zcx-dpdk-sys uses to find
# it. As root, quietly, and only the packages that are missing; without root it says what it skipped.
# Returns non-zero only if an install was attempted and failed.
zcx_dpdk_install() {
    local pkgs=(libdpdk-dev dpdk pkg-config) missing=() pkg
    for pkg in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        printf '[zcx-dpdk] not root: cannot install %s; DPDK tests will say they skipped\n' "${missing[*]}" >&2
        return 0
    fi
    printf '[zcx-dpdk] installing %s\n' "${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
