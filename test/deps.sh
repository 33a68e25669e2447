#!/usr/bin/env bash
# Installs the system packages the kernel, e2e, node and demo tiers use (Debian/Ubuntu), when missing.
# The nftproxy binary itself needs none of them.
set -euo pipefail
need=()
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
# kube-proxy's iptables mode in the migration test (test/k8s) runs iptables-nft (Debian's default).
command -v iptables >/dev/null 2>&1 || need+=(iptables)
# promtool lints the metrics exposition and the dashboard queries (metrics tests).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# The node tier (test/node) runs a real kubelet on containerd and runc, pods on the CNI bridge
# plugin (Debian puts the plugins in /usr/lib/cni).
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ "${#need[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages: ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
