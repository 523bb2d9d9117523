package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"cdplane/internal/lifecycle"
	"cdplane/internal/refusal"
)

// TestUsageExitCode: what the command line gets wrong exits 2, before any cluster is read:
// cobra's own errors (unknown command or flag, a bad flag value, arguments) and the commands'
// checks of their flags and arguments.
func TestUsageExitCode(t *testing.T) {
	runCases(t, map[string]cliCase{
		"unknown command":                          {args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate" for "cdplane"`},
		"unknown flag":                             {args: []string{"status", "--frobnicate"}, code: 2, stderr: "unknown flag: --frobnicate"},
		"unknown shorthand":                        {args: []string{"version", "-x"}, code: 2, stderr: "unknown shorthand flag: 'x'"},
		"a bad flag value":                         {args: []string{"status", "--timeout", "soon"}, code: 2, stderr: `invalid argument "soon" for "--timeout"`},
		"a bad -v":                                 {args: []string{"-v", "many", "version"}, code: 2, stderr: `invalid argument "many" for "-v`},
		"a negative -v":                            {args: []string{"-v", "-1", "version"}, code: 2, stderr: "-v -1: want 0 or more"},
		"too many arguments":                       {args: []string{"status", "a", "b"}, code: 2, stderr: "want at most one ComputeDomain name, got 2 arguments"},
		"an argument where none":                   {args: []string{"version", "now"}, code: 2, stderr: `unknown command "now" for "cdplane version"`},
		"-A with -n":                               {args: []string{"status", "-A", "-n", "team-a"}, code: 2, stderr: "-n team-a and -A: give one namespace or every namespace, not both"},
		"-A with a name":                           {args: []string{"status", "-A", "train"}, code: 2, stderr: `ComputeDomain "train": -A lists every namespace's domains`},
		"an invalid namespace":                     {args: []string{"status", "-n", "Team_A"}, code: 2, stderr: `invalid namespace name "Team_A"`},
		"an unknown output":                        {args: []string{"status", "-o", "wide"}, code: 2, stderr: `--output "wide": want one of text, json, yaml, name, jsonpath=TEMPLATE, jsonpath-file=FILE`},
		"a bad template":                           {args: []string{"status", "-o", "jsonpath={.planes["}, code: 2, stderr: `--output "jsonpath={.planes["`},
		"no -o name for bench":                     {args: []string{"bench", "slices", "-o", "name"}, code: 2, stderr: `--output "name"`},
		"--json with -o yaml":                      {args: []string{"bench", "slices", "--json", "-o", "yaml"}, code: 2, stderr: `--json and --output "yaml": give one`},
		"an invalid value":                         {args: []string{"install", "plane", "--control-plane-id", "plane-a", "--set", "logVerbosity=11"}, code: 2, stderr: "values of chart cdplane"},
		"debug bundle: log lines":                  {args: []string{"debug", "bundle", "--log-lines", "0"}, code: 2, stderr: "--log-lines must be positive"},
		"bench: no runs":                           {args: []string{"bench", "registration", "--runs", "0"}, code: 2, stderr: "--runs must be at least 1, got 0"},
		"sim up: a bad IMEX mode":                  {args: []string{"sim", "up", "--imex-mode", "both"}, code: 2, stderr: `--imex-mode "both"`},
		"no -n where it means none":                {args: []string{"assign", "namespace", "team-a", "--control-plane-id", "plane-a", "-n", "x"}, code: 2, stderr: "unknown shorthand flag: 'n'"},
		"a valid status reaches the cluster":       {args: []string{"status", "-n", "team-a", "-o", "name", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		"a domain without -n reads the kubeconfig": {args: []string{"status", "train", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		// bench starts a control plane of its own unless a kubeconfig flag names a cluster.
		"bench memory on the cluster given":      {args: []string{"bench", "memory", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		"bench slices on the context given":      {args: []string{"bench", "slices", "--context", "elsewhere"}, code: 1, stderr: reachedCluster},
		"bench registration on the server given": {args: []string{"bench", "registration", "--server", "https://127.0.0.1:1", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
	})
}

// TestRefusedExitCode: a safety check's refusal exits 3, also when it needs no cluster to say
// so (the real refusals of a cluster's state are in test/integration: planes and lifecycle).
func TestRefusedExitCode(t *testing.T) {
	runCases(t, map[string]cliCase{
		"destroy without naming the plane": {args: []string{"destroy", "plane", "--kubeconfig", "{missing}"}, code: 3, stderr: "name the control plane to destroy"},
		"the plane's own namespace":        {args: []string{"assign", "namespace", "plane-a-cdplane", "--control-plane-id", "plane-a"}, code: 3, stderr: `assign refused: namespace plane-a-cdplane: it is control plane "plane-a"'s driver namespace`},
	})
}

func TestExitCodeOf(t *testing.T) {
	refused := &lifecycle.RefusedError{Target: lifecycle.Target{Kind: lifecycle.KindNode, Name: "n1"}, ID: "plane-a", Reason: "owned by control plane \"plane-b\""}
	cases := map[string]struct {
		err  error
		want int
	}{
		"done":                      {want: exitOK},
		"failed":                    {err: errors.New("connection refused"), want: exitError},
		"usage":                     {err: usage(errors.New("--timeout must be positive")), want: exitUsage},
		"usage, wrapped":            {err: fmt.Errorf("x: %w", usage(errors.New("y"))), want: exitUsage},
		"a refusal":                 {err: refusal.Errorf("still has 1 ComputeDomains"), want: exitRefused},
		"lifecycle's refusal":       {err: fmt.Errorf("assign refused: %w", refused), want: exitRefused},
		"a refusal among usage":     {err: usage(errors.Join(errors.New("bad timeout"), refused)), want: exitRefused},
		"a refusal only as message": {err: errors.New(refused.Error()), want: exitError},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := exitCodeOf(tc.err); got != tc.want {
				t.Errorf("exitCodeOf(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// TestKubeFlagsReachTheRequests: the kubectl flags given to a command are in its requests:
// --server picks the apiserver, --token and --as (impersonation) its identity, for status,
// assign and install alike.
func TestKubeFlagsReachTheRequests(t *testing.T) {
	var (
		mu      sync.Mutex
		headers []http.Header
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
		// Forbidden is not retried: the command ends at once.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
	}))
	defer srv.Close()
	// client-go sends a token over TLS only.
	kube := []string{"--server", srv.URL, "--insecure-skip-tls-verify", "--token", "t0ken", "--as", "alice", "--as-group", "team-a", "--request-timeout", "5s"}
	for _, args := range [][]string{
		{"status"},
		{"status", "-n", "team-a"},
		{"assign", "namespace", "team-a", "--control-plane-id", "plane-a"},
		{"destroy", "prerequisites"},
	} {
		mu.Lock()
		headers = nil
		mu.Unlock()
		code, _, stderr := run(t, "", append(args, kube...)...)
		if code == 0 {
			t.Errorf("cdplane %s: exit 0 against a server that forbids everything", strings.Join(args, " "))
		}
		mu.Lock()
		if len(headers) == 0 {
			t.Errorf("cdplane %s: no request reached --server: %s", strings.Join(args, " "), stderr)
		}
		for _, h := range headers {
			if h.Get("Authorization") != "Bearer t0ken" || h.Get("Impersonate-User") != "alice" || h.Get("Impersonate-Group") != "team-a" {
				t.Errorf("cdplane %s: a request with Authorization %q, Impersonate-User %q, Impersonate-Group %q; want the flags'",
					strings.Join(args, " "), h.Get("Authorization"), h.Get("Impersonate-User"), h.Get("Impersonate-Group"))
				break
			}
		}
		mu.Unlock()
	}
}

// TestVerbosityLogsRequests: -v 6 logs every request on stderr, as kubectl's does (client-go's
// round tripper, set up when the client is built). In a child process: klog writes to the
// process's stderr, and its level is the process's.
func TestVerbosityLogsRequests(t *testing.T) {
	if args := os.Getenv("CDPLANE_TEST_MAIN_ARGS"); args != "" {
		os.Exit(Main(strings.Fields(args), os.Stdout, os.Stderr))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	for v, want := range map[string]bool{"0": false, "6": true} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestVerbosityLogsRequests$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CDPLANE_TEST_MAIN_ARGS=-v "+v+" status --server "+srv.URL+" --timeout 5s")
		out, _ := cmd.CombinedOutput()
		logged := strings.Contains(string(out), `verb="GET" url="`+srv.URL+`/`)
		if logged != want {
			t.Errorf("-v %s: requests logged %v, want %v:\n%s", v, logged, want, out)
		}
	}
}
