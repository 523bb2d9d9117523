package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"cdplane/internal/sim/controlplane"
)

// The controller of the cdplane modes runs, when Options.ControllerCommand is set, in a process
// of its own, as it does in a cluster (a Deployment on some node), rather than in this process,
// where it shares one Go scheduler and garbage collector with thousands of daemon instances
// (in large runs their goroutines waited long to run). Its CPU profile and memory are then its
// own. On a machine whose cores the apiserver needs, a process of its own also takes CPU that
// the Go scheduler would have held back; docs/scale.md has both measured. The
// child is this binary (`cdplane bench controller`); it stops when its standard input closes
// (so also when the benchmark dies) and then prints what it measured as JSON on its standard
// output.

// ControllerArgs are what the controller process needs: the cluster (a kubeconfig of the
// benchmark's administrator; the controller impersonates its service account) and the mode's
// world.
type ControllerArgs struct {
	Kubeconfig      string
	DriverNamespace string
	Run             string
	Cliques         bool
	BatchWindow     time.Duration
	// CPUProfile, when set, receives the process's CPU profile.
	CPUProfile string
}

// AddFlags defines a's flags (those Flags returns) on fs.
func (a *ControllerArgs) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.Kubeconfig, "kubeconfig", "", "The cluster (an administrator's kubeconfig; the controller impersonates its service account)")
	fs.StringVar(&a.DriverNamespace, "driver-namespace", "", "The mode's driver namespace")
	fs.StringVar(&a.Run, "run", "", "The mode's run label: the domains the controller reconciles")
	fs.BoolVar(&a.Cliques, "cliques", true, "The ComputeDomainCliques gate")
	fs.DurationVar(&a.BatchWindow, "batch-window", 0, "The controller's --batch-window (0: its default)")
	fs.StringVar(&a.CPUProfile, "cpu-profile", "", "Write this process's CPU profile here")
}

// Validate names a missing flag.
func (a *ControllerArgs) Validate() error {
	switch {
	case a.Kubeconfig == "":
		return errors.New("--kubeconfig is required")
	case a.DriverNamespace == "":
		return errors.New("--driver-namespace is required")
	case a.Run == "":
		return errors.New("--run is required")
	}
	return nil
}

// Flags returns a as the flags of `cdplane bench controller`.
func (a ControllerArgs) Flags() []string {
	f := []string{"--kubeconfig", a.Kubeconfig, "--driver-namespace", a.DriverNamespace, "--run", a.Run,
		"--cliques=" + strconv.FormatBool(a.Cliques), "--batch-window", a.BatchWindow.String()}
	if a.CPUProfile != "" {
		f = append(f, "--cpu-profile", a.CPUProfile)
	}
	return f
}

// controllerReport is what the controller process prints when it stops.
type controllerReport struct {
	Writes           int64              `json:"writes"`
	Reconciles       float64            `json:"reconciles"`
	ReconcileSeconds float64            `json:"reconcile_seconds"`
	Steps            map[string]float64 `json:"steps"`
	// Seen is, per phase (seen, ready_seen), when the controller's cache first showed each pod
	// so (Unix nanoseconds, by pod name).
	Seen map[string]map[string]int64 `json:"seen"`
}

// ServeController runs the benchmark's controller until stdin closes or ctx ends, then writes
// its report to stdout: what it did after the line "start" on stdin (the mode's clock), or
// since it started when no such line came.
func ServeController(ctx context.Context, a ControllerArgs, stdin io.Reader, stdout io.Writer) (err error) {
	if err := a.Validate(); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if a.CPUProfile != "" {
		f, err := os.Create(a.CPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	ctl, err := startInProcessController(ctx, cfg, a)
	if err != nil {
		return err
	}
	lines, quit := make(chan string), make(chan struct{})
	defer close(quit)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-quit:
				return
			}
		}
	}()
	for open := true; open; {
		select {
		case line, ok := <-lines:
			if open = ok; ok && line == "start" {
				ctl.markStart()
			}
		case <-ctx.Done():
			open = false
		case <-ctl.exited:
			open = false
		}
	}
	rep, err := ctl.stop(time.Minute)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(rep)
}

// modeController is the controller of a cdplane mode, in this process or in one of its own.
type modeController interface {
	// markStart starts the mode's clock: the report counts from here.
	markStart()
	// running returns an error once the controller stopped by itself.
	running() error
	// rss is the resident memory of the controller's own process (0 in this process).
	rss() uint64
	// stop stops the controller, waiting at most timeout, and returns its report.
	stop(timeout time.Duration) (controllerReport, error)
}

// inProcessController is the controller running in this process.
type inProcessController struct {
	cancel  context.CancelFunc
	exited  chan struct{} // closed when the manager returned, exitErr set
	exitErr error
	counter *writeCounter
	seen    *podsSeen

	mu             sync.Mutex
	writes0        int64
	recs0, recSec0 float64
	steps0         map[string]float64
}

func startInProcessController(ctx context.Context, cfg *rest.Config, a ControllerArgs) (*inProcessController, error) {
	mctx, cancel := context.WithCancel(ctx)
	c := &inProcessController{cancel: cancel, exited: make(chan struct{}), counter: &writeCounter{}, seen: newPodsSeen()}
	c.recs0, c.recSec0, c.steps0 = reconcileTotals()
	done := make(chan error, 1)
	if err := startController(mctx, cfg, a.DriverNamespace, a.Run, a.Cliques, a.BatchWindow, c.counter, done, c.seen); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		c.exitErr = <-done
		close(c.exited)
	}()
	return c, nil
}

func (c *inProcessController) markStart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes0 = c.counter.n.Load()
	c.recs0, c.recSec0, c.steps0 = reconcileTotals()
}

func (c *inProcessController) running() error {
	select {
	case <-c.exited:
		if c.exitErr == nil {
			return errors.New("controller manager stopped")
		}
		return fmt.Errorf("controller manager stopped: %w", c.exitErr)
	default:
		return nil
	}
}

func (c *inProcessController) rss() uint64 { return 0 }

func (c *inProcessController) stop(timeout time.Duration) (controllerReport, error) {
	c.cancel()
	select {
	case <-c.exited:
	case <-time.After(timeout):
		return controllerReport{}, fmt.Errorf("the controller did not stop within %v", timeout)
	}
	if c.exitErr != nil {
		return controllerReport{}, fmt.Errorf("controller manager: %w", c.exitErr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, sec, steps := reconcileTotals()
	rep := controllerReport{Writes: c.counter.n.Load() - c.writes0, Reconciles: n - c.recs0, ReconcileSeconds: sec - c.recSec0,
		Steps: map[string]float64{}, Seen: c.seen.byName()}
	for step, s := range steps {
		if d := s - c.steps0[step]; d > 0 {
			rep.Steps[step] = d
		}
	}
	return rep, nil
}

// controllerProcess is a running controller process.
type controllerProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout bytes.Buffer
	stderr tailBuffer
	exited chan struct{}
	err    error // set before exited closes
}

// startControllerProcess writes a kubeconfig for cfg into dir and starts command with a's
// flags; ownSession starts it in a session of its own (see Options.NodesNice).
func startControllerProcess(command []string, cfg *rest.Config, dir string, a ControllerArgs, ownSession bool) (*controllerProcess, error) {
	a.Kubeconfig = filepath.Join(dir, "controller.kubeconfig")
	if err := writeKubeconfig(cfg, a.Kubeconfig); err != nil {
		return nil, err
	}
	p := &controllerProcess{exited: make(chan struct{})}
	p.cmd = exec.Command(command[0], append(append([]string{}, command[1:]...), a.Flags()...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// Gone with the benchmark, whatever ends it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: ownSession}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the controller process: %w", err)
	}
	go func() {
		err := p.cmd.Wait()
		if err != nil {
			err = fmt.Errorf("controller process: %w: %s", err, p.stderr.String())
		}
		p.err = err
		close(p.exited)
	}()
	return p, nil
}

func (p *controllerProcess) markStart() { _, _ = io.WriteString(p.stdin, "start\n") }

func (p *controllerProcess) rss() uint64 {
	n, _ := controlplane.ResidentMemory(p.cmd.Process.Pid)
	return n
}

// running reports an error when the process has ended before it was asked to stop.
func (p *controllerProcess) running() error {
	select {
	case <-p.exited:
		if p.err != nil {
			return p.err
		}
		return errors.New("the controller process exited")
	default:
		return nil
	}
}

// stop asks the process to stop (closes its stdin), waits for it at most timeout (then kills
// it) and returns its report.
func (p *controllerProcess) stop(timeout time.Duration) (controllerReport, error) {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return controllerReport{}, fmt.Errorf("the controller process did not stop within %v: %s", timeout, p.stderr.String())
	}
	if p.err != nil {
		return controllerReport{}, p.err
	}
	var rep controllerReport
	if err := json.Unmarshal(p.stdout.Bytes(), &rep); err != nil {
		return controllerReport{}, fmt.Errorf("the controller process's report: %w", err)
	}
	return rep, nil
}

// writeKubeconfig writes cfg's address and credentials to path: inline where cfg holds them
// (client-go may have read its files into it), else as cfg's file names.
func writeKubeconfig(cfg *rest.Config, path string) error {
	cluster := &clientcmdapi.Cluster{Server: cfg.Host, TLSServerName: cfg.ServerName, InsecureSkipTLSVerify: cfg.Insecure}
	user := &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	if cluster.CertificateAuthorityData = cfg.CAData; len(cfg.CAData) == 0 {
		cluster.CertificateAuthority = cfg.CAFile
	}
	if user.ClientCertificateData = cfg.CertData; len(cfg.CertData) == 0 {
		user.ClientCertificate = cfg.CertFile
	}
	if user.ClientKeyData = cfg.KeyData; len(cfg.KeyData) == 0 {
		user.ClientKey = cfg.KeyFile
	}
	if cfg.BearerToken == "" {
		user.TokenFile = cfg.BearerTokenFile
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = cluster
	kc.AuthInfos["bench"] = user
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	kc.CurrentContext = "bench"
	return clientcmd.WriteToFile(*kc, path)
}

// tailBuffer keeps the last 4 KiB written to it (a child's stderr, for error messages).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - 4096; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}
