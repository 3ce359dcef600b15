package host

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the host's Prometheus metrics, in a registry of their own.
type Metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	durations    *prometheus.HistogramVec
	syncSuccess  prometheus.Gauge
	syncFailures prometheus.Counter
	// the queues' group commits: how many messages one fdatasync made
	// durable, and how long it took (the disk's health, as etcd's
	// wal_fsync_duration_seconds)
	commitMessages prometheus.Histogram
	fsyncDurations prometheus.Histogram

	// the children of requests and durations, found once: a door × status
	// pair is looked up per request, and the vectors hash their labels and
	// take a lock on every lookup
	requestCounters sync.Map // requestKey → prometheus.Counter
	doorDurations   sync.Map // door → prometheus.Observer
}

type requestKey struct {
	door   string
	status int
}

// NewMetrics creates the metrics (and the Go runtime and process ones).
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nexus_requests_total", Help: "Requests answered by door and status.",
		}, []string{"door", "status"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nexus_execution_duration_seconds", Help: "Duration of flow executions by door.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"door"}),
		syncSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nexus_sync_last_success_timestamp_seconds", Help: "Unix time of the last successful sync of the config repo.",
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nexus_sync_failures_total", Help: "Syncs that failed: a refused commit or an unreachable repo.",
		}),
		commitMessages: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nexus_queue_commit_messages", Help: "Messages made durable by one fdatasync of a queue's log (a group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10), // 1 … 512
		}),
		fsyncDurations: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nexus_queue_fsync_duration_seconds", Help: "Duration of the fdatasync of a group commit to a queue's log.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
	}
	m.reg.MustRegister(m.requests, m.durations, m.syncSuccess, m.syncFailures, m.commitMessages, m.fsyncDurations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Register adds collectors of other components (the queues) to the metrics.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.reg.MustRegister(cs...) }

// SyncSucceeded records a sync that left the live set on the branch's head.
func (m *Metrics) SyncSucceeded(at time.Time) { m.syncSuccess.Set(float64(at.UnixNano()) / 1e9) }

// SyncFailed records a refused commit or an unreachable repo.
func (m *Metrics) SyncFailed() { m.syncFailures.Inc() }

// QueueCommitted records one group commit to a queue's log: the messages
// it made durable and its fdatasync's duration (queue.Options.OnCommit).
func (m *Metrics) QueueCommitted(messages int, sync time.Duration) {
	m.commitMessages.Observe(float64(messages))
	m.fsyncDurations.Observe(sync.Seconds())
}

func (m *Metrics) request(door string, status int) {
	k := requestKey{door, status}
	c, ok := m.requestCounters.Load(k)
	if !ok {
		c, _ = m.requestCounters.LoadOrStore(k, m.requests.WithLabelValues(door, strconv.Itoa(status)))
	}
	c.(prometheus.Counter).Inc()
}

func (m *Metrics) execution(door string, d time.Duration) {
	o, ok := m.doorDurations.Load(door)
	if !ok {
		o, _ = m.doorDurations.LoadOrStore(door, m.durations.WithLabelValues(door))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}
