package k8s

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
)

// informers are the Source's three informers. They are built here rather than by client-go's
// informer factory so that each list is slimmed as soon as it is decoded (see slimList), and
// without the factory's namespace index, which nothing here reads.
type informers struct {
	services, slices, node cache.SharedIndexInformer
}

// newInformers builds the informers of Services and EndpointSlices selected by the proxy's
// selector and of this node's Node, sharing one slimmer (its interned names) and one look at the
// API server's version.
func (s *Source) newInformers() (informers, error) {
	sl, pages := newSlimmer(), &listPages{server: s.cfg.Client.Discovery(), log: s.cfg.Logger}
	selected := func(o *metav1.ListOptions) { o.LabelSelector = s.selector.String() }
	thisNode := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.cfg.NodeName).String()
	}
	core, eps := s.cfg.Client.CoreV1(), s.cfg.Client.DiscoveryV1()
	infs := informers{
		services: newInformer(s.cfg.Client, &corev1.Service{}, sl, pages, selected,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Services(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Services(metav1.NamespaceAll).Watch(ctx, o)
			}),
		slices: newInformer(s.cfg.Client, &discoveryv1.EndpointSlice{}, sl, pages, selected,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return eps.EndpointSlices(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return eps.EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
			}),
		node: newInformer(s.cfg.Client, &corev1.Node{}, sl, pages, thisNode,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Nodes().Watch(ctx, o)
			}),
	}
	// Watch events, and list items a second time (idempotent and cheap on a slimmed object);
	// the slice informer keeps the model's parsed form (sl.store).
	for _, inf := range []cache.SharedIndexInformer{infs.services, infs.slices, infs.node} {
		if err := inf.SetTransform(sl.store); err != nil {
			return informers{}, err
		}
	}
	return infs, nil
}

// newInformer is an informer of example's type whose lists are slimmed by sl page by page,
// with tweak applied to the options of lists and watches, and lists paged when pages says the
// API server serves them well. client is asked whether it can stream initial lists at all
// (client-go's fake clientset says it cannot: it never sends the closing bookmark), since from
// client-go 0.35 on informers stream them by default.
func newInformer(client any, example runtime.Object, sl *slimmer, pages *listPages, tweak func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			if o.ResourceVersion == "0" && o.Limit > 0 && pages.supported() {
				o.ResourceVersion = "" // see listPages
			}
			l, err := list(ctx, o)
			if err != nil {
				return nil, err
			}
			return l, slimList(sl, l)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchFn(ctx, o)
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), example, cache.SharedIndexInformerOptions{})
}

// slimList slims the items of a list page as soon as it is decoded. The reflector gathers
// every page of the initial list and copies each item before its transform runs, so a
// transform alone keeps every Service and EndpointSlice whole (managedFields, targetRefs, the
// decoder's spare capacity) until the whole list is in.
func slimList(sl *slimmer, l runtime.Object) error {
	return meta.EachListItem(l, func(o runtime.Object) error {
		_, err := sl.transform(o)
		return err
	})
}

// listPages decides whether the informers' initial lists ask for pages. A reflector's first
// list asks for resourceVersion "0" (whatever the API server's watch cache holds), which the
// API server answers in one response whatever the limit: every Service and EndpointSlice, the
// whole response and every object decoded from it whole, are in memory at once, before the
// first is slimmed; paged lists lower the peak (bench/README.md, "Memory: peak resident set",
// measures both with BenchmarkKubeMemoryProfile). A consistent list (resourceVersion "") honours
// the limit, and from Kubernetes 1.34 on (ListFromCacheSnapshot, beta and on by default;
// consistent reads from the cache are GA) the API server serves it and its continuations from
// the watch cache, as it serves "0". An older API server would serve a paged consistent list
// from etcd, and thousands of nodes restarting together would all read etcd, the herd the
// reflector's "0" is there to avoid: against those the list stays one response.
//
// The binary streams its initial lists (StreamInitialLists), which needs neither: lists, and
// so this, are what an informer falls back to when the API server refuses a stream (its
// WatchList feature off, as in 1.33) or when streaming is turned off.
type listPages struct {
	server discovery.ServerVersionInterface
	log    logr.Logger
	mu     sync.Mutex
	known  bool // the API server's version has been read
	paged  bool
}

// supported reports whether the API server serves paged consistent lists from its cache. It
// asks the API server's version once, again at the next list if that failed.
func (p *listPages) supported() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.known {
		return p.paged
	}
	info, err := p.server.ServerVersion()
	if err != nil {
		p.log.V(1).Info("Cannot read the API server's version: this list is not paged", "err", err.Error())
		return false
	}
	p.known = true
	v, err := version.ParseGeneric(info.GitVersion)
	p.paged = err == nil && v.AtLeast(version.MajorMinor(1, 34))
	p.log.V(1).Info("API server version read", "version", info.GitVersion, "pagedLists", p.paged)
	return p.paged
}
