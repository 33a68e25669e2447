package soak

import (
	"fmt"
	"net/netip"

	"github.com/nftproxy/nftproxy/test/fixture"
)

// serviceFile and sliceFile are the file names of a Service and of its EndpointSlices: apart,
// so the churn can rewrite endpoints without touching the Service.
func serviceFile(s fixture.Service) string { return "svc-" + s.NS() + "-" + s.Name + ".yaml" }
func sliceFile(s fixture.Service) string   { return "eps-" + s.NS() + "-" + s.Name + ".yaml" }

// slicesYAML is the Service's EndpointSlices with version written into a label, so two
// generations of the same endpoints still differ as files.
func slicesYAML(s fixture.Service, version int) string {
	s.SliceLabels = map[string]string{"soak.nftproxy.io/version": fmt.Sprint(version)}
	return s.SlicesYAML()
}

// serviceAddr is ClusterIP number n of the service CIDR 198.19.0.0/18 for scenarios with more
// Services than lab.ClusterIPv4 numbers (n from 1 to 16382): 198.19.(n/256).(n%256), skipping
// nothing but .0 of the first block.
func serviceAddr(n int) netip.Addr {
	if n < 1 || n > 16382 {
		panic(fmt.Sprintf("soak: service address index %d outside 1..16382", n))
	}
	return netip.AddrFrom4([4]byte{198, 19, byte(n / 256), byte(n % 256)})
}
