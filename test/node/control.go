package node

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// nodeControllers are the kube-controller-manager controllers the tier needs: DaemonSets,
// Deployments and their ReplicaSets become pods; Services' selectors become EndpointSlices;
// ServiceAccounts get tokens and every namespace the kube-root-ca.crt ConfigMap (a pod's
// projected token volume needs both); the garbage collector removes what a rollout replaces;
// the node lifecycle controller taints a node that stops reporting.
var nodeControllers = []string{
	"daemonset-controller",
	"deployment-controller",
	"replicaset-controller",
	"endpointslice-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"garbage-collector-controller",
	"node-lifecycle-controller",
	"namespace-controller",
}

// ControlPlane is kube-controller-manager and kube-scheduler, beside test/cluster's etcd and
// kube-apiserver, on the host's loopback with the admin identity.
type ControlPlane struct {
	kcm, scheduler *proc
}

// StartControlPlane starts both; dir holds their logs. saKey is the API server's
// ServiceAccount signing key, caFile the CA pods get as kube-root-ca.crt.
func StartControlPlane(dir, kcmBin, schedBin, kubeconfig, saKey, caFile string) (*ControlPlane, error) {
	cp := &ControlPlane{}
	var err error
	cp.kcm, err = startProc("kube-controller-manager", filepath.Join(dir, "kube-controller-manager.log"), kcmBin,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--controllers="+strings.Join(nodeControllers, ","),
		"--service-account-private-key-file="+saKey,
		"--root-ca-file="+caFile,
		"--use-service-account-credentials=false",
		"--node-monitor-grace-period=40s",
		"--endpointslice-updates-batch-period=0s",
		"--v=1")
	if err != nil {
		return nil, err
	}
	cp.scheduler, err = startProc("kube-scheduler", filepath.Join(dir, "kube-scheduler.log"), schedBin,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--v=1")
	if err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// Check fails when either process has exited, with its log's tail.
func (cp *ControlPlane) Check() error {
	for _, p := range []*proc{cp.kcm, cp.scheduler} {
		if p != nil && !p.running() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail(30))
		}
	}
	return nil
}

// Logs are both logs' tails.
func (cp *ControlPlane) Logs(lines int) string {
	var b strings.Builder
	for _, p := range []*proc{cp.kcm, cp.scheduler} {
		if p != nil {
			b.WriteString(p.tail(lines) + "\n")
		}
	}
	return b.String()
}

// Stop stops both.
func (cp *ControlPlane) Stop() {
	for _, p := range []*proc{cp.scheduler, cp.kcm} {
		if p != nil {
			p.stop(15 * time.Second)
		}
	}
}
