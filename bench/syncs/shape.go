package syncs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Shape is one workload size: Services × endpoints per Service port. The campaign measures
// several endpoint counts because the kernel's cost follows the number of elements as well as
// the number of Services: 5,000 × 50 (250k endpoints) is the shape of upstream Kubernetes
// issue #135639, where kube-proxy's syncs were reported to take minutes.
type Shape struct {
	Services, Endpoints int
}

// String is "5000x50", the form ParseShapes reads.
func (s Shape) String() string { return fmt.Sprintf("%dx%d", s.Services, s.Endpoints) }

// MarshalText makes a Shape a JSON map key ("5000x50").
func (s Shape) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads "5000x50", or a bare "1000" (results.json files written before shapes
// existed, when every run had 10 endpoints per Service port).
func (s *Shape) UnmarshalText(b []byte) error {
	v, err := parseShape(string(b), 10)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

func parseShape(f string, endpoints int) (Shape, error) {
	svc, eps, hasEps := strings.Cut(strings.TrimSpace(f), "x")
	n, err := strconv.Atoi(svc)
	if err != nil || n < 1 {
		return Shape{}, fmt.Errorf("bad shape %q: want SERVICESxENDPOINTS (e.g. 5000x50) or SERVICES", f)
	}
	if hasEps {
		if endpoints, err = strconv.Atoi(eps); err != nil || endpoints < 1 {
			return Shape{}, fmt.Errorf("bad shape %q: want SERVICESxENDPOINTS (e.g. 5000x50) or SERVICES", f)
		}
	}
	return Shape{Services: n, Endpoints: endpoints}, nil
}

// ParseShapes reads a comma-separated list of shapes ("1000,10000,5000x50"); a bare number of
// Services takes endpoints per Service port.
func ParseShapes(list string, endpoints int) ([]Shape, error) {
	var out []Shape
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		s, err := parseShape(f, endpoints)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// SortShapes orders shapes by endpoints per Service, then Services: each endpoint count is one
// series of the plots and one group of tables.
func SortShapes(s []Shape) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Endpoints != s[j].Endpoints {
			return s[i].Endpoints < s[j].Endpoints
		}
		return s[i].Services < s[j].Services
	})
}
