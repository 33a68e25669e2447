package app

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/kubeproxycleanup"
)

// cleanupKubeProxy removes what kube-proxy left in the kernel (proxy/kubeproxycleanup says what that
// is) in one batch, so a failure leaves everything as it was.
func cleanupKubeProxy(ctx context.Context, log logr.Logger, k *nft.Kernel) error {
	p, err := kubeproxycleanup.PlanCleanup(ctx, k)
	if err != nil {
		return err
	}
	if p.Empty() {
		log.Info("nothing to clean up: no kube-proxy tables or chains")
		return nil
	}
	if _, err := k.Apply(ctx, p.Tx); err != nil {
		return fmt.Errorf("remove kube-proxy's rules (nothing was changed): %w", err)
	}
	tables := make([]string, len(p.Tables))
	for i, t := range p.Tables {
		tables[i] = t.String()
	}
	log.Info("deleted kube-proxy's rules", "tables", tables, "chainsPerTable", p.Chains, "jumpRules", p.JumpRules)
	return nil
}
