package secretmirror

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/scheme"
)

// CacheByObject returns the cache scoping the mirror needs, to merge into the manager's
// cache.Options.ByObject:
//   - Secrets: only those of the source namespace matching the Secret selector. Copies are not
//     cached: they are read with namespaced requests, so the controller never needs to list or
//     watch Secrets cluster-wide;
//   - namespaces, metadata only: the plane's targets, selected by the plane label (legacy: the
//     explicit selector and no plane label; without a selector, none).
//
// The cache is keyed by kind: the manager must not scope Secrets or Namespaces elsewhere.
func CacheByObject(o Options) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{
			o.SourceNamespace: {LabelSelector: SourceSelector(o)},
		}},
		namespaceMeta(): {Label: NamespaceSelector(o)},
	}
}

func namespaceMeta() *metav1.PartialObjectMetadata {
	m := scheme.Meta(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

func namespaceMetaList() *metav1.PartialObjectMetadataList {
	m := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	return m
}

// secretMetaList is a list of Secrets' metadata: listing copies never transfers their data.
func secretMetaList() *metav1.PartialObjectMetadataList {
	m := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("SecretList"))
	return m
}
