package metrics

import "github.com/prometheus/client_golang/prometheus"

// ListenerUp is 1 while a server of the daemon listens on its address, 0 while its port cannot
// be bound (taken by another process, e.g. kube-proxy on the same node) and is being retried.
const ListenerUp = "nftproxy_listener_up"

// The values of ListenerUp's server label.
const (
	ServerHealthz = "healthz"
	ServerMetrics = "metrics"
)

// Listeners reports whether the health and metrics servers listen. A port that cannot be
// bound is retried rather than fatal (unless --bind-address-hard-fail), so this is where it shows.
type Listeners struct {
	up *prometheus.GaugeVec
}

// NewListeners creates the gauge and registers it on reg.
func NewListeners(reg prometheus.Registerer) (*Listeners, error) {
	m := &Listeners{up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ListenerUp,
		Help: "1 while the server (healthz, metrics) listens on its address, 0 while its port cannot be bound and is retried every 5s."}, []string{"server"})}
	if err := reg.Register(m.up); err != nil {
		return nil, err
	}
	return m, nil
}

// Up sets whether server listens.
func (m *Listeners) Up(server string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(server).Set(v)
}
