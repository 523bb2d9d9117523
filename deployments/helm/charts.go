// Package charts embeds cdplane's two Helm charts — cdplane-prerequisites (shared, cluster-wide)
// and cdplane (one control plane) — so that the cdplane CLI installs exactly the charts of its
// own version, and renders them for tests and for `cdplane` dry runs.
package charts

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The chart names, which are also their directories here.
const (
	Prerequisites = "cdplane-prerequisites"
	Plane         = "cdplane"
)

//go:embed all:cdplane all:cdplane-prerequisites
var files embed.FS

// Load returns the embedded chart name (Prerequisites or Plane).
func Load(name string) (*chartv2.Chart, error) {
	if name != Prerequisites && name != Plane {
		return nil, fmt.Errorf("no chart %q: want %s or %s", name, Prerequisites, Plane)
	}
	var buffered []*archive.BufferedFile
	err := fs.WalkDir(files, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		buffered = append(buffered, &archive.BufferedFile{Name: strings.TrimPrefix(p, name+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading chart %s: %w", name, err)
	}
	ch, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", name, err)
	}
	return ch, nil
}

// Manifest is one rendered object and the template it came from.
type Manifest struct {
	Template string
	Object   *unstructured.Unstructured
}

// NewestKubernetes is the Kubernetes version Render assumes: the newest supported, which serves
// every API the charts use. `cdplane install` and `apply` render against the cluster's own
// version and APIs (Helm's discovery), so what older versions lack is left out there.
const NewestKubernetes = "v1.37.2"

// Render renders chart name for a release as `helm template` does against NewestKubernetes,
// values checked against the chart's schema: the objects in template order (templates by path,
// documents in order).
func Render(name, release, namespace string, values map[string]any) ([]Manifest, error) {
	return RenderFor(NewestKubernetes, name, release, namespace, values)
}

// RenderFor is Render for a given Kubernetes version (vMAJOR.MINOR.PATCH), with Helm's default
// API versions.
func RenderFor(kubeVersion, name, release, namespace string, values map[string]any) ([]Manifest, error) {
	ch, err := Load(name)
	if err != nil {
		return nil, err
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q: %w", kubeVersion, err)
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, kv.String()) {
		return nil, fmt.Errorf("chart %s supports Kubernetes %s, not %s", name, c, kv.String())
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	vals, err := util.ToRenderValuesWithSchemaValidation(ch, values,
		common.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, caps, false)
	if err != nil {
		return nil, fmt.Errorf("values of chart %s: %w", name, err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		// The chart's own checks fail the render with a sentence for the user: say it without
		// the template position Helm puts before it.
		if _, msg, ok := strings.Cut(err.Error(), "): "); ok && strings.HasPrefix(err.Error(), "execution error at (") {
			return nil, fmt.Errorf("chart %s refuses these values: %s", name, msg)
		}
		return nil, fmt.Errorf("rendering chart %s: %w", name, err)
	}
	templates := make([]string, 0, len(out))
	for t := range out {
		if path.Ext(t) == ".yaml" && !strings.HasPrefix(path.Base(t), "_") {
			templates = append(templates, t)
		}
	}
	sort.Strings(templates)
	var ms []Manifest
	for _, t := range templates {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(out[t])), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", t, err)
			}
			if len(obj.Object) > 0 {
				ms = append(ms, Manifest{Template: t, Object: obj})
			}
		}
	}
	return ms, nil
}
