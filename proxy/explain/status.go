package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// RejectionsPath is where the daemon serves its current rejections, on its metrics listener
// (--metrics-bind-address, 127.0.0.1:10249 by default: the node itself, not the network).
const RejectionsPath = "/rejections"

// Rejection is one Service the daemon does not program, in whole or (Partial) in part, and
// why. A rejected Service leaves nothing in the kernel, so explain learns its reason from the
// daemon, not from the tables.
type Rejection struct {
	// Service is "namespace/name".
	Service string `json:"service"`
	// Reason is the stable label of proxy/model/REASONS.md (the metric's reason label).
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Partial bool   `json:"partial,omitempty"`
}

// rejectionsDoc is the JSON body of RejectionsPath.
type rejectionsDoc struct {
	Rejections []Rejection `json:"rejections"`
}

// Status holds the daemon's current rejections, as the Tracker reports them (once per change,
// nil when a Service is accepted again or gone), and serves them as JSON at RejectionsPath.
// The log and the metric say the same, but neither can be read back by a tool on the node: a
// log is rotated or elsewhere, a counter has no Service name. It is safe for concurrent use.
type Status struct {
	mu sync.Mutex
	m  map[string]Rejection
	// nodePorts are manifest mode's node ports not assigned (each Service served without
	// them), replaced as a whole after each load.
	nodePorts []Rejection
}

// NewStatus returns an empty Status.
func NewStatus() *Status { return &Status{m: map[string]Rejection{}} }

// SetNodePortProblems replaces the node ports and blocks manifest mode could not assign (the
// pipeline's Result.Problems of the last load): each is a partial rejection of its Service,
// reason NodePortNotAssigned.
func (s *Status) SetNodePortProblems(probs []nodeport.Problem) {
	out := make([]Rejection, 0, len(probs))
	for _, p := range probs {
		out = append(out, Rejection{Service: p.Service, Reason: model.ReasonNodePortNotAssigned, Message: p.Error(), Partial: true})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodePorts = out
}

// Set records the rejection of a Service, or forgets it when r is nil: the Tracker's
// OnRejection.
func (s *Status) Set(key model.ServiceKey, r *model.Rejection) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r == nil {
		delete(s.m, key.String())
		return
	}
	s.m[key.String()] = Rejection{Service: key.String(), Reason: r.Reason, Message: r.Message, Partial: r.Partial}
}

// List returns the current rejections sorted by Service (a Service may have several: its
// rejection and node ports not assigned).
func (s *Status) List() []Rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Rejection, 0, len(s.m)+len(s.nodePorts))
	for _, r := range s.m {
		out = append(out, r)
	}
	out = append(out, s.nodePorts...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out
}

// ServeHTTP answers GET with {"rejections": [...]}.
func (s *Status) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rejectionsDoc{Rejections: s.List()})
}

// FetchRejections reads a daemon's rejections from url (http://127.0.0.1:10249/rejections).
func FetchRejections(ctx context.Context, c *http.Client, url string) ([]Rejection, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	var doc rejectionsDoc
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return doc.Rejections, nil
}
