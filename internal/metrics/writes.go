package metrics

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Verbs of cdplane_api_writes_total: the client call that sent the write.
const (
	VerbCreate           = "create"
	VerbUpdate           = "update"
	VerbPatch            = "patch"
	VerbApply            = "apply"
	VerbDelete           = "delete"
	VerbDeleteCollection = "deletecollection"
)

// CountWrites returns c with every write it sends counted in APIWrites for plane planeID, by
// the object's kind, the verb and the subresource: Create, Update, Patch (verb apply for a
// server-side apply patch), Apply, Delete, DeleteAllOf, and the same through Status() and
// SubResource(). A write is counted when it is asked for, before it is sent: a request the
// apiserver refuses counts too. Reads pass through untouched.
func CountWrites(c client.Client, planeID string) client.Client {
	return &countingClient{Client: c, planeID: planeID}
}

type countingClient struct {
	client.Client
	planeID string
}

func (c *countingClient) count(obj any, verb, subresource string) {
	APIWrites.WithLabelValues(c.planeID, kindOf(c.Client, obj), verb, subresource).Inc()
}

// kindOf is obj's kind: from the scheme for typed objects, from the object for unstructured and
// metadata-only ones and for apply configurations.
func kindOf(c client.Client, obj any) string {
	if ac, ok := obj.(interface{ GetKind() *string }); ok && ac.GetKind() != nil {
		return *ac.GetKind()
	}
	o, ok := obj.(runtime.Object)
	if !ok {
		return "unknown"
	}
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	gvk, err := c.GroupVersionKindFor(o)
	if err != nil {
		return "unknown"
	}
	return gvk.Kind
}

func patchVerb(p client.Patch) string {
	if t := p.Type(); t == types.ApplyPatchType || t == types.ApplyCBORPatchType {
		return VerbApply
	}
	return VerbPatch
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.count(obj, VerbCreate, "")
	return c.Client.Create(ctx, obj, opts...)
}

func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.count(obj, VerbUpdate, "")
	return c.Client.Update(ctx, obj, opts...)
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.count(obj, patchVerb(patch), "")
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.count(obj, VerbApply, "")
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.count(obj, VerbDelete, "")
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *countingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	c.count(obj, VerbDeleteCollection, "")
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return &countingSubResourceWriter{w: c.Client.Status(), c: c, name: "status"}
}

func (c *countingClient) SubResource(subResource string) client.SubResourceClient {
	sc := c.Client.SubResource(subResource)
	return &countingSubResourceClient{SubResourceReader: sc, countingSubResourceWriter: &countingSubResourceWriter{w: sc, c: c, name: subResource}}
}

type countingSubResourceClient struct {
	client.SubResourceReader
	*countingSubResourceWriter
}

type countingSubResourceWriter struct {
	w    client.SubResourceWriter
	c    *countingClient
	name string
}

func (s *countingSubResourceWriter) Create(ctx context.Context, obj, subResource client.Object, opts ...client.SubResourceCreateOption) error {
	s.c.count(obj, VerbCreate, s.name)
	return s.w.Create(ctx, obj, subResource, opts...)
}

func (s *countingSubResourceWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.count(obj, VerbUpdate, s.name)
	return s.w.Update(ctx, obj, opts...)
}

func (s *countingSubResourceWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.count(obj, patchVerb(patch), s.name)
	return s.w.Patch(ctx, obj, patch, opts...)
}

func (s *countingSubResourceWriter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	s.c.count(obj, VerbApply, s.name)
	return s.w.Apply(ctx, obj, opts...)
}
