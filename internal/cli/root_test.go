package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cdplane/internal/plane"
)

// reachedCluster is how every command that loads a kubeconfig fails when it is given one that
// does not exist ({missing}): the mark that all its flags and arguments passed validation.
const reachedCluster = "loading the kubeconfig"

// cliCase is one run of cdplane: its arguments, optionally $CDPLANE_CONTROL_PLANE_ID, and
// what it must print and exit with.
type cliCase struct {
	args []string
	env  string // $CDPLANE_CONTROL_PLANE_ID; unset when empty
	code int    // wanted exit status: 0, 1, 2 (usage) or 3 (refused)
	// stderr: wanted on stderr (after "cdplane: " when code is 1); stdout: wanted on stdout.
	stderr, stdout string
}

// run runs cdplane with args in an environment without a cluster: no $KUBECONFIG, a home
// without ~/.kube/config, not in a pod, no $CDPLANE_CONTROL_PLANE_ID unless env. In args,
// {missing} is a kubeconfig or file that does not exist, {dir} an empty directory, {values}
// a valid values file and {bad-values} a file that is not YAML.
func run(t *testing.T, env string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if env != "" {
		t.Setenv(plane.EnvVar, env)
	} else {
		t.Setenv(plane.EnvVar, "")
		_ = os.Unsetenv(plane.EnvVar) // restored by t.Setenv's cleanup
	}
	empty := filepath.Join(dir, "empty")
	values := filepath.Join(dir, "values.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	for path, content := range map[string]string{values: "logVerbosity: 2\n", bad: "logVerbosity: [\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	expand := strings.NewReplacer("{missing}", filepath.Join(dir, "missing"), "{dir}", empty,
		"{values}", values, "{bad-values}", bad)
	expanded := make([]string, len(args))
	for i, a := range args {
		expanded[i] = expand.Replace(a)
	}
	var out, errOut bytes.Buffer
	code = Main(expanded, &out, &errOut)
	return code, out.String(), errOut.String()
}

// runCases runs each case and checks its exit status and output. A case that fails must not
// have got as far as the kubeconfig unless it wants to.
func runCases(t *testing.T, cases map[string]cliCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("cdplane %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, stdout, stderr)
			}
			want := tc.stderr
			if tc.code != 0 && want != "" {
				want = "cdplane: " + want
			}
			if !strings.Contains(stderr, want) {
				t.Errorf("cdplane %s: stderr %q, want it to contain %q", strings.Join(tc.args, " "), stderr, want)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("cdplane %s: stdout %q, want it to contain %q", strings.Join(tc.args, " "), stdout, tc.stdout)
			}
			if tc.code != 0 && !strings.Contains(tc.stderr, reachedCluster) && strings.Contains(stderr, "kubeconfig") {
				t.Errorf("cdplane %s: stderr %q: reached the kubeconfig before refusing", strings.Join(tc.args, " "), stderr)
			}
		})
	}
}

func TestRoot(t *testing.T) {
	runCases(t, map[string]cliCase{
		"no command prints help":       {args: nil, stdout: "Available Commands:"},
		"help":                         {args: []string{"--help"}, stdout: "Available Commands:"},
		"unknown command":              {args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate" for "cdplane"`},
		"unknown flag":                 {args: []string{"--frobnicate"}, code: 2, stderr: "unknown flag: --frobnicate"},
		"a group alone prints help":    {args: []string{"assign"}, stdout: "Available Commands:"},
		"a group's help":               {args: []string{"install", "--help"}, stdout: "prerequisites"},
		"a typo in a group":            {args: []string{"assign", "nmespace", "team-a"}, code: 2, stderr: `unknown command "nmespace" for "cdplane assign"; did you mean namespace?`},
		"no suggestion when far":       {args: []string{"destroy", "everything"}, code: 2, stderr: `unknown command "everything" for "cdplane destroy"` + "\n"},
		"a flag on a group":            {args: []string{"assign", "--control-plane-id", "plane-a"}, code: 2, stderr: "unknown flag: --control-plane-id"},
		"typos in bench and sim":       {args: []string{"bench", "registraton"}, code: 2, stderr: `unknown command "registraton" for "cdplane bench"; did you mean registration?`},
		"a typo under sim":             {args: []string{"sim", "upp"}, code: 2, stderr: `unknown command "upp" for "cdplane sim"; did you mean up?`},
		"a subcommand's help":          {args: []string{"assign", "node", "--help"}, stdout: "cdplane assign node (NAME... | -l SELECTOR) --control-plane-id ID [flags]"},
		"a subcommand's help, invalid": {args: []string{"install", "plane", "--help", "--control-plane-id", "Plane-A"}, stdout: "--control-plane-id"},
	})
}

// TestBenchAndSimValidation: bench and sim check their flags before they start or read
// anything (the commands are another package's; these cases only read them).
func TestBenchAndSimValidation(t *testing.T) {
	runCases(t, map[string]cliCase{
		"bench: no nodes":                           {args: []string{"bench", "registration", "--nodes", "0"}, code: 2, stderr: "--nodes must be at least 1, got 0"},
		"bench: clique size":                        {args: []string{"bench", "registration", "--clique-size", "0"}, code: 2, stderr: "--clique-size must be between 1 and"},
		"bench: arrival":                            {args: []string{"bench", "registration", "--arrival", "sometimes"}, code: 2, stderr: `--arrival must be burst or ramp, got "sometimes"`},
		"bench: unknown mode":                       {args: []string{"bench", "registration", "--modes", "cdplane,fast"}, code: 2, stderr: `unknown mode "fast"`},
		"bench: nodes nice":                         {args: []string{"bench", "registration", "--nodes-nice", "20"}, code: 2, stderr: "--nodes-nice must be between 0 and 19, got 20"},
		"bench: controller":                         {args: []string{"bench", "registration", "--controller", "elsewhere"}, code: 2, stderr: `--controller must be process or in-process, got "elsewhere"`},
		"bench: controller process without its run": {args: []string{"bench", "controller", "--kubeconfig", "{missing}", "--driver-namespace", "ns"}, code: 1, stderr: "--run is required"},
		// --nodes 0 keeps a regression from starting a benchmark: the arguments are refused first.
		"bench: arguments":        {args: []string{"bench", "registration", "288", "--nodes", "0"}, code: 2, stderr: `unknown command "288" for "cdplane bench registration"`},
		"sim up: no nodes":        {args: []string{"sim", "up", "--nodes", "0", "--state-dir", "{dir}"}, code: 2, stderr: "--nodes 0: want 1..20000"},
		"sim up: invalid plane":   {args: []string{"sim", "up", "--planes", "plane-a,Plane-B", "--state-dir", "{dir}"}, code: 2, stderr: `--planes: invalid control-plane id "Plane-B"`},
		"sim up: arguments":       {args: []string{"sim", "up", "36"}, code: 2, stderr: `unknown command "36" for "cdplane sim up"`},
		"sim down: nothing there": {args: []string{"sim", "down", "--state-dir", "{missing}"}, stdout: "No simulated cluster in"},
		"sim job: nothing there":  {args: []string{"sim", "job", "--state-dir", "{dir}"}, code: 1, stderr: "no simulated cluster in"},
	})
}

// TestMainConcurrently: two commands started at once, as the first of a process (parallel
// integration tests run the CLI this way), share no state unsynchronised. The tests run under
// the race detector, which fails the child process otherwise; it runs in a child so that no
// earlier command of this process has already made the first calls.
func TestMainConcurrently(t *testing.T) {
	if os.Getenv("CDPLANE_TEST_CONCURRENT_MAIN") == "1" {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { Main([]string{"--version"}, io.Discard, io.Discard) })
		}
		wg.Wait()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainConcurrently$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CDPLANE_TEST_CONCURRENT_MAIN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("two commands at once: %v\n%s", err, out)
	}
}

// TestSecondInterruptEnds: the first interrupt ends the commands' context (a command stops and
// reports what it got), the second ends the process, so that a clean-up that hangs can still be
// stopped from the terminal. In a child process, which the signals are sent to.
func TestSecondInterruptEnds(t *testing.T) {
	if os.Getenv("CDPLANE_TEST_SIGNALS") == "1" {
		ctx, stop := signalContext()
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("interrupted")
		time.Sleep(30 * time.Second) // a clean-up that hangs
		fmt.Println("not ended by the second interrupt")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSecondInterruptEnds$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CDPLANE_TEST_SIGNALS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	await := func(want string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child never printed %q", want)
	}
	await("ready")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	await("interrupted")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("after the second interrupt: %v, want the child ended by it\n%s", err, rest.String())
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("after the second interrupt: %v, want the child ended by SIGINT\n%s", err, rest.String())
	}
}
