package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"

	"cdplane/internal/version"
)

// Both charts carry the one version (internal/version/VERSION) as version and appVersion: the
// image the plane chart names by default (cdplane:<appVersion>) is the one `make image` tags.
func TestChartVersionsAreTheVersion(t *testing.T) {
	for _, name := range []string{Prerequisites, Plane} {
		ch, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.AppVersion != version.Version || ch.Metadata.Version != version.Version {
			t.Errorf("chart %s: version %q, appVersion %q; want both %q (internal/version/VERSION)",
				name, ch.Metadata.Version, ch.Metadata.AppVersion, version.Version)
		}
	}
}

// Package writes what `helm package` writes, loadable again, and the same bytes every time.
func TestPackageIsReproducible(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	for _, name := range []string{Prerequisites, Plane} {
		var sums []string
		for i := range 2 {
			p, err := Package(name, filepath.Join(t.TempDir(), "out"), epoch)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(p) != name+"-"+version.Version+".tgz" {
				t.Errorf("packaged %s as %s", name, filepath.Base(p))
			}
			ch, err := chartloader.Load(p)
			if err != nil {
				t.Fatalf("loading packaged %s: %v", name, err)
			}
			if ch.Metadata.Name != name {
				t.Errorf("packaged chart %d is %q, want %q", i, ch.Metadata.Name, name)
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			sums = append(sums, string(data))
		}
		if sums[0] != sums[1] {
			t.Errorf("packaging %s twice gave different archives", name)
		}
	}
}

// Before Kubernetes 1.36 no MutatingAdmissionPolicy v1 is served: the prerequisites leave it
// out (the plane's controller labels domains instead) and keep every validating policy, and
// a version below the supported range is refused by name.
func TestKubernetesVersionRange(t *testing.T) {
	kinds := func(v string) map[string]int {
		t.Helper()
		ms, err := RenderFor(v, Prerequisites, Prerequisites, "kube-system", nil)
		if err != nil {
			t.Fatalf("rendering the prerequisites for %s: %v", v, err)
		}
		n := map[string]int{}
		for _, m := range ms {
			n[m.Object.GetKind()]++
		}
		return n
	}
	newest, oldest := kinds(NewestKubernetes), kinds("v1.34.4")
	if newest["MutatingAdmissionPolicy"] != 1 || newest["MutatingAdmissionPolicyBinding"] != 1 {
		t.Errorf("on %s the prerequisites render %d MutatingAdmissionPolicies and %d bindings, want 1 each", NewestKubernetes, newest["MutatingAdmissionPolicy"], newest["MutatingAdmissionPolicyBinding"])
	}
	if oldest["MutatingAdmissionPolicy"]+oldest["MutatingAdmissionPolicyBinding"] != 0 {
		t.Errorf("on v1.34.4 the prerequisites render a MutatingAdmissionPolicy, which that version does not serve")
	}
	for _, k := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition"} {
		if oldest[k] == 0 || oldest[k] != newest[k] {
			t.Errorf("%s: %d on v1.34.4, %d on %s; want the same, non-zero", k, oldest[k], newest[k], NewestKubernetes)
		}
	}
	for _, name := range []string{Prerequisites, Plane} {
		_, err := RenderFor("v1.33.7", name, "x", "x", map[string]any{})
		if err == nil || !strings.Contains(err.Error(), "v1.33.7") || !strings.Contains(err.Error(), ">=1.34") {
			t.Errorf("rendering %s for v1.33.7: got %v, want a refusal naming the version and the supported range", name, err)
		}
	}
}
