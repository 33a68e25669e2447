// Package pipeline is manifest mode's one path from a directory of manifests to the model:
// load, assign node ports (manifest mode is its own node-port control plane, proxy/nodeport),
// feed the Tracker. `run` (on every reload of its Watcher), `run --once` and `render` all go
// through a Pipeline, so what they program or print cannot drift apart.
//
// It lives beside proxy/manifest rather than in it because proxy/nodeport already imports
// proxy/manifest (the assigner works on manifest.Objects): manifest cannot import nodeport back.
package pipeline

import (
	"fmt"
	"sort"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// Config says where a Pipeline loads from and what it feeds.
type Config struct {
	// Dir is the manifest directory Load reads.
	Dir string
	// Loader reads Dir (its file-size limit).
	Loader manifest.Loader
	// Assigner gives the loaded Services their node ports and blocks.
	Assigner *nodeport.Assigner
	// Tracker receives the result.
	Tracker *model.Tracker
	// NodeName is this node: the first load warns when no Node object of that name is loaded.
	NodeName string
	// Log receives what a load could not use: skipped files, objects left out, node ports not
	// assigned (each once per change), a state file that could not be written.
	Log logr.Logger
	// OnProblem, if set, is called once for each node-port problem that is new or whose reason
	// changed, as the Tracker's OnRejection is called once per change: the daemon counts it in
	// nftproxy_invalid_services_total{reason="NodePortNotAssigned"}.
	OnProblem func(nodeport.Problem)
	// OnNodeMissing, if set, is called after each load with whether the Node named NodeName
	// is missing from it (the daemon's nftproxy_node_object_missing).
	OnNodeMissing func(missing bool)
}

// Pipeline applies successive loads of one directory to one Tracker. It is not safe for
// concurrent use; the Watcher's serial OnLoad callback is the intended caller.
type Pipeline struct {
	cfg    Config
	feeder *manifest.Feeder
	fed    bool
	// nodeMissing: the last load had no Node object for this node.
	nodeMissing bool
	// fileErrs are the file errors of the last load (their messages), badFiles their files.
	fileErrs map[string]bool
	badFiles []string
	// reported holds the node-port problems already reported, by Service and port, with their
	// message: a problem is reported when it appears or changes, and its end is logged.
	reported map[problemKey]string
}

type problemKey struct{ service, port string }

// Result is what one load brought: everything render prints besides the ruleset.
type Result struct {
	// Objects are the loaded objects, with their node ports assigned.
	Objects manifest.Objects
	// FileErrors are the files that failed to load (their objects keep their last good state).
	FileErrors []manifest.FileError
	// Problems are the node ports and blocks not assigned; each Service is served without them.
	Problems []nodeport.Problem
}

// New returns a Pipeline that has fed nothing yet.
func New(cfg Config) *Pipeline {
	f := manifest.NewFeeder(cfg.Tracker)
	f.KeepNode(cfg.NodeName)
	return &Pipeline{cfg: cfg, feeder: f, reported: map[problemKey]string{}}
}

// Load reads the directory once and applies it (`run --once`, `render`). A directory that
// cannot be read is returned as an error and nothing is assigned or fed: a missing directory is
// not "no Services".
func (p *Pipeline) Load() (Result, error) {
	objs, ferrs := p.cfg.Loader.Load(p.cfg.Dir)
	if err := manifest.DirectoryError(ferrs); err != nil {
		return Result{FileErrors: ferrs}, err
	}
	return p.Apply(objs, ferrs), nil
}

// Apply applies one load (the Watcher's OnLoad): it reports what the load could not use,
// assigns node ports, and feeds the Tracker. A load whose directory could not be read changes
// nothing, as Feeder.Feed.
func (p *Pipeline) Apply(objs manifest.Objects, ferrs []manifest.FileError) Result {
	log := p.cfg.Log
	if manifest.DirectoryError(ferrs) != nil {
		return Result{Objects: objs, FileErrors: ferrs}
	}
	p.reportFiles(ferrs)
	for _, e := range objs.Invalid {
		log.Error(e, "manifest object or endpoint left out; the rest of the file is served", "object", e.Ref.String())
	}
	probs, err := p.cfg.Assigner.Assign(&objs, ferrs)
	if err != nil {
		log.Error(err, "node-port assignments not saved; retrying at the next change (check --state-dir)")
	}
	p.report(probs)
	p.feeder.Feed(objs, ferrs)
	p.checkNode(objs)
	return Result{Objects: objs, FileErrors: ferrs, Problems: probs}
}

// reportFiles logs each file error when it appears or changes, and the files that load again:
// the Watcher retries an unreadable file every second, and a line per retry would bury the rest.
func (p *Pipeline) reportFiles(ferrs []manifest.FileError) {
	now := make(map[string]bool, len(ferrs))
	files := map[string]bool{}
	for _, e := range ferrs {
		msg := e.Error()
		now[msg] = true
		files[e.File] = true
		if p.fileErrs[msg] {
			continue
		}
		switch {
		case e.Duplicate:
			p.cfg.Log.Error(e, "manifest skipped in part: an object is defined twice; the rest of the file is served")
		case e.LastGood:
			p.cfg.Log.Error(e, "manifest skipped: the file cannot be used; its objects stay as last loaded, the objects of other files are served")
		default:
			p.cfg.Log.Error(e, "manifest skipped: the file cannot be used and has no last good state, so its objects are not served until it is fixed")
		}
	}
	for _, f := range p.badFiles {
		if !files[f] {
			p.cfg.Log.Info("Manifest file loads again", "file", f)
		}
	}
	p.fileErrs, p.badFiles = now, p.badFiles[:0]
	for f := range files {
		p.badFiles = append(p.badFiles, f)
	}
	sort.Strings(p.badFiles)
}

// checkNode reports a load without this node's Node object: at the first load, node ports are
// not served until one appears; later, the Node fed last is kept (Feeder.KeepNode) and the
// warning repeats at every load until the Node is back, so its loss is not silent.
func (p *Pipeline) checkNode(objs manifest.Objects) {
	_, present := objs.From[manifest.Ref{Kind: "Node", Name: p.cfg.NodeName}]
	first := !p.fed
	p.fed = true
	switch {
	case present:
		if p.nodeMissing {
			p.cfg.Log.Info("Node object for this node is back in the manifests", "node", p.cfg.NodeName)
		}
	case p.cfg.Tracker.Snapshot().Node != nil:
		p.cfg.Log.Info("Warning: the Node object for this node is no longer in the manifests; its last version is kept, so node ports keep being served on its addresses. Restore it (or restart without it to stop serving node ports)", "node", p.cfg.NodeName)
	case first || !p.nodeMissing:
		p.cfg.Log.Info("no Node object for this node in the manifests: node ports are not served until one appears", "node", p.cfg.NodeName)
	}
	p.nodeMissing = !present
	if p.cfg.OnNodeMissing != nil {
		p.cfg.OnNodeMissing(!present)
	}
}

// report logs and hands to OnProblem each problem that is new or changed, and logs the end of
// those gone, so a reload of an unchanged directory neither repeats a line nor counts again.
func (p *Pipeline) report(probs []nodeport.Problem) {
	now := make(map[problemKey]string, len(probs))
	for _, pr := range probs {
		k := problemKey{pr.Service, pr.Port}
		msg := pr.Err.Error()
		now[k] = msg
		if prev, ok := p.reported[k]; ok && prev == msg {
			continue
		}
		p.cfg.Log.Error(pr, "node port not assigned; the Service is served without it",
			"service", pr.Service, "port", pr.Port, "reason", model.ReasonNodePortNotAssigned)
		if p.cfg.OnProblem != nil {
			p.cfg.OnProblem(pr)
		}
	}
	var gone []problemKey
	for k := range p.reported {
		if _, ok := now[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return fmt.Sprint(gone[i]) < fmt.Sprint(gone[j]) })
	for _, k := range gone {
		p.cfg.Log.Info("node-port problem resolved", "service", k.service, "port", k.port)
	}
	p.reported = now
}
