package k8s

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
)

// DefaultProbePeriod is how often the source asks the API server's /readyz. Informers retry
// quietly and a cluster with no changes sends no events, so without a probe an unreachable API
// server is invisible; the daemon's /healthz reports it once it lasts longer than its timeout.
const DefaultProbePeriod = 5 * time.Second

// reachability tracks whether the API server answers, and since when it has not.
type reachability struct {
	mu           sync.Mutex
	failingSince time.Time
}

func (r *reachability) since() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failingSince
}

func (r *reachability) report(now time.Time, err error, log logr.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil && r.failingSince.IsZero():
		r.failingSince = now
		log.Error(err, "API server unreachable: the rules stay as they are; changes wait for it")
	case err == nil && !r.failingSince.IsZero():
		log.Info("API server reachable again", "after", now.Sub(r.failingSince).Round(time.Second))
		r.failingSince = time.Time{}
	}
}

// probe asks /readyz every period until ctx ends. /readyz is readable by every authenticated
// identity (system:public-info-viewer), so the DaemonSet needs no extra RBAC for it.
func (r *reachability) probe(ctx context.Context, client kubernetes.Interface, period time.Duration, now func() time.Time, log logr.Logger) {
	rc := client.Discovery().RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() {
		log.V(1).Info("API client has no REST client (a fake): reachability not probed")
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		c, cancel := context.WithTimeout(ctx, period)
		err := rc.Get().AbsPath("/readyz").Do(c).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.report(now(), err, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
