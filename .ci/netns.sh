# Hosts on one LAN, on one machine (sourced by .ci/rails and
# docs/gen/rails-bench.sh): `netns_up TAG N` makes network namespaces
# TAG-h0 .. TAG-h(N-1), host h at 10.77.0.(h+1)/24 on its eth0, all joined
# by a bridge in namespace TAG-lan (host h's port there: TAG-p<h>);
# `netns_down TAG N` removes them. Needs root and iproute2 (installed if
# missing; fails loudly otherwise). IPv6 is off: what crosses the LAN is
# the job's.
netns_need() {
    [ "$(id -u)" -eq 0 ] || { echo "network namespaces need root"; exit 1; }
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
    fi
}

netns_up() {
    local tag=$1 hosts=$2 h ns
    netns_need
    ip netns add "$tag-lan"
    ip -n "$tag-lan" link add br0 type bridge
    ip -n "$tag-lan" link set br0 up
    for h in $(seq 0 $((hosts - 1))); do
        ns=$tag-h$h
        ip netns add "$ns"
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        ip link add "$tag-e$h" type veth peer name "$tag-p$h"
        ip link set "$tag-e$h" netns "$ns"
        ip link set "$tag-p$h" netns "$tag-lan"
        ip -n "$ns" link set "$tag-e$h" name eth0
        ip -n "$ns" addr add "10.77.0.$((h + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        ip -n "$tag-lan" link set "$tag-p$h" master br0
        ip -n "$tag-lan" link set "$tag-p$h" up
    done
}

netns_down() {
    local tag=$1 hosts=$2 h
    for h in $(seq 0 $((hosts - 1))); do ip netns del "$tag-h$h" 2>/dev/null || true; done
    ip netns del "$tag-lan" 2>/dev/null || true
}

# A fabric file for N hosts of the LAN, host h running node h.
netns_fabric() {
    local hosts=$1 h
    for h in $(seq 0 $((hosts - 1))); do
        printf '[[host]]\naddress = "10.77.0.%d"\nnodes = [%d]\n' $((h + 1)) "$h"
    done
}
