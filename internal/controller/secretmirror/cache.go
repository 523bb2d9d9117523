package secretmirror

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheByObject returns the cache scoping the mirror needs, to merge into the manager's
// cache.Options.ByObject:
//   - Secrets: in the source namespace those matching the Secret selector; in every other
//     namespace only the plane's copies, selected by its marker (controller-runtime excludes the
//     source namespace from the all-namespaces informer with a field selector);
//   - namespaces, metadata only: the plane's targets, selected by the plane label (legacy: the
//     explicit selector and no plane label; without a selector, none).
//
// The cache is keyed by kind: the manager must not scope Secrets or Namespaces elsewhere.
func CacheByObject(o Options) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{
			o.SourceNamespace:   {LabelSelector: SourceSelector(o)},
			cache.AllNamespaces: {LabelSelector: CopySelector(o)},
		}},
		namespaceMeta(): {Label: NamespaceSelector(o)},
	}
}

func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

func namespaceMetaList() *metav1.PartialObjectMetadataList {
	m := &metav1.PartialObjectMetadataList{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	return m
}
