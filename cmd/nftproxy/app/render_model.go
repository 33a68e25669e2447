package app

import (
	"sort"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/manifest/pipeline"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// renderedModel is what `render` prints and `explain --manifests` traces: the tables run would
// apply for the manifests, and what the load could not use.
type renderedModel struct {
	res pipeline.Result
	// rejected are the Services rejected in whole or in part, sorted by Service.
	rejected []renderedRejection
	node     *model.Node
	tables   []*nft.Ruleset
}

type renderedRejection struct {
	key model.ServiceKey
	r   *model.Rejection
}

// renderModel loads o.Manifests through manifest mode's pipeline (render's assigner: --state-dir
// read only, a fixed seed) and builds each family's table. render may run anywhere, so the
// guard knows the node's addresses from its Node manifest only, not from the kernel of the
// machine it runs on.
func renderModel(o *Options, builders []*ruleset.Builder, guard model.GuardConfig, log logr.Logger) (*renderedModel, error) {
	var m renderedModel
	tracker := model.NewTracker(model.TrackerConfig{NodeName: o.NodeName, ProxyName: o.ProxyName, Logger: log, Guard: guard,
		OnRejection: func(k model.ServiceKey, r *model.Rejection) {
			if r != nil {
				m.rejected = append(m.rejected, renderedRejection{k, r})
			}
		}})
	a, err := newRenderAssigner(o, log)
	if err != nil {
		return nil, err
	}
	if m.res, err = newPipeline(o, log, a, tracker, nil).Load(); err != nil {
		return nil, err
	}
	snap := tracker.Snapshot()
	m.node = snap.Node
	if m.node != nil {
		if err := checkServiceCIDRs(o.ServiceCIDRs, m.node.Addresses, "in the Node manifest "+o.NodeName); err != nil {
			return nil, usageError{err}
		}
	}
	services := snap.Sorted()
	for i, s := range services { // the bound run's sync loop applies
		if r := proxier.OverCost(s.Key, proxier.ServiceCost(builders, snap.Node, s), o.MaxServiceCost); r != nil {
			services[i] = &model.Service{Key: s.Key, Rejected: r}
			m.rejected = append(m.rejected, renderedRejection{s.Key, r})
		}
	}
	sort.Slice(m.rejected, func(i, j int) bool { return m.rejected[i].key.String() < m.rejected[j].key.String() })
	for _, b := range builders {
		m.tables = append(m.tables, b.Ruleset(snap.Node, services))
	}
	return &m, nil
}

// explainNode is the model as explain sees a node: its tables, the Node manifest's addresses
// as the node's own, and the rejections render lists.
func (m *renderedModel) explainNode() *explain.Node {
	n := &explain.Node{Tables: m.tables, Rejections: []explain.Rejection{}}
	if m.node != nil {
		n.Addrs = m.node.Addresses
	}
	for _, r := range m.rejected {
		n.Rejections = append(n.Rejections, explain.Rejection{Service: r.key.String(), Reason: r.r.Reason, Message: r.r.Message, Partial: r.r.Partial})
	}
	for _, p := range m.res.Problems {
		n.Rejections = append(n.Rejections, explain.Rejection{Service: p.Service, Reason: model.ReasonNodePortNotAssigned, Message: p.Error(), Partial: true})
	}
	return n
}
