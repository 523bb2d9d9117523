package kubeletplugin

import (
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
)

// TestStaleClaimsSweptPeriodically: a claim prepared on the node whose ResourceClaim is deleted
// without an unprepare (the kubelet lost its state, or the plugin was down when the pod went)
// is undone by the periodic sweep — its CDI spec, checkpoint entry and node label go — as is a
// CDI spec of this plugin's naming that no entry holds; a claim that still exists, and a spec
// of another vendor, are kept.
func TestStaleClaimsSweptPeriodically(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(11)
	n.startWith(4, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) { o.StaleSweepInterval = 300 * time.Millisecond })
	cd := e.createCD(e.ns, "sweep")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	kept := e.channelClaim(e.ns, "kept", n, cd, "")
	gone := e.channelClaimOn(e.ns, "gone", n, cd, "", 1)
	n.mustPrepare(kept)
	n.mustPrepare(gone)

	orphan := n.path("cdi", kubeletplugin.CDISpecName("0b7e0a1c-0000-4000-8000-00000000beef"))
	foreign := n.path("cdi", "k8s.gpu.nvidia.com-claim_0b7e0a1c-0000-4000-8000-00000000beef.json")
	for _, f := range []string{orphan, foreign} {
		if err := os.WriteFile(f, []byte(`{"cdiVersion":"0.6.0","kind":"x/y","devices":[]}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The claim goes without an unprepare (no pod reserves these claims here).
	if err := e.C.Delete(e.Ctx(), gone); err != nil {
		t.Fatal(err)
	}

	e.Eventually(time.Minute, "the deleted claim's entry and CDI spec, and the orphan spec, swept", func() (bool, error) {
		_, hasGone := n.cdiSpec(gone.UID)
		_, inCP := n.checkpoint().Claims[gone.UID]
		_, err := os.Stat(orphan)
		return !hasGone && !inCP && os.IsNotExist(err), nil
	})
	if _, ok := n.cdiSpec(kept.UID); !ok {
		t.Error("the live claim's CDI spec was swept")
	}
	if _, ok := n.checkpoint().Claims[kept.UID]; !ok {
		t.Error("the live claim's checkpoint entry was swept")
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("another vendor's CDI spec: %v, want kept", err)
	}
	if l := n.label(); l != string(cd.UID) {
		t.Errorf("node label %q while the live claim still needs it, want %s", l, cd.UID)
	}
	// The last claim of the domain going the same way takes the node label with it.
	if err := e.C.Delete(e.Ctx(), kept); err != nil {
		t.Fatal(err)
	}
	e.Eventually(time.Minute, "the node label removed with the domain's last claim", func() (bool, error) {
		return n.label() == "", nil
	})
}
