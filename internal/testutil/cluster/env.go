package cluster

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/testutil"
)

// Env is the part of one test's world that every suite sets up the same way: the test, the
// cluster and its administrator client, and the helpers around them (a bounded context,
// waits, objects and directories removed when the test ends). A suite's own env embeds it and
// adds its specifics.
type Env struct {
	T       *testing.T
	C       client.Client
	Cluster *Cluster
}

// NewEnv returns the Env of test t on cluster c.
func NewEnv(t *testing.T, c *Cluster) *Env {
	return &Env{T: t, C: c.Client, Cluster: c}
}

// Ctx returns a context that ends after 2 minutes, or when the test ends.
func (e *Env) Ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e.T.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace named after the test, deleted when the test ends.
func (e *Env) Namespace(labels map[string]string) string {
	e.T.Helper()
	return e.Cluster.Namespace(e.T, labels)
}

// Eventually polls cond until it holds, failing the test after timeout.
func (e *Env) Eventually(timeout time.Duration, what string, cond func() (bool, error)) {
	e.T.Helper()
	testutil.Eventually(e.T, timeout, what, cond)
}

// Consistently checks that cond holds for the whole window, failing the test the first time it
// does not.
func (e *Env) Consistently(window time.Duration, what string, cond func() (bool, error)) {
	e.T.Helper()
	testutil.Consistently(e.T, window, what, cond)
}

// TempDir creates a directory removed when the test ends. Unlike t.TempDir its path is short:
// Unix socket paths below it stay within their 108 bytes.
func (e *Env) TempDir(prefix string) string {
	e.T.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Create creates obj, failing the test on error, and deletes it when the test ends.
func (e *Env) Create(obj client.Object) {
	e.T.Helper()
	if err := e.C.Create(e.Ctx(), obj); err != nil {
		e.T.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	e.T.Cleanup(func() { _ = e.C.Delete(context.Background(), obj) })
}

// CreateNode creates node, and sets its status when it has one (the apiserver ignores the
// status of a create); it is deleted when the test ends.
func (e *Env) CreateNode(node *corev1.Node) {
	e.T.Helper()
	status := node.Status
	e.Create(node)
	if status.Allocatable == nil && len(status.Conditions) == 0 && len(status.Addresses) == 0 {
		return
	}
	node.Status = status
	if err := e.C.Status().Update(e.Ctx(), node); err != nil {
		e.T.Fatal(err)
	}
}

// SetLabel sets (value != nil) or removes label key of obj, read afresh, with a merge patch of
// that label alone. obj holds the result.
func (e *Env) SetLabel(obj client.Object, key string, value *string) {
	e.T.Helper()
	if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(obj), obj); err != nil {
		e.T.Fatal(err)
	}
	orig, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		e.T.Fatalf("%T is not a client.Object", obj)
	}
	labels := obj.GetLabels()
	if value == nil {
		delete(labels, key)
	} else {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[key] = *value
	}
	obj.SetLabels(labels)
	if err := e.C.Patch(e.Ctx(), obj, client.MergeFrom(orig)); err != nil {
		e.T.Fatal(err)
	}
}

// CreateAllocated creates claim and writes its status.allocation, as the scheduler would once
// it placed the claim (the apiserver ignores the status of a create).
func CreateAllocated(ctx context.Context, c client.Client, claim *resourcev1.ResourceClaim) error {
	status := claim.Status
	if err := c.Create(ctx, claim); err != nil {
		return err
	}
	claim.Status = status
	return c.Status().Update(ctx, claim)
}
