package proxier

import (
	"fmt"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// SlowSync is the sync duration above which a sync is logged at -v 0, with its phases and the
// Services that cost it most: a sync that long delays every change behind it, and the log must
// say which Service to look at.
const SlowSync = time.Second

// slowTop is how many of the costliest Services a slow sync's log line names.
const slowTop = 3

// syncTrace records, for the log of a slow sync, how long its phases took and which Services
// it built cost most. Reset at the start of each sync; costs are kept for the top few only.
type syncTrace struct {
	start  time.Time
	phases []string
	last   time.Time
	top    [slowTop]costOf
}

type costOf struct {
	key  model.ServiceKey
	cost int
}

func (t *syncTrace) reset(now time.Time) { *t = syncTrace{start: now, last: now} }

// cost notes the cost of a Service the sync built (a Service built twice, for its own
// transaction, is named once).
func (t *syncTrace) cost(key model.ServiceKey, cost int) {
	for i := range t.top {
		if t.top[i].key == key && t.top[i].cost > 0 {
			return
		}
	}
	for i := range t.top {
		if cost > t.top[i].cost {
			copy(t.top[i+1:], t.top[i:len(t.top)-1])
			t.top[i] = costOf{key, cost}
			return
		}
	}
}

// phase ends a phase named what at now.
func (t *syncTrace) phase(what string, now time.Time) {
	t.phases = append(t.phases, fmt.Sprintf("%s %v", what, now.Sub(t.last).Round(time.Millisecond)))
	t.last = now
}

// costliest names the costliest Services built, with their costs ("ns/a=120000, ns/b=900").
func (t *syncTrace) costliest() string {
	var out []string
	for _, c := range t.top {
		if c.cost > 0 {
			out = append(out, fmt.Sprintf("%s=%d", c.key, c.cost))
		}
	}
	return strings.Join(out, ", ")
}

// logSlow logs a sync that took longer than SlowSync, at -v 0.
func (p *Proxier) logSlow(d time.Duration, full bool, ops int, changed int, err error) {
	if d <= SlowSync {
		return
	}
	p.log.Info("slow sync: changes waited behind it; the costliest Services are named with their cost in kernel objects (see --max-service-cost)",
		"duration", d.Round(time.Millisecond), "full", full, "ops", ops, "changedServices", changed,
		"phases", strings.Join(p.trace.phases, ", "), "costliestServices", p.trace.costliest(), "failed", err != nil)
}
