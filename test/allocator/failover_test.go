// Package allocator is the integration tier of the node-port block controller
// (allocator/controller): replicas of it run in the test process against a real kube-apiserver (test/cluster), each with its own
// client, under the ServiceAccount and RBAC of deploy/allocator.
package allocator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/controller"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/tier"
)

const (
	leaseNS = "kube-system"
	testNS  = "voip"
	// bound caps every wait; none of them is an assertion about speed.
	bound = 2 * time.Minute
)

// replica is one controller running in the test process.
type replica struct {
	id     string
	c      *controller.Controller
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startReplica(t *testing.T, cfg controller.Config, id string) *replica {
	t.Helper()
	cfg.Identity = id
	cfg.Logger = testr.NewWithOptions(t, testr.Options{LogTimestamp: true}).WithName(id)
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the replica, as a killed process would stop (its Lease is not released), and
// waits for it to return (slowness logged, not failed).
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		tier.AwaitStop(t, "replica "+r.id, r.done, bound)
	})
}

// waitFor polls cond until it holds or the bound passes; the last explanation is the failure.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, why, err := cond(ctx)
		last = why
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last seen: %s", what, err, last)
	}
}

func leaseHolder(ctx context.Context, cs kubernetes.Interface) (string, error) {
	l, err := cs.CoordinationV1().Leases(leaseNS).Get(ctx, controller.DefaultLeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// rangeService is a NodePort Service whose one UDP port "rtp" is the range first-last.
func rangeService(name string, first, last int, mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name,
			Annotations: map[string]string{annotation.PortRangesKey: fmt.Sprintf("rtp=%d-%d", first, last)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "rtp", Protocol: corev1.ProtocolUDP, Port: int32(first)}}},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

// TestLeaderKilledMidStream runs two replicas, creates Services one after another, kills the
// leader part-way (context cancelled, Lease not released) and checks that the other replica
// takes over and that in the end every Service holds what the rules give it, with no port in
// two blocks: non-overlapping ranges get their block; of two overlapping ones the older keeps
// it and the newer gets an Event naming it; a LoadBalancer that allocates no node ports gets none.
func TestLeaderKilledMidStream(t *testing.T) {
	cluster.Skip(t)
	c := cluster.Start(t, cluster.Options{SingleStack: true})
	admin := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*bound)
	defer cancel()

	install(ctx, t, admin)
	sa := c.ServiceAccount(t, leaseNS, "nftproxy-allocator", "nftproxy-allocator")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := func() kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(sa.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	// The controllers' identity is not an admin: it may not read Secrets, nor another Lease.
	probe := client()
	if _, err := probe.CoreV1().Secrets(leaseNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("ServiceAccount listing Secrets: got %v, want Forbidden (the test must not run as admin)", err)
	}
	if _, err := probe.CoordinationV1().Leases(leaseNS).Get(ctx, "someone-else", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("ServiceAccount reading another Lease: got %v, want Forbidden", err)
	}

	cfg := controller.Config{
		BlockRange: allocator.MustParseRange("1024-29999"), LeaseNamespace: leaseNS,
		// Short timings keep the takeover quick; the test waits for it, it does not time it.
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	ra := startReplica(t, withClient(cfg, client()), "replica-a")
	rb := startReplica(t, withClient(cfg, client()), "replica-b")
	replicas := map[string]*replica{ra.id: ra, rb.id: rb}
	var leader string
	waitFor(t, "a leader", func(ctx context.Context) (bool, string, error) {
		h, err := leaseHolder(ctx, admin)
		leader = h
		return replicas[h] != nil, "holder " + h, err
	})

	// The plan: 40 Services, created in name order (so creation order and name order agree on
	// who is older even within one second). Every 8th overlaps its predecessor's range; one
	// LoadBalancer has allocateLoadBalancerNodePorts: false.
	const n, killAt = 40, 15
	type plan struct {
		svc         *corev1.Service
		want        string // expected annotation, "" none
		olderHolder string // the older Service that keeps the contested block
	}
	var plans []plan
	for i := range n {
		name := fmt.Sprintf("svc-%02d", i)
		first := 10000 + 20*i
		p := plan{}
		switch {
		case i%8 == 7:
			first -= 15 // overlaps the previous Service's 10 ports by 5
			p.olderHolder = fmt.Sprintf("svc-%02d", i-1)
		case i == 20:
			p.svc = rangeService(name, first, first+9, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				f := false
				s.Spec.AllocateLoadBalancerNodePorts = &f
			})
		}
		if p.svc == nil {
			p.svc = rangeService(name, first, first+9)
		}
		if p.olderHolder == "" && i != 20 {
			p.want = fmt.Sprintf("rtp=%d-%d", first, first+9)
		}
		plans = append(plans, p)
	}
	survivor := ra
	for i, p := range plans {
		if i == killAt {
			killed := replicas[leader]
			if killed == ra {
				survivor = rb
			}
			t.Logf("killing the leader %s after %d Services", leader, i)
			killed.stop(t)
		}
		if _, err := admin.CoreV1().Services(testNS).Create(ctx, p.svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.svc.Name, err)
		}
	}
	waitFor(t, "the other replica to take over", func(ctx context.Context) (bool, string, error) {
		h, err := leaseHolder(ctx, admin)
		return h == survivor.id && survivor.c.IsLeader(), "holder " + h, err
	})

	waitFor(t, "every Service to hold what the rules give it", func(ctx context.Context) (bool, string, error) {
		var wrong []string
		for _, p := range plans {
			s, err := admin.CoreV1().Services(testNS).Get(ctx, p.svc.Name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if got := s.Annotations[annotation.NodePortRangesKey]; got != p.want {
				wrong = append(wrong, fmt.Sprintf("%s has %q, want %q", p.svc.Name, got, p.want))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; "), nil
	})

	// No port in two blocks, across every Service of the cluster.
	all, err := admin.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int]string{}
	var recorded []string
	for _, s := range all.Items {
		rs, err := annotation.ParseRanges(s.Annotations[annotation.NodePortRangesKey])
		if err != nil {
			t.Errorf("Service %s/%s: annotation does not parse: %v", s.Namespace, s.Name, err)
		}
		for _, r := range rs {
			recorded = append(recorded, fmt.Sprintf("%d-%d %s/%s/%s", r.Start, r.End, s.Namespace, s.Name, r.Name))
			for p := int(r.Start); p <= int(r.End); p++ {
				if o, dup := owner[p]; dup {
					t.Errorf("port %d is in the blocks of both %s and %s/%s", p, o, s.Namespace, s.Name)
				}
				owner[p] = s.Namespace + "/" + s.Name
			}
		}
	}

	// The leader's state is exactly what the annotations say (its rebuild, then its work).
	snap, ok := survivor.c.Snapshot()
	if !ok {
		t.Fatal("the survivor is not leading")
	}
	var held []string
	for _, b := range snap.Blocks {
		held = append(held, b.Block.String()+" "+b.Owner)
	}
	sort.Strings(held)
	sort.Strings(recorded)
	if strings.Join(held, "\n") != strings.Join(recorded, "\n") {
		t.Errorf("leader's allocation differs from the annotations:\nheld\n%s\nrecorded\n%s", strings.Join(held, "\n"), strings.Join(recorded, "\n"))
	}

	// Each loser has a Warning Event naming the older Service (Events are sent asynchronously).
	for _, p := range plans {
		if p.olderHolder == "" {
			continue
		}
		waitFor(t, "a conflict Event on "+p.svc.Name, func(ctx context.Context) (bool, string, error) {
			evs, err := admin.EventsV1().Events(testNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			var seen []string
			for _, e := range evs.Items {
				if e.Regarding.Name != p.svc.Name {
					continue
				}
				seen = append(seen, e.Reason+" "+e.Note)
				if e.Reason == policy.ReasonConflict && e.Type == corev1.EventTypeWarning &&
					e.Related != nil && e.Related.Name == p.olderHolder && strings.Contains(e.Note, testNS+"/"+p.olderHolder) {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("Events on %s: %q", p.svc.Name, seen), nil
		})
	}
}

func withClient(cfg controller.Config, cs kubernetes.Interface) controller.Config {
	cfg.Client = cs
	return cfg
}
