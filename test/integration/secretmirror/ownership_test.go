package secretmirror

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/metrics"
)

// hijacker is a validating admission webhook, called by the apiserver for Secret writes in one
// namespace, that takes a Secret over while the mirror's write to it is held in admission:
// armed, it answers the mirror's next update or delete of the Secret only after rewriting the
// Secret without the plane's marker. The mirror's request then fails with a conflict (the
// object changed under it), deterministically, and its next attempt must see a foreign Secret.
type hijacker struct {
	e      *env
	ns     string
	target atomic.Pointer[string] // the Secret to take over; nil: disarmed
	probes atomic.Int32
	taken  chan string // resourceVersion of each takeover write
}

// probeName is the Secret the hijacker counts dry-run probes of, to know it is being called.
const probeName = "hijacker-probe"

// startHijacker serves the webhook on loopback, registers it for Secrets in ns, and waits until
// the apiserver calls it.
func (e *env) startHijacker(ns string) *hijacker {
	e.T.Helper()
	h := &hijacker{e: e, ns: ns, taken: make(chan string, 4)}
	path := "hijack"
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sm-hijack-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "hijack.secretmirror.cdplane.test",
			// envtest replaces the service with https://127.0.0.1:<port>/hijack and a CA bundle.
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: "unused", Name: "unused", Path: &path},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	opts := &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{hook}}
	if err := opts.PrepWithoutInstalling(); err != nil {
		e.T.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(opts.LocalServingCertDir, "tls.crt"), filepath.Join(opts.LocalServingCertDir, "tls.key"))
	if err != nil {
		e.T.Fatal(err)
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(opts.LocalServingHost, strconv.Itoa(opts.LocalServingPort)), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		e.T.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.T.Cleanup(func() {
		_ = e.C.Delete(context.Background(), hook)
		_ = srv.Close()
		_ = opts.Cleanup()
	})
	if err := opts.Install(testCluster.Config); err != nil {
		e.T.Fatal(err)
	}
	e.Eventually(30*time.Second, "the apiserver calls the webhook", func() (bool, error) {
		probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: probeName, Namespace: ns}}
		if err := e.C.Create(context.Background(), probe, client.DryRunAll); err != nil {
			return false, err
		}
		return h.probes.Load() > 0, nil
	})
	return h
}

// arm makes the hijacker take Secret name over at the mirror's next write to it.
func (h *hijacker) arm(name string) { h.target.Store(&name) }

func (h *hijacker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("decoding the review: %v", err), http.StatusBadRequest)
		return
	}
	req := review.Request
	dryRun := req.DryRun != nil && *req.DryRun
	if dryRun && req.Name == probeName {
		h.probes.Add(1)
	}
	if !dryRun && h.fromMirror(req) {
		if name := h.target.Load(); name != nil && *name == req.Name && h.target.CompareAndSwap(name, nil) {
			h.taken <- h.takeOver(r.Context(), req.Name)
		}
	}
	review.Response = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	review.Request = nil
	_ = json.NewEncoder(w).Encode(review)
}

// fromMirror tells the mirror's updates (by their field manager) and deletes (the test makes
// none of the watched Secret) from the test's own writes.
func (h *hijacker) fromMirror(req *admissionv1.AdmissionRequest) bool {
	switch req.Operation {
	case admissionv1.Delete:
		return true
	case admissionv1.Update:
		opts := &metav1.UpdateOptions{}
		return json.Unmarshal(req.Options.Raw, opts) == nil && opts.FieldManager == secretmirror.DefaultFieldManager
	}
	return false
}

// takeOver removes the plane's marker and replaces the data, as another writer would.
func (h *hijacker) takeOver(ctx context.Context, name string) string {
	for ctx.Err() == nil {
		cur := &corev1.Secret{}
		if err := h.e.C.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: name}, cur); err != nil {
			return ""
		}
		delete(cur.Labels, secretmirror.MirroredFromLabel)
		delete(cur.Labels, cdv1beta1.ControlPlaneLabel)
		cur.Data = map[string][]byte{"token": []byte("taken over")}
		if err := h.e.C.Update(ctx, cur, client.FieldOwner("hijacker")); err == nil {
			return cur.ResourceVersion
		}
	}
	return ""
}

func (h *hijacker) waitTaken(t *testing.T) string {
	t.Helper()
	select {
	case rv := <-h.taken:
		if rv == "" {
			t.Fatal("the takeover write failed")
		}
		return rv
	case <-time.After(30 * time.Second):
		t.Fatal("the mirror never wrote the armed Secret")
		return ""
	}
}

// TestOwnershipRecheckedOnEveryAttempt: a copy is taken over (its marker removed) while the
// mirror's update of it, and later its delete, is in flight. The mirror's request fails with a
// conflict; its retry re-reads the Secret, sees it is no longer the plane's and makes no further
// write: the Secret keeps the takeover's resourceVersion and data, and the refusal is counted.
// Without the ownership check on the retry the Secret would be overwritten or deleted.
func TestOwnershipRecheckedOnEveryAttempt(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	t1 := e.target("sm-hijack-")
	e.createSource("updated", map[string]string{"token": "v1"})
	e.createSource("deleted", map[string]string{"token": "v1"})
	e.start()
	e.waitCopy(t1, "updated", map[string]string{"token": "v1"})
	e.waitCopy(t1, "deleted", map[string]string{"token": "v1"})
	h := e.startHijacker(t1)
	taken := map[string]string{"token": "taken over"}

	// Update path: the source changes, the mirror updates its copy, the copy is taken over.
	conflicts, foreign := e.metric(metrics.SecretMirrorWriteConflictsName), e.metric(metrics.SecretMirrorForeignTargetsName)
	h.arm("updated")
	e.updateSecret(e.srcNS, "updated", func(s *corev1.Secret) { s.Data["token"] = []byte("v2") })
	rv := h.waitTaken(t)
	e.Eventually(30*time.Second, "the taken-over copy reported", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > foreign, nil
	})
	if got := e.metric(metrics.SecretMirrorWriteConflictsName) - conflicts; got < 1 {
		t.Errorf("the mirror counted %.0f conflicts, want at least 1", got)
	}
	e.assertUntouched(t1, "updated", rv, taken)

	// Delete path: the source goes, the mirror deletes its copy, the copy is taken over.
	conflicts, foreign = e.metric(metrics.SecretMirrorWriteConflictsName), e.metric(metrics.SecretMirrorForeignTargetsName)
	h.arm("deleted")
	if err := e.C.Delete(e.Ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.srcNS, Name: "deleted"}}); err != nil {
		t.Fatal(err)
	}
	rv = h.waitTaken(t)
	e.Eventually(30*time.Second, "the taken-over copy reported", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > foreign, nil
	})
	if got := e.metric(metrics.SecretMirrorWriteConflictsName) - conflicts; got < 1 {
		t.Errorf("the mirror counted %.0f conflicts, want at least 1", got)
	}
	e.assertUntouched(t1, "deleted", rv, taken)
}
