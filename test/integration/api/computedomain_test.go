package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

var cdGVR = schema.GroupVersionResource{Group: cdv1beta1.GroupName, Version: cdv1beta1.Version, Resource: "computedomains"}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A manifest as users of the original API write it.
const userManifest = `
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: imex-domain
spec:
  numNodes: 2
  channel:
    resourceClaimTemplate:
      name: imex-channel
    allocationMode: Single
`

func TestUserManifestReadsBackUnchanged(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	ns := testCluster.Namespace(t, nil)
	dyn := dynamic.NewForConfigOrDie(testCluster.Config)

	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(userManifest), &obj.Object); err != nil {
		t.Fatal(err)
	}
	created, err := dyn.Resource(cdGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		t.Fatalf("creating the user's manifest: %v", err)
	}
	got, err := dyn.Resource(cdGVR).Namespace(ns).Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonOf(t, obj.Object["spec"]), jsonOf(t, got.Object["spec"])); diff != "" {
		t.Errorf("spec changed on the way through the apiserver (-sent +read):\n%s", diff)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	ns := testCluster.Namespace(t, nil)
	// Neither numNodes nor allocationMode given.
	dyn := dynamic.NewForConfigOrDie(testCluster.Config)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
		"metadata": map[string]any{"name": "defaults"},
		"spec":     map[string]any{"channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": "ch"}}},
	}}
	if _, err := dyn.Resource(cdGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cd := &cdv1beta1.ComputeDomain{}
	if err := testCluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults"}, cd); err != nil {
		t.Fatal(err)
	}
	if cd.Spec.NumNodes != 0 || cd.Spec.Channel.AllocationMode != cdv1beta1.AllocationModeSingle {
		t.Errorf("defaults: numNodes=%d allocationMode=%q, want 0 and Single", cd.Spec.NumNodes, cd.Spec.Channel.AllocationMode)
	}
}

func TestInvalidComputeDomainsAreRefused(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	dyn := dynamic.NewForConfigOrDie(testCluster.Config)

	cases := map[string]struct {
		manifest  string
		wantInErr []string
	}{
		"negative numNodes": {
			manifest:  "spec: {numNodes: -1, channel: {resourceClaimTemplate: {name: ch}}}",
			wantInErr: []string{"spec.numNodes", "greater than or equal to 0"},
		},
		"unknown allocationMode": {
			manifest:  "spec: {channel: {resourceClaimTemplate: {name: ch}, allocationMode: Some}}",
			wantInErr: []string{"spec.channel.allocationMode", `Unsupported value: "Some"`},
		},
		"unknown field under strict validation": {
			manifest:  "spec: {channel: {resourceClaimTemplate: {name: ch}}, unexpectedField: 1}",
			wantInErr: []string{`unknown field "spec.unexpectedField"`},
		},
		"template name not a DNS subdomain": {
			manifest:  "spec: {channel: {resourceClaimTemplate: {name: Bad_Name}}}",
			wantInErr: []string{"spec.channel.resourceClaimTemplate.name"},
		},
		"missing channel": {
			manifest:  "spec: {numNodes: 1}",
			wantInErr: []string{"spec.channel", "Required value"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(tc.manifest), &obj.Object); err != nil {
				t.Fatal(err)
			}
			obj.SetAPIVersion("resource.nvidia.com/v1beta1")
			obj.SetKind("ComputeDomain")
			obj.SetGenerateName("bad-")
			_, err := dyn.Resource(cdGVR).Namespace(ns).Create(ctxT(t), obj, metav1.CreateOptions{FieldValidation: "Strict"})
			if err == nil {
				t.Fatalf("the apiserver accepted %s", tc.manifest)
			}
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestSpecIsImmutable(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	ns := testCluster.Namespace(t, nil)
	cd := testutil.MakeComputeDomain("immutable").Namespace(ns).NumNodes(2).Obj()
	if err := testCluster.Client.Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*cdv1beta1.ComputeDomain){
		"numNodes":       func(cd *cdv1beta1.ComputeDomain) { cd.Spec.NumNodes = 3 },
		"allocationMode": func(cd *cdv1beta1.ComputeDomain) { cd.Spec.Channel.AllocationMode = cdv1beta1.AllocationModeAll },
		"template name":  func(cd *cdv1beta1.ComputeDomain) { cd.Spec.Channel.ResourceClaimTemplate.Name = "other" },
	} {
		changed := cd.DeepCopy()
		mutate(changed)
		err := testCluster.Client.Update(ctx, changed)
		if err == nil {
			t.Fatalf("changing %s after creation was accepted", name)
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec: Invalid value") ||
			!strings.Contains(err.Error(), "spec is immutable after creation") {
			t.Errorf("changing %s: error %q does not name the immutable spec", name, err)
		}
	}
	// Metadata and status stay writable.
	labelled := cd.DeepCopy()
	labelled.Labels = map[string]string{"team": "a"}
	if err := testCluster.Client.Update(ctx, labelled); err != nil {
		t.Errorf("a label change was refused: %v", err)
	}
}

// jsonOf normalises a decoded value (numbers decode as float64 or int64 depending on the path).
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
