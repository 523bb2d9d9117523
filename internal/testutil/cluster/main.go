package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// Main starts a cluster for a test binary, runs its tests and stops the cluster. Use it from
// TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m, cluster.Options{}, &testCluster)) }
func Main(m *testing.M, opts Options, into **Cluster) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*into = c
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
