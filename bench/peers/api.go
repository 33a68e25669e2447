package peers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// ProbeNamespace holds the Services the campaign changes while it measures.
const ProbeNamespace = "bench-probe"

// Populate creates the workload's namespaces and Node, and Services + EndpointSlices from index
// from to index to (exclusive), with workers in parallel.
func Populate(ctx context.Context, cs kubernetes.Interface, w *workload.Workload, from, to, workers int) error {
	for _, ns := range append(w.Namespaces(), ProbeNamespace) {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, w.NodeObject(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node: %w", err)
	}
	idx := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := CreateService(ctx, cs, w.Services[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := from; i < to; i++ {
		select {
		case idx <- i:
		case err = <-errs:
			break feed
		}
	}
	close(idx)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// createAttempts bounds the tries of one create the API server answered with a transient error.
const createAttempts = 5

// CreateService creates s's Service and EndpointSlice (already existing ones are kept).
func CreateService(ctx context.Context, cs kubernetes.Interface, s *model.Service) error {
	if err := createService(ctx, cs, workload.ServiceObject(s)); err != nil {
		return fmt.Errorf("service %s: %w", s.Key, err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(s.Key.Namespace).Create(ctx, workload.SliceObject(s, time.Now()), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("endpointslice %s: %w", s.Key, err)
	}
	return nil
}

// createService creates svc, and takes a Service of the same name and ClusterIP as created: a
// loaded API server (30k Services on 2 cores) can answer a create with a timeout while it still
// stores the Service, and client-go's retry (or ours, after a transient error) then fails with
// "provided IP is already allocated" — allocated to this very Service.
func createService(ctx context.Context, cs kubernetes.Interface, svc *corev1.Service) error {
	var err error
	for i := 0; i < createAttempts; i++ {
		if _, err = cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if got, gerr := cs.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{}); gerr == nil && got.Spec.ClusterIP == svc.Spec.ClusterIP {
			return nil
		}
		if leaked, lerr := releaseLeakedIP(ctx, cs, svc.Spec.ClusterIP, err); lerr != nil {
			return fmt.Errorf("%w; %v", err, lerr)
		} else if leaked {
			continue // the address is free again: create the Service once more
		}
		if !transient(err) {
			return err
		}
		time.Sleep(time.Duration(i+1) * 500 * time.Millisecond)
	}
	return fmt.Errorf("%w (after %d attempts)", err, createAttempts)
}

// releaseLeakedIP handles a create refused because its ClusterIP is "already allocated" when no
// Service holds it: the API server's allocator (IPAddress objects, 1.33 and later) can keep the
// address of a create that timed out and was never stored, for minutes, until its repair loop
// runs (seen while loading 10k Services on 2 cores), or name as its parent a Service that
// exists with other addresses (seen at 26,750 of 30k Services: the address was held for the
// campaign's first Service, which has its own). It deletes the IPAddress when the Service its
// parentRef names does not exist or does not have the address, and reports whether it did; an
// address another Service has is an error naming it.
func releaseLeakedIP(ctx context.Context, cs kubernetes.Interface, ip string, createErr error) (bool, error) {
	if ip == "" || !apierrors.IsInvalid(createErr) || !strings.Contains(createErr.Error(), "already allocated") {
		return false, nil
	}
	a, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil // released meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("look up IPAddress %s: %w", ip, err)
	}
	ref := a.Spec.ParentRef
	if ref == nil || ref.Resource != "services" {
		return false, fmt.Errorf("IPAddress %s is held by %+v", ip, ref)
	}
	parent, err := cs.CoreV1().Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case err == nil && slices.Contains(parent.Spec.ClusterIPs, ip):
		return false, fmt.Errorf("IPAddress %s is held by Service %s/%s", ip, ref.Namespace, ref.Name)
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	if err := cs.NetworkingV1().IPAddresses().Delete(ctx, ip, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("release leaked IPAddress %s (of Service %s/%s, which does not exist or has other addresses): %w", ip, ref.Namespace, ref.Name, err)
	}
	return true, nil
}

// transient errors are worth another try: the API server was busy, not the request wrong.
func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)
}

// DeleteService deletes s's Service and EndpointSlice.
func DeleteService(ctx context.Context, cs kubernetes.Interface, s *model.Service) error {
	if err := cs.CoreV1().Services(s.Key.Namespace).Delete(ctx, s.Key.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err := cs.DiscoveryV1().EndpointSlices(s.Key.Namespace).Delete(ctx, workload.SliceObject(s, time.Time{}).Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// UpdateEndpoints replaces s's EndpointSlice (an unconditional update), stamped with now as the
// trigger time.
func UpdateEndpoints(ctx context.Context, cs kubernetes.Interface, s *model.Service) error {
	_, err := cs.DiscoveryV1().EndpointSlices(s.Key.Namespace).Update(ctx, workload.SliceObject(s, time.Now()), metav1.UpdateOptions{})
	return err
}

// ProbeService is a one-port TCP Service (port 80 to 8080) in ProbeNamespace with one endpoint.
func ProbeService(name string, clusterIP, endpoint netip.Addr) *model.Service {
	key := model.ServiceKey{Namespace: ProbeNamespace, Name: name}
	return &model.Service{Key: key, Ports: []model.ServicePort{{
		Name: model.PortName{Service: key, Port: "http", Protocol: model.TCP}, ClusterIPs: []netip.Addr{clusterIP},
		Port: 80, PortEnd: 80, TargetPort: 8080,
		Endpoints: []model.Endpoint{model.Endpoint{Addr: endpoint, Port: 8080, Ready: true, Serving: true}.At("node-0", "")},
	}}}
}
