package kubeletplugin

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/featuregate"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/testutil"
)

// TestSingleAndAllInjection prepares a Single and an All channel claim of a Ready domain and
// checks what the kubelet gets back and what the CDI specs inject.
func TestSingleAndAllInjection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(1)
	n.start(16)
	cd := e.createCD(e.ns, "inject")
	e.setClique(cd, n, cdv1beta1.StatusReady)

	single := e.channelClaim(e.ns, "single", n, cd, cdv1beta1.AllocationModeSingle)
	got := n.mustPrepare(single)
	wantID := "k8s.compute-domain.nvidia.com/claim=" + string(single.UID) + "-channel-0"
	if len(got.Devices) != 1 || got.Devices[0].PoolName != n.name || got.Devices[0].DeviceName != "channel-0" ||
		!cmp.Equal(got.Devices[0].CdiDeviceIds, []string{wantID}) || !cmp.Equal(got.Devices[0].RequestNames, []string{"channel"}) {
		t.Errorf("prepare answered %v, want channel-0 of pool %s with CDI device %s", got.Devices, n.name, wantID)
	}
	spec, ok := n.cdiSpec(single.UID)
	if !ok {
		t.Fatal("no CDI spec for the Single claim")
	}
	if spec.Kind != kubeletplugin.CDIKind || len(spec.Devices) != 1 || spec.Devices[0].Name != string(single.UID)+"-channel-0" {
		t.Fatalf("Single CDI spec: kind %s, devices %+v", spec.Kind, spec.Devices)
	}
	nodes := spec.Devices[0].ContainerEdits.DeviceNodes
	if len(nodes) != 1 || nodes[0].Path != "/dev/nvidia-caps-imex-channels/channel0" || nodes[0].HostPath != "" ||
		nodes[0].Type != "c" || nodes[0].Major == 0 || nodes[0].Minor != 0 {
		t.Errorf("Single claim injects %+v, want only channel0, described by its numbers for the runtime to create", nodes)
	}
	if _, err := os.Stat(n.path("dev", "nvidia-caps-imex-channels")); !os.IsNotExist(err) {
		t.Errorf("the node's /dev: %v, want no IMEX device node created on the host", err)
	}
	if got := n.label(); got != string(cd.UID) {
		t.Errorf("node label %q, want the domain's UID %s", got, cd.UID)
	}
	if got := n.labels()[cdv1beta1.GPUCliqueNodeLabel]; got != n.clique {
		t.Errorf("node clique label %q, want %s (--node-clique-label)", got, n.clique)
	}

	all := e.channelClaimOn(e.ns, "all", n, cd, cdv1beta1.AllocationModeAll, 1)
	n.mustPrepare(all)
	spec, ok = n.cdiSpec(all.UID)
	if !ok {
		t.Fatal("no CDI spec for the All claim")
	}
	paths := deviceNodePaths(spec.Devices[0])
	if len(paths) != kubeletplugin.MaxChannels {
		t.Errorf("All claim injects %d channels, want %d", len(paths), kubeletplugin.MaxChannels)
	}
	for _, ch := range []int{0, 222, 2047} {
		if want := fmt.Sprintf("/dev/nvidia-caps-imex-channels/channel%d", ch); !containsString(paths, want) {
			t.Errorf("All claim does not inject %s", want)
		}
	}

	// Preparing again (a kubelet restart) answers the same without redoing anything.
	again := n.mustPrepare(single)
	if !cmp.Equal(again.Devices[0].CdiDeviceIds, []string{wantID}) {
		t.Errorf("second prepare answered %v", again.Devices)
	}
	cp := n.checkpoint()
	for _, c := range []string{string(single.UID), string(all.UID)} {
		if st := cp.Claims[types.UID(c)].State; st != kubeletplugin.PrepareCompleted {
			t.Errorf("checkpoint state of %s is %q, want PrepareCompleted", c, st)
		}
	}
}

// TestWrongNamespaceIsPermanent: a channel claim naming a domain of another namespace fails at
// once with a permanent error and changes nothing.
func TestWrongNamespaceIsPermanent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(2)
	n.start(4)
	other := testCluster.Namespace(t, nil)
	cd := e.createCD(other, "elsewhere")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	claim := e.channelClaim(e.ns, "wrong-ns", n, cd, "")
	// Permanent (the kubelet does not retry it), not the retryable wait for readiness.
	got, _ := n.prepare(claim)
	if !strings.Contains(got.Error, "permanent error") || !strings.Contains(got.Error, "must be in its ComputeDomain's namespace") {
		t.Errorf("prepare error %q, want a permanent error about the namespace", got.Error)
	}
	if l := n.label(); l != "" {
		t.Errorf("node labelled %q for a refused claim", l)
	}
	if _, ok := n.cdiSpec(claim.UID); ok {
		t.Error("CDI spec written for a refused claim")
	}
}

// TestNodeServingAnotherDomainIsRefused: a node labelled for one domain refuses another's claim
// and keeps its label.
func TestNodeServingAnotherDomainIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(3)
	n.start(4)
	first, second := e.createCD(e.ns, "first"), e.createCD(e.ns, "second")
	e.setClique(first, n, cdv1beta1.StatusReady)
	e.setClique(second, n, cdv1beta1.StatusReady)
	n.mustPrepare(e.channelClaim(e.ns, "first", n, first, ""))

	claim := e.channelClaimOn(e.ns, "second", n, second, "", 1)
	got, _ := n.prepare(claim)
	want := fmt.Sprintf("node %s already serves ComputeDomain %s", n.name, first.UID)
	if !strings.Contains(got.Error, want) {
		t.Errorf("prepare error %q, want it to contain %q", got.Error, want)
	}
	if l := n.label(); l != string(first.UID) {
		t.Errorf("node label %q, want the first domain's %s", l, first.UID)
	}
	if _, ok := n.cdiSpec(claim.UID); ok {
		t.Error("CDI spec written for a refused claim")
	}
}

// TestNotReadyDaemonIsRetryable: while the node's daemon is not Ready, prepare returns a
// retryable error and injects nothing; once it is Ready, prepare succeeds. Cliques and
// status.nodes alike: status.nodes with the plugin's ComputeDomainCliques gate off, and with it
// on as the fallback for a controller whose gate is off (no clique comes: after
// StatusFallbackAfter, shortened here). States only: how long a call takes depends on the
// machine.
func TestNotReadyDaemonIsRetryable(t *testing.T) {
	t.Parallel()
	toClique := func(e *env, cd *cdv1beta1.ComputeDomain, n *node, s string) { e.setClique(cd, n, s) }
	toStatus := func(e *env, cd *cdv1beta1.ComputeDomain, n *node, s string) { e.setStatusNode(cd, n, 0, s) }
	cliquesOff := features.NewGatesForTest(t, map[featuregate.Feature]bool{features.ComputeDomainCliques: false})
	for name, tc := range map[string]struct {
		setReady func(e *env, cd *cdv1beta1.ComputeDomain, n *node, status string)
		opts     func(*kubeletplugin.Options)
		// place is the domain's membership annotation, as cdplane's controller sets it.
		place string
	}{
		"clique":                    {setReady: toClique},
		"status.nodes, cliques off": {setReady: toStatus, opts: func(o *kubeletplugin.Options) { o.Gates = cliquesOff }},
		"status.nodes, fallback":    {setReady: toStatus, opts: func(o *kubeletplugin.Options) { o.StatusFallbackAfter = 2 * time.Second }},
		// The controller says status: read at once, not after the fallback's 2 minutes (the
		// wait below is 1 minute).
		"status.nodes, annotated": {setReady: toStatus, place: cdv1beta1.MembershipInStatus},
	} {
		setReady := tc.setReady
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			n := e.addNode(4)
			n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), tc.opts)
			cd := e.createCD(e.ns, "notready")
			if tc.place != "" {
				e.annotateMembership(cd, tc.place)
			}
			setReady(e, cd, n, cdv1beta1.StatusNotReady)
			claim := e.channelClaim(e.ns, "wait", n, cd, "")

			got, _ := n.prepare(claim)
			if !strings.Contains(got.Error, "retryable error") || !strings.Contains(got.Error, "not Ready") || strings.Contains(got.Error, "permanent") {
				t.Errorf("prepare error %q, want a retryable error saying the daemon is not Ready", got.Error)
			}
			if len(got.Devices) != 0 {
				t.Errorf("prepare answered devices %v while the daemon is not Ready", got.Devices)
			}
			if l := n.label(); l != string(cd.UID) {
				t.Errorf("node label %q while waiting, want %s (the daemon needs it to start)", l, cd.UID)
			}
			if _, ok := n.cdiSpec(claim.UID); ok {
				t.Error("CDI spec written before the daemon is Ready")
			}
			if st := n.checkpoint().Claims[claim.UID].State; st != kubeletplugin.PrepareStarted {
				t.Errorf("checkpoint state %q while the daemon is not Ready, want PrepareStarted", st)
			}

			// The daemon turns Ready: prepare succeeds. The kubelet retries a retryable error;
			// so does this test, for as long as the plugin's cache may lag the write.
			setReady(e, cd, n, cdv1beta1.StatusReady)
			var last string
			e.Eventually(time.Minute, "prepare succeeds once the daemon is Ready", func() (bool, error) {
				resp, _ := n.prepare(claim)
				last = resp.Error
				// Done unless the kubelet would retry.
				return !strings.Contains(last, "retryable error"), errors.New(last)
			})
			if last != "" {
				t.Fatalf("prepare after the daemon turned Ready: %s", last)
			}
			if _, ok := n.cdiSpec(claim.UID); !ok {
				t.Error("no CDI spec after the daemon turned Ready")
			}
			if st := n.checkpoint().Claims[claim.UID].State; st != kubeletplugin.PrepareCompleted {
				t.Errorf("checkpoint state %q after the daemon turned Ready, want PrepareCompleted", st)
			}
		})
	}
}

// TestMembershipInCliquesNeverReadsStatus: where the controller says it keeps the membership in
// cliques, a node with a clique waits for its clique object and never falls back to the domain's
// status.nodes, even past the fallback time; its clique then answers.
func TestMembershipInCliquesNeverReadsStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(7)
	n.startWith(4, testr.New(t), func(o *kubeletplugin.Options) {
		o.StatusFallbackAfter = time.Second
		o.ReadyWaitTimeout = 3 * time.Second
	})
	// Created annotated: the plugin's cache never holds it without the annotation.
	cd := testutil.MakeComputeDomain("incliques").Namespace(e.ns).NumNodes(1).Obj()
	cd.Annotations = map[string]string{cdv1beta1.MembershipAnnotation: cdv1beta1.MembershipInCliques}
	if err := createAdmitted(e.Ctx(), e.C, cd); err != nil {
		t.Fatal(err)
	}
	e.setStatusNode(cd, n, 0, cdv1beta1.StatusReady) // would answer, were it read
	claim := e.channelClaim(e.ns, "incliques", n, cd, "")
	// Two calls, as the kubelet retries: the second begins past the fallback time (the wait is
	// counted across calls) and would read the status at once.
	for i := range 2 {
		got, took := n.prepare(claim)
		if !strings.Contains(got.Error, "retryable error") || len(got.Devices) != 0 {
			t.Fatalf("prepare call %d after %s: error %q devices %v; want a retryable error (the status is not read)", i+1, took, got.Error, got.Devices)
		}
	}
	e.setClique(cd, n, cdv1beta1.StatusReady)
	e.Eventually(time.Minute, "prepare succeeds once the clique lists the node Ready", func() (bool, error) {
		resp, _ := n.prepare(claim)
		return resp.Error == "", errors.New(resp.Error)
	})
}

// TestNoFabricInjectsNothing: on a node without NVLink fabric the claim is prepared once the
// fabric-less daemon is Ready in status.nodes, with no CDI device.
func TestNoFabricInjectsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(5, noFabric())
	n.start(4)
	cd := e.createCD(e.ns, "nofabric")
	e.setStatusNode(cd, n, cdv1beta1.FabriclessIndex, cdv1beta1.StatusReady)
	claim := e.channelClaim(e.ns, "nofabric", n, cd, cdv1beta1.AllocationModeAll)
	got := n.mustPrepare(claim)
	if len(got.Devices) != 1 || len(got.Devices[0].CdiDeviceIds) != 0 {
		t.Errorf("prepare answered %v, want channel-0 without CDI devices", got.Devices)
	}
	if _, ok := n.cdiSpec(claim.UID); ok {
		t.Error("CDI spec written on a node without fabric")
	}
}

// TestUnknownOpaqueFieldIsPermanent: an opaque config with an unknown field (here only in the
// allocation, past admission) fails at prepare with a permanent error naming the field.
func TestUnknownOpaqueFieldIsPermanent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(6)
	n.start(4)
	cd := e.createCD(e.ns, "strict")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	good := rawJSON(t, cdv1beta1.NewChannelConfig(string(cd.UID), ""))
	for name, bad := range map[string]struct {
		raw  string
		want string
	}{
		"unknown field": {fmt.Sprintf(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":%q,"unexpectedField":1}`, cd.UID), `unknown field "unexpectedField"`},
		"wrong kind":    {fmt.Sprintf(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","domainID":%q}`, cd.UID), `field kind is "GpuConfig"`},
		"wrong version": {fmt.Sprintf(`{"apiVersion":"resource.nvidia.com/v1","kind":"ComputeDomainChannelConfig","domainID":%q}`, cd.UID), `field apiVersion is "resource.nvidia.com/v1"`},
	} {
		raw := runtime.RawExtension{Raw: []byte(bad.raw)}
		claim := e.allocatedClaim(e.ns, strings.ReplaceAll(name, " ", "-"), n, kubeletplugin.ChannelDeviceName(0), good, &raw)
		got, _ := n.prepare(claim)
		if !strings.Contains(got.Error, "permanent error") || !strings.Contains(got.Error, bad.want) {
			t.Errorf("%s: prepare error %q, want a permanent error containing %s", name, got.Error, bad.want)
		}
	}
	if l := n.label(); l != "" {
		t.Errorf("node labelled %q for refused claims", l)
	}
}

// TestPrepareAfterRebootWritesTheCDISpecAgain: the CDI directory is a tmpfs on GPU nodes, the
// checkpoint is not; after a reboot the kubelet prepares its claims again. A claim the
// checkpoint holds as prepared whose CDI spec is gone is prepared again (before, the plugin
// answered from the checkpoint and the container runtime found no such CDI device).
func TestPrepareAfterRebootWritesTheCDISpecAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(7)
	n.start(16)
	cd := e.createCD(e.ns, "reboot")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	claim := e.channelClaim(e.ns, "single", n, cd, cdv1beta1.AllocationModeSingle)
	before := n.mustPrepare(claim)
	if _, ok := n.cdiSpec(claim.UID); !ok {
		t.Fatal("no CDI spec after the first prepare")
	}
	if err := os.Remove(n.path("cdi", kubeletplugin.CDISpecName(claim.UID))); err != nil {
		t.Fatal(err)
	}
	after := n.mustPrepare(claim)
	if _, ok := n.cdiSpec(claim.UID); !ok {
		t.Fatal("the CDI spec is still gone after preparing the claim again")
	}
	ids := func(r interface{ GetDevices() []*drapbv1.Device }) []string {
		var out []string
		for _, d := range r.GetDevices() {
			out = append(out, d.PoolName+"/"+d.DeviceName+"="+strings.Join(d.CdiDeviceIds, ","))
		}
		return out
	}
	if diff := cmp.Diff(ids(before), ids(after)); diff != "" {
		t.Errorf("devices of the second prepare (-first +second):\n%s", diff)
	}
}
