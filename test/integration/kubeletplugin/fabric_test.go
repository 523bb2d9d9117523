package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/component-base/featuregate"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/nvml"
	"cdplane/internal/sim/nodehost"
	"cdplane/internal/sim/nvmlsim"
)

// specFile is a Discoverer that reads the node's simulated NVML spec file on every discovery,
// so that a test changes the fabric under a running plugin by rewriting the file
// (nodehost.WriteNode). (nodehost.Plugin reads the file once, at start.)
type specFile struct{ nodeDir string }

func (s specFile) Discover(ctx context.Context) (nvml.Result, error) {
	data, err := os.ReadFile(filepath.Join(s.nodeDir, nodehost.NVMLSpecPath))
	if err != nil {
		return nvml.Result{}, err
	}
	spec, err := nvmlsim.Parse(data)
	if err != nil {
		return nvml.Result{}, err
	}
	return spec.Discover(ctx)
}

// setFabric rewrites the node's NVML spec file: every GPU's fabric registration in state, with
// status.
func (n *node) setFabric(state nvml.FabricState, status nvml.FabricStatus) {
	n.e.T.Helper()
	spec := n.sim
	spec.Fabric.State, spec.Fabric.Status = state, status
	if err := nodehost.WriteNode(n.dir, spec); err != nil {
		n.e.T.Fatal(err)
	}
}

// errorLog records the messages and errors the plugin logs at error level, and passes every
// line on to the test's log.
type errorLog struct {
	logr.LogSink
	mu    *sync.Mutex
	lines *[]string
}

func newErrorLog(t *testing.T) (logr.Logger, func() []string) {
	mu, lines := &sync.Mutex{}, &[]string{}
	sink := errorLog{LogSink: testr.NewWithOptions(t, testr.Options{Verbosity: 1}).GetSink(), mu: mu, lines: lines}
	return logr.New(sink), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), *lines...)
	}
}

func (l errorLog) Error(err error, msg string, kv ...any) {
	l.mu.Lock()
	*l.lines = append(*l.lines, fmt.Sprintf("%s: %v", msg, err))
	l.mu.Unlock()
	l.LogSink.Error(err, msg, kv...)
}

func (l errorLog) WithValues(kv ...any) logr.LogSink {
	return errorLog{LogSink: l.LogSink.WithValues(kv...), mu: l.mu, lines: l.lines}
}

func (l errorLog) WithName(name string) logr.LogSink {
	return errorLog{LogSink: l.LogSink.WithName(name), mu: l.mu, lines: l.lines}
}

// startOnSpecFile starts the plugin reading its fabric from the node's spec file, refreshed
// every 100ms, with CrashOnNVLinkFabricErrors as given. waitLogged waits until the plugin has
// logged an error containing text.
func (n *node) startOnSpecFile(crash bool) (waitLogged func(text string)) {
	n.e.T.Helper()
	logger, logged := newErrorLog(n.e.T)
	n.startWith(4, logger, func(o *kubeletplugin.Options) {
		o.Discoverer = specFile{nodeDir: n.dir}
		o.CliqueRefreshPeriod = 100 * time.Millisecond
		o.Gates = features.NewGatesForTest(n.e.T, map[featuregate.Feature]bool{features.CrashOnNVLinkFabricErrors: crash})
		o.PodName = "plugin-" + n.name
	})
	return func(text string) {
		n.e.T.Helper()
		n.e.Eventually(20*time.Second, "the plugin logs an error containing "+text, func() (bool, error) {
			for _, l := range logged() {
				if strings.Contains(l, text) {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

var attempts atomic.Int32

// refusedOnce prepares new claims of domain cd (a prepared claim is answered from the
// checkpoint) until one is refused: the plugin rediscovers its fabric every 100ms, so the first
// ones may be prepared before it has seen a change. It returns the refusal and the claim.
func (n *node) refusedOnce(what string, cd *cdv1beta1.ComputeDomain) (string, *resourcev1.ResourceClaim) {
	n.e.T.Helper()
	var refusal string
	var refused *resourcev1.ResourceClaim
	i := 0
	n.e.Eventually(20*time.Second, what, func() (bool, error) {
		i++
		claim := n.e.channelClaim(n.e.ns, fmt.Sprintf("attempt-%d", attempts.Add(1)), n, cd, "")
		resp, _ := n.prepare(claim)
		refusal, refused = resp.Error, claim
		if refusal == "" {
			// Prepared: free its channel for the next attempt, as its pod's end would.
			if msg := n.unprepare(claim.Namespace, claim.Name, claim.UID); msg != "" {
				return false, fmt.Errorf("unpreparing %s: %s", claim.Name, msg)
			}
		}
		return refusal != "", fmt.Errorf("%d claims prepared", i)
	})
	return refusal, refused
}

func (n *node) serving() bool {
	select {
	case <-n.drv.Done():
		return false
	default:
		return true
	}
}

// failedRegistration is what the error of a failed registration says (status 999).
const failedRegistration = "NVLink fabric registration failed: state COMPLETED, status ERROR_UNKNOWN"

// TestFabricRegistrationAtRunTime changes a running plugin's NVLink fabric through the node's
// simulated NVML (CrashOnNVLinkFabricErrors off). Registration in progress: prepare answers a
// retryable error (the node is not ready) and the plugin keeps serving; completed again:
// prepare succeeds. Registration failed: the node serves as one without a fabric, says so in its
// log and an event, and the plugin keeps serving.
func TestFabricRegistrationAtRunTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(21)
	waitLogged := n.startOnSpecFile(false)
	cd := e.createCD(e.ns, "fabric")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	n.mustPrepare(e.channelClaimOn(e.ns, "before", n, cd, "", 1))

	// In progress.
	n.setFabric(nvml.FabricStateInProgress, nvml.FabricStatusSuccess)
	got, registering := n.refusedOnce("a prepare refused while the fabric registers", cd)
	if !strings.Contains(got, "retryable error") || !strings.Contains(got, nvml.ErrFabricNotReady.Error()) || !strings.Contains(got, "IN_PROGRESS") {
		t.Errorf("prepare while the fabric registers: %q, want a retryable error saying registration is in progress", got)
	}
	if _, ok := n.cdiSpec(registering.UID); ok {
		t.Error("CDI spec written while the fabric registers")
	}
	if !n.serving() {
		t.Fatalf("the plugin stopped while the fabric registers: %v", n.drv.Err())
	}
	// Meanwhile the node offers nothing, so workloads go elsewhere, and says why.
	n.waitDevices(0)
	waitNodeEvent(e, n, kubeletplugin.ReasonFabricNotReady, "its NVLink fabric registration has not completed")

	// Completed: the kubelet's retry succeeds.
	n.setFabric(nvml.FabricStateCompleted, nvml.FabricStatusSuccess)
	var last string
	e.Eventually(30*time.Second, "prepare succeeds once registration completed", func() (bool, error) {
		resp, _ := n.prepare(registering)
		last = resp.Error
		return last == "", errors.New(last)
	})
	if _, ok := n.cdiSpec(registering.UID); !ok {
		t.Error("no CDI spec once registration completed")
	}
	n.waitDevices(5) // 4 channels and the daemon device
	waitNodeEvent(e, n, kubeletplugin.ReasonDevicesPublished, "offers its ComputeDomain devices again")

	// Failed (CrashOnNVLinkFabricErrors off): as NVIDIA's driver, the node serves as one
	// without a fabric — its devices stay published, its clique is empty — and says so in its
	// log and an event; the plugin keeps serving.
	n.setFabric(nvml.FabricStateCompleted, 999)
	waitLogged("as a node without NVLink fabric")
	waitNodeEvent(e, n, kubeletplugin.ReasonFabricFailed, "serves ComputeDomains as a node without NVLink fabric")
	if !n.serving() {
		t.Fatalf("the plugin stopped on a fabric failure with CrashOnNVLinkFabricErrors off: %v", n.drv.Err())
	}
	n.waitDevices(5)
}

// waitDevices waits until the node's pool holds want devices.
func (n *node) waitDevices(want int) {
	n.e.T.Helper()
	n.e.Eventually(time.Minute, fmt.Sprintf("%d devices published by %s", want, n.name), func() (bool, error) {
		list := &resourcev1.ResourceSliceList{}
		if err := n.e.C.List(n.e.Ctx(), list); err != nil {
			return false, err
		}
		count := 0
		for _, s := range list.Items {
			if s.Spec.Driver == cdv1beta1.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == n.name {
				count += len(s.Spec.Devices)
			}
		}
		return count == want, fmt.Errorf("%d devices", count)
	})
}

// TestFabricFailureAtRunTimeIsFatal: with CrashOnNVLinkFabricErrors on, a registration in
// progress is still only retryable, and a registration that fails while the plugin runs stops
// the plugin with the error.
func TestFabricFailureAtRunTimeIsFatal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(22)
	n.startOnSpecFile(true)
	cd := e.createCD(e.ns, "fatal")
	e.setClique(cd, n, cdv1beta1.StatusReady)

	n.setFabric(nvml.FabricStateInProgress, nvml.FabricStatusSuccess)
	got, _ := n.refusedOnce("a prepare refused while the fabric registers", cd)
	if !strings.Contains(got, "retryable error") || !strings.Contains(got, "IN_PROGRESS") {
		t.Errorf("prepare while the fabric registers: %q, want a retryable error", got)
	}
	if !n.serving() {
		t.Fatalf("the plugin stopped while the fabric registers: %v", n.drv.Err())
	}

	n.setFabric(nvml.FabricStateCompleted, 999)
	select {
	case <-n.drv.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin still serves 30s after its fabric failed, with CrashOnNVLinkFabricErrors on")
	}
	if err := n.drv.Err(); err == nil || !strings.Contains(err.Error(), "CrashOnNVLinkFabricErrors") || !strings.Contains(err.Error(), failedRegistration) {
		t.Errorf("the plugin stopped with %v, want the fabric failure", err)
	}
}
