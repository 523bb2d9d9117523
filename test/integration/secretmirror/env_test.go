package secretmirror

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/cluster"
)

func init() {
	ctrl.SetLogger(logr.Discard())
}

// mirrorLabel selects a test's source Secrets; its value is the test's source namespace.
const mirrorLabel = "cdplane.test/mirror"

// env is one test's plane: a source namespace, the mirror's options and, once started, a
// controller manager running only the mirror.
type env struct {
	*cluster.Env
	srcNS string
	opts  secretmirror.Options
	stop  func()
	// logs records what the manager logged, once started.
	logs *logRecorder
}

// newPlane returns an env for a plane with a fresh id.
func newPlane(t *testing.T) *env {
	return newEnv(t, "sm-"+randomHex(4))
}

// newEnv returns an env for plane id ("" for the legacy plane) with its source namespace.
func newEnv(t *testing.T, id string) *env {
	t.Helper()
	e := &env{Env: cluster.NewEnv(t, testCluster)}
	e.srcNS = e.Namespace(nil)
	e.opts = secretmirror.Options{
		ControlPlaneID:  id,
		SourceNamespace: e.srcNS,
		SecretSelector:  labels.SelectorFromSet(labels.Set{mirrorLabel: e.srcNS}),
	}
	return e
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// start runs the mirror as a cluster administrator: see startAs.
func (e *env) start() {
	e.T.Helper()
	e.startAs(testCluster.Config)
}

// startAs runs a controller manager with the mirror, reaching the apiserver with cfg, its cache
// scoped by CacheByObject, a 10-hour informer resync period, its log recorded in e.logs, and
// SkipNameValidation so several managers share the process. The mirror's own ResyncInterval is
// e.opts's (default 10 minutes, longer than any test).
func (e *env) startAs(cfg *rest.Config) {
	e.T.Helper()
	r, err := secretmirror.New(e.opts)
	if err != nil {
		e.T.Fatal(err)
	}
	syncPeriod := 10 * time.Hour
	e.logs = &logRecorder{}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testCluster.Scheme,
		Logger:                 e.logs.logger(testr.New(e.T)),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{
			SyncPeriod:       &syncPeriod,
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         secretmirror.CacheByObject(e.opts),
		},
	})
	if err != nil {
		e.T.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		e.T.Fatal(err)
	}
	e.stop = testutil.RunManager(e.T, mgr)
}

// namespace creates a namespace named prefix plus a random suffix, deleted when the test ends.
func (e *env) namespace(prefix string, l map[string]string) string {
	e.T.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: l}}
	e.Create(ns)
	return ns.Name
}

// target creates a namespace assigned to the plane (labelled with its id).
func (e *env) target(prefix string) string {
	e.T.Helper()
	if e.opts.ControlPlaneID == "" {
		e.T.Fatal("target() is for planes with an id; legacy targets match the namespace selector")
	}
	return e.namespace(prefix, map[string]string{cdv1beta1.ControlPlaneLabel: e.opts.ControlPlaneID})
}

// setNamespaceLabel sets (value != nil) or removes a namespace label.
func (e *env) setNamespaceLabel(name, key string, value *string) {
	e.T.Helper()
	e.SetLabel(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, key, value)
}

func toBytes(data map[string]string) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = []byte(v)
	}
	return out
}

// createSource creates a Secret of the source namespace that the mirror selects.
func (e *env) createSource(name string, data map[string]string) *corev1.Secret {
	e.T.Helper()
	return e.createSecret(e.srcNS, name, map[string]string{mirrorLabel: e.srcNS}, data)
}

func (e *env) createSecret(ns, name string, l, data map[string]string) *corev1.Secret {
	e.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l}, Data: toBytes(data)}
	if err := e.C.Create(e.Ctx(), s); err != nil {
		e.T.Fatal(err)
	}
	return s
}

// createCopy creates a Secret carrying the plane's mirror marker, as if the mirror had made it
// before the test's manager started.
func (e *env) createCopy(ns, name string, data map[string]string) *corev1.Secret {
	e.T.Helper()
	return e.createSecret(ns, name, secretmirror.Marker(e.opts.ControlPlaneID, e.srcNS), data)
}

// updateSecret changes a Secret's data and labels with a fresh read and optimistic locking.
func (e *env) updateSecret(ns, name string, mutate func(*corev1.Secret)) *corev1.Secret {
	e.T.Helper()
	s := &corev1.Secret{}
	if err := e.C.Get(e.Ctx(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		e.T.Fatal(err)
	}
	mutate(s)
	if err := e.C.Update(e.Ctx(), s); err != nil {
		e.T.Fatal(err)
	}
	return s
}

func (e *env) get(ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := e.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s)
	return s, err
}

// waitCopy waits until ns holds the plane's copy of the source with exactly data, and returns it.
func (e *env) waitCopy(ns, name string, data map[string]string) *corev1.Secret {
	e.T.Helper()
	var got *corev1.Secret
	e.Eventually(30*time.Second, fmt.Sprintf("copy %s/%s with data %v", ns, name, data), func() (bool, error) {
		s, err := e.get(ns, name)
		if err != nil {
			return false, err
		}
		got = s
		if !secretmirror.OwnsCopy(e.opts.ControlPlaneID, e.srcNS, s.Labels) {
			return false, fmt.Errorf("labels %v are not the plane's marker", s.Labels)
		}
		if want := e.srcNS + "/" + name; s.Annotations[secretmirror.SourceAnnotation] != want {
			return false, fmt.Errorf("source annotation %q, want %q", s.Annotations[secretmirror.SourceAnnotation], want)
		}
		if !maps.EqualFunc(s.Data, toBytes(data), bytes.Equal) {
			return false, fmt.Errorf("data %v", stringData(s))
		}
		return true, nil
	})
	return got
}

// waitLog waits until the manager logged a line that matches, and returns the matching lines.
func (e *env) waitLog(what string, match func(logRecord) bool) []logRecord {
	e.T.Helper()
	var got []logRecord
	e.Eventually(30*time.Second, what, func() (bool, error) {
		got = e.logs.find(match)
		return len(got) > 0, nil
	})
	return got
}

// mirrored matches the mirror's plan line for source name: a pass of its reconcile.
func (e *env) mirrored(name string) func(logRecord) bool {
	return func(l logRecord) bool {
		return l.msg == "Mirroring" && l.has("namespace", e.srcNS) && l.has("name", name)
	}
}

// waitGone waits until ns has no Secret named name.
func (e *env) waitGone(ns, name string) {
	e.T.Helper()
	e.Eventually(30*time.Second, fmt.Sprintf("Secret %s/%s deleted", ns, name), func() (bool, error) {
		_, err := e.get(ns, name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// assertAbsent fails unless ns has no Secret named name now.
func (e *env) assertAbsent(ns, name string) {
	e.T.Helper()
	if s, err := e.get(ns, name); !apierrors.IsNotFound(err) {
		e.T.Fatalf("Secret %s/%s: want none, got %v (labels %v)", ns, name, err, s.Labels)
	}
}

// assertUntouched fails unless the Secret still has resourceVersion rv and data.
func (e *env) assertUntouched(ns, name, rv string, data map[string]string) {
	e.T.Helper()
	s, err := e.get(ns, name)
	if err != nil {
		e.T.Fatal(err)
	}
	if s.ResourceVersion != rv || !maps.EqualFunc(s.Data, toBytes(data), bytes.Equal) {
		e.T.Fatalf("Secret %s/%s was written: resourceVersion %s (want %s), data %v (want %v)", ns, name, s.ResourceVersion, rv, stringData(s), data)
	}
}

func stringData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// metric returns this plane's sample of one of the mirror's counters, read from
// controller-runtime's registry as the metrics endpoint would serve it.
func (e *env) metric(name string) float64 {
	e.T.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		e.T.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["control_plane_id"] == e.opts.ControlPlaneID && l["source_namespace"] == e.srcNS {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// apiMetric sums samples of an apiserver metric.
func (e *env) apiMetric(name string, match map[string]string) float64 {
	e.T.Helper()
	v, err := testCluster.MetricSum(e.Ctx(), name, match)
	if err != nil {
		e.T.Fatal(err)
	}
	return v
}
