package computedomain

import (
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewClient returns the client the reconciler reads and writes through: reads from the manager's
// cache, writes to the apiserver, and every read waits until the cache shows the writes this
// client made before it (controller-runtime's read-your-writes consistency: a Get waits for the
// object's own writes, a List for every write of its kind). Under load the cache lags the
// apiserver by seconds, longer than the batch window between two passes: a pass that read a
// cache not yet showing the previous pass's clique or status write would take the entries it had
// just written for absent and give a joining node whose name sorts first an index just given to
// another (an index moving under IMEX, which the membership rules exist to prevent), and a pass
// that did not yet see the DaemonSet it created would create it again.
//
// Writes to objects outside the cache must pass client.DisableReadYourWritesConsistency: the
// cache never shows them, and reads of their kind would wait for them in vain (takeOver's writes
// to what NVIDIA's driver left).
func NewClient(mgr ctrl.Manager) (client.Client, error) {
	return client.New(mgr.GetConfig(), client.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		Cache:      &client.CacheOptions{Reader: mgr.GetCache(), EnableReadYourWritesConsistency: ptr.To(true)},
	})
}
