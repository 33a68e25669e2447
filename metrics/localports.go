package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/proxy/localports"
)

// EphemeralOverlapPorts is the gauge of ports, per configured range, that this node's kernel may
// pick as ephemeral source ports (net.ipv4.ip_local_port_range less ip_local_reserved_ports,
// read in the daemon's network namespace). Anything above 0 is a misconfiguration: the node's
// own connections can get such a port as their source port, and their replies then match a
// node port or block and are sent to a pod.
const EphemeralOverlapPorts = "nftproxy_ephemeral_overlap_ports"

// LocalPorts exports the node's ephemeral-port check.
type LocalPorts struct {
	overlap *prometheus.GaugeVec
}

// NewLocalPorts creates the gauge, with every range label of localports at 0, and registers it on reg.
func NewLocalPorts(reg prometheus.Registerer) (*LocalPorts, error) {
	m := &LocalPorts{overlap: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: EphemeralOverlapPorts,
		Help: "Ports of each range (node_port_range, block_range, blocks: the programmed node-port blocks) that this node's kernel may use as ephemeral source ports (net.ipv4.ip_local_port_range less ip_local_reserved_ports); above 0, the node's own connections can be captured by a Service."},
		[]string{"range"})}
	for _, r := range localports.Labels() {
		m.overlap.WithLabelValues(r)
	}
	if err := reg.Register(m.overlap); err != nil {
		return nil, err
	}
	return m, nil
}

// Overlap sets the number of ephemeral, unreserved ports in the range labelled r (one of
// localports.Labels): it is the localports.Observer the daemon passes.
func (m *LocalPorts) Overlap(r string, ports int) { m.overlap.WithLabelValues(r).Set(float64(ports)) }
