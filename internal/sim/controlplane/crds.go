package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	charts "cdplane/deployments/helm"
)

// crdTemplates is where the prerequisites chart keeps cdplane's CRDs (plain YAML).
const crdTemplates = "templates/crds/"

// CRDs returns cdplane's CustomResourceDefinitions from the embedded prerequisites chart.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	ch, err := charts.Load(charts.Prerequisites)
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range ch.Templates {
		if !strings.HasPrefix(f.Name, crdTemplates) || !strings.HasSuffix(f.Name, ".yaml") {
			continue
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(f.Data), 4096)
		for {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := dec.Decode(crd); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("chart %s, %s: %w", charts.Prerequisites, f.Name, err)
			}
			if crd.Name != "" {
				crds = append(crds, crd)
			}
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("chart %s has no CRDs under %s", charts.Prerequisites, crdTemplates)
	}
	return crds, nil
}

// installCRDs creates cdplane's CRDs (an existing one is left as it is) and waits until each is
// Established and its resources are in discovery, so that a client's first request finds them.
func installCRDs(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	for _, crd := range crds {
		if err := c.Create(ctx, crd.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
				return false, nil //nolint:nilerr // not there yet: keep polling
			}
			return established(got) && served(dc, crd), nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be served: %w", crd.Name, err)
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// served reports whether discovery lists the CRD's resource in each served version.
func served(dc discovery.DiscoveryInterface, crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		list, err := dc.ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
		if err != nil {
			return false
		}
		found := false
		for _, r := range list.APIResources {
			found = found || r.Name == crd.Spec.Names.Plural
		}
		if !found {
			return false
		}
	}
	return true
}
