package kubeletplugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/sim/nvmlsim"
	"cdplane/internal/testutil/cluster"
)

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	// nvmlLibrary is the simulated NVML library built beside the binary.
	nvmlLibrary string
)

// removeBinary removes the built binary; TestMain calls it after the tests.
func removeBinary() {
	if binaryPath != "" && binaryErr == nil {
		_ = os.RemoveAll(filepath.Dir(binaryPath))
	}
}

// pluginBinary builds cmd/cdplane-kubelet-plugin once per test binary.
func pluginBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		root, err := cluster.RepoRoot()
		if err != nil {
			binaryErr = err
			return
		}
		dir, err := os.MkdirTemp("", "kp-bin")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "cdplane-kubelet-plugin")
		cmd := exec.Command("go", "build", "-o", binaryPath, "./internal/sim/cmd/cdplane-kubelet-plugin")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binaryErr = err
			binaryPath = string(out)
			return
		}
		// The simulated NVML library the process loads, as a simulated node's driver root
		// holds it; it answers from the node directory in the process's environment.
		nvmlLibrary = filepath.Join(dir, nvmlsim.LibraryFile)
		binaryErr = nvmlsim.BuildLibrary(context.Background(), nvmlLibrary)
	})
	if binaryErr != nil {
		t.Fatalf("building cdplane-kubelet-plugin: %v\n%s", binaryErr, binaryPath)
	}
	return binaryPath
}

// process is the plugin binary running for a node.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	log  string
}

// startProcess runs the plugin binary for the node with a long readiness bound, so that a
// prepare stays in flight until the test kills the process.
func (n *node) startProcess(kubeconfig string) *process {
	t := n.e.T
	t.Helper()
	if err := nodehost.WriteNode(n.dir, n.sim); err != nil {
		t.Fatal(err)
	}
	o := n.options(4)
	logPath := n.path("plugin.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(pluginBinary(t),
		"--kubeconfig="+kubeconfig, "--node-name="+n.name, "--namespace="+n.e.driverNS,
		"--plugin-registration-path="+o.RegistrarDir, "--plugin-data-path="+o.PluginDataDir,
		"--cdi-root="+o.CDIRoot, "--state-dir="+o.StateDir,
		"--num-channels=4",
		"--prepare-wait-timeout=2m", "-v=2", "--nvml-library="+nvmlLibrary,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), nodehost.NodeDirEnv+"="+n.dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait() // killed on purpose: the exit status says nothing
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("plugin log:\n%s", cluster.Tail(logPath, 40))
		}
	})
	n.connect()
	return p
}

// signal sends sig and waits for the process to end.
func (p *process) signal(sig syscall.Signal) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// TestKillBetweenPrepareStartedAndCompletion kills the plugin process while a claim is
// PrepareStarted (node labelled, waiting for the daemon), deletes the claim, and restarts the
// plugin: the claim is unprepared (label removed) and marked PrepareAborted, a claim left
// PrepareStarted that still exists is left for the kubelet, and a later unprepare of the aborted
// claim is a no-op.
func TestKillBetweenPrepareStartedAndCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(11)
	kubeconfig, err := testCluster.AdminKubeconfig("kubelet-plugin-" + n.name)
	if err != nil {
		t.Fatal(err)
	}
	p := n.startProcess(kubeconfig)

	// Claim kept: its domain is not known yet, so it stays PrepareStarted (retryable error).
	kept := e.allocatedClaim(e.ns, "kept", n, kubeletplugin.ChannelDeviceName(0),
		rawJSON(t, cdv1beta1.NewChannelConfig("5a1e0c6b-7d7e-4b8e-9f00-000000000001", "")), nil)
	if got, _ := n.prepare(kept); !strings.Contains(got.Error, "retryable error") {
		t.Fatalf("preparing the kept claim: %q, want a retryable error", got.Error)
	}

	// Claim killed: its daemon never turns Ready, so prepare waits after labelling the node.
	cd := e.createCD(e.ns, "killed")
	e.setClique(cd, n, cdv1beta1.StatusNotReady)
	killed := e.channelClaim(e.ns, "killed", n, cd, "")
	inFlight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err := n.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{
			{Namespace: killed.Namespace, Name: killed.Name, Uid: string(killed.UID)},
		}})
		inFlight <- err
	}()
	e.Eventually(30*time.Second, "claim PrepareStarted with the node labelled", func() (bool, error) {
		cp, err := kubeletplugin.ReadCheckpoint(n.path("state", kubeletplugin.CheckpointFile))
		if err != nil {
			return false, err
		}
		return cp.Claims[killed.UID].State == kubeletplugin.PrepareStarted && n.label() == string(cd.UID), nil
	})
	p.signal(syscall.SIGKILL)
	if err := <-inFlight; err == nil {
		t.Fatal("the in-flight prepare succeeded although the plugin was killed")
	}
	n.stop()

	if err := e.C.Delete(e.Ctx(), killed); err != nil {
		t.Fatal(err)
	}
	e.Eventually(30*time.Second, "claim deleted", func() (bool, error) {
		err := e.C.Get(context.Background(), client.ObjectKeyFromObject(killed), &resourcev1.ResourceClaim{})
		return apierrors.IsNotFound(err), err
	})

	// Restart: recovery runs before the plugin serves, so it is done once it answers.
	n.startProcess(kubeconfig)
	cp := n.checkpoint()
	if st := cp.Claims[killed.UID].State; st != kubeletplugin.PrepareAborted {
		t.Errorf("deleted claim is %q after the restart, want PrepareAborted", st)
	}
	if st := cp.Claims[kept.UID].State; st != kubeletplugin.PrepareStarted {
		t.Errorf("existing claim is %q after the restart, want PrepareStarted (left for the kubelet)", st)
	}
	if l := n.label(); l != "" {
		t.Errorf("node label %q after aborting the claim, want none", l)
	}

	// Unprepare of the aborted claim is a no-op: the label someone set since stays.
	n.setLabel(string(cd.UID))
	if msg := n.unprepare(killed.Namespace, killed.Name, killed.UID); msg != "" {
		t.Fatalf("unprepare of the aborted claim: %s", msg)
	}
	if l := n.label(); l != string(cd.UID) {
		t.Errorf("unprepare of an aborted claim removed the node label (now %q)", l)
	}
	if msg := n.unprepare(kept.Namespace, kept.Name, kept.UID); msg != "" {
		t.Errorf("unprepare of the kept claim: %s", msg)
	}
	if cp := n.checkpoint(); len(cp.Claims) != 0 {
		t.Errorf("checkpoint still lists %v", cp.Claims)
	}
}
