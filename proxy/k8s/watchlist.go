package k8s

import (
	"os"

	clientfeatures "k8s.io/client-go/features"
)

// WatchListEnv is client-go's own switch of streamed initial lists; when it is set, its value
// decides and StreamInitialLists changes nothing.
const WatchListEnv = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// StreamInitialLists has every informer of the process take its initial state as a stream
// rather than as a list: a watch with sendInitialEvents (KEP-3157 "watch-list", client-go's
// WatchListClient feature, off by default in client-go 0.34, on from 0.35), ended by a
// bookmark. Each object is decoded on its own and passes the informer's transform (the slimmer,
// the parsed slices) as it arrives, so the initial state is never in memory twice: a list holds
// every page of the response and every object decoded whole until the last page is in
// (bench/README.md, "Memory: peak resident set", gives both as BenchmarkKubeMemoryProfile
// measures them).
//
// The API server serves streams from its watch cache when its WatchList feature is on (beta
// and on by default from 1.32, off in 1.33, on again from 1.34); otherwise it refuses the
// request and client-go falls back to a list, logging once per informer.
//
// The switch is process-wide (client-go reads its gates when a reflector is built), so the
// binary calls it once at start-up, before any informer exists. A client that cannot stream
// (client-go's fake clientset never sends the closing bookmark) says so, and the informers
// (newInformer) then list.
// Setting WatchListEnv in the environment decides instead (false: lists).
func StreamInitialLists() {
	if _, set := os.LookupEnv(WatchListEnv); set {
		return
	}
	clientfeatures.ReplaceFeatureGates(streamedLists{clientfeatures.FeatureGates()})
}

// streamedLists is client-go's gates with WatchListClient on.
type streamedLists struct{ clientfeatures.Gates }

func (g streamedLists) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.WatchListClient || g.Gates.Enabled(f)
}
