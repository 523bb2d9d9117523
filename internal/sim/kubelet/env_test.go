package kubelet

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"cdplane/internal/testutil"
)

type fakeSource struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string][]byte
}

func (f fakeSource) configMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	d, ok := f.configMaps[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return &corev1.ConfigMap{Data: d}, nil
}

func (f fakeSource) secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	d, ok := f.secrets[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	return &corev1.Secret{Data: d}, nil
}

func field(p string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
}

func cmKey(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: ptr.To(optional)}}
}

func TestResolveEnv(t *testing.T) {
	pod := testutil.MakePod("p", "ns").UID("uid-1").Label("app", "x").Annotation("a", "b").NodeName("n1").ServiceAccount("sa").Obj()
	src := fakeSource{
		configMaps: map[string]map[string]string{"cm": {"k": "v", "b": "2", "a": "1"}},
		secrets:    map[string]map[string][]byte{"s": {"pw": []byte("secret")}},
	}
	addrs := podAddresses{PodIP: "127.128.0.1", HostIP: "127.10.0.1"}
	for name, tc := range map[string]struct {
		c       corev1.Container
		want    []EnvVar
		wantErr bool
	}{
		"literals and expansion": {
			c: corev1.Container{Env: []corev1.EnvVar{
				{Name: "A", Value: "1"}, {Name: "B", Value: "$(A)-$(MISSING)-$$(A)"}, {Name: "A", Value: "3"},
			}},
			want: []EnvVar{{Name: "A", Value: "3"}, {Name: "B", Value: "1-$(MISSING)-$(A)"}},
		},
		"downward API": {
			c: corev1.Container{Env: []corev1.EnvVar{
				{Name: "NAME", ValueFrom: field("metadata.name")}, {Name: "NS", ValueFrom: field("metadata.namespace")},
				{Name: "UID", ValueFrom: field("metadata.uid")}, {Name: "NODE", ValueFrom: field("spec.nodeName")},
				{Name: "SA", ValueFrom: field("spec.serviceAccountName")}, {Name: "IP", ValueFrom: field("status.podIP")},
				{Name: "HOST", ValueFrom: field("status.hostIP")}, {Name: "APP", ValueFrom: field("metadata.labels['app']")},
				{Name: "ANN", ValueFrom: field("metadata.annotations['a']")},
			}},
			want: []EnvVar{
				{Name: "NAME", Value: "p"}, {Name: "NS", Value: "ns"}, {Name: "UID", Value: "uid-1"}, {Name: "NODE", Value: "n1"},
				{Name: "SA", Value: "sa"}, {Name: "IP", Value: "127.128.0.1"}, {Name: "HOST", Value: "127.10.0.1"},
				{Name: "APP", Value: "x"}, {Name: "ANN", Value: "b"},
			},
		},
		"unsupported field": {
			c:       corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: field("spec.hostname")}}},
			wantErr: true,
		},
		"configMap and secret keys": {
			c: corev1.Container{Env: []corev1.EnvVar{
				{Name: "K", ValueFrom: cmKey("cm", "k", false)},
				{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "pw"}}},
				{Name: "OPT", ValueFrom: cmKey("missing", "k", true)},
				{Name: "OPTKEY", ValueFrom: cmKey("cm", "nokey", true)},
			}},
			want: []EnvVar{{Name: "K", Value: "v"}, {Name: "PW", Value: "secret"}},
		},
		"missing configMap": {c: corev1.Container{Env: []corev1.EnvVar{{Name: "K", ValueFrom: cmKey("missing", "k", false)}}}, wantErr: true},
		"missing key":       {c: corev1.Container{Env: []corev1.EnvVar{{Name: "K", ValueFrom: cmKey("cm", "nokey", false)}}}, wantErr: true},
		"envFrom then env": {
			c: corev1.Container{
				EnvFrom: []corev1.EnvFromSource{
					{Prefix: "C_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}},
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptr.To(true)}},
				},
				Env: []corev1.EnvVar{{Name: "C_k", Value: "override $(pw)"}},
			},
			want: []EnvVar{{Name: "C_a", Value: "1"}, {Name: "C_b", Value: "2"}, {Name: "C_k", Value: "override secret"}, {Name: "pw", Value: "secret"}},
		},
		"missing envFrom": {
			c:       corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}},
			wantErr: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := resolveEnv(context.Background(), pod, &tc.c, addrs, src)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for name, tc := range map[string]struct{ in, want string }{
		"none":     {in: "plain", want: "plain"},
		"one":      {in: "$(A)", want: "1"},
		"several":  {in: "x$(A)y$(B)z", want: "x1ytwoz"},
		"unknown":  {in: "$(C)", want: "$(C)"},
		"escaped":  {in: "$$(A)", want: "$(A)"},
		"double $": {in: "a$$b", want: "a$b"},
		"unclosed": {in: "$(A", want: "$(A"},
		"lone $":   {in: "cost $5 $", want: "cost $5 $"},
		"adjacent": {in: "$(A)$(A)", want: "11"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := expand(tc.in, lookup); got != tc.want {
				t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
