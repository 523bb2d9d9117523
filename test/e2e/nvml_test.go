package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPluginsLoadNVMLFromTheDriverRoot: every node's kubelet plugin process has NVML loaded
// from its own node's driver root (the shared library the simulated node installs there, found
// by the plugin's search of the root and loaded by full path), as /proc/<pid>/maps shows: not
// a library the loader found by bare name, and no Go stand-in (the process maps no NVML then).
func TestPluginsLoadNVMLFromTheDriverRoot(t *testing.T) {
	e2eOnly(t)
	pods := &corev1.PodList{}
	must(t, c.List(ctx(), pods, client.MatchingLabels{"app.kubernetes.io/name": "cdplane-kubelet-plugin"}))
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			nodes[p.Spec.NodeName] = true
		}
	}
	if len(nodes) == 0 {
		t.Fatal("no kubelet plugin pods")
	}
	// node -> the libnvidia-ml files its plugin processes map
	mapped := map[string][]string{}
	procs, err := filepath.Glob("/proc/[0-9]*")
	must(t, err)
	for _, proc := range procs {
		cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("--container-driver-root")) {
			continue // gone, or not a kubelet plugin
		}
		env, err := os.ReadFile(filepath.Join(proc, "environ"))
		if err != nil {
			continue
		}
		node := ""
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("NODE_NAME=")); ok {
				node = string(v)
			}
		}
		if !nodes[node] {
			continue // another cluster's, or a plugin being replaced
		}
		maps, err := os.ReadFile(filepath.Join(proc, "maps"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(maps), "\n") {
			f := strings.Fields(line)
			if len(f) >= 6 && strings.Contains(filepath.Base(f[5]), "libnvidia-ml.so") {
				mapped[node] = append(mapped[node], f[5])
			}
		}
		pid, _ := strconv.Atoi(filepath.Base(proc))
		t.Logf("node %s: plugin pid %d maps %v", node, pid, dedupe(mapped[node]))
	}
	for node := range nodes {
		root := filepath.Join(stateDir, "nodes", node) + string(filepath.Separator)
		libs := dedupe(mapped[node])
		if len(libs) == 0 {
			t.Errorf("node %s: its kubelet plugin maps no libnvidia-ml", node)
			continue
		}
		for _, lib := range libs {
			if !strings.HasPrefix(lib, root) {
				t.Errorf("node %s: its kubelet plugin maps %s, not a library under its driver root %s", node, lib, root)
			}
		}
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
