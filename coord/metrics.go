package coord

import "github.com/prometheus/client_golang/prometheus"

// nodeMetrics are the node's own, registered once for its life; the
// current role's (the mount's or the backup's) are gathered with them.
type nodeMetrics struct {
	reg         *prometheus.Registry
	leaseDoubts prometheus.Counter
	leaseLost   *prometheus.CounterVec
	terms       prometheus.Counter
}

func newNodeMetrics() *nodeMetrics {
	m := &nodeMetrics{
		reg: prometheus.NewRegistry(),
		leaseDoubts: prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_node_lease_in_doubt_total",
			Help: "Times the primary's lease went past its deadline with no renewal accepted: barriers waited while renewals were retried."}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_node_lease_lost_total",
			Help: "Terms this node ended deposed: etcd said the lease was gone, or no renewal was accepted by the give-up time."}, []string{"why"}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_node_terms_won_total",
			Help: "Elections this node won."}),
	}
	m.reg.MustRegister(m.leaseDoubts, m.leaseLost, m.terms)
	return m
}
