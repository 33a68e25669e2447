package k8s

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nftproxy/nftproxy/test/tier"
)

// churnProfile sizes the Kubernetes-mode churn. The short one runs in `go test ./...` (CI, no
// time assertions); the long one (NFTPROXY_SOAK=1, as test/soak) is the soak figure.
type churnProfile struct {
	name string
	// services are the Services (each with one EndpointSlice) written before the churn.
	services int
	// rate is the EndpointSlice updates per second the writers aim at (NFTPROXY_K8S_CHURN_RATE
	// overrides it); a rate above what the API server sustains measures the API server.
	rate int
	// clients are the concurrent writers, each with its own Services
	// (NFTPROXY_K8S_CHURN_CLIENTS overrides it).
	clients int
	// churnFor is how long the updates go on.
	churnFor time.Duration
}

var (
	churnShort = churnProfile{name: "short", services: 500, rate: 500, clients: 8, churnFor: 5 * time.Second}
	// The long profile's rate is about what the local API server sustained on the 2-core
	// development VM (5 s runs at 500 Services: 571/s with 4 clients, 887/s with 8, 1663/s
	// with 16, no more with 32 or 64); the figure reports what a run achieved.
	churnLong = churnProfile{name: "long", services: 10000, rate: 1500, clients: 16, churnFor: 60 * time.Second}
)

// churnRun is the profile of this run.
func churnRun() churnProfile {
	p := churnShort
	if os.Getenv("NFTPROXY_SOAK") != "" {
		p = churnLong
	}
	for env, field := range map[string]*int{"NFTPROXY_K8S_CHURN_RATE": &p.rate, "NFTPROXY_K8S_CHURN_CLIENTS": &p.clients} {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*field = n
		}
	}
	return p
}

// scrape fetches the daemon's /metrics from inside the node.
func (e *env) scrape() (tier.Sample, error) {
	r, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.metricsAddr+"/metrics")
	if err != nil {
		return nil, err
	}
	if r.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", r.Status)
	}
	return tier.ParseMetrics(r.Body)
}

// peakRSS is the VmHWM of the process running exe (the daemon: setpriv execs it), read from
// /proc while it runs.
func peakRSS(exe string) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if target, err := os.Readlink(d + "/exe"); err == nil && target == exe {
			if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
				return tier.PeakRSS(pid)
			}
		}
	}
	return "unknown (no process runs " + exe + ")"
}
