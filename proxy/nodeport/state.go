package nodeport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nftproxy/nftproxy/allocator"
)

// StateFile is the name of the assignment file inside the state directory.
const StateFile = "nodeports.json"

// stateVersion is written into every state file; a file of another version is refused rather
// than guessed at.
const stateVersion = 1

// state is what survives a restart: for every Service that holds something, the node ports,
// health-check node port and node-port blocks it was given, and the manifest file it came from
// (so a Service whose file fails to load keeps its ports, as the manifest feeder keeps the
// Service).
type state struct {
	Version int `json:"version"`
	// NodePortRange and BlockRange are informational: claims are absolute port numbers and are
	// re-checked against the configured ranges at every assignment.
	NodePortRange allocator.Range     `json:"nodePortRange"`
	BlockRange    *allocator.Range    `json:"blockRange,omitempty"`
	Services      map[string]svcEntry `json:"services"`
}

// svcEntry is one Service's holdings, keyed in state by "namespace/name".
type svcEntry struct {
	File                string       `json:"file,omitempty"`
	Ports               []portEntry  `json:"ports,omitempty"`
	HealthCheckNodePort int          `json:"healthCheckNodePort,omitempty"`
	Blocks              []blockEntry `json:"blocks,omitempty"`
}

// portEntry is the node port of one named ServicePort. Ports are remembered by name, as the
// API server patches a missing nodePort from the old object's port of the same name.
type portEntry struct {
	Name     string `json:"name"`
	NodePort int    `json:"nodePort"`
}

// blockEntry is the node-port block of one ranged ServicePort.
type blockEntry struct {
	Name  string          `json:"name"`
	Block allocator.Range `json:"block"`
}

func (e svcEntry) port(name string) int {
	for _, p := range e.Ports {
		if p.Name == name {
			return p.NodePort
		}
	}
	return 0
}

func (e svcEntry) block(name string) (allocator.Range, bool) {
	for _, b := range e.Blocks {
		if b.Name == name {
			return b.Block, true
		}
	}
	return allocator.Range{}, false
}

func (e svcEntry) empty() bool {
	return len(e.Ports) == 0 && e.HealthCheckNodePort == 0 && len(e.Blocks) == 0
}

// loadState reads dir/StateFile. A missing file is an empty state; an unreadable or malformed
// one is an error, because starting empty would hand the Services new ports and break every
// client that uses the old ones.
func loadState(dir string) (map[string]svcEntry, error) {
	if dir == "" {
		return map[string]svcEntry{}, nil
	}
	path := filepath.Join(dir, StateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]svcEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read node-port state %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s state
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("node-port state %s is not valid (%v); fix it, or move it away to start "+
			"afresh (Services without explicit node ports will then get new ones)", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("node-port state %s has version %d, this nftproxy reads version %d; "+
			"move it away to start afresh", path, s.Version, stateVersion)
	}
	if s.Services == nil {
		s.Services = map[string]svcEntry{}
	}
	return s.Services, nil
}

// encodeState renders the state deterministically (map keys sorted by encoding/json), so an
// unchanged assignment produces identical bytes and is not rewritten.
func encodeState(s state) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode node-port state: %w", err)
	}
	return append(b, '\n'), nil
}

// writeFileAtomic replaces dir/name with data so that a reader (or a crash) sees either the old
// or the new content, never a mix: write a temporary file in the same directory, sync it,
// rename it over the target, sync the directory.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write node-port state in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	target := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), target); err != nil {
		return fmt.Errorf("replace %s: %w", target, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state directory %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state directory %s: %w", dir, err)
	}
	return nil
}
