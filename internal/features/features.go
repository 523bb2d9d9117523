// Package features defines cdplane's feature gates on k8s.io/component-base/featuregate.
package features

import (
	"fmt"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
)

const (
	// ComputeDomainCliques keeps daemon membership in ComputeDomainClique objects, one per clique,
	// with ComputeDomain.status.nodes as their aggregate. Off: membership lives in status.nodes.
	ComputeDomainCliques featuregate.Feature = "ComputeDomainCliques"

	// IMEXDaemonsWithDNSNames makes nodes.cfg list static names (compute-domain-daemon-%04d by
	// index) resolved through a hosts file of peer IPs, so nodes.cfg never changes. Off: nodes.cfg
	// lists peer IPs. Required by ComputeDomainCliques.
	IMEXDaemonsWithDNSNames featuregate.Feature = "IMEXDaemonsWithDNSNames"

	// CrashOnNVLinkFabricErrors makes a failed NVLink fabric registration fatal for the component
	// that discovers it, instead of an error it reports and retries.
	CrashOnNVLinkFabricErrors featuregate.Feature = "CrashOnNVLinkFabricErrors"
)

// Specs lists every gate with its default and maturity.
var Specs = map[featuregate.Feature]featuregate.FeatureSpec{
	ComputeDomainCliques:      {Default: true, PreRelease: featuregate.Beta},
	IMEXDaemonsWithDNSNames:   {Default: true, PreRelease: featuregate.Beta},
	CrashOnNVLinkFabricErrors: {Default: true, PreRelease: featuregate.Beta},
}

// Gates is the process-wide gate set, set from --feature-gates.
var Gates featuregate.MutableFeatureGate = NewGates()

// NewGates returns a gate set with every cdplane gate at its default.
func NewGates() featuregate.MutableFeatureGate {
	g := featuregate.NewFeatureGate()
	if err := g.Add(Specs); err != nil {
		panic(fmt.Sprintf("registering feature gates: %v", err))
	}
	// The logging options of component-base are gated too.
	if err := logsapi.AddFeatureGates(g); err != nil {
		panic(fmt.Sprintf("registering logging feature gates: %v", err))
	}
	return g
}

// Enabled reports whether a gate of the process-wide set is on.
func Enabled(f featuregate.Feature) bool {
	return Gates.Enabled(f)
}

// Validate returns an error naming the gates when their combination is invalid.
func Validate(g featuregate.FeatureGate) error {
	if g.Enabled(ComputeDomainCliques) && !g.Enabled(IMEXDaemonsWithDNSNames) {
		return fmt.Errorf("invalid feature gates: %s=true requires %s=true", ComputeDomainCliques, IMEXDaemonsWithDNSNames)
	}
	return nil
}

// SetForTest sets a gate of the process-wide set for the duration of a test and restores it
// afterwards. Tests using it must not run in parallel with tests reading the same gate.
func SetForTest(t interface {
	Helper()
	Cleanup(func())
	Fatalf(string, ...any)
}, f featuregate.Feature, value bool) {
	t.Helper()
	old := Gates.Enabled(f)
	if err := Gates.SetFromMap(map[string]bool{string(f): value}); err != nil {
		t.Fatalf("setting feature gate %s=%v: %v", f, value, err)
	}
	t.Cleanup(func() {
		if err := Gates.SetFromMap(map[string]bool{string(f): old}); err != nil {
			t.Fatalf("restoring feature gate %s=%v: %v", f, old, err)
		}
	})
}

// daemonGates are the gates the daemons read. ComputeDomainCliques is not among them: daemons
// behave the same either way, and a gate in the DaemonSet template would roll it on a flip.
var daemonGates = []featuregate.Feature{IMEXDaemonsWithDNSNames, CrashOnNVLinkFabricErrors}

// DaemonGates renders the daemon-relevant gates of g as a --feature-gates value.
func DaemonGates(g featuregate.FeatureGate) string {
	out := ""
	for i, f := range daemonGates {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%s=%t", f, g.Enabled(f))
	}
	return out
}
