package report

// The report's fixed prose: how each figure is taken. It changes only with the code.

const methodText = `
## Method

Everything runs as root inside network namespaces the benchmark creates and removes
(addresses from 198.18.0.0/15); nothing touches the host's own namespace. Times are medians
with [min–max] over the runs; a ratio compares two medians taken in the same campaign. The
machine is a shared VM: trust ratios and orders of magnitude more than the last digit.
`

const syncMethodText = `Each run takes fresh namespaces, the seeded workload (bench/workload: 30% NodePort, 1%
100-port UDP ranges, 0.5% all-ports, 10% with a second UDP port; 10 endpoints per port) and the
real proxier (proxy/proxier) over the kernel. *Full sync* is a new proxier's first sync into an
empty namespace; *restart* is a second proxier against the programmed kernel (read-back and
diff); then partial syncs after 1 endpoint change, after 100 endpoint changes (in 100
Services) and after one new Service. Columns: *our Go* is building and diffing, *read-back* the
kernel dump, *encode* the batch encoding, *kernel apply* from the first byte sent to the
kernel's answer (its commit); *CPU user/sys* are the process's own CPU (sys is mostly the
kernel's work for our netlink traffic). *nft -f* loads the identical ruleset as text into
another fresh namespace (what knftables-based proxies do). *Per-endpoint chains* is the same
workload, version by version, in the layout kube-proxy's nftables mode used until 1.35 (one
chain per endpoint with a hairpin rule and a DNAT rule, the Service chain picking one with
numgen + goto; built by bench/chains from nftproxy's own ruleset) applied our way, one netlink
batch; partial syncs flush and rewrite changed chains, add and delete chains, diff set elements,
as upstream's partial sync does. Only its apply is timed.
`

const peersMethodText = `One etcd + kube-apiserver (built from the Go module proxy, test/cluster) holds the workload as
Services + EndpointSlices (created through the API by bench/peers) and a Node object. Each peer
runs alone, in turn, in the node namespace of a fresh client/node/backend topology
(bench/probe), watching that API server through a relay, with the same node name and metrics
address; each kube-proxy mode runs in every release test/cluster builds (v1.37.2 and v1.34.4,
each row names its release); each peer paces its syncs by its own default: kube-proxy's fixed
1 s minimum sync period in both modes (both releases), nftproxy's adaptive pacing (the wait follows what its syncs cost, at most
1 s; README, "Sync pacing"); kube-proxy also gets --conntrack-max-per-core=0 and logs at -v=2
(one line per sync with its numbers of chains and rules), and iptables mode runs the
distribution's iptables-restore (nf_tables backend). The backend namespace owns every pod
address (local routes) and answers on port 8080 with the address a connection reached.

Each peer at each size runs: start-up until serving and quiet, first packets, a restart, then the
endpoint and new-Service trials on the restarted process. Every wait is bounded, and so is a
peer's whole run at one size (its budget): a peer that does not serve in time fails its row with
what it was doing then (the processes it was waiting for, e.g. an iptables-restore with its
running time, CPU time and how much of its input it had read, and its last log lines), and is
not run at larger sizes; trials the budget left cannot hold are skipped with a note.

- *full sync (own metric)*: kubeproxy_sync_proxy_rules_duration_seconds (nftproxy exports the
  same name) once the peer is quiet after start-up (no new sync for 2 s); the mean of those
  syncs when there were several.
- *start-up to serving*: process start until a ClusterIP answers through it.
- *endpoint change: API→packet*: the probe Service's only endpoint is moved with an
  EndpointSlice update; the time from the API call until a new connection from the client
  reaches the new address (a new connection every ms). Same for a *new Service*. This is the
  network-programming latency measured the same way for every peer. A new Service is two API
  objects (Service, then EndpointSlice): the first sync sees the Service without endpoints and
  the second waits out kube-proxy's 1 s minimum sync period, so about 1 s of a new Service's
  time is that period for kube-proxy; nftproxy's pacing lets it follow a few ms after a cheap
  sync; *own programming metric*
  is the peer's kubeproxy_network_programming_duration_seconds: every peer, nftproxy included,
  measures it from the slice's last-change-trigger-time (which the benchmark sets as the
  EndpointSlice controller would) to the sync that programmed it, so it includes the API
  server's and the watch's share.
- *sync (metric)*: the mean duration of the syncs the peer ran for that change.
- *restart sync*: a second process of the peer against the kernel the first one programmed.
- *peak RSS*: VmHWM of the first process (start-up and first packets), before the restart.

`
