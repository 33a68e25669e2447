package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// client-go's request metric names, as component-base exposes them in every Kubernetes
// component (kube-proxy included), so API-client panels of kube-proxy dashboards work.
const (
	RESTRequests        = "rest_client_requests_total"
	RESTRequestDuration = "rest_client_request_duration_seconds"
	RESTRequestSize     = "rest_client_request_size_bytes"
	RESTResponseSize    = "rest_client_response_size_bytes"
	RESTRateLimiter     = "rest_client_rate_limiter_duration_seconds"
	RESTRetries         = "rest_client_request_retries_total"
)

// Buckets as component-base's: a request takes 5 ms to a minute; a body is 64 B to 16 MB.
var (
	restLatencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	restSizeBuckets    = []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
)

// RESTClient holds the collectors of client-go's request metrics (k8s.io/client-go/tools/metrics).
type RESTClient struct {
	duration, requestSize, responseSize, rateLimiter *prometheus.HistogramVec
	requests, retries                                *prometheus.CounterVec
}

// restClients are the RESTClients client-go's hooks report to. client-go takes its hooks once
// per process (tools/metrics.Register), so the hooks installed by the first NewRESTClient
// report to every RESTClient created since: the daemon creates one; tests create several, each
// on its own registry.
var restClients struct {
	once sync.Once
	mu   sync.Mutex
	all  []*RESTClient
}

// NewRESTClient creates client-go's request metrics on reg and makes every API client of the
// process report to them.
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
	}
	cs := []prometheus.Collector{m.duration, m.requestSize, m.responseSize, m.rateLimiter, m.requests, m.retries}
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
	restClients.once.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:     restLatency{func(m *RESTClient) *prometheus.HistogramVec { return m.duration }},
			RateLimiterLatency: restLatency{func(m *RESTClient) *prometheus.HistogramVec { return m.rateLimiter }},
			RequestSize:        restSize{func(m *RESTClient) *prometheus.HistogramVec { return m.requestSize }},
			ResponseSize:       restSize{func(m *RESTClient) *prometheus.HistogramVec { return m.responseSize }},
			RequestResult:      restResult{},
			RequestRetry:       restRetry{},
		})
	})
	return m, nil
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
