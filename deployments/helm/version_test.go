package charts

import (
	"os"
	"path/filepath"
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
