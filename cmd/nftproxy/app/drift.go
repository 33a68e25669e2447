package app

import (
	"context"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// watchDrift subscribes to nftables events and turns every foreign change to our tables (an
// operator's `nft flush ruleset`, firewalld reloading, a deleted element) into a full sync that
// reads the kernel back and repairs it, within about MinSyncPeriod instead of the next periodic
// resync. Our own commits and other tables' changes are ignored by the Watcher. If events cannot
// be watched, the periodic full resync still repairs drift; that is logged, not fatal. The
// returned func releases the socket.
func watchDrift(ctx context.Context, log logr.Logger, kernel *nft.Kernel, builders []*ruleset.Builder,
	runner *proxier.Runner, dm *metrics.Drift, fullSync time.Duration) func() {
	var tables []nft.Table
	for _, b := range builders {
		tables = append(tables, b.Table())
	}
	log = log.WithName("drift")
	w, err := nft.NewWatcher(tables, kernel)
	if err != nil {
		log.Error(err, "cannot watch nftables events: drift is found only by the periodic full resync", "fullSyncPeriod", fullSync)
		return func() {}
	}
	go func() {
		err := w.Run(ctx, func(f nft.Foreign) {
			switch {
			case f.Overflow:
				log.Info("nftables events were lost (event socket full): verifying our tables")
				dm.Suspected(metrics.DriftEventsLost)
			case f.Unwatched:
				log.V(1).Info("another batch was committed while one of ours was applied unwatched: verifying our tables")
				dm.Suspected(metrics.DriftEventsLost)
			default:
				log.Info("another process changed nftproxy's tables: verifying and repairing", "tables", f.Tables,
					"process", f.Process, "pid", f.PID, "generation", f.Gen, "events", f.Events)
				dm.Suspected(metrics.DriftForeignChange)
			}
			runner.SuspectDrift()
		})
		if err != nil {
			log.Error(err, "stopped watching nftables events: drift is found only by the periodic full resync", "fullSyncPeriod", fullSync)
		}
	}()
	return func() { w.Close() }
}
