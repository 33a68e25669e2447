package soak

import (
	"fmt"
	"net/http"

	"github.com/nftproxy/nftproxy/test/tier"
)

// scrape fetches the daemon's /metrics from inside the node.
func (e *env) scrape(d *daemon) (tier.Sample, error) {
	r, err := tier.Get(e.ctx, e.lab.Node, "http://"+d.metrics+"/metrics")
	if err != nil {
		return nil, err
	}
	if r.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics of %s: %s", d.name, r.Status)
	}
	return tier.ParseMetrics(r.Body)
}
