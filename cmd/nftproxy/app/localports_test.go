package app

import (
	"reflect"
	"testing"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/localports"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestTrackerBlocks: the daemon's check sees each accepted node-port block once, and no single
// node port.
func TestTrackerBlocks(t *testing.T) {
	key := model.ServiceKey{Namespace: "default", Name: "rtp"}
	name := model.PortName{Service: key, Port: "media", Protocol: model.UDP}
	block := model.ServicePort{Name: name, Port: 20000, PortEnd: 20099, NodePort: 20000, NodePortEnd: 20099}
	single := model.ServicePort{Name: model.PortName{Service: key, Port: "sip", Protocol: model.UDP}, Port: 5060, PortEnd: 5060, TargetPort: 5060, NodePort: 30060, NodePortEnd: 30060}
	snap := model.Snapshot{Services: map[model.ServiceKey]*model.Service{
		key:                                     {Key: key, Ports: []model.ServicePort{block, single, block}}, // block once per family
		{Namespace: "default", Name: "refused"}: {Key: model.ServiceKey{Namespace: "default", Name: "refused"}},
	}}
	want := []localports.Block{{Name: "default/rtp/udp/media", Range: allocator.MustParseRange("20000-20099")}}
	if got := trackerBlocks(snap); !reflect.DeepEqual(got, want) {
		t.Errorf("trackerBlocks = %v, want %v", got, want)
	}
}
