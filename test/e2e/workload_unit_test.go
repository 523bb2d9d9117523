package e2e

// Tests of the suite's own parts that need no cluster: they run with or without CDPLANE_E2E.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"cdplane/internal/imex"
	"cdplane/internal/sim/imexsim"
)

// The IMEX workload finishes only when its node's IMEX is connected both ways to exactly the
// peers of the release, on every node of the release; it never finishes otherwise.
func TestIMEXWorkload(t *testing.T) {
	for name, tc := range map[string]struct {
		// start says which nodes run IMEX; peers which nodes each IMEX's config lists.
		start map[string]bool
		peers map[string][]string
		done  bool
	}{
		"connected both ways": {
			start: map[string]bool{"a": true, "b": true},
			peers: map[string][]string{"a": {"a", "b"}, "b": {"a", "b"}}, done: true,
		},
		"peer's IMEX not running": {
			start: map[string]bool{"a": true, "b": false},
			peers: map[string][]string{"a": {"a", "b"}, "b": {"a", "b"}},
		},
		"peer not in the config (no reload)": {
			start: map[string]bool{"a": true, "b": true},
			peers: map[string][]string{"a": {"a"}, "b": {"a", "b"}},
		},
		"one way only": {
			start: map[string]bool{"a": true, "b": true},
			peers: map[string][]string{"a": {"a", "b"}, "b": {"b"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// Addresses of the subtest's own (a previous subtest's IMEX may still be closing
			// its listeners), and ports free on them, not only on 127.0.0.1.
			subnet := subnets.Add(1)
			ips := map[string]string{"a": fmt.Sprintf("127.77.%d.1", subnet), "b": fmt.Sprintf("127.77.%d.2", subnet)}
			ports := freePorts(t, 2, ips["a"], ips["b"])
			index := map[string]int{"a": 0, "b": 1}
			configs := map[string]string{}
			for node := range ips {
				s := imex.Settings{
					BindIP: ips[node], ServerPort: ports[0], CmdPort: ports[1],
					IMEXConfigPath:  filepath.Join(dir, node, "imexd.cfg"),
					NodesConfigPath: filepath.Join(dir, node, "nodes.cfg"),
				}
				must(t, os.MkdirAll(filepath.Join(dir, node), 0o755))
				var peers []imex.Peer
				for _, p := range tc.peers[node] {
					peers = append(peers, imex.Peer{NodeName: p, IPAddress: ips[p], Index: index[p]})
				}
				_, err := imex.WriteConfig(s, peers)
				must(t, err)
				configs[node] = s.IMEXConfigPath
				if tc.start[node] {
					sim := imexsim.New(imex.Options{ConfigPath: s.IMEXConfigPath, Log: logr.Discard(),
						Env: []string{imexsim.LocalAddrsEnv + "=" + ips[node]}})
					_, err := sim.Start(context.Background())
					must(t, err)
					t.Cleanup(func() { _ = sim.Stop(context.Background()) })
				}
			}
			release := filepath.Join(dir, "job.release")
			data, err := json.Marshal(release2(ips))
			must(t, err)
			must(t, os.WriteFile(release, data, 0o644))

			var wg sync.WaitGroup
			codes, outs := map[string]int{}, map[string]*bytes.Buffer{}
			var mu sync.Mutex
			stop := make(chan os.Signal, 2)
			for node := range ips {
				out := &bytes.Buffer{}
				outs[node] = out
				wg.Add(1)
				go func() {
					defer wg.Done()
					sigs := make(chan os.Signal, 1)
					go func() { sigs <- <-stop }()
					code := runWorkload(node, configs[node], release, &syncWriter{mu: &mu, w: out}, sigs)
					mu.Lock()
					codes[node] = code
					mu.Unlock()
				}()
			}
			deadline := time.After(10 * time.Second)
			if !tc.done {
				deadline = time.After(1500 * time.Millisecond) // the connected case finishes in about 0.4s
			}
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-deadline:
				stop <- os.Interrupt
				stop <- os.Interrupt
				<-finished
			}
			mu.Lock()
			defer mu.Unlock()
			for node, out := range outs {
				connected := strings.Contains(out.String(), "every node of the job is connected: done")
				if connected != tc.done || codes[node] != 0 {
					t.Errorf("workload on %s: done %v (want %v), exit %d:\n%s", node, connected, tc.done, codes[node], out)
				}
			}
		})
	}
}

// release2 is the release of a two-node job whose nodes expect each other.
func release2(ips map[string]string) release {
	return release{Peers: map[string][]string{"a": {ips["b"]}, "b": {ips["a"]}}}
}

// subnets numbers the IMEX workload subtests' loopback addresses.
var subnets atomic.Int32

// freePorts returns n distinct ports that are free on every one of ips at the time of asking.
func freePorts(t *testing.T, n int, ips ...string) []int {
	t.Helper()
	var out []int
	for len(out) < n {
		ln, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		must(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		free := !slices.Contains(out, port)
		for _, ip := range ips[1:] {
			other, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			must(t, other.Close())
		}
		must(t, ln.Close())
		if free {
			out = append(out, port)
		}
	}
	return out
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Every scenario starts with e2eOnly(t), so that without CDPLANE_E2E it is reported as skipped
// (and does not touch the cluster clients, which are nil then).
func TestEveryScenarioCallsE2EOnly(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	must(t, err)
	n := 0
	for _, file := range files {
		{
			if strings.HasSuffix(file, "_unit_test.go") {
				continue // tests that need no cluster
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			must(t, err)
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
					continue
				}
				n++
				first := ""
				if len(fn.Body.List) > 0 {
					if es, ok := fn.Body.List[0].(*ast.ExprStmt); ok {
						if call, ok := es.X.(*ast.CallExpr); ok {
							if id, ok := call.Fun.(*ast.Ident); ok {
								first = id.Name
							}
						}
					}
				}
				if first != "e2eOnly" {
					t.Errorf("%s: %s does not start with e2eOnly(t)", fset.Position(fn.Pos()), fn.Name.Name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no scenarios found")
	}
	t.Logf("%d scenarios start with e2eOnly", n)
}
