package bench

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim/controlplane"
)

// etcdCounters are etcd's counters the costs are made of; nil where etcd cannot be read or
// does not export them.
type etcdCounters struct {
	cpuSeconds, walBytes *float64
}

// readEtcdCounters reads etcd's CPU time and WAL bytes written, when cl can reach etcd.
// etcd_disk_wal_write_bytes_total counts what etcd writes to its log whether or not it then
// syncs it (the benchmark's etcd runs with --unsafe-no-fsync): every write to etcd, with raft's
// framing, so it measures what a mode asks etcd to store.
func readEtcdCounters(ctx context.Context, cl Cluster) (etcdCounters, error) {
	if cl.EtcdMetrics == nil {
		return etcdCounters{}, nil
	}
	m, err := cl.EtcdMetrics(ctx)
	if err != nil {
		return etcdCounters{}, err
	}
	return etcdCounters{
		cpuSeconds: counterOf(m, "process_cpu_seconds_total"),
		walBytes:   counterOf(m, "etcd_disk_wal_write_bytes_total"),
	}, nil
}

// counterOf is the sum of metric name's samples, nil when m has no such metric.
func counterOf(m controlplane.Metrics, name string) *float64 {
	if m[name] == nil {
		return nil
	}
	v := m.Sum(name, nil)
	return &v
}

// growth is after - before, nil when either is.
func growth(before, after *float64) *float64 {
	if before == nil || after == nil {
		return nil
	}
	d := *after - *before
	return &d
}

// finalCliquesLeast is cliqueWatchLeast of the cliques in w's driver namespace now (the end of
// the mode), each weighed by the daemons of w whose clique it is; zero when there are none.
// The objects' sizes are those of their JSON in a list response, which the apiserver encodes
// with the same serializer as the object of a watch event.
func finalCliquesLeast(ctx context.Context, cfg *rest.Config, w *world, cliqueSize int) (float64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	// client-go's REST client, which waits out a 429's Retry-After as every client of the
	// apiserver does: the registration may have left its priority levels' queues full.
	raw, err := cs.RESTClient().Get().
		AbsPath("/apis", cdv1beta1.GroupName, cdv1beta1.Version, "namespaces", w.driverNS, cliqueResource).
		SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing the cliques: %w", err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("reading the cliques: %w", err)
	}
	sizes := map[string]int{}
	for _, raw := range list.Items {
		var meta struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return 0, fmt.Errorf("reading a clique: %w", err)
		}
		sizes[meta.Metadata.Name] = len(raw)
	}
	daemons := map[string]int{}
	for i := range w.nodes {
		daemons[cdv1beta1.CliqueName(string(w.cd.UID), w.clique(i, cliqueSize))]++
	}
	return cliqueWatchLeast(sizes, daemons), nil
}
