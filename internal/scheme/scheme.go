// Package scheme builds the one runtime.Scheme every cdplane client uses: client-go's kinds and
// cdplane's API.
package scheme

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	cdv1beta1 "cdplane/api/v1beta1"
)

// New returns a scheme with client-go's kinds and resource.nvidia.com/v1beta1.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, cdv1beta1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

var shared = sync.OnceValue(New)

// Shared returns one scheme for the whole process, built on first use. A scheme is safe for
// concurrent use once built, so the daemon and kubelet-plugin instances a simulated node runs in
// one process share it instead of building hundreds of identical ones; callers must not add
// kinds to it.
func Shared() *runtime.Scheme { return shared() }

// Meta returns an empty metadata-only object of kind gvk: what metadata-only reads and caches
// (a Get or a watch that receives no spec or status) fill in.
func Meta(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// MetaList returns an empty metadata-only list of list kind gvk (NodeList, not Node).
func MetaList(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk)
	return l
}
