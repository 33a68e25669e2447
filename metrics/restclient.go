package metrics

import (
	"context"
	"math"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// client-go's metric names, as component-base exposes them in every Kubernetes component
// (kube-proxy included), so API-client panels of kube-proxy dashboards work: the requests, the
// exec credential plugin, and the transport cache.
const (
	RESTRequests        = "rest_client_requests_total"
	RESTRequestDuration = "rest_client_request_duration_seconds"
	RESTRequestSize     = "rest_client_request_size_bytes"
	RESTResponseSize    = "rest_client_response_size_bytes"
	RESTRateLimiter     = "rest_client_rate_limiter_duration_seconds"
	RESTRetries         = "rest_client_request_retries_total"

	RESTExecCertTTL         = "rest_client_exec_plugin_ttl_seconds"
	RESTExecCertRotationAge = "rest_client_exec_plugin_certificate_rotation_age"
	RESTExecCalls           = "rest_client_exec_plugin_call_total"

	RESTTransportCacheEntries = "rest_client_transport_cache_entries"
	RESTTransportCreateCalls  = "rest_client_transport_create_calls_total"
	RESTTransportCAReloads    = "rest_client_transport_ca_reload_total"
	RESTTransportCertGCCalls  = "rest_client_transport_cert_rotation_gc_calls_total"
	RESTTransportCacheGCCalls = "rest_client_transport_cache_gc_calls_total"
)

// Buckets as component-base's: a request takes 5 ms to a minute; a body is 64 B to 16 MB; an
// exec plugin's client certificate lives 10 minutes (rotated too fast) to 4 years (too slow).
var (
	restLatencyBuckets      = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	restSizeBuckets         = []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
	restCertRotationBuckets = []float64{600, 1800, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000}
)

// RESTClient holds the collectors of client-go's metrics (k8s.io/client-go/tools/metrics).
type RESTClient struct {
	duration, requestSize, responseSize, rateLimiter *prometheus.HistogramVec
	requests, retries                                *prometheus.CounterVec

	certRotationAge                             prometheus.Histogram
	execCalls, createCalls, caReloads, cacheGCs *prometheus.CounterVec
	cacheEntries                                prometheus.Gauge
	certGCs                                     prometheus.Counter

	// now is the clock of the exec plugin certificate's TTL; expiry is that certificate's
	// expiry, nil while no exec plugin manages one.
	now      func() time.Time
	expiryMu sync.Mutex
	expiry   *time.Time
}

// restClients are the RESTClients client-go's hooks report to. client-go takes its hooks once
// per process (tools/metrics.Register), so the hooks report to every RESTClient created: the
// daemon creates one; tests create several, each on its own registry.
var restClients struct {
	once sync.Once
	mu   sync.Mutex
	all  []*RESTClient
}

// InstallClientGoHooks makes client-go report its metrics to every RESTClient of the process
// (none until NewRESTClient). It is idempotent. Call it before the first API client is built:
// client-go captures the hooks of a transport's garbage-collection counts when it creates the
// transport, so a transport created before would count them nowhere.
func InstallClientGoHooks() {
	restClients.once.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:               restLatency{func(m *RESTClient) *prometheus.HistogramVec { return m.duration }},
			RateLimiterLatency:           restLatency{func(m *RESTClient) *prometheus.HistogramVec { return m.rateLimiter }},
			RequestSize:                  restSize{func(m *RESTClient) *prometheus.HistogramVec { return m.requestSize }},
			ResponseSize:                 restSize{func(m *RESTClient) *prometheus.HistogramVec { return m.responseSize }},
			RequestResult:                restResult{},
			RequestRetry:                 restRetry{},
			ClientCertExpiry:             restCertExpiry{},
			ClientCertRotationAge:        restCertRotation{},
			ExecPluginCalls:              restExecCalls{},
			TransportCacheEntries:        restCacheEntries{},
			TransportCreateCalls:         restByResult{func(m *RESTClient) *prometheus.CounterVec { return m.createCalls }},
			TransportCAReloads:           restCAReloads{},
			TransportCertRotationGCCalls: restCertGCs{},
			TransportCacheGCCalls:        restByResult{func(m *RESTClient) *prometheus.CounterVec { return m.cacheGCs }},
			// ResolverLatency and ExecPluginPolicyCalls stay client-go's no-ops: component-base
			// registers no metric for them, so kube-proxy exposes none.
		})
	})
}

// NewRESTClient creates client-go's metrics on reg and makes every API client of the process
// report to them.
func NewRESTClient(reg prometheus.Registerer) (*RESTClient, error) {
	byVerbHost := []string{"verb", "host"}
	h := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, byVerbHost)
	}
	m := &RESTClient{
		duration:     h(RESTRequestDuration, "Request latency in seconds. Broken down by verb, and host.", restLatencyBuckets),
		requestSize:  h(RESTRequestSize, "Request size in bytes. Broken down by verb and host.", restSizeBuckets),
		responseSize: h(RESTResponseSize, "Response size in bytes. Broken down by verb and host.", restSizeBuckets),
		rateLimiter:  h(RESTRateLimiter, "Client side rate limiter latency in seconds. Broken down by verb, and host.", restLatencyBuckets),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RESTRequests,
			Help: "Number of HTTP requests, partitioned by status code, method, and host."}, []string{"code", "method", "host"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RESTRetries,
			Help: "Number of request retries, partitioned by status code, verb, and host."}, []string{"code", "verb", "host"}),
		certRotationAge: prometheus.NewHistogram(prometheus.HistogramOpts{Name: RESTExecCertRotationAge,
			Help:    "Seconds an exec credential plugin's client certificate lived before it was replaced; empty while no exec plugin supplies certificates.",
			Buckets: restCertRotationBuckets}),
		execCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RESTExecCalls,
			Help: "Calls of exec credential plugins, by exit code (0 only on success) and outcome (no_error, plugin_execution_error, plugin_not_found_error, client_internal_error)."},
			[]string{"code", "call_status"}),
		cacheEntries: prometheus.NewGauge(prometheus.GaugeOpts{Name: RESTTransportCacheEntries,
			Help: "Transports in client-go's shared transport cache."}),
		createCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RESTTransportCreateCalls,
			Help: "Transports asked of client-go's cache, by result: hit, miss (created and cached), miss-gc (created again after garbage collection), uncacheable."},
			[]string{"result"}),
		caReloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RESTTransportCAReloads,
			Help: "Reloads of a CA file attempted by a transport, by result (success, failure) and reason."},
			[]string{"result", "reason"}),
		certGCs: prometheus.NewCounter(prometheus.CounterOpts{Name: RESTTransportCertGCCalls,
			Help: "Certificate-rotation goroutines stopped because their transport was garbage collected."}),
		cacheGCs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RESTTransportCacheGCCalls,
			Help: "Transport cache entries garbage collection tried to delete, by result: deleted, skipped."},
			[]string{"result"}),
		now: time.Now,
	}
	certTTL := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: RESTExecCertTTL,
		Help: "Seconds until the soonest expiry of the client certificates exec credential plugins supply (negative once expired); +Inf when no exec plugin supplies one."},
		m.certTTL)
	cs := []prometheus.Collector{m.duration, m.requestSize, m.responseSize, m.rateLimiter, m.requests, m.retries,
		certTTL, m.certRotationAge, m.execCalls, m.cacheEntries, m.createCalls, m.caReloads, m.certGCs, m.cacheGCs}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	restClients.mu.Lock()
	restClients.all = append(restClients.all, m)
	restClients.mu.Unlock()
	InstallClientGoHooks()
	return m, nil
}

// certTTL is the seconds left to the exec plugin's client certificate, +Inf without one.
func (m *RESTClient) certTTL() float64 {
	m.expiryMu.Lock()
	defer m.expiryMu.Unlock()
	if m.expiry == nil {
		return math.Inf(1)
	}
	return m.expiry.Sub(m.now()).Seconds()
}

// eachRESTClient calls fn for every RESTClient of the process.
func eachRESTClient(fn func(*RESTClient)) {
	restClients.mu.Lock()
	defer restClients.mu.Unlock()
	for _, m := range restClients.all {
		fn(m)
	}
}

// restLatency adapts a histogram to client-go's LatencyMetric.
type restLatency struct {
	vec func(*RESTClient) *prometheus.HistogramVec
}

func (a restLatency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	eachRESTClient(func(m *RESTClient) { a.vec(m).WithLabelValues(verb, u.Host).Observe(d.Seconds()) })
}

// restSize adapts a histogram to client-go's SizeMetric.
type restSize struct {
	vec func(*RESTClient) *prometheus.HistogramVec
}

func (a restSize) Observe(_ context.Context, verb, host string, size float64) {
	eachRESTClient(func(m *RESTClient) { a.vec(m).WithLabelValues(verb, host).Observe(size) })
}

// restResult adapts the request counter to client-go's ResultMetric.
type restResult struct{}

func (restResult) Increment(_ context.Context, code, method, host string) {
	eachRESTClient(func(m *RESTClient) { m.requests.WithLabelValues(code, method, host).Inc() })
}

// restRetry adapts the retry counter to client-go's RetryMetric.
type restRetry struct{}

func (restRetry) IncrementRetry(_ context.Context, code, verb, host string) {
	eachRESTClient(func(m *RESTClient) { m.retries.WithLabelValues(code, verb, host).Inc() })
}

// restCertExpiry records the exec plugin certificate's expiry (client-go's ExpiryMetric).
type restCertExpiry struct{}

func (restCertExpiry) Set(expiry *time.Time) {
	eachRESTClient(func(m *RESTClient) {
		m.expiryMu.Lock()
		m.expiry = expiry
		m.expiryMu.Unlock()
	})
}

// restCertRotation adapts the rotation-age histogram to client-go's DurationMetric.
type restCertRotation struct{}

func (restCertRotation) Observe(d time.Duration) {
	eachRESTClient(func(m *RESTClient) { m.certRotationAge.Observe(d.Seconds()) })
}

// restExecCalls adapts the exec plugin call counter to client-go's CallsMetric.
type restExecCalls struct{}

func (restExecCalls) Increment(exitCode int, callStatus string) {
	eachRESTClient(func(m *RESTClient) { m.execCalls.WithLabelValues(strconv.Itoa(exitCode), callStatus).Inc() })
}

// restCacheEntries adapts the transport cache gauge to client-go's TransportCacheMetric.
type restCacheEntries struct{}

func (restCacheEntries) Observe(n int) {
	eachRESTClient(func(m *RESTClient) { m.cacheEntries.Set(float64(n)) })
}

// restByResult adapts a counter by result to client-go's TransportCreateCallsMetric and
// TransportCacheGCCallsMetric.
type restByResult struct {
	vec func(*RESTClient) *prometheus.CounterVec
}

func (a restByResult) Increment(result string) {
	eachRESTClient(func(m *RESTClient) { a.vec(m).WithLabelValues(result).Inc() })
}

// restCAReloads adapts the CA reload counter to client-go's TransportCAReloadsMetric.
type restCAReloads struct{}

func (restCAReloads) Increment(result, reason string) {
	eachRESTClient(func(m *RESTClient) { m.caReloads.WithLabelValues(result, reason).Inc() })
}

// restCertGCs adapts the certificate-rotation GC counter to client-go's
// TransportCertRotationGCCallsMetric.
type restCertGCs struct{}

func (restCertGCs) Increment() {
	eachRESTClient(func(m *RESTClient) { m.certGCs.Inc() })
}
